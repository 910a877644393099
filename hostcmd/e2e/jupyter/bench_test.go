//go:build linux

package jupyter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/jupyter/jupytertest"
)

// BenchmarkJupyter measures the host on the Jupyter transport side by side
// with the floor: a bare websocket client straight on the kernels' channels
// (the protocol the host speaks: the v1 binary subprotocol where the server
// offers it, TCP_QUICKACK re-armed after every read, as the transport does).
// One server for all sub-benchmarks:
//
//	go test -run '^$' -bench Jupyter -benchtime 3s -count 1 ./hostcmd/e2e/jupyter/
//
// RoundTrip alternates `1+1` direct, via the host with the transport linked
// in and via the host with it behind its plugin (see roundTrips);
// Concurrent8x50 runs 8 contexts × 50 sequential `1+1` at once via the host
// and the same load on 8 bare websockets, twice each per op (host, direct,
// direct, host), and reports both throughputs, their ratio and both tails
// (p99 and max of every round trip);
// Stream200kLines and Flush20kLines count every line at the client and fail
// on any loss.
func BenchmarkJupyter(b *testing.B) {
	srv := jupytertest.Start(b)
	inProc := hosttest.JupyterInProcess(b, srv)
	direct := &directJupyter{srv: srv}

	b.Run("RoundTrip", func(b *testing.B) { roundTrips(b, srv, inProc) })

	b.Run("Concurrent8x50", func(b *testing.B) {
		const contexts, execs = 8, 50
		h := hosttest.Start(b, inProc)
		// One idle connection per worker, so no request waits for a dial.
		tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: contexts}
		b.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr}
		ids := make([]string, contexts)
		for i := range ids {
			ids[i] = h.CreateContext(`{}`).ID
		}
		wss := make([]*directKernel, contexts)
		for i := range wss {
			wss[i] = direct.kernel(b)
		}
		warm := func(i int) error {
			if err := hostOneTwo(client, h.URL(), ids[i]); err != nil {
				return err
			}
			return wss[i].oneTwo()
		}
		if err := testkit.Concurrently(contexts, warm); err != nil {
			b.Fatal(err)
		}
		viaHost := func(i int) error { return hostOneTwo(client, h.URL(), ids[i]) }
		straight := func(i int) error { return wss[i].oneTwo() }
		var host, direct latencies
		timed := func(one func(int) error, into *latencies) {
			l, err := concurrently(contexts, execs, one)
			if err != nil {
				b.Fatal(err)
			}
			into.all = append(into.all, l.all...)
			into.elapsed += l.elapsed
		}
		b.ResetTimer()
		for range b.N {
			// Host, direct, direct, host: both see the same machine on average
			// (other processes' load drifts over seconds).
			timed(viaHost, &host)
			timed(straight, &direct)
			timed(straight, &direct)
			timed(viaHost, &host)
		}
		b.StopTimer()
		n := float64(2 * contexts * execs * b.N)
		b.ReportMetric(n/host.elapsed.Seconds(), "host-exec/s")
		b.ReportMetric(n/direct.elapsed.Seconds(), "direct-exec/s")
		b.ReportMetric(direct.elapsed.Seconds()/host.elapsed.Seconds(), "host/direct-throughput")
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(host.p99()), "host-p99-ms")
		b.ReportMetric(ms(host.max()), "host-max-ms")
		b.ReportMetric(ms(direct.p99()), "direct-p99-ms")
		b.ReportMetric(ms(direct.max()), "direct-max-ms")
	})

	b.Run("Stream200kLines", func(b *testing.B) {
		streamLines(b, hosttest.Start(b, inProc), 200_000, "print(i)")
	})
	b.Run("Flush20kLines", func(b *testing.B) {
		streamLines(b, hosttest.Start(b, inProc), 20_000, "print(i, flush=True)")
	})
}

