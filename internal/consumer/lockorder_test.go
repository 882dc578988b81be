package consumer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"aggregator/internal/config"
	"aggregator/internal/invariants"
)

// TestLockOrderChecked: a Consumer's locks are in their order
// (lockorder.go). Taken in it they never panic; c.fetch.polling taken
// while c.mu is held panics, naming both, in a build with the checks
// (-race, or -tags invariants), and is a plain lock without them.
func TestLockOrderChecked(t *testing.T) {
	c := unconnected(t)
	c.fetch.polling.Lock() // lockedCommit's order
	c.mu.Lock()
	c.revocations.mu.Lock()
	c.revocations.mu.Unlock()
	c.mu.Unlock()
	c.fetch.polling.Unlock()

	c.mu.Lock()
	defer c.mu.Unlock()
	got := recovered(func() {
		c.fetch.polling.Lock()
		c.fetch.polling.Unlock()
	})
	if want := "fetcher.polling (rank 1) taken while holding Consumer.mu (rank 2)"; invariants.Enabled && !strings.Contains(got, want) {
		t.Errorf("polling taken under c.mu with the checks: panic %q, want one containing %q", got, want)
	}
	if !invariants.Enabled && got != "" {
		t.Errorf("polling taken under c.mu without the checks: panic %q, want none", got)
	}
}

// unconnected is a Consumer of a minimal config (by_key), not connected
// (New does no I/O).
func unconnected(t *testing.T) *Consumer {
	t.Helper()
	yaml := `
source: {brokers: [127.0.0.1:1], topics: [calls], group: g, format: json, key: [sid], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
window: {type: tumbling, size: 5s}
aggregates: [{name: calls, fn: count}]
sink: {results_topic: out}
`
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	c, err := NewWithClock(cfg, zerolog.Nop(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// recovered runs f and returns what it panicked with ("" if nothing).
func recovered(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}
