package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kernelhost/kernelhost/core/engine"
)

// RunCodeInput is run_code's arguments: /execute's body.
type RunCodeInput struct {
	Code      string            `json:"code" jsonschema:"the code to run; it may span many lines"`
	Language  string            `json:"language,omitempty" jsonschema:"selects the language's default context (python when absent); leave it out when context_id is given"`
	ContextID string            `json:"context_id,omitempty" jsonschema:"run in this context (an id from create_context or list_contexts) instead of the language's default context"`
	EnvVars   map[string]string `json:"env_vars,omitempty" jsonschema:"environment variables set for this call only: the next call no longer sees them"`
	Timeout   float64           `json:"timeout,omitempty" jsonschema:"seconds the code may run before it is interrupted; 0 or absent: the host's limit"`
}

// RunCodeOutput is run_code's structured result.
type RunCodeOutput struct {
	ContextID      string     `json:"context_id" jsonschema:"the context the code ran in"`
	ExecutionCount int        `json:"execution_count,omitempty" jsonschema:"the interpreter's execution counter, where it has one"`
	Stdout         string     `json:"stdout"`
	Stderr         string     `json:"stderr"`
	Results        []Result   `json:"results" jsonschema:"the values the code returned or displayed, in order"`
	Error          *ExecError `json:"error,omitempty" jsonschema:"the exception the code raised, if any"`
}

// Result is one value the code returned (is_main_result) or displayed, in
// its structured formats; images are image content of the call's result.
type Result struct {
	IsMainResult bool     `json:"is_main_result" jsonschema:"the value of the last expression, not a display"`
	Formats      []string `json:"formats" jsonschema:"the MIME types the interpreter gave for it, images included"`
	Text         string   `json:"text,omitempty" jsonschema:"its text representation (text/plain)"`
	HTML         string   `json:"html,omitempty"`
	Markdown     string   `json:"markdown,omitempty"`
	JSON         any      `json:"json,omitempty"`
	Data         any      `json:"data,omitempty" jsonschema:"a DataFrame's data (e2b/data)"`
	Chart        any      `json:"chart,omitempty" jsonschema:"a chart's structured data: type, title, axes and elements (e2b/chart)"`
}

// ExecError is the exception the code raised.
type ExecError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Bounds of a timeout, as /execute's (hostcmd/httpapi/api_execute.go): a
// smaller positive one would round to "none", a larger one overflow.
const (
	minTimeoutSeconds = 0.001
	maxTimeoutSeconds = float64(math.MaxInt64/int64(time.Second)) - 1
)

// runCode runs the code through the engine as /execute does (admission,
// env-var policies, limits, metrics) and collects its outputs into one
// result. ctx is the call's: the client's cancellation, or its going away,
// interrupts the code (the context survives).
func (t *tools) runCode(ctx context.Context, req *mcp.CallToolRequest, in RunCodeInput) (*mcp.CallToolResult, RunCodeOutput, error) {
	if t := in.Timeout; t != 0 && (t < minTimeoutSeconds || t > maxTimeoutSeconds) {
		return nil, RunCodeOutput{}, fmt.Errorf(`"timeout" must be 0 (the host's) or a number of seconds from %g to %.0f`, minTimeoutSeconds, maxTimeoutSeconds)
	}
	x, err := t.engine.Execute(ctx, engine.ExecRequest{
		Code:      in.Code,
		ContextID: in.ContextID,
		Language:  in.Language,
		EnvVars:   in.EnvVars,
		Metadata:  metadata(req),
		Timeout:   time.Duration(in.Timeout * float64(time.Second)),
		// A cancelled call's result reaches nobody and cannot be re-attached
		// to: cancelling means stop, whatever -disconnect-policy says.
		InterruptWhenClientLeaves: true,
	})
	if err != nil {
		if t.opts.Refused != nil {
			t.opts.Refused(err)
		}
		return nil, RunCodeOutput{}, err
	}
	c := collector{out: RunCodeOutput{ContextID: x.ContextID(), Results: []Result{}}, progress: progressSender(req)}
	var outs []engine.Output
	for {
		outs, err = x.Next(ctx, outs[:0])
		for _, o := range outs {
			c.add(ctx, o)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				// Cancelled, or the client is gone: nobody reads a result.
				return nil, RunCodeOutput{}, ctx.Err()
			}
			return nil, RunCodeOutput{}, fmt.Errorf("the execution's output stream ended early: %w", err)
		}
	}
	c.out.Stdout = clip(c.out.Stdout, "stdout")
	c.out.Stderr = clip(c.out.Stderr, "stderr")
	return c.result(), c.out, nil
}

// maxStreamText bounds the stdout and the stderr a result carries: a model
// reads the result whole, and clients bound a message (the Go SDK's at 16
// MiB), so a cell that prints megabytes must not make its own result
// unreadable. Progress notifications still carry every chunk.
const maxStreamText = 256 << 10