// roundTrips times `1+1` three ways on srv, each on a kernel of its own:
// on a bare websocket (direct), via a host with the transport linked in
// (linked) and via a host running it behind its plugin as the kernelhost
// binary does (plugin: one more process and hop, the plugin's kernel
// socket). Every round of three runs them in the next of the six orders, so
// each way sees the same machine: the load of other processes drifts over
// seconds, and the plugin's cost was once read wrong from two sub-benchmarks
// run a minute apart. It reports each median, each host's ratio to direct
// and what it adds at p50, the plugin's cost over linked in
// (plugin-minus-linked-ms), this process's CPU time and voluntary context
// switches per round trip of each way (getrusage: the linked-in host, or
// the plugin's client end, plus the client), and the plugin process's own
// (plugin-process-cpu-ms/op, plugin-process-ctxsw/op, from its threads in
// /proc, over the whole loop: it has no other work). Not the server's or
// the kernels'.
func roundTrips(b *testing.B, srv *jupytertest.Server, linkedIn func(*settings.Config)) {
	// Each kernel answers once before the next is started: Kernel Gateway
	// 2.5.2 can leave a start request unanswered that comes while it is still
	// opening another kernel's websocket ("Cannot enter into task" in its log).
	ws := (&directJupyter{srv: srv}).kernel(b)
	if err := ws.oneTwo(); err != nil {
		b.Fatal(err)
	}
	linked := hosttest.Start(b, linkedIn)
	if err := hostOneTwo(linked.Client(), linked.URL(), ""); err != nil {
		b.Fatal(err)
	}
	plugin := hosttest.Start(b, hosttest.JupyterViaPlugin(srv))
	ways := []struct {
		name string
		once func() error
		d    []time.Duration
		use  usage
	}{
		{name: "direct", once: ws.oneTwo},
		{name: "linked", once: func() error { return hostOneTwo(linked.Client(), linked.URL(), "") }},
		{name: "plugin", once: func() error { return hostOneTwo(plugin.Client(), plugin.URL(), "") }},
	}
	run := func(i int) time.Duration {
		w := &ways[i]
		defer w.use.add(takeUsage())
		t0 := time.Now()
		if err := w.once(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for range 20 { // warm every path up
		for i := range ways {
			run(i)
		}
	}
	for i := range ways {
		ways[i].use = usage{}
	}
	orders := [][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}
	pluginPID := plugin.PluginPID()
	pluginBefore := processUsage(pluginPID)
	for r := 0; b.Loop(); r++ {
		for _, i := range orders[r%len(orders)] {
			ways[i].d = append(ways[i].d, run(i))
		}
	}
	if pluginPID != plugin.PluginPID() {
		b.Fatalf("the plugin process changed during the benchmark (%d, now %d)", pluginPID, plugin.PluginPID())
	}
	pluginUse := processUsage(pluginPID)
	pluginUse.cpu -= pluginBefore.cpu
	pluginUse.nvcsw -= pluginBefore.nvcsw
	pluginUse.report(b, "plugin-process", len(ways[2].d))
	p50 := make([]time.Duration, len(ways))
	for i, w := range ways {
		p50[i] = testkit.Quantile(w.d, 0.5)
		b.ReportMetric(float64(p50[i])/float64(time.Millisecond), w.name+"-p50-ms")
		w.use.report(b, w.name, len(w.d))
	}
	for i := 1; i < len(ways); i++ {
		b.ReportMetric(float64(p50[i])/float64(p50[0]), ways[i].name+"/direct")
		b.ReportMetric(float64(p50[i]-p50[0])/float64(time.Millisecond), ways[i].name+"-added-p50-ms")
	}
	b.ReportMetric(float64(p50[2]-p50[1])/float64(time.Millisecond), "plugin-minus-linked-ms")
}

// usage sums this process's CPU time and voluntary context switches over
// the calls it was added for.
type usage struct {
	cpu   time.Duration
	nvcsw int64
}

// takeUsage returns a function that, called at the end of a call, gives
// what the process used since takeUsage.
func takeUsage() func() usage {
	before := rusage()
	return func() usage {
		after := rusage()
		return usage{cpu: after.cpu - before.cpu, nvcsw: after.nvcsw - before.nvcsw}
	}
}

func (u *usage) add(since func() usage) {
	d := since()
	u.cpu += d.cpu
	u.nvcsw += d.nvcsw
}

func (u *usage) report(b *testing.B, name string, n int) {
	if n == 0 {
		return
	}
	b.ReportMetric(float64(u.cpu.Microseconds())/float64(n)/1000, name+"-cpu-ms/op")
	b.ReportMetric(float64(u.nvcsw)/float64(n), name+"-ctxsw/op")
}

// processUsage is the CPU time and voluntary context switches of every
// thread process pid has now (Linux /proc).
func processUsage(pid int) usage {
	var u usage
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		if b, err := os.ReadFile(task + "/schedstat"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				u.cpu += time.Duration(ns)
			}
		}
		if b, err := os.ReadFile(task + "/status"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					u.nvcsw += n
				}
			}
		}
	}
	return u
}

