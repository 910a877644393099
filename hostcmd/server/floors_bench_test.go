package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/internal/hosttest"
	"github.com/kernelhost/kernelhost/hostcmd/settings"
	"github.com/kernelhost/kernelhost/internal/testkit"
	"github.com/kernelhost/kernelhost/transports/subprocess"
)

// The floors benchmarks put each figure of the host's default transport
// next to its physical floor, measured in the same run and alternated with
// it so both see the same machine: the ratio is the figure to judge
// (docs/benchmarks.md). The interpreter is KERNELHOST_PYTHON, else python3,
// for the host and the floor alike.

// floorPython is the interpreter's own executable: python3 on PATH may be a
// launcher script (pyenv's shim, itself ~0.1-0.4 s), which the bare start
// must not count. It is what the host runs too.
var floorPython = sync.OnceValue(func() string {
	p := os.Getenv("KERNELHOST_PYTHON")
	if p == "" {
		p = "python3"
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if exe := strings.TrimSpace(string(out)); err == nil && exe != "" {
		return exe
	}
	return p
})

func startFloorHost(b *testing.B) *hosttest.Host {
	return hosttest.Start(b, func(c *settings.Config) {
		c.Transport = subprocess.New(subprocess.Options{Interpreters: map[string]string{"python": floorPython(), "node": "node"}})
	})
}

// BenchmarkFloorPrints: 200,000 lines printed (python: print(i);
// javascript: console.log(i)) and streamed to the client (sent, streamed
// and decoded, timed from the POST to end_of_execution) against the same
// loop printing into /dev/null inside one interpreter, timed by the
// interpreter itself (its start-up excluded).
func BenchmarkFloorPrints(b *testing.B) {
	const n = 200_000
	for _, c := range []struct {
		lang, interp, flag, loop, floor string
	}{{
		lang: "python", interp: floorPython(), flag: "-c",
		loop: "for i in range(" + strconv.Itoa(n) + "):\n    print(i)",
		floor: "import sys, time\nsys.stdout = open('/dev/null', 'w')\nt = time.perf_counter()\n%s" +
			"\nsys.stdout.flush()\nsys.stderr.write(repr(time.perf_counter() - t))",
	}, {
		lang: "javascript", interp: "node", flag: "-e",
		loop: "for (let i = 0; i < " + strconv.Itoa(n) + "; i++) console.log(i)",
		// stdout is /dev/null (exec.Cmd's nil Stdout): console.log writes
		// a file synchronously, one write per call.
		floor: "const t = performance.now();\n%s\nprocess.stderr.write(String((performance.now() - t) / 1000))",
	}} {
		b.Run(c.lang, func(b *testing.B) {
			h := startFloorHost(b)
			body, _ := json.Marshal(map[string]string{"code": c.loop, "language": c.lang})
			streamed := func() time.Duration {
				t0 := time.Now()
				if lines := postCountLines(b, h, body); lines != n {
					b.Fatalf("got %d lines, want %d", lines, n)
				}
				return time.Since(t0)
			}
			floor := func() time.Duration {
				var stderr bytes.Buffer
				cmd := exec.Command(c.interp, c.flag, fmt.Sprintf(c.floor, c.loop))
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					b.Fatalf("floor: %v: %s", err, stderr.String())
				}
				secs, err := strconv.ParseFloat(strings.TrimSpace(stderr.String()), 64)
				if err != nil {
					b.Fatalf("floor: %q: %v", stderr.String(), err)
				}
				return time.Duration(secs * float64(time.Second))
			}
			reportRatio(b, "streamed", streamed, "floor", floor)
		})
	}
}

// postCountLines posts an execution and counts the stdout lines the client
// decodes; it fails unless the stream ends with end_of_execution.
func postCountLines(b *testing.B, h *hosttest.Host, body []byte) int {
	resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	lines, last := 0, ""
	for sc.Scan() {
		var l struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			b.Fatal(err)
		}
		if l.Type == "stdout" {
			lines += strings.Count(l.Text, "\n")
		}
		last = l.Type
	}
	if sc.Err() != nil || last != "end_of_execution" {
		b.Fatalf("last line %q, err %v", last, sc.Err())
	}
	return lines
}

// BenchmarkFloorContextStart: POST /contexts for python, until the context
// is ready (the response), against a bare `python3 -c pass` start and exit.
// Each context is deleted after it is timed. pooled: the transport keeps a
// warm pool of one python interpreter (the default of the plugin), and each
// timed start waits, untimed, until the pool has refilled; cold: no pool.
// The -owncwd variants create each context in a directory of its own (the
// SDK's createCodeContext({cwd})), not the default cwd the pool starts in:
// the pooled interpreter is moved there on hand-out.
func BenchmarkFloorContextStart(b *testing.B) {
	for _, ownCwd := range []bool{false, true} {
		for _, pooled := range []bool{true, false} {
			name := "cold"
			if pooled {
				name = "pooled"
			}
			if ownCwd {
				name += "-owncwd"
			}
			b.Run(name, func(b *testing.B) { floorContextStart(b, pooled, ownCwd) })
		}
	}
}

