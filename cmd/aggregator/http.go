package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveHTTP serves /metrics from reg (a *prometheus.Registry, which also
// counts the handler's own errors, or any Gatherer), /healthz (200 while the process
// runs) and /readyz (200 when ready reports true, else 503). It listens
// before returning, so a bad or busy address fails here rather than in a
// goroutine; the returned server's Addr is the address actually bound
// (useful with port 0). Stop it with Shutdown.
func serveHTTP(addr string, reg prometheus.Gatherer, ready func() bool) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: %w", addr, err)
	}
	srv := &http.Server{
		Addr:              ln.Addr().String(),
		Handler:           probesMux(reg, ready),
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

// newRegistry is the metrics registry of one service run (never the global
// one), with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
