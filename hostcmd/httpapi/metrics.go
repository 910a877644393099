package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kernelhost/kernelhost/core"
	"github.com/kernelhost/kernelhost/core/engine"
	"github.com/kernelhost/kernelhost/hostcmd/envd"
	"github.com/kernelhost/kernelhost/plugins/transportplugin/pluginhost"
)

// Admission outcomes: executions that /execute refused before they were
// queued, counted beside the engine.Outcome values of those that were.
const (
	outcomeRejected  = "rejected"   // an env-var policy refused (403)
	outcomeQueueFull = "queue_full" // the context's queue was full (429)
	outcomeInvalid   = "invalid"    // the request was wrong: body, env key, unknown context or language (4xx)
	// outcomeUnavailable: the host could not take it (shutting down, a
	// default context that would not start): 503 and 500.
	outcomeUnavailable = "unavailable"
)

// Policy decisions, as kernelhost_policy_decisions_total labels them.
const (
	decisionAllow   = "allow"
	decisionRewrite = "rewrite"
	decisionReject  = "reject"
	decisionError   = "error"
)

// metrics are the host's Prometheus metrics (docs/operating.md lists them),
// in a registry of their own so that several hosts in one process (tests)
// do not collide. It is the engine's engine.Observer.
type Metrics struct {
	reg *prometheus.Registry

	executions      *prometheus.CounterVec
	queueDepth      *prometheus.GaugeVec
	queueWait       *prometheus.HistogramVec
	execDuration    prometheus.Histogram
	streamedBytes   prometheus.Counter
	policyDecisions *prometheus.CounterVec
	policyLatency   prometheus.Histogram
	pluginRestarts  prometheus.Counter
	messagesLost    prometheus.Counter
	kernelsReplaced *prometheus.CounterVec
}

var _ engine.Observer = (*Metrics)(nil)

// Buckets in seconds. Executions run from a millisecond (1+1) to hours;
// queue waits are an execution's run at most; policies take microseconds
// to their 1 s deadline.
var (
	durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 12) // 1 ms … ~70 min
	policyBuckets   = prometheus.ExponentialBuckets(0.00005, 4, 10)
)

// newMetrics registers every metric. liveContexts is read at each scrape.
func NewMetrics(liveContexts func() int) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kernelhost_executions_total",
			Help: "Executions by outcome: how accepted ones ended (ok, error, timeout, client_gone, aborted) or why /execute refused one (rejected, queue_full, invalid, unavailable).",
		}, []string{"outcome"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kernelhost_queue_depth",
			Help: "Executions waiting in a context's queue, not counting the one running; no series while none waits.",
		}, []string{"context_id"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kernelhost_queue_wait_seconds",
			Help:    "Time an execution waited in its context's queue before it went to the kernel, per context.",
			Buckets: durationBuckets,
		}, []string{"context_id"}),
		execDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kernelhost_execution_duration_seconds",
			Help:    "Time an execution held its context (env vars set and reset included); executions that never started are not observed.",
			Buckets: durationBuckets,
		}),
		streamedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kernelhost_streamed_bytes_total",
			Help: "Bytes of NDJSON written to execution streams (/execute and re-attached ones).",
		}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kernelhost_policy_decisions_total",
			Help: "Env-var policy decisions: allow, rewrite, reject, error (a module failed).",
		}, []string{"decision"}),
		policyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kernelhost_policy_evaluation_seconds",
			Help:    "Time to evaluate the env-var policies for one execution.",
			Buckets: policyBuckets,
		}),
		pluginRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kernelhost_plugin_restarts_total",
			Help: "Times the transport plugin was started again after it exited.",
		}),
		messagesLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kernelhost_kernel_messages_lost_total",
			Help: "Kernel messages the transport knows were lost on their way to it (a Jupyter kernel's IOPub queue overflowed); each loss is also announced on the execution's stderr.",
		}),
		kernelsReplaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kernelhost_kernels_replaced_total",
			Help: "Contexts' kernels replaced without a client asking, by reason: died (crashed or exited), gone (the Jupyter server no longer has it, e.g. culled it).",
		}, []string{"reason"}),
	}
	live := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kernelhost_contexts",
		Help: "Live contexts (each one an interpreter), defaults included.",
	}, func() float64 { return float64(liveContexts()) })
	m.reg.MustRegister(m.executions, m.queueDepth, m.queueWait, m.execDuration, m.streamedBytes,
		m.policyDecisions, m.policyLatency, m.pluginRestarts, m.messagesLost, m.kernelsReplaced, live,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every label value exists from the start at 0, so that rate() and
	// alerts see a series before its first event.
	for _, o := range []string{string(engine.OutcomeOK), string(engine.OutcomeError), string(engine.OutcomeTimeout),
		string(engine.OutcomeClientGone), string(engine.OutcomeAborted),
		outcomeRejected, outcomeQueueFull, outcomeInvalid, outcomeUnavailable} {
		m.executions.WithLabelValues(o)
	}
	for _, d := range []string{decisionAllow, decisionRewrite, decisionReject, decisionError} {
		m.policyDecisions.WithLabelValues(d)
	}
	return m
}

// handler serves the registry in the Prometheus text format.
// serveMetrics is GET /metrics: the Prometheus text format, or the unknown
// route's 404 when metrics are off (settings.Config.DisableMetrics).
func (a *API) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if a.metrics == nil {
		writeRouteError(w, http.StatusNotFound)
		return
	}
	promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// QueueDepth keeps a series only while executions wait: an empty queue
// has none (read absent as 0). That bounds the series to the contexts with
// a backlog.
func (m *Metrics) QueueDepth(contextID string, depth int) {
	if depth == 0 {
		m.queueDepth.DeleteLabelValues(contextID)
		return
	}
	m.queueDepth.WithLabelValues(contextID).Set(float64(depth))
}