func floorContextStart(b *testing.B, pooled, ownCwd bool) {
	var tr *subprocess.Transport
	h := hosttest.Start(b, func(c *settings.Config) {
		opts := subprocess.Options{Interpreters: map[string]string{"python": floorPython(), "node": "node"}}
		if pooled {
			opts.PoolSizes, opts.PoolCwd = map[string]int{"python": 1}, c.DefaultCwd
		}
		tr = subprocess.New(opts)
		c.Transport = tr
	})
	b.Cleanup(func() { _ = tr.Close() })
	body := `{"language":"python"}`
	if ownCwd {
		cwd, err := json.Marshal(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		body = `{"language":"python","cwd":` + string(cwd) + `}`
	}
	start := func() time.Duration {
		if pooled {
			awaitPoolReady(b, tr)
		}
		t0 := time.Now()
		status, text := h.Do("POST", "/contexts", body)
		d := time.Since(t0)
		if status != 200 && status != 201 {
			b.Fatalf("POST /contexts: %d %s", status, text)
		}
		var c struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(text), &c); err != nil || c.ID == "" {
			b.Fatalf("POST /contexts: %q: %v", text, err)
		}
		if status, text := h.Do("DELETE", "/contexts/"+c.ID, ""); status >= 300 {
			b.Fatalf("DELETE /contexts: %d %s", status, text)
		}
		return d
	}
	bare := func() time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(floorPython(), "-c", "pass").CombinedOutput(); err != nil {
			b.Fatalf("bare start: %v: %s", err, out)
		}
		return time.Since(t0)
	}
	reportRatio(b, "context", start, "bare", bare)
}

// awaitPoolReady waits (bounded) until every pool of tr is full.
func awaitPoolReady(b *testing.B, tr *subprocess.Transport) {
	deadline := time.Now().Add(time.Minute)
	for {
		full := true
		for _, st := range tr.PoolStats() {
			full = full && st.Ready == st.Size
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the pool did not refill within a minute: %+v", tr.PoolStats())
		}
		time.Sleep(5 * time.Millisecond) // the pool's start is not awaitable from here
	}
}

// BenchmarkFloorIdleRSS: the resident memory of an idle context's
// interpreter (python, and node for javascript) after one `1+1`, against
// the same interpreter started bare and idle. ns/op is meaningless here.
func BenchmarkFloorIdleRSS(b *testing.B) {
	for _, c := range []struct{ lang, interp string }{
		{"python", floorPython()},
		{"javascript", "node"},
	} {
		b.Run(c.lang, func(b *testing.B) {
			h := startFloorHost(b)
			var ctxRSS, bareRSS int64
			for range b.N {
				ctxRSS = idleContextRSS(b, h, c.lang)
				bareRSS = idleBareRSS(b, c.interp, c.lang)
			}
			b.ReportMetric(float64(ctxRSS)/(1<<20), "context-MiB")
			b.ReportMetric(float64(bareRSS)/(1<<20), "bare-MiB")
			b.ReportMetric(float64(ctxRSS)/float64(bareRSS), "ratio")
		})
	}
}

// idleContextRSS creates a context, runs 1+1 in it, and returns the RSS of
// the interpreter it started: the one child of this process that is new.
func idleContextRSS(b *testing.B, h *hosttest.Host, lang string) int64 {
	before := childPIDs()
	status, text := h.Do("POST", "/contexts", fmt.Sprintf(`{"language":%q}`, lang))
	if status >= 300 {
		b.Fatalf("POST /contexts: %d %s", status, text)
	}
	var c struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal([]byte(text), &c)
	defer h.Do("DELETE", "/contexts/"+c.ID, "")
	body, _ := json.Marshal(map[string]string{"code": "1+1", "context_id": c.ID})
	resp, err := h.Client().Post(h.URL()+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for pid := range childPIDs() {
		if !before[pid] {
			return rssOf(b, pid)
		}
	}
	b.Fatalf("no new interpreter process for the %s context", lang)
	return 0
}

// idleBareRSS starts the interpreter waiting on its stdin and reads its RSS
// once it has started (it says so on stdout).
func idleBareRSS(b *testing.B, interp, lang string) int64 {
	code := "import sys; print('up', flush=True); sys.stdin.read()"
	if lang == "javascript" {
		code = "console.log('up'); process.stdin.resume()"
	}
	cmd := exec.Command(interp, map[bool]string{true: "-e", false: "-c"}[lang == "javascript"], code)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "up\n" {
		b.Fatalf("bare %s: %q %v", interp, line, err)
	}
	return rssOf(b, cmd.Process.Pid)
}

// childPIDs is the set of this process's child processes.
func childPIDs() map[int]bool {
	self := os.Getpid()
	pids := map[int]bool{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(self) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			pids[pid] = true
		}
	}
	return pids
}

func rssOf(b *testing.B, pid int) int64 {
	rss, err := testkit.StatusBytes(pid, "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	return rss
}

// reportRatio alternates a and floor (either first every other time) for
// b.N pairs after one pair of warm-up, and reports both medians and their
// ratio.
func reportRatio(b *testing.B, aName string, a func() time.Duration, floorName string, floor func() time.Duration) {
	aD, fD := testkit.Compare(b, 1, a, floor)
	testkit.ReportRatio(b, time.Millisecond, aName, aD, floorName, fD, "ratio")
}
