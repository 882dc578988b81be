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
