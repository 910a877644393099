package pluginrpc

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// slogAdapter is the hclog.Logger go-plugin gets on the host side. It sends
// go-plugin's own logs and the plugin's re-logged stderr lines to the host's
// slog logger. Its level is fixed (Info by default) because go-plugin's
// default host logger logs at Trace, which floods the host log.
type slogAdapter struct {
	l     *slog.Logger
	name  string
	level hclog.Level
	args  []any
}

var _ hclog.Logger = (*slogAdapter)(nil)

func newSlogAdapter(l *slog.Logger, name string, level hclog.Level) *slogAdapter {
	return &slogAdapter{l: l, name: name, level: level}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *slogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < a.level {
		return
	}
	all := make([]any, 0, len(a.args)+len(args)+2)
	if a.name != "" {
		all = append(all, "logger", a.name)
	}
	all = appendRenamed(all, a.args)
	all = appendRenamed(all, args)
	a.l.Log(context.Background(), slogLevel(level), msg, all...)
}

// appendRenamed appends the key-value pairs kv to all, renaming the key
// "plugin": the host's logger already carries plugin=<name>, and go-plugin
// logs the executable's path under that same key ("plugin process exited"),
// which would put the key in the line twice.
func appendRenamed(all, kv []any) []any {
	for i, v := range kv {
		if i%2 == 0 && v == "plugin" {
			v = "path"
		}
		all = append(all, v)
	}
	return all
}

func (a *slogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *slogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *slogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *slogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *slogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }
func (a *slogAdapter) IsTrace() bool                 { return a.level <= hclog.Trace }
func (a *slogAdapter) IsDebug() bool                 { return a.level <= hclog.Debug }
func (a *slogAdapter) IsInfo() bool                  { return a.level <= hclog.Info }
func (a *slogAdapter) IsWarn() bool                  { return a.level <= hclog.Warn }
func (a *slogAdapter) IsError() bool                 { return a.level <= hclog.Error }
func (a *slogAdapter) ImpliedArgs() []any            { return a.args }
func (a *slogAdapter) Name() string                  { return a.name }
func (a *slogAdapter) SetLevel(l hclog.Level)        { a.level = l }
func (a *slogAdapter) GetLevel() hclog.Level         { return a.level }

func (a *slogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *slogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *slogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *slogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *slogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return lineLogger{a: a, level: hclog.Info}
}

// lineLogger logs each write as one message; go-plugin uses it for the
// plugin's stdout/stderr that arrive over its stdio stream.
type lineLogger struct {
	a     *slogAdapter
	level hclog.Level
}

func (w lineLogger) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.a.Log(w.level, line)
		}
	}
	return len(p), nil
}
