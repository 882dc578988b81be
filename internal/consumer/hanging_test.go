package consumer

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
)

// syncBuffer is a bytes.Buffer the service's logger writes while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRestoreHangingTransaction: a changelog partition holds an open
// transaction whose producer is gone (it never ends by itself: a hanging
// transaction). The restore of the other partition is not held: its
// windows fire. The partition waiting on it is paused; once the wait is
// longer than state.transaction_timeout the instance reports it (an
// error line naming the changelog partition, the producer ID and the
// kafka-transactions.sh command that aborts it; the
// aggregator_hanging_transactions gauge; /readyz false). Once the
// transaction is aborted the partition is restored and its input, read
// from its committed position, fires its windows too.
func TestRestoreHangingTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		pn := &pipeNet{}
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, txnInput), kfake.SeedTopics(1, txnResults), kfake.ListenFn(pn.listen))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(kc.Close)
		yaml := fmt.Sprintf(`
source: {brokers: [%s], topics: [%s], group: %s, format: json, key: [sid], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, scope: partition}
window: {type: tumbling, size: 5s}
aggregates: [{name: calls, fn: count}]
sink: {results_topic: %s, linger: 1ms}
delivery: exactly_once
state: {commit_interval: 200ms, transaction_timeout: 2s}
`, kc.ListenAddrs()[0], txnInput, txnGroup, txnResults)
		cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
		if err != nil {
			t.Fatalf("config.Parse: %v", err)
		}
		var logs syncBuffer
		c, err := New(cfg, zerolog.New(&logs), prometheus.NewRegistry(), kgo.Dialer(pn.dial), kgo.FetchMaxWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.connect(ctx); err != nil { // creates the changelog topic
			t.Fatalf("connect: %v", err)
		}
		h := &txnHarness{t: t, kc: kc, c: c, ctx: ctx, net: pn}

		// The hanging transaction: a producer that wrote to changelog
		// partition 1 in a transaction and is gone.
		hung := h.client(kgo.TransactionalID("gone"), kgo.TransactionTimeout(10*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := hung.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := hung.ProduceSync(ctx, &kgo.Record{Topic: cfg.State.ChangelogTopic, Partition: 1, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("the hanging transaction's record: %v", err)
		}
		in := h.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
		for i, v := range []string{`{"sid":"a","t":1000}`, `{"sid":"a","t":12000}`, `{"sid":"b","t":1000}`, `{"sid":"b","t":12000}`} {
			if err := in.ProduceSync(ctx, &kgo.Record{Topic: txnInput, Partition: int32(i / 2), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}

		var run sync.WaitGroup
		rctx, stop := context.WithCancel(ctx)
		run.Go(func() {
			if err := c.Run(rctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		t.Cleanup(func() { stop(); run.Wait(); c.Close() })

		results := h.client(kgo.ConsumeTopics(txnResults), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		var got []string
		waitResult := func(sid string) {
			t.Helper()
			for !strings.Contains(strings.Join(got, "\n"), `"sid":"`+sid+`"`) {
				if ctx.Err() != nil {
					t.Fatalf("no result of %s within a minute; results %q; log:\n%s", sid, got, logs.String())
				}
				pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				results.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
				pcancel()
			}
		}
		waitResult("a") // partition 0 goes on
		deadline, _ := ctx.Deadline()
		waitFor(t, time.Until(deadline), func() bool { return testutil.ToFloat64(c.m.HangingTxns) == 1 }, func() string {
			return "aggregator_hanging_transactions 1; log:\n" + logs.String()
		})
		log := logs.String()
		for _, want := range []string{`"level":"error"`, `hanging transaction`, `"topic":"` + cfg.State.ChangelogTopic + `","partition":1`,
			`"producer_id":`, `"abort_with":"kafka-transactions.sh --bootstrap-server ` + kc.ListenAddrs()[0] + ` abort --topic ` + cfg.State.ChangelogTopic + ` --partition 1 --start-offset 0"`} {
			if !strings.Contains(log, want) {
				t.Errorf("the log has no %s:\n%s", want, log)
			}
		}
		if c.Serving() {
			t.Error("/readyz is true with a hanging transaction, want false")
		}
		if strings.Contains(strings.Join(got, "\n"), `"sid":"b"`) {
			t.Errorf("a result of partition 1 before its restore: %q", got)
		}

		// The operator aborts it (here its producer does).
		if err := hung.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
		waitResult("b")
		waitFor(t, time.Until(deadline), func() bool { return testutil.ToFloat64(c.m.HangingTxns) == 0 && c.Serving() }, func() string {
			return fmt.Sprintf("hanging %v, ready %v after the abort; log:\n%s", testutil.ToFloat64(c.m.HangingTxns), c.Serving(), logs.String())
		})
		if n := strings.Count(strings.Join(got, "\n"), `"sid":"b"`); n != 1 {
			t.Errorf("partition 1's window fired %d times, want once: %q", n, got)
		}
	})
}
