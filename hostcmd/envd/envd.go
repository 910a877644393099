// Package envd serves the sandbox API of E2B's in-sandbox daemon (envd) that
// the official E2B SDKs call for sbx.files.* and sbx.commands.*: the HTTP
// routes /files (download and upload), /health and /envs, and the Connect
// RPC services filesystem.Filesystem and process.Process, generated from
// the spec (package gen). The host (hostcmd/server) serves it on its own
// listener (the SDKs' port 49983) behind its access token and Host/Origin
// checks; this package holds the walls: files only where a context may
// read or write (paths.go), commands only in a bubblewrap sandbox like a
// context's interpreter (process.go).
package envd

import (
	"encoding/json"
	"errors"
	"github.com/kernelhost/kernelhost/transports/subprocess"
	"log/slog"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"

	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/filesystem/filesystemconnect"
	"github.com/kernelhost/kernelhost/hostcmd/envd/gen/process/processconnect"
)

// Config is what the sandbox API needs from the host.
type Config struct {
	// Home is where relative paths resolve and commands start: the host's
	// default cwd, where contexts start too (one machine, one view).
	Home string
	// Writable is the writable set of a context (the sandbox's); the files
	// side writes nowhere else.
	Writable []string
	// Hidden are the host's secrets (its access token file, its config
	// file, systemd's credentials directory): never read, written or shown
	// to a command.
	Hidden []string
	// Env is what every command's environment starts from (the host's
	// global env vars), under the request's own.
	Env map[string]string
	// Sandbox wraps each command in its sandbox; nil runs commands as plain
	// host processes, which only an operator's -sandbox=off asks for.
	Sandbox Wrapper
	// Limits starts each command in cgroups of its own with a context's
	// limits (subprocess.CommandLimits); nil: a plain start.
	Limits Starter
	// NoCommands, when set, says why commands are refused (no sandbox can
	// be had here): Start answers FailedPrecondition with it.
	NoCommands string
	// MaxUploadBytes bounds one upload's file (413 past it).
	MaxUploadBytes int64
	Log            *slog.Logger
}

// Wrapper makes a command run in a sandbox (subprocess.CommandSandbox);
// net, when not nil, gives the started command its outbound network.
type Wrapper interface {
	Wrap(cmd *exec.Cmd, dir string, hidden []string, tty bool) (net *subprocess.CommandNet, err error)
}

// Starter starts a command in its cgroups; end, once it was waited for,
// kills what is left there and removes them.
type Starter interface {
	Start(cmd *exec.Cmd) (end func(), err error)
}

// Server is the sandbox API.
type Server struct {
	cfg      Config
	procs    *processes
	watchers sync.Map // watcher id -> *pollWatcher
	stats    Stats
}

// Stats are the counters the host's /metrics shows.
type Stats struct {
	Commands      atomic.Int64 // commands started
	BytesUploaded atomic.Int64
	BytesRead     atomic.Int64 // downloaded
}

// New returns the sandbox API for cfg. Writable and Hidden are resolved.
func New(cfg Config) *Server {
	cfg.Writable = realPaths(cfg.Writable)
	cfg.Hidden = realPaths(cfg.Hidden)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	return &Server{cfg: cfg, procs: newProcesses()}
}

// DefaultMaxUploadBytes bounds one uploaded file when Config leaves it 0.
const DefaultMaxUploadBytes = 1 << 30

// Stats returns the server's counters.
func (s *Server) Stats() *Stats { return &s.stats }

// Handler serves every route of the sandbox API (no authentication: the
// host puts its own in front).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /envs", s.envs)
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	mux.Handle(filesystemconnect.NewFilesystemHandler(fsService{s}))
	mux.Handle(processconnect.NewProcessHandler(procService{s}))
	return mux
}

// Close kills every command still running and ends the watchers.
func (s *Server) Close() {
	s.procs.killAll()
	s.watchers.Range(func(k, v any) bool {
		v.(*pollWatcher).close()
		s.watchers.Delete(k)
		return true
	})
}

// envs answers the environment commands start with (the global env vars).
func (s *Server) envs(w http.ResponseWriter, r *http.Request) {
	env := s.cfg.Env
	if env == nil {
		env = map[string]string{}
	}
	writeJSON(w, http.StatusOK, env)
}

// apiError is envd's HTTP error body.
type apiError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Message: msg, Code: status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"message":"encode response","code":500}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// httpStatus maps a files error to envd's status.
func httpStatus(err error) int {
	switch {
	case isNotExist(err):
		return http.StatusNotFound
	case isPermission(err):
		return http.StatusForbidden
	case errors.Is(err, errInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
