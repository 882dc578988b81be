package consumer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRunRenewsFencedProducer: exactly_once, the transactional producer
// is fenced while the service runs (its epoch bumped by another
// InitProducerID of its transactional ID, as a broker that aborted its
// transaction at the timeout or in a restart leaves it). The service does
// not end: it makes its session again, restores from the last commit and
// goes on; a read_committed reader sees every window's result once.
func TestRunRenewsFencedProducer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessCommitting(t, "exactly_once", "200ms")
		ctx, stop := context.WithCancel(h.ctx)
		var run sync.WaitGroup
		var runErr error
		run.Go(func() { runErr = h.c.Run(ctx) })
		t.Cleanup(func() { stop(); run.Wait() })
		h.waitCommitted(int64(len(txnInputs)))

		fencer := h.client(kgo.TransactionalID(transactionalID(h.c.cfg.Source)), kgo.DefaultProduceTopic(txnInput))
		if err := fencer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := fencer.ProduceSync(h.ctx, kgo.StringRecord(`{"sid":"z","t":0}`)).FirstErr(); err != nil {
			t.Fatalf("fencing producer: %v", err)
		}
		if err := fencer.EndTransaction(h.ctx, kgo.TryAbort); err != nil {
			t.Fatalf("fencing producer's abort: %v", err)
		}
		// Window [10s, 15s) fires: a (t 12000) and c.
		h.produce(txnInput, `{"sid":"c","t":13000}`, `{"sid":"c","t":22000}`)
		h.waitCommitted(int64(len(txnInputs)) + 3) // the fencer's aborted record and its marker take two offsets
		stop()
		run.Wait()
		if runErr != nil {
			t.Fatalf("Run = %v, want nil (the fenced session is made again)", runErr)
		}
		if got := testutil.ToFloat64(h.c.m.Renewals); got != 1 {
			t.Errorf("aggregator_producer_renewals_total = %v, want 1", got)
		}
		got := h.visible(txnResults)
		slices.Sort(got)
		if len(got) != 4 || len(slices.Compact(slices.Clone(got))) != 4 {
			t.Errorf("read_committed reader sees %d results %q, want 4, each once", len(got), got)
		}
		for _, want := range []string{`"sid":"a"`, `"sid":"b"`, `"sid":"c"`} {
			if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, want) }) {
				t.Errorf("no result of %s in %q", want, got)
			}
		}
	})
}

// TestRunRenewsAfterInvalidTxnState: exactly_once, the coordinator
// answers a commit's EndTxn INVALID_TXN_STATE (it had aborted the
// transaction at its timeout while the process was stopped, and bumped
// the epoch). The service does not end: it renews its session as when
// fenced, and the records of the aborted transaction commit once.
func TestRunRenewsAfterInvalidTxnState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessCommitting(t, "exactly_once", "200ms")
		ctx, stop := context.WithCancel(h.ctx)
		var run sync.WaitGroup
		var runErr error
		run.Go(func() { runErr = h.c.Run(ctx) })
		t.Cleanup(func() { stop(); run.Wait() })
		h.waitCommitted(int64(len(txnInputs)))

		h.answer(kmsg.EndTxn.Int16(), func(r kmsg.Request) kmsg.Response {
			resp := r.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.InvalidTxnState.Code
			return resp
		})
		h.produce(txnInput, `{"sid":"c","t":13000}`, `{"sid":"c","t":22000}`)
		h.waitCommitted(int64(len(txnInputs)) + 2)
		stop()
		run.Wait()
		if runErr != nil {
			t.Fatalf("Run = %v, want nil (the session is made again)", runErr)
		}
		if got := testutil.ToFloat64(h.c.m.Renewals); got != 1 {
			t.Errorf("aggregator_producer_renewals_total = %v, want 1", got)
		}
		got := h.visible(txnResults)
		slices.Sort(got)
		if len(got) != 4 || len(slices.Compact(slices.Clone(got))) != 4 {
			t.Errorf("read_committed reader sees %d results %q, want 4, each once", len(got), got)
		}
	})
}

