package httpapi

import (
	"net/http"
	"sync/atomic"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// front is what the host's listener serves. The host listens before it
// starts its transport, so that /health can say what start-up waits for
// while the transport plugin's start is retried (a gateway not up yet,
// settings.Config.DefaultStartRetry), instead of refusing connections. Until the
// API exists every route answers 503, behind the API's Host and Origin
// checks; /health says what start-up is doing, the others only that the
// host is starting.
type Front struct {
	api      atomic.Pointer[http.Handler] // nil until the API exists
	starting atomic.Value                 // string: what start-up waits for
	early    http.Handler
}

func NewFront(cfg settings.Config) *Front {
	f := &Front{}
	guard := newBrowserGuard(cfg.AllowedHosts, cfg.AllowedOrigins, cfg.Logger)
	f.early = guard.wrap(http.HandlerFunc(f.serveStarting))
	return f
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if api := f.api.Load(); api != nil {
		(*api).ServeHTTP(w, r)
		return
	}
	f.early.ServeHTTP(w, r)
}

// Serve hands every request from now on to the API.
func (f *Front) Serve(api http.Handler) { f.api.Store(&api) }

// SetStarting says what start-up waits for, on /health until the API
// exists.
func (f *Front) SetStarting(what string) { f.starting.Store(what) }

func (f *Front) serveStarting(w http.ResponseWriter, r *http.Request) {
	msg := "Starting: the transport is not up yet"
	if what, ok := f.starting.Load().(string); ok && r.URL.Path == "/health" {
		msg += ": " + what
	}
	writeText(w, http.StatusServiceUnavailable, msg)
}