func rusage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nvcsw: ru.Nvcsw}
}

// BenchmarkKernelGateway is BenchmarkJupyter's RoundTrip against Kernel
// Gateway 2.5.2 (jupytertest.StartKernelGateway), which offers only JSON
// frames:
//
//	go test -run '^$' -bench KernelGateway -benchtime 400x -count 1 ./hostcmd/e2e/jupyter/
func BenchmarkKernelGateway(b *testing.B) {
	kg := jupytertest.StartKernelGateway(b)
	b.Run("RoundTrip", func(b *testing.B) { roundTrips(b, kg, hosttest.JupyterInProcess(b, kg)) })
}

// streamLines runs `for i in range(n): <stmt>` through h, decodes every
// NDJSON line at the client, and fails unless exactly the n numbers arrived,
// in order, and the stream ended with end_of_execution. It reports lines/s.
func streamLines(b *testing.B, h *hosttest.Host, n int, stmt string) {
	body, _ := json.Marshal(map[string]string{"code": "for i in range(" + strconv.Itoa(n) + "):\n    " + stmt})
	var want strings.Builder
	for i := range n {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var got strings.Builder
		last := ""
		for sc.Scan() {
			var l struct{ Type, Text, Name, Value string }
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				b.Fatal(err)
			}
			switch l.Type {
			case "stdout":
				got.WriteString(l.Text)
			case "stderr", "error":
				b.Fatalf("unexpected %s line: %s %s%s", l.Type, l.Name, l.Value, l.Text)
			}
			last = l.Type
		}
		resp.Body.Close()
		if sc.Err() != nil || last != "end_of_execution" || got.String() != want.String() {
			b.Fatalf("got %d of %d lines (stdout equal: %v), last line %q, err %v",
				strings.Count(got.String(), "\n"), n, got.String() == want.String(), last, sc.Err())
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "lines/s")
}

