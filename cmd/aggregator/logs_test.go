package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestRunLogsRebalances: two instances of examples/local.yaml's service
// in one group log at info what changed, once: one line per rebalance
// with the partitions assigned, revoked and held; one ready line each
// (the second instance, ready at once with no partition, logged it again
// once it was given some); a transaction that the rebalance aborted at
// info, not warn: no warn line at all.
func TestRunLogsRebalances(t *testing.T) {
	t.Parallel() // its own broker; mostly waits on the group's rebalances
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	env := []string{"AGGREGATOR_SOURCE_BROKERS=" + kc.ListenAddrs()[0], "AGGREGATOR_HTTP_LISTEN=:0"}
	start := func(ctx context.Context) (*lockedBuffer, <-chan error) {
		out := new(lockedBuffer)
		errc := make(chan error, 1)
		go func() { errc <- run(ctx, []string{"run", "--config", "../../examples/local.yaml"}, env, nil, out, out) }()
		return out, errc
	}
	ctx1, stop1 := context.WithCancel(ctx)
	defer stop1()
	out1, done1 := start(ctx1)
	waitFor(t, ctx, out1, regexp.MustCompile(`(INF ready)`))
	ctx2, stop2 := context.WithCancel(ctx)
	defer stop2()
	out2, done2 := start(ctx2)
	// The second instance is given a partition of each topic, the first
	// gives them up.
	waitFor(t, ctx, out2, regexp.MustCompile(`INF partitions rebalanced (assigned="calls\[\d\] calls-local-repartition\[\d\]")`))
	waitFor(t, ctx, out1, regexp.MustCompile(`INF partitions rebalanced assigned=none component=consumer held="calls\[\d\] calls-local-repartition\[\d\]" (revoked="calls\[\d\] calls-local-repartition\[\d\]")`))
	waitFor(t, ctx, out2, regexp.MustCompile(`(INF ready)`))
	stop2()
	if err := <-done2; err != nil {
		t.Fatalf("second run: %v\n%s", err, out2.String())
	}
	// The first takes them back.
	waitFor(t, ctx, out1, regexp.MustCompile(`revoked=none\n(?s:.*)INF partitions rebalanced (assigned="calls\[\d\] calls-local-repartition\[\d\]") component=consumer held="calls\[0,1\] calls-local-repartition\[0,1\]" revoked=none`))
	stop1()
	if err := <-done1; err != nil {
		t.Fatalf("first run: %v\n%s", err, out1.String())
	}
	for i, out := range []string{out1.String(), out2.String()} {
		if n := strings.Count(out, " INF ready "); n != 1 {
			t.Errorf("instance %d logged %d ready lines, want 1:\n%s", i+1, n, out)
		}
		if strings.Contains(out, " WRN ") || strings.Contains(out, " ERR ") {
			t.Errorf("instance %d logged a warning or an error:\n%s", i+1, out)
		}
	}
}

// TestRunLogsOneLinePerRetry: with no broker answering, each connect
// attempt is one warn line with its cause, not also the Kafka client's
// own line for the failed dial. Sequential: a test running meanwhile
// could take the closed broker's port.
func TestRunLogsOneLinePerRetry(t *testing.T) {
	ctx, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	addr := kc.ListenAddrs()[0]
	kc.Close() // its port refuses connections now
	env := []string{"AGGREGATOR_SOURCE_BROKERS=" + addr, "AGGREGATOR_HTTP_LISTEN=:0"}
	out := new(lockedBuffer)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--config", "../../examples/local.yaml"}, env, nil, out, out)
	}()
	waitFor(t, ctx, out, regexp.MustCompile(`(attempt=3)`))
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	if warns, retries := strings.Count(text, " WRN "), strings.Count(text, " WRN connect to Kafka failed; retrying "); warns != retries || retries < 3 {
		t.Errorf("run logged %d warn lines, %d of them connect retries, want only retries, 3 or more:\n%s", warns, retries, text)
	}
}

// TestLogReadyOnce: the ready line is written the first time the service
// is ready, not again when it becomes ready after a rebalance's restore.
func TestLogReadyOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := 0
	ready := func() bool { // not ready, ready, not ready (a restore), ready, ...
		calls++
		if calls == 8 {
			cancel()
		}
		return calls%2 == 0
	}
	out := new(lockedBuffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		logReady(ctx, zerolog.New(out), ready, prometheus.NewRegistry(), "http://localhost:9090/metrics")
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("logReady did not return")
	}
	if n := strings.Count(out.String(), `"message":"ready"`); n != 1 {
		t.Errorf("logReady wrote %d ready lines, want 1:\n%s", n, out.String())
	}
}
