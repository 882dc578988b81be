package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"aggregator/internal/config"
)

// serveHTTP serves, on cfg.Listen, /metrics from reg (a *prometheus.Registry, which also
// counts the handler's own errors, or any Gatherer), /healthz (200 while the process
// runs) and /readyz (200 when ready reports true, else 503), and with
// cfg.Pprof Go's profiles under /debug/pprof/. It listens
// before returning, so a bad or busy address fails here rather than in a
// goroutine; the returned server's Addr is the address actually bound
// (useful with port 0). Stop it with Shutdown.
func serveHTTP(cfg config.HTTP, reg prometheus.Gatherer, ready func() bool) (*http.Server, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: %w", cfg.Listen, err)
	}
	mux := probesMux(reg, ready)
	if cfg.Pprof {
		servePprof(mux)
	}
	srv := &http.Server{
		Addr:              ln.Addr().String(),
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
	}
	// Serve returns ErrServerClosed once Shutdown has closed the listener,
	// which is how this goroutine ends. Accept on a TCP listener we own
	// fails for no other reason worth a log line: the probes would fail
	// and the kubelet would restart the pod.
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

func probesMux(reg prometheus.Gatherer, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	var opts promhttp.HandlerOpts
	if r, ok := reg.(prometheus.Registerer); ok {
		opts.Registry = r
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, opts))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// servePprof adds net/http/pprof's handlers to mux, as the package adds
// them to http.DefaultServeMux (which this process never serves): a CPU
// profile of a running service is `go tool pprof
// http://HOST:PORT/debug/pprof/profile?seconds=30`.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// newRegistry is the metrics registry of one service run (never the global
// one), with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