// TestRunRenewsFencedBeforeRebalance: exactly_once, the commit the
// service makes before it lets a rebalance in (another member joins) is
// answered PRODUCER_FENCED (a broker that aborted the transaction at its
// timeout bumped the epoch). The service renews its session, as when a
// commit of its own is fenced, and every window's result reaches a
// read_committed reader once. It went on without a transaction instead:
// the commit began none, and the next output failed "cannot produce
// record transactionally if not in a transaction", which ended Run
// (TestPairwise under load, a case of two instances with the
// repartition stage).
func TestRunRenewsFencedBeforeRebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarnessCommitting(t, "exactly_once", "10m") // commits before a rebalance or a restore only
		ctx, stop := context.WithCancel(h.ctx)
		var run sync.WaitGroup
		var runErr error
		run.Go(func() { runErr = h.c.Run(ctx) })
		t.Cleanup(func() { stop(); run.Wait() })
		waitFor(t, 30*time.Second, h.appliedAll, func() string { return "the input applied" })

		h.answer(kmsg.TxnOffsetCommit.Int16(), txnOffsetCommitFails(kerr.ProducerFenced.Code))
		joiner := h.client(kgo.ConsumerGroup(txnGroup), kgo.ConsumeTopics(txnInput))
		jctx, leave := context.WithCancel(h.ctx)
		var polls sync.WaitGroup
		polls.Go(func() {
			for jctx.Err() == nil {
				joiner.PollFetches(jctx)
			}
		})
		waitFor(t, 30*time.Second, func() bool { return testutil.ToFloat64(h.c.m.Renewals) == 1 }, func() string {
			return fmt.Sprintf("%v renewals of the session, want 1", testutil.ToFloat64(h.c.m.Renewals))
		})
		leave()
		polls.Wait()
		joiner.Close() // leaves the group: the service takes the partition back

		// Window [10s, 15s) fires: a (t 12000) and c.
		h.produce(txnInput, `{"sid":"c","t":13000}`, `{"sid":"c","t":22000}`)
		passed := func() bool { // c at 22000 applied: the watermark past 20999
			h.c.mu.Lock()
			defer h.c.mu.Unlock()
			p := h.c.parts.byTP[topicPartition{txnInput, 0}]
			return p != nil && h.c.core.Partition(p.id).Watermark >= 20_999
		}
		waitFor(t, 30*time.Second, passed, func() string { return "the input applied after the renewal" })
		stop()
		run.Wait()
		if runErr != nil {
			t.Fatalf("Run = %v, want nil (the fenced session is made again)", runErr)
		}
		dctx, cancel := context.WithTimeout(h.ctx, time.Minute)
		defer cancel()
		if err := h.c.Drain(dctx); err != nil {
			t.Fatalf("Drain = %v", err)
		}
		got := h.visible(txnResults)
		slices.Sort(got)
		if len(got) != 4 || len(slices.Compact(slices.Clone(got))) != 4 {
			t.Errorf("read_committed reader sees %d results %q, want 4, each once", len(got), got)
		}
	})
}

// waitCommitted waits until the group's committed offset of the input
// partition is at least off.
func (h *txnHarness) waitCommitted(off int64) {
	h.t.Helper()
	adm := kadm.NewClient(h.client())
	committed := func() int64 { // -1: none yet (the group may not exist yet)
		offs, err := adm.FetchOffsets(h.ctx, txnGroup)
		if err != nil {
			return -1
		}
		if o, ok := offs.Lookup(txnInput, 0); ok && o.Err == nil {
			return o.At
		}
		return -1
	}
	waitFor(h.t, 30*time.Second, func() bool { return committed() >= off }, func() string {
		return fmt.Sprintf("committed offset %d, want %d", committed(), off)
	})
}
