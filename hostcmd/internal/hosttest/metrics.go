package hosttest

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one parsed GET /metrics.
type Scrape map[string]*dto.MetricFamily

// Metrics fetches h's /metrics over HTTP (with headers) and parses the
// Prometheus text format.
func Metrics(t testing.TB, h *Host, headers map[string]string) Scrape {
	t.Helper()
	status, _, body := h.DoWith("GET", "/metrics", "", headers)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics: parse: %v", err)
	}
	return fams
}

// Metric finds the series of name whose labels are label=value pairs; nil
// when there is none.
func (s Scrape) Metric(name string, labels ...string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// Value is a counter's or gauge's value, failing when the series is missing.
func (s Scrape) Value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	m := s.Metric(name, labels...)
	switch {
	case m == nil:
		t.Fatalf("no series %s%v in the scrape", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s%v is neither a counter nor a gauge", name, labels)
	return 0
}

// Histogram is a histogram's sample count and sum over all its series
// (0 when it has none yet: a per-context histogram before its first sample).
func (s Scrape) Histogram(t testing.TB, name string) (count uint64, sum float64) {
	t.Helper()
	for _, m := range s[name].GetMetric() {
		if m.Histogram == nil {
			t.Fatalf("%s is not a histogram", name)
		}
		count += m.Histogram.GetSampleCount()
		sum += m.Histogram.GetSampleSum()
	}
	return count, sum
}
