package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/kernelhost/kernelhost/hostcmd/settings"
)

// pprofServer serves net/http/pprof on its own listener (settings.Config.PprofAddr),
// never on the API's: the API port may be reachable from outside the
// sandbox, and profiles show memory contents.
type pprofServer struct {
	srv    *http.Server
	ln     net.Listener
	served chan struct{}
}

func startPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: listen on %s (setting %s): %w", addr, settings.EnvVar("pprof-addr"), err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		log.Warn("pprof listens on a non-loopback address: anyone who reaches it can read profiles and memory contents",
			"pprof_addr", ln.Addr().String())
	}
	// A mux of its own: importing net/http/pprof registers on
	// http.DefaultServeMux, which nothing here serves.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	p := &pprofServer{
		// No WriteTimeout: a CPU profile or trace takes as long as asked.
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln:     ln,
		served: make(chan struct{}),
	}
	go func() {
		defer close(p.served)
		if err := p.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server stopped", "err", err)
		}
	}()
	log.Info("pprof listening", "pprof_addr", ln.Addr().String())
	return p, nil
}

func (p *pprofServer) addr() string { return p.ln.Addr().String() }

// close stops the listener and cuts profiles in progress.
func (p *pprofServer) close() {
	_ = p.srv.Close()
	<-p.served
}