// hostOneTwo runs `1+1` via the host (on context id, or the default) and
// reads the stream to its end.
func hostOneTwo(client *http.Client, url, id string) error {
	body := `{"code":"1+1"}`
	if id != "" {
		body = fmt.Sprintf(`{"code":"1+1","context_id":%q}`, id)
	}
	resp, err := client.Post(url+"/execute", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Contains(out, []byte(`"text":"2"`)) || !bytes.HasSuffix(out, []byte("{\"type\":\"end_of_execution\"}\n")) {
		return fmt.Errorf("host 1+1: %v %q", err, out)
	}
	return nil
}

// directJupyter starts kernels on srv over REST and talks to them on bare
// websockets, in the protocol the host speaks: the least any client has to
// do.
type directJupyter struct{ srv *jupytertest.Server }

type directKernel struct {
	ws      *websocket.Conn
	session string
	v1      bool // the server took the v1 binary subprotocol
}

// subprotocolV1 is jupyter-server's binary websocket subprotocol, which the
// transport offers (a server without it answers with JSON frames).
const subprotocolV1 = "v1.kernel.websocket.jupyter.org"

func (d *directJupyter) kernel(b testing.TB) *directKernel {
	b.Helper()
	k, err := d.start(b)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// start is kernel for any goroutine: it returns its error, and only
// registers cleanups on b.
func (d *directJupyter) start(b testing.TB) (*directKernel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hdr := http.Header{"Authorization": {"token " + d.srv.Token}}
	req, _ := http.NewRequestWithContext(ctx, "POST", d.srv.URL+"api/kernels", strings.NewReader(`{"name":"python3"}`))
	req.Header = hdr.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	var km struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&km)
	resp.Body.Close()
	if err != nil || km.ID == "" {
		return nil, fmt.Errorf("create kernel: %s %v", resp.Status, err)
	}
	b.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", d.srv.URL+"api/kernels/"+km.ID, nil)
		req.Header = hdr.Clone()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	k := &directKernel{session: uuid.NewString()}
	dialer := websocket.Dialer{NetDialContext: quickAckDial, Subprotocols: []string{subprotocolV1}}
	wsURL := "ws" + strings.TrimPrefix(d.srv.URL, "http") + "api/kernels/" + km.ID + "/channels?session_id=" + k.session
	ws, _, err := dialer.DialContext(ctx, wsURL, hdr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	b.Cleanup(func() { ws.Close() })
	k.ws, k.v1 = ws, ws.Subprotocol() == subprotocolV1
	return k, nil
}

// oneTwo sends `1+1` as an execute_request (a v1 frame or a JSON frame) and
// reads until its execute_reply and its status idle.
func (k *directKernel) oneTwo() error {
	id := uuid.NewString()
	header, _ := json.Marshal(map[string]any{
		"msg_id": id, "session": k.session, "username": "bench", "msg_type": "execute_request",
		"version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano),
	})
	content, _ := json.Marshal(map[string]any{
		"code": "1+1", "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": false,
	})
	typ, frame := websocket.TextMessage, []byte(nil)
	if k.v1 {
		typ, frame = websocket.BinaryMessage, v1Frame("shell", header, []byte("{}"), []byte("{}"), content)
	} else {
		frame, _ = json.Marshal(map[string]any{
			"header": json.RawMessage(header), "parent_header": map[string]any{}, "metadata": map[string]any{},
			"content": json.RawMessage(content), "channel": "shell", "buffers": []any{},
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	_ = k.ws.SetWriteDeadline(deadline)
	if err := k.ws.WriteMessage(typ, frame); err != nil {
		return err
	}
	_ = k.ws.SetReadDeadline(deadline)
	var reply, idle, result bool
	for !reply || !idle {
		typ, data, err := k.ws.ReadMessage()
		if err != nil {
			return fmt.Errorf("direct 1+1: %w", err)
		}
		var m struct {
			Header struct {
				MsgType string `json:"msg_type"`
			}
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Content struct {
				ExecutionState string            `json:"execution_state"`
				Data           map[string]string `json:"data"`
			}
		}
		if k.v1 && typ == websocket.BinaryMessage {
			parts, err := v1Parts(data)
			if err == nil {
				err = errors.Join(json.Unmarshal(parts[0], &m.Header), json.Unmarshal(parts[1], &m.ParentHeader), json.Unmarshal(parts[3], &m.Content))
			}
			if err != nil {
				return fmt.Errorf("direct: decode v1 frame: %w", err)
			}
		} else if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("direct: decode frame: %w", err)
		}
		if m.ParentHeader.MsgID != id {
			continue
		}
		switch m.Header.MsgType {
		case "execute_reply":
			reply = true
		case "execute_result":
			result = m.Content.Data["text/plain"] == "2"
		case "status":
			idle = idle || m.Content.ExecutionState == "idle"
		}
	}
	if !result {
		return fmt.Errorf("direct 1+1: no result 2")
	}
	return nil
}

// v1Frame lays out a v1 frame: the count of offsets, the offsets (8-byte
// little-endian each: the channel's start, then the end of the channel and
// of every part), the channel, the parts.
func v1Frame(channel string, parts ...[]byte) []byte {
	n := 2 + len(parts)
	off := 8 * (1 + n)
	b := binary.LittleEndian.AppendUint64(nil, uint64(n))
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	off += len(channel)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	for _, p := range parts {
		off += len(p)
		b = binary.LittleEndian.AppendUint64(b, uint64(off))
	}
	b = append(b, channel...)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// v1Parts returns the message parts of a v1 frame (header, parent_header,
// metadata, content, buffers...); the last part may run to the frame's end
// without an end offset.
func v1Parts(f []byte) ([][]byte, error) {
	if len(f) < 8 {
		return nil, errors.New("short v1 frame")
	}
	n := binary.LittleEndian.Uint64(f)
	if n < 2 || n > uint64(len(f)/8-1) {
		return nil, fmt.Errorf("v1 frame: %d offsets", n)
	}
	offs := make([]int, n, n+1)
	for i := range offs {
		offs[i] = int(binary.LittleEndian.Uint64(f[8*(i+1):]))
		if offs[i] > len(f) || (i > 0 && offs[i] < offs[i-1]) {
			return nil, fmt.Errorf("v1 frame: bad offset %d", offs[i])
		}
	}
	if offs[n-1] < len(f) {
		offs = append(offs, len(f))
	}
	var parts [][]byte
	for i := 1; i+1 < len(offs); i++ {
		parts = append(parts, f[offs[i]:offs[i+1]])
	}
	if len(parts) < 4 {
		return nil, fmt.Errorf("v1 frame: %d parts", len(parts))
	}
	return parts, nil
}

// quickAckDial dials TCP and re-arms TCP_QUICKACK after every read, so the
// client never delays an ACK that the server's Nagle waits for (docs/jupyter.md).
func quickAckDial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	return &quickAckConn{Conn: c, raw: raw}, nil
}

type quickAckConn struct {
	net.Conn
	raw syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	_ = c.raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
	return n, err
}