// clip keeps the head and the tail of a text longer than maxStreamText,
// with a line saying how much was left out between them.
func clip(s, name string) string {
	if len(s) <= maxStreamText {
		return s
	}
	head, tail := maxStreamText/2, len(s)-maxStreamText/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return fmt.Sprintf("%s\n[kernelhost] %d bytes of %s left out here: the result keeps the first and last %d KiB\n%s",
		s[:head], tail-head, name, maxStreamText/2>>10, s[tail:])
}

// metadata is what env-var policies see of the call: that it came over
// MCP, and its session (empty over stdio, which has one session).
func metadata(req *mcp.CallToolRequest) map[string]string {
	m := map[string]string{"transport": "mcp"}
	if req.Session != nil {
		m["mcp_session_id"] = req.Session.ID()
	}
	return m
}

// progressSender sends each output line as a progress notification, when
// the client asked for progress (a progress token); else nil.
func progressSender(req *mcp.CallToolRequest) func(ctx context.Context, n int, line string) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return func(ctx context.Context, n int, line string) {
		// A failed notification loses a progress line, not the result.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: line})
	}
}

// collector builds run_code's result from an execution's outputs.
type collector struct {
	out      RunCodeOutput
	content  []mcp.Content // results' text and images, in order
	progress func(ctx context.Context, n int, line string)
	lines    int
}

func (c *collector) add(ctx context.Context, o engine.Output) {
	switch o.Type {
	case engine.OutNumberOfExecutions:
		c.out.ExecutionCount = o.ExecutionCount
	case engine.OutStdout, engine.OutStderr:
		if o.Type == engine.OutStdout {
			c.out.Stdout += o.Text
		} else {
			c.out.Stderr += o.Text
		}
		if c.progress != nil {
			c.lines++
			c.progress(ctx, c.lines, o.Text)
		}
	case engine.OutResult:
		c.addResult(o)
	case engine.OutError:
		c.out.Error = &ExecError{Name: o.ErrName, Value: o.ErrValue, Traceback: o.Traceback}
	}
}

// imageTypes are the result formats sent as image content.
var imageTypes = []string{"image/png", "image/jpeg"}

func (c *collector) addResult(o engine.Output) {
	r := Result{IsMainResult: o.IsMainResult, Formats: make([]string, 0, len(o.Bundle))}
	for mime := range o.Bundle {
		r.Formats = append(r.Formats, mime)
	}
	slices.Sort(r.Formats)
	r.Text = rawString(o.Bundle["text/plain"])
	r.HTML = rawString(o.Bundle["text/html"])
	r.Markdown = rawString(o.Bundle["text/markdown"])
	r.JSON = rawValue(o.Bundle["application/json"])
	r.Data = rawValue(o.Bundle["e2b/data"])
	r.Chart = rawValue(o.Bundle["e2b/chart"])
	c.out.Results = append(c.out.Results, r)

	if r.Text != "" {
		label := "Displayed"
		if r.IsMainResult {
			label = "Result"
		}
		c.content = append(c.content, &mcp.TextContent{Text: label + ":\n" + r.Text})
	}
	for _, mime := range imageTypes {
		if raw, ok := o.Bundle[mime]; ok {
			// Kernels send base64 with line breaks (IPython wraps it).
			b64 := strings.Join(strings.Fields(rawString(raw)), "")
			if data, err := base64.StdEncoding.DecodeString(b64); err == nil {
				c.content = append(c.content, &mcp.ImageContent{Data: data, MIMEType: mime})
			}
		}
	}
}

// result is the call's content: what a model reads. The structured result
// (c.out) is added by the SDK.
func (c *collector) result() *mcp.CallToolResult {
	var content []mcp.Content
	if c.out.Stdout != "" {
		content = append(content, &mcp.TextContent{Text: "stdout:\n" + c.out.Stdout})
	}
	if c.out.Stderr != "" {
		content = append(content, &mcp.TextContent{Text: "stderr:\n" + c.out.Stderr})
	}
	content = append(content, c.content...)
	if e := c.out.Error; e != nil {
		// A traceback usually ends with "Name: value" already.
		msg := "Error: " + e.Name + ": " + e.Value
		if strings.Contains(e.Traceback, e.Name) {
			msg = "Error:\n" + e.Traceback
		} else if e.Traceback != "" {
			msg += "\n" + e.Traceback
		}
		content = append(content, &mcp.TextContent{Text: msg})
	}
	if len(content) == 0 {
		content = append(content, &mcp.TextContent{Text: "(no output)"})
	}
	return &mcp.CallToolResult{Content: content, IsError: c.out.Error != nil}
}

// rawString decodes a raw JSON string; another value is kept as its JSON
// text, nothing as "".
func rawString(raw json.RawMessage) string {
	if raw == nil {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return string(raw)
	}
	return s
}

// rawValue decodes a raw JSON value; nil for none.
func rawValue(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	return v
}
