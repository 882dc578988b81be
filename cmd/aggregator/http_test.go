package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
)

func TestServeHTTPProbes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Records.WithLabelValues("calls", "0", "aggregated").Add(3)
	var ready atomic.Bool
	srv, err := serveHTTP(config.HTTP{Listen: "127.0.0.1:0"}, reg, ready.Load)
	if err != nil {
		t.Fatalf("serveHTTP() = %v", err)
	}
	t.Cleanup(func() { shutdown(t, srv) })
	base := "http://" + srv.Addr

	tests := []struct {
		name, path string
		ready      bool
		wantCode   int
		wantBody   string
	}{
		{"healthz while starting", "/healthz", false, http.StatusOK, "ok"},
		{"readyz before the group is joined", "/readyz", false, http.StatusServiceUnavailable, "not ready"},
		{"readyz once joined", "/readyz", true, http.StatusOK, "ready"},
		{"metrics", "/metrics", true, http.StatusOK, `aggregator_records_total{outcome="aggregated",partition="0",topic="calls"} 3`},
		{"unknown path", "/nope", true, http.StatusNotFound, "404"},
	}
	for _, tt := range tests {
		ready.Store(tt.ready)
		code, body := get(t, base+tt.path)
		if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
			t.Errorf("%s: GET %s = %d %q, want %d containing %q", tt.name, tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}
}

// TestServeHTTPPprof: Go's profiles are served only with http.pprof.
func TestServeHTTPPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		srv, err := serveHTTP(config.HTTP{Listen: "127.0.0.1:0", Pprof: on}, prometheus.NewRegistry(), func() bool { return true })
		if err != nil {
			t.Fatalf("serveHTTP() = %v", err)
		}
		base := "http://" + srv.Addr
		for path, want := range map[string]string{"/debug/pprof/": "goroutine", "/debug/pprof/cmdline": "aggregator"} {
			code, body := get(t, base+path)
			switch {
			case on && (code != http.StatusOK || !strings.Contains(body, want)):
				t.Errorf("http.pprof on: GET %s = %d %.80q, want 200 containing %q", path, code, body, want)
			case !on && code != http.StatusNotFound:
				t.Errorf("http.pprof off: GET %s = %d, want 404", path, code)
			}
		}
		shutdown(t, srv)
	}
}

func TestServeHTTPBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = serveHTTP(config.HTTP{Listen: ln.Addr().String()}, prometheus.NewRegistry(), func() bool { return true })
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "http.listen") {
		t.Errorf("serveHTTP(busy %s) = %v, want EADDRINUSE naming http.listen", ln.Addr(), err)
	}
}

func TestServeHTTPShutdownStopsServing(t *testing.T) {
	srv, err := serveHTTP(config.HTTP{Listen: "127.0.0.1:0"}, prometheus.NewRegistry(), func() bool { return true })
	if err != nil {
		t.Fatalf("serveHTTP() = %v", err)
	}
	shutdown(t, srv)
	if _, err := http.Get("http://" + srv.Addr + "/healthz"); err == nil {
		t.Errorf("GET /healthz after Shutdown succeeded, want a connection error")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func shutdown(t *testing.T, srv *http.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown() = %v", err)
	}
}