func (m *Metrics) ExecutionStarted(contextID string, waited time.Duration) {
	m.queueWait.WithLabelValues(contextID).Observe(waited.Seconds())
}

func (m *Metrics) ExecutionFinished(_ string, outcome engine.Outcome, ran time.Duration) {
	m.executions.WithLabelValues(string(outcome)).Inc()
	if ran > 0 {
		m.execDuration.Observe(ran.Seconds())
	}
}

// ContextRemoved drops the context's series: context ids are not reused,
// and series of dead contexts would grow without bound.
func (m *Metrics) ContextRemoved(contextID string) {
	m.queueDepth.DeleteLabelValues(contextID)
	m.queueWait.DeleteLabelValues(contextID)
}

func (m *Metrics) MessagesLost(_ string, n int) { m.messagesLost.Add(float64(n)) }

func (m *Metrics) KernelReplaced(_, reason string) { m.kernelsReplaced.WithLabelValues(reason).Inc() }

// The methods the API calls do nothing on a nil *Metrics (metrics off).

// refused counts an /execute that was refused before it was queued.
func (m *Metrics) refused(err error) {
	if m == nil {
		return
	}
	outcome := outcomeUnavailable
	switch core.KindOf(err) {
	case core.KindRejected:
		outcome = outcomeRejected
	case core.KindQueueFull:
		outcome = outcomeQueueFull
	case core.KindInvalid, core.KindNotFound, core.KindTooLarge:
		outcome = outcomeInvalid
	}
	m.executions.WithLabelValues(outcome).Inc()
}

// invalid counts an /execute whose body the host refused before the engine
// saw it (malformed JSON, too large, not received in time).
func (m *Metrics) invalid() {
	if m == nil {
		return
	}
	m.executions.WithLabelValues(outcomeInvalid).Inc()
}

func (m *Metrics) streamed(n int) {
	if m == nil {
		return
	}
	m.streamedBytes.Add(float64(n))
}

func (m *Metrics) PluginRestarted() { m.pluginRestarts.Inc() }

// ObservePolicy wraps the host's env-var policy with the decision counter
// and the latency histogram.
func (m *Metrics) ObservePolicy(p engine.EnvPolicy) engine.EnvPolicy {
	return &observedPolicy{next: p, m: m}
}

type observedPolicy struct {
	next engine.EnvPolicy
	m    *Metrics
}

func (p *observedPolicy) Evaluate(ctx context.Context, in engine.PolicyInput) (engine.PolicyDecision, error) {
	began := time.Now()
	d, err := p.next.Evaluate(ctx, in)
	p.m.policyLatency.Observe(time.Since(began).Seconds())
	decision := decisionAllow
	switch {
	case err != nil:
		decision = decisionError
	case len(d.Rejections) > 0:
		decision = decisionReject
	case d.EnvVars != nil: // a chain answers nil when no module changed anything
		decision = decisionRewrite
	}
	p.m.policyDecisions.WithLabelValues(decision).Inc()
	return d, err
}

// gaugeSource is a transport that reports gauges of its own: the plugin
// supervisor (pluginhost.Supervised) asks its plugin at each scrape.
type gaugeSource interface {
	Gauges(ctx context.Context) ([]pluginhost.Gauge, error)
}

// transportGauges serves a transport's own gauges (the subprocess
// transport's warm pools) in /metrics, asked for at each scrape. It is an
// unchecked collector: the transport names its gauges.
type transportGauges struct {
	src gaugeSource
	log *slog.Logger
}

// transportGaugesWait bounds the plugin's answer at a scrape.
const transportGaugesWait = 2 * time.Second

func (g transportGauges) Describe(chan<- *prometheus.Desc) {}

func (g transportGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), transportGaugesWait)
	defer cancel()
	gauges, err := g.src.Gauges(ctx)
	if err != nil {
		g.log.Warn("transport gauges are missing from this scrape", "err", err)
		return
	}
	for _, s := range gauges {
		names := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			names = append(names, k)
		}
		sort.Strings(names)
		values := make([]string, len(names))
		for i, k := range names {
			values[i] = s.Labels[k]
		}
		m, err := prometheus.NewConstMetric(prometheus.NewDesc(s.Name, s.Help, names, nil), prometheus.GaugeValue, s.Value, values...)
		if err != nil {
			g.log.Warn("a transport gauge is not valid", "name", s.Name, "err", err)
			continue
		}
		ch <- m
	}
}

// ObserveTransport adds the transport's own gauges, if it reports any.
func (m *Metrics) ObserveTransport(t core.Transport, log *slog.Logger) {
	if src, ok := t.(gaugeSource); ok {
		m.reg.MustRegister(transportGauges{src: src, log: log})
	}
}

const sandboxBytesHelp = "Bytes of files through the sandbox API: uploaded (POST /files) or downloaded (GET /files)."

// ObserveSandboxAPI counts the sandbox API's commands and file bytes.
func (m *Metrics) ObserveSandboxAPI(st *envd.Stats) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kernelhost_sandbox_commands_total",
			Help: "Commands the sandbox API started (process.Process Start).",
		}, func() float64 { return float64(st.Commands.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "kernelhost_sandbox_file_bytes_total",
			Help:        sandboxBytesHelp,
			ConstLabels: prometheus.Labels{"direction": "upload"},
		}, func() float64 { return float64(st.BytesUploaded.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "kernelhost_sandbox_file_bytes_total",
			Help:        sandboxBytesHelp,
			ConstLabels: prometheus.Labels{"direction": "download"},
		}, func() float64 { return float64(st.BytesRead.Load()) }),
	)
}
