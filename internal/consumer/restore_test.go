package consumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/invariants"
)

// TestRestoreReadsWithoutLock: the changelog reads of a restore happen
// without c.mu held, so a slow read holds up nothing else that takes it
// (Close, the rebalance callbacks, the engine goroutine's checks): while
// the restore's fetch of the changelog waits for its answer, c.mu comes
// free. (Not "is free when the fetch arrives": the engine goroutine may
// hold it for a step meanwhile, as it did in 1 run of 6.)
func TestRestoreReadsWithoutLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process()
		if err := h.commit(h.ctx); err != nil { // the changelog holds the state now
			t.Fatalf("commit = %v, want nil", err)
		}
		details, err := kadm.NewClient(h.client()).ListTopics(h.ctx, h.c.cfg.State.ChangelogTopic)
		if err != nil {
			t.Fatalf("list topics: %v", err)
		}
		changelog := details[h.c.cfg.State.ChangelogTopic].ID
		var fetches, free atomic.Int32 // the restore's fetches of the changelog; with c.mu free
		h.kc.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			for _, rt := range r.(*kmsg.FetchRequest).Topics {
				if rt.Topic == h.c.cfg.State.ChangelogTopic || rt.TopicID == changelog {
					fetches.Add(1)
					if lockFreeWithin(&h.c.mu, time.Second) { // bubble time
						free.Add(1)
					}
				}
			}
			return nil, nil, false // the broker answers it
		})
		h.c.fetch.polling.Lock() // abort's locks, in their order
		h.c.mu.Lock()
		h.c.abort() // every partition waits for its restore from the changelog
		h.c.mu.Unlock()
		h.c.fetch.polling.Unlock()
		h.stepFor("the partition is restored", func() bool { return len(h.c.core.Unrestored()) == 0 })
		if n, f := fetches.Load(), free.Load(); n == 0 || f != n {
			t.Errorf("the restore fetched the changelog %d times, c.mu came free while %d of them waited; want at least once, always", n, f)
		}
	})
}

// lockFreeWithin reports whether mu comes free within d, trying every
// millisecond; it leaves mu as it found it.
func lockFreeWithin(mu *invariants.Mutex, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if mu.TryLock() {
			mu.Unlock()
			return true
		}
	}
	return false
}

// stepFor polls and processes (as process does) until done, which is
// called with c.mu held, says so; it fails after a deadline, saying what
// it waited for.
func (h *txnHarness) stepFor(what string, done func() bool) {
	h.t.Helper()
	c, f := h.c, h.c.fetch
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		ok := done()
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("waited 30s for %s", what)
		}
		p, nerr := f.next(h.ctx)
		if nerr != nil {
			h.t.Fatalf("commit before a rebalance: %v", nerr)
		}
		f.poll(h.ctx, p)
		p.decoding.Wait()
		err := c.step(h.ctx, p)
		f.free <- p
		if err != nil {
			h.t.Fatalf("step: %v", err)
		}
	}
}

// TestRestorePartitionDroppedMeanwhile: a rebalance callback that drops
// a partition while its changelog is read (here lost, at_least_once: the
// callbacks run while the engine goroutine applies an empty poll) leaves
// it out of the restore, which ends without error; assigned again, it is
// restored anew.
func TestRestorePartitionDroppedMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process()
		if err := h.commit(h.ctx); err != nil { // the changelog holds the state now
			t.Fatalf("commit = %v, want nil", err)
		}
		details, err := kadm.NewClient(h.client()).ListTopics(h.ctx, h.c.cfg.State.ChangelogTopic)
		if err != nil {
			t.Fatalf("list topics: %v", err)
		}
		changelog := details[h.c.cfg.State.ChangelogTopic].ID
		input := map[string][]int32{txnInput: {0}}
		var dropped atomic.Bool
		h.kc.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			for _, rt := range r.(*kmsg.FetchRequest).Topics {
				if (rt.Topic == h.c.cfg.State.ChangelogTopic || rt.TopicID == changelog) && !dropped.Swap(true) {
					h.c.lost(h.ctx, nil, input)
				}
			}
			return nil, nil, false
		})
		h.c.fetch.polling.Lock()
		h.c.mu.Lock()
		h.c.abort()
		h.c.mu.Unlock()
		h.c.fetch.polling.Unlock()
		h.stepFor("the restore to end", func() bool { return len(h.c.core.Unrestored()) == 0 })
		if !dropped.Load() {
			t.Fatal("the restore never fetched the changelog")
		}
		if p := h.c.parts.byTP[topicPartition{txnInput, 0}]; p != nil {
			t.Fatalf("partition %s[0] assigned after it was lost", txnInput)
		}
		h.c.assigned(h.ctx, nil, input)
		h.stepFor("the partition assigned again restored", func() bool {
			return h.c.parts.byTP[topicPartition{txnInput, 0}] != nil && len(h.c.core.Unrestored()) == 0
		})
	})
}

// TestRestoreTakesAsLongAsItsRecords: a restore whose changelog comes
// slowly but steadily (each fetch of it answered after 8 s with one
// record batch) goes on for as long as it reads records, past
// state.transaction_timeout + 30 s in all (a large state on a loaded
// machine): only a read that gets nothing for that long fails (and
// starts again). The restore used to fail at that deadline whatever it
// read, and so started again, and failed again, for ever.
func TestRestoreTakesAsLongAsItsRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process()
		for i := range 6 { // commits of one batch each, at least
			ts := int64(20_000 + 1000*i)
			h.produce(txnInput, fmt.Sprintf(`{"sid":"k%d","t":%d}`, i, ts))
			h.stepFor("the record applied", func() bool {
				p := h.c.parts.byTP[topicPartition{txnInput, 0}]
				return p != nil && h.c.core.Partition(p.id).Watermark >= ts-1001 // max_out_of_orderness 1s
			})
			if err := h.commit(h.ctx); err != nil {
				t.Fatalf("commit = %v, want nil", err)
			}
		}
		details, err := kadm.NewClient(h.client()).ListTopics(h.ctx, h.c.cfg.State.ChangelogTopic)
		if err != nil {
			t.Fatalf("list topics: %v", err)
		}
		changelog := details[h.c.cfg.State.ChangelogTopic].ID
		var fetches atomic.Int32
		h.kc.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			req := r.(*kmsg.FetchRequest)
			for i, rt := range req.Topics {
				if rt.Topic == h.c.cfg.State.ChangelogTopic || rt.TopicID == changelog {
					fetches.Add(1)
					req.MaxBytes = 1 // one batch an answer
					for j := range rt.Partitions {
						req.Topics[i].Partitions[j].PartitionMaxBytes = 1
					}
					time.Sleep(8 * time.Second)
				}
			}
			return nil, nil, false // the broker answers it
		})
		ctx, cancel := context.WithTimeout(h.ctx, 5*time.Minute) // a restore that starts again for ever fails the step
		defer cancel()
		h.ctx = ctx
		began := time.Now()
		h.c.fetch.polling.Lock()
		h.c.mu.Lock()
		h.c.abort() // every partition waits for its restore from the changelog
		h.c.mu.Unlock()
		h.c.fetch.polling.Unlock()
		h.stepFor("the partition is restored", func() bool { return len(h.c.core.Unrestored()) == 0 })
		limit := h.c.cfg.State.TransactionTimeout + commitTimeout
		if took := time.Since(began); took <= limit || fetches.Load() < 6 {
			t.Errorf("the restore took %v in %d fetches of the changelog; want it past %v, in 6 or more", took, fetches.Load(), limit)
		}
	})
}
