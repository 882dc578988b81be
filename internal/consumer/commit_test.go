package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/config"
	"aggregator/internal/state"
)

// The topics of the commit tests: one partition each, so that a reader
// sees the results in the order they were written.
const (
	txnInput   = "calls"
	txnResults = "out"
	txnGroup   = "g"
)

// txnInputs are the records every commit test consumes: the last one's
// watermark fires window [0, 5s) with two results (a: 2, b: 1).
var txnInputs = []string{`{"sid":"a","t":1000}`, `{"sid":"a","t":2000}`, `{"sid":"b","t":3000}`, `{"sid":"a","t":12000}`}

// txnHarness is an exactly_once Consumer on kfake that the test steps by
// hand (no goroutine of its own): it polls and processes through the
// fetcher's and the engine goroutine's functions and commits when told.
type txnHarness struct {
	t   *testing.T
	kc  *kfake.Cluster
	c   *Consumer
	ctx context.Context
	// net is the in-memory network of the broker and the clients (nil:
	// loopback): in a synctest bubble, a client waiting for an answer is
	// durably blocked, so the bubble's clock moves on.
	net *pipeNet
	// markers counts the markers visible appended, each its own.
	markers int
}

func newTxnHarness(t *testing.T) *txnHarness {
	t.Helper()
	return newHarness(t, "exactly_once")
}

// newHarness is newTxnHarness with delivery (exactly_once or
// at_least_once).
func newHarness(t *testing.T, delivery string) *txnHarness {
	t.Helper()
	return newHarnessCommitting(t, delivery, "10m")
}

// newHarnessCommitting is newHarness with state.commit_interval interval.
func newHarnessCommitting(t *testing.T, delivery, interval string) *txnHarness {
	t.Helper()
	txnTimeout := ""
	if delivery == "exactly_once" {
		txnTimeout = ", transaction_timeout: 15m"
	}
	pn := &pipeNet{}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, txnInput, txnResults), kfake.ListenFn(pn.listen))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	yaml := fmt.Sprintf(`
source: {brokers: [%s], topics: [%s], group: %s, instance_id: i1, format: json, key: [sid], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 5s}
aggregates: [{name: calls, fn: count}]
sink: {results_topic: %s, linger: 1ms}
delivery: %s
state: {commit_interval: %s%s}
`, kc.ListenAddrs()[0], txnInput, txnGroup, txnResults, delivery, interval, txnTimeout)
	cfg, err := config.Parse([]byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	c, err := New(cfg, zerolog.Nop(), prometheus.NewRegistry(), kgo.Dialer(pn.dial), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := &txnHarness{t: t, kc: kc, c: c, ctx: t.Context(), net: pn}
	h.produce(txnInput, txnInputs...) // before the client fetches: its first fetch has them all
	if err := c.connect(h.ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		// As Run ends a session: the polls the test took are done with,
		// so that Close's leaving the group does not wait for them.
		c.kafka.cl.AllowRebalance()
		c.Close()
	})
	return h
}

// client is a plain client of the cluster; opts come last.
func (h *txnHarness) client(opts ...kgo.Opt) *kgo.Client {
	h.t.Helper()
	base := []kgo.Opt{kgo.SeedBrokers(h.kc.ListenAddrs()...)}
	if h.net != nil {
		base = append(base, kgo.Dialer(h.net.dial))
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(cl.Close)
	return cl
}

func (h *txnHarness) produce(topic string, values ...string) {
	h.t.Helper()
	cl := h.client(kgo.DefaultProduceTopic(topic))
	for _, v := range values {
		if err := cl.ProduceSync(h.ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			h.t.Fatalf("produce to %s: %v", topic, err)
		}
	}
}

// process polls and processes (as Run's two goroutines do, one step at a
// time) until the pipeline has applied every input record, the partition
// restored first. It fails after a deadline.
func (h *txnHarness) process() {
	h.t.Helper()
	c, f := h.c, h.c.fetch
	deadline := time.Now().Add(30 * time.Second)
	for !h.appliedAll() {
		if time.Now().After(deadline) {
			h.t.Fatalf("the consumer did not apply the %d input records within 30s", len(txnInputs))
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

// appliedAll reports whether the pipeline has applied every input record
// (they were produced before the first fetch: no lag is all of them).
func (h *txnHarness) appliedAll() bool {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	p := h.c.parts.byTP[topicPartition{txnInput, 0}]
	if p == nil || len(h.c.core.Unrestored()) > 0 {
		return false
	}
	ps := h.c.core.Partition(p.id)
	return ps.LagKnown && ps.Lag == 0
}

// commit is the engine goroutine's commit, with ctx.
func (h *txnHarness) commit(ctx context.Context) error { return h.c.lockedCommit(ctx) }

// told reports what the core was last told of a commit: the commits
// counted by result, and whether its partition waits for a restore (an
// Abort sends the core back to the changelog).
func (h *txnHarness) told() (committed, aborted float64, restoring bool) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return testutil.ToFloat64(h.c.m.Commits.WithLabelValues("committed")),
		testutil.ToFloat64(h.c.m.Commits.WithLabelValues("aborted")),
		len(h.c.core.Unrestored()) > 0
}

// counted is what aggregator_records_total says of the input partition
// (every outcome) and aggregator_firings_total of on-time results.
func (h *txnHarness) counted() (records, onTime float64) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	p := h.c.parts.byTP[topicPartition{txnInput, 0}]
	for _, r := range p.records {
		records += testutil.ToFloat64(r)
	}
	return records, testutil.ToFloat64(h.c.m.Firings.WithLabelValues("on_time"))
}

// visible is what a read_committed reader of topic sees: every record
// before a marker that a plain producer appends now.
func (h *txnHarness) visible(topic string) []string {
	h.t.Helper()
	h.markers++
	marker := fmt.Sprintf("marker-%d", h.markers) // the bubble's clock may not have moved since the last
	h.produce(topic, marker)
	cl := h.client(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("read_committed reader of %s: no marker within 30s, read %q", topic, got)
		}
		for _, r := range fs.Records() {
			if v := string(r.Value); strings.HasPrefix(v, "marker-") {
				if v == marker {
					return got
				}
			} else {
				got = append(got, v)
			}
		}
	}
}

// committedOffset is the group's committed offset of the input partition
// (-1: none).
func (h *txnHarness) committedOffset() int64 {
	h.t.Helper()
	offs, err := kadm.NewClient(h.client()).FetchOffsets(h.ctx, txnGroup)
	if err != nil {
		h.t.Fatalf("fetch offsets: %v", err)
	}
	if o, ok := offs.Lookup(txnInput, 0); ok && o.Err == nil {
		return o.At
	}
	return -1
}

// wantResults checks that a read_committed reader sees the window's two
// results once each.
func (h *txnHarness) wantResults() {
	h.t.Helper()
	got := h.visible(txnResults)
	if len(got) != 2 || got[0] == got[1] || !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, `"calls":2`) }) {
		h.t.Errorf("read_committed reader of %s sees %q, want the two results of window [0, 5s) once each (a: 2, b: 1)", txnResults, got)
	}
	if off := h.committedOffset(); off != int64(len(txnInputs)) {
		h.t.Errorf("committed offset = %d, want %d", off, len(txnInputs))
	}
}

// wantPublished checks that a read_committed reader of the watermark
// topic sees want (values, in order).
func (h *txnHarness) wantPublished(want ...string) {
	h.t.Helper()
	if got := h.visible(h.c.cfg.State.WatermarkTopic); !slices.Equal(got, want) {
		h.t.Errorf("read_committed reader of the watermark topic sees %q, want %q", got, want)
	}
}

// published is the value of the watermark-topic record of the input
// partition once every input record is applied.
const published = `{"version":1,"watermark":10999,"idle":false}`

// answer makes the broker answer the next request of kind key with the
// response fill makes of it, instead of handling it.
func (h *txnHarness) answer(key int16, fill func(req kmsg.Request) kmsg.Response) {
	h.kc.ControlKey(key, func(req kmsg.Request) (kmsg.Response, error, bool) {
		return fill(req), nil, true
	})
}

// TestCommitTransactionCommits: the transaction commits, the core is told
// Accept, and a read_committed reader sees each result once, with the
// offsets committed.
func TestCommitTransactionCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTxnHarness(t)
		h.process()
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("commit = %v, want nil", err)
		}
		if committed, aborted, restoring := h.told(); committed != 1 || aborted != 0 || restoring {
			t.Errorf("commits: %v committed, %v aborted, restoring %v; want 1, 0, false (Accept)", committed, aborted, restoring)
		}
		if !h.c.cycle.inTxn {
			t.Error("no transaction open after the commit")
		}
		h.wantResults()
		h.wantPublished(published) // by_key, scope global: in the transaction, once
		if records, onTime := h.counted(); records != float64(len(txnInputs)) || onTime != 2 {
			t.Errorf("counters after the commit: %v records, %v on-time firings; want %d, 2", records, onTime, len(txnInputs))
		}
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("second commit = %v, want nil", err)
		}
		h.wantPublished(published) // nothing changed: nothing more
	})
}

// TestCommitTransactionAborts: the brokers answer so that the transaction
// aborts and the service goes on (a lost group generation, a lost
// session, an EndTxn that kgo retries as an abort): End returns no
// error, the core is told Abort, a reader sees nothing of it, and the
// records processed again commit once.
func TestCommitTransactionAborts(t *testing.T) {
	tests := map[string]func(h *txnHarness){
		"TxnOffsetCommit: ILLEGAL_GENERATION (the group moved on)": func(h *txnHarness) {
			h.answer(kmsg.TxnOffsetCommit.Int16(), txnOffsetCommitFails(kerr.IllegalGeneration.Code))
		},
		"TxnOffsetCommit: UNKNOWN_MEMBER_ID (the coordinator forgot the member: a lost session)": func(h *txnHarness) {
			h.answer(kmsg.TxnOffsetCommit.Int16(), txnOffsetCommitFails(kerr.UnknownMemberID.Code))
		},
		"TxnOffsetCommit: FENCED_INSTANCE_ID (a static member that lost its session joined again)": func(h *txnHarness) {
			h.answer(kmsg.TxnOffsetCommit.Int16(), txnOffsetCommitFails(kerr.FencedInstanceID.Code))
		},
		"EndTxn: TRANSACTION_ABORTABLE": func(h *txnHarness) {
			h.answer(kmsg.EndTxn.Int16(), func(r kmsg.Request) kmsg.Response {
				resp := r.ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = kerr.TransactionAbortable.Code
				return resp
			})
		},
	}
	for name, inject := range tests {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newTxnHarness(t)
				h.process()
				inject(h)
				if err := h.commit(h.ctx); err != nil {
					t.Fatalf("commit = %v, want nil (the transaction aborts, the service goes on)", err)
				}
				if committed, aborted, restoring := h.told(); committed != 0 || aborted != 1 || !restoring {
					t.Errorf("commits: %v committed, %v aborted, restoring %v; want 0, 1, true (Abort)", committed, aborted, restoring)
				}
				if !h.c.cycle.inTxn {
					t.Error("no transaction begun after the abort")
				}
				if got := h.visible(txnResults); len(got) != 0 {
					t.Errorf("read_committed reader sees %q of the aborted transaction, want nothing", got)
				}
				h.wantPublished() // the watermark went with the aborted transaction
				if records, onTime := h.counted(); records != 0 || onTime != 0 {
					t.Errorf("counters after the abort: %v records, %v on-time firings; want 0, 0 (they are processed again)", records, onTime)
				}
				if off := h.committedOffset(); off != -1 {
					t.Errorf("committed offset = %d after the abort, want none", off)
				}
				h.process() // restored and read again from the last commit
				if err := h.commit(h.ctx); err != nil {
					t.Fatalf("commit after the abort = %v, want nil", err)
				}
				if committed, _, restoring := h.told(); committed != 1 || restoring {
					t.Errorf("after the second commit: %v committed, restoring %v; want 1, false", committed, restoring)
				}
				h.wantResults()
				h.wantPublished(published) // published again after the abort
				if records, onTime := h.counted(); records != float64(len(txnInputs)) || onTime != 2 {
					t.Errorf("counters after the abort and the commit: %v records, %v on-time firings; want %d, 2 (each once)", records, onTime, len(txnInputs))
				}
			})
		})
	}
}

// TestCommitTransactionFenced: another producer took the transactional ID
// (a second instance with the same source.instance_id): the transaction
// cannot end, commit fails (the service ends), the core is told Abort, and
// a reader sees nothing of it.
func TestCommitTransactionFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTxnHarness(t)
		h.process()
		// Every output is written before the fence, so that the failure is
		// the end of the transaction (a record produced after it fails, and
		// commit ends the service before it ends the transaction).
		h.c.writer.Sync()
		if err := h.c.kafka.pr.Flush(h.ctx); err != nil {
			t.Fatal(err)
		}
		fencer := h.client(kgo.TransactionalID(transactionalID(h.c.cfg.Source)), kgo.DefaultProduceTopic(txnInput))
		if err := fencer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		// Its first record initializes the producer ID: the broker bumps the
		// epoch and aborts the consumer's open transaction.
		if err := fencer.ProduceSync(h.ctx, kgo.StringRecord(`{"sid":"z","t":0}`)).FirstErr(); err != nil {
			t.Fatalf("fencing producer: %v", err)
		}
		if err := fencer.EndTransaction(h.ctx, kgo.TryAbort); err != nil {
			t.Fatalf("fencing producer's abort: %v", err)
		}
		err := h.commit(h.ctx)
		if err == nil || !strings.Contains(err.Error(), "end transaction") {
			t.Fatalf("commit = %v, want an end transaction error", err)
		}
		if committed, aborted, restoring := h.told(); committed != 0 || aborted != 1 || !restoring {
			t.Errorf("commits: %v committed, %v aborted, restoring %v; want 0, 1, true (Abort)", committed, aborted, restoring)
		}
		if got := h.visible(txnResults); len(got) != 0 {
			t.Errorf("read_committed reader sees %q of the fenced transaction, want nothing", got)
		}
		h.wantPublished() // a fenced instance publishes nothing
		if off := h.committedOffset(); off != -1 {
			t.Errorf("committed offset = %d, want none", off)
		}
	})
}

// TestCommitTransactionEndTxnFails: EndTxn fails with an error kgo cannot
// retry: commit fails (the service ends, a restart reads again from the
// last commit) and the core is told Abort.
func TestCommitTransactionEndTxnFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTxnHarness(t)
		h.process()
		h.answer(kmsg.EndTxn.Int16(), func(r kmsg.Request) kmsg.Response {
			resp := r.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = kerr.InvalidTxnState.Code
			return resp
		})
		err := h.commit(h.ctx)
		if !errors.Is(err, kerr.InvalidTxnState) {
			t.Fatalf("commit = %v, want %v", err, kerr.InvalidTxnState)
		}
		if committed, aborted, restoring := h.told(); committed != 0 || aborted != 1 || !restoring {
			t.Errorf("commits: %v committed, %v aborted, restoring %v; want 0, 1, true (Abort)", committed, aborted, restoring)
		}
		if off := h.committedOffset(); off != -1 {
			t.Errorf("committed offset = %d, want none", off)
		}
	})
}

// TestCommitTransactionBrokersSilent: the brokers give no answer that
// ends the transaction before the commit's deadline, so its outcome is
// unknown: EndTxn unanswered, or answered with an error that kgo retries
// until the deadline (the coordinator moving), or a flush cut short (a
// Produce unanswered). The transaction is aborted in the client before
// the next one begins; the core is told Abort, commit returns no error,
// and the records read again commit once.
func TestCommitTransactionBrokersSilent(t *testing.T) {
	notCoordinator := func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp, nil, true
	}
	tests := map[string]struct {
		key kmsg.Key
		// respond answers a request of kind key made before the commit
		// returned; deadline is the commit's.
		respond func(deadline <-chan struct{}, r kmsg.Request) (kmsg.Response, error, bool)
	}{
		"EndTxn unanswered until the deadline": {kmsg.EndTxn, func(deadline <-chan struct{}, r kmsg.Request) (kmsg.Response, error, bool) {
			if !r.(*kmsg.EndTxnRequest).Commit {
				return nil, nil, false
			}
			// Then an answer kgo retries, should it reach the client
			// before it gives up: every try meets this too.
			<-deadline
			return notCoordinator(r)
		}},
		"EndTxn NOT_COORDINATOR until the deadline": {kmsg.EndTxn, func(_ <-chan struct{}, r kmsg.Request) (kmsg.Response, error, bool) {
			if !r.(*kmsg.EndTxnRequest).Commit {
				return nil, nil, false
			}
			return notCoordinator(r) // kgo's last error when it gives up between tries
		}},
		"Produce unanswered until the deadline": {kmsg.Produce, func(deadline <-chan struct{}, _ kmsg.Request) (kmsg.Response, error, bool) {
			<-deadline // the commit's flush is cut short; then it is appended
			return nil, nil, false
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newTxnHarness(t)
				h.process()
				ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
				defer cancel()
				var answered atomic.Bool // the commit returned: the brokers answer again
				h.kc.ControlKey(tt.key.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
					h.kc.KeepControl()
					if answered.Load() {
						h.kc.DropControl()
						return nil, nil, false
					}
					return tt.respond(ctx.Done(), r)
				})
				err := h.commit(ctx)
				answered.Store(true)
				if err != nil {
					t.Fatalf("commit = %v, want nil (brokers out of reach are waited for)", err)
				}
				if committed, aborted, restoring := h.told(); committed != 0 || aborted != 1 || !restoring {
					t.Errorf("commits: %v committed, %v aborted, restoring %v; want 0, 1, true (Abort)", committed, aborted, restoring)
				}
				if !h.c.cycle.inTxn {
					t.Error("no transaction begun after the abort")
				}
				h.process() // restored and read again from the last commit
				if err := h.commit(h.ctx); err != nil {
					t.Fatalf("commit after the abort = %v, want nil", err)
				}
				h.wantResults() // the transaction the brokers may still have held has none of it
			})
		})
	}
}

// TestCommitTransactionOutputFailed: outputs the brokers refuse for good
// (the output topics not writable): commit fails before it ends the
// transaction, and the core is told nothing (the service ends; a restart
// reads again from the last commit).
func TestCommitTransactionOutputFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTxnHarness(t) // the inputs are in
		h.kc.ControlKey(kmsg.Produce.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			req := r.(*kmsg.ProduceRequest)
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		h.process()
		// The results were produced while processing: wait for their answer,
		// as the commit's check would see it a moment later.
		h.c.writer.Sync()
		_ = h.c.kafka.pr.Flush(h.ctx)
		err := h.commit(h.ctx)
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("commit = %v, want %v", err, kerr.TopicAuthorizationFailed)
		}
		if committed, aborted, restoring := h.told(); committed != 0 || aborted != 0 || restoring {
			t.Errorf("commits: %v committed, %v aborted, restoring %v; want 0, 0, false (neither Accept nor Abort)", committed, aborted, restoring)
		}
		if off := h.committedOffset(); off != -1 {
			t.Errorf("committed offset = %d, want none", off)
		}
	})
}

// TestCommitAtLeastOnceRejected: with at_least_once the group coordinator
// refuses the offset commit because the group moved on without the
// member (a rebalance, a lost session): the service goes on (the client
// rejoins), the refusal is counted, and the changelog holds the state and
// the position the next owner restores (past every input record, whatever
// offset the group holds). The offsets are committed after the rejoin.
func TestCommitAtLeastOnceRejected(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.IllegalGeneration, kerr.UnknownMemberID} {
		t.Run(code.Message, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, "at_least_once")
				// The first offset commit is refused: the one that commits the
				// input's records, whether the restore's end or the commit
				// below makes it (an idle service does not commit the same
				// offsets twice).
				h.answer(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) kmsg.Response {
					req := r.(*kmsg.OffsetCommitRequest)
					resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
					for _, rt := range req.Topics {
						st := kmsg.NewOffsetCommitResponseTopic()
						st.Topic = rt.Topic
						for _, rp := range rt.Partitions {
							sp := kmsg.NewOffsetCommitResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, code.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp
				})
				h.process()
				if err := h.commit(h.ctx); err != nil {
					t.Fatalf("commit = %v, want nil (a refused offset commit means rejoin)", err)
				}
				if got := testutil.ToFloat64(h.c.m.Commits.WithLabelValues("rejected")); got != 1 {
					t.Errorf("aggregator_commits_total{result=rejected} = %v, want 1", got)
				}
				if pos, ok := h.changelogPosition(); !ok || pos.Offset != int64(len(txnInputs)) {
					t.Errorf("the changelog's position = %+v (%v), want offset %d: the next owner skips what the state holds", pos, ok, len(txnInputs))
				}
				h.wantResults2()
				if err := h.commit(h.ctx); err != nil {
					t.Fatalf("the next commit = %v, want nil", err)
				}
				if off := h.committedOffset(); off != int64(len(txnInputs)) {
					t.Errorf("committed offset = %d after the next commit, want %d", off, len(txnInputs))
				}
			})
		})
	}
}

// changelogPosition is the position the next owner of the input
// partition restores from the changelog.
func (h *txnHarness) changelogPosition() (state.Position, bool) {
	h.t.Helper()
	topic := h.c.cfg.State.ChangelogTopic
	ends, err := kadm.NewClient(h.client()).ListEndOffsets(h.ctx, topic)
	if err != nil {
		h.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	end, _ := ends.Lookup(topic, 0)
	cl := h.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	r := state.NewRestorer()
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			h.t.Fatalf("read %s: offset %d of %d within 30s", topic, next, end.Offset)
		}
		for _, rec := range fs.Records() {
			next = rec.Offset + 1
			var tag []byte
			for _, hd := range rec.Headers {
				if hd.Key == state.TagHeader {
					tag = hd.Value
				}
			}
			if err := r.Add(rec.Key, rec.Value, tag); err != nil {
				h.t.Fatalf("restore %s offset %d: %v", topic, rec.Offset, err)
			}
		}
	}
	return r.Position()
}

// wantResults2 checks that a read_committed reader sees the window's two
// results (at_least_once: what was flushed is visible).
func (h *txnHarness) wantResults2() {
	h.t.Helper()
	got := h.visible(txnResults)
	if len(got) != 2 || !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, `"calls":2`) }) {
		h.t.Errorf("reader of %s sees %q, want the two results of window [0, 5s) (a: 2, b: 1)", txnResults, got)
	}
}

// TestCommitAtLeastOnceZombie: with at_least_once the process was paused
// past its session in the middle of the commit cycle (SIGSTOP), and the
// coordinator no longer knows the member: the commit writes nothing (no
// output, no state change, no position) and commits no offset (the
// partitions' next owner may have committed meanwhile: the zombie's
// changes would land among its commits), and the service goes on (the
// client drops the partitions and rejoins).
func TestCommitAtLeastOnceZombie(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process() // and commits: the first commit is due at once
		h.produce(txnInput, `{"sid":"c","t":13000}`)
		h.stepUntil(int64(len(txnInputs))) // applied, not committed
		var dropped atomic.Bool            // the coordinator no longer knows the member
		dropped.Store(true)
		h.kc.ControlKey(kmsg.Heartbeat.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			if !dropped.Load() {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		})
		// Not paused (the last commit just now): a member the group dropped
		// while the brokers restarted is a zombie all the same.
		h.c.mu.Lock()
		h.c.cycle.lastCommit = time.Now()
		h.c.mu.Unlock()
		before := h.endOffsets(h.c.cfg.State.ChangelogTopic, txnResults)
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("commit = %v, want nil (the zombie rejoins)", err)
		}
		if after := h.endOffsets(h.c.cfg.State.ChangelogTopic, txnResults); !maps.Equal(after, before) {
			t.Errorf("end offsets after the zombie's commit = %v, want %v (it writes nothing)", after, before)
		}
		// The commit on revoke, once the client rejoins (a new generation:
		// the zombie's mark no longer holds), writes nothing either: the
		// partitions were dropped, and a position it wrote would cover the
		// changes the zombie's commit did not write.
		dropped.Store(false)
		h.c.mu.Lock()
		n := len(h.c.parts.byTP)
		h.c.cycle.gone = false
		h.c.cycle.lastCommit = time.Now()
		h.c.mu.Unlock()
		if n != 0 {
			t.Errorf("the zombie holds %d partitions after its commit, want none (dropped)", n)
		}
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("the commit after the zombie's = %v, want nil", err)
		}
		if after := h.endOffsets(h.c.cfg.State.ChangelogTopic, txnResults); !maps.Equal(after, before) {
			t.Errorf("end offsets after the commit that follows the zombie's = %v, want %v (nothing to write)", after, before)
		}
		if got := testutil.ToFloat64(h.c.m.Commits.WithLabelValues("rejected")); got != 1 {
			t.Errorf("aggregator_commits_total{result=rejected} = %v, want 1", got)
		}
		if pos, ok := h.changelogPosition(); !ok || pos.Offset != int64(len(txnInputs)) {
			t.Errorf("the changelog's position = %+v (%v), want the last commit's, offset %d (none of the zombie's)", pos, ok, len(txnInputs))
		}
		if off := h.committedOffset(); off != int64(len(txnInputs)) {
			t.Errorf("committed offset = %d, want the last commit's, %d", off, len(txnInputs))
		}
	})
}

// TestCommitAtLeastOnceZombieWhileWriting: with at_least_once the member
// is still in the group when its commit begins, and dropped while the
// commit's outputs and state changes are on their way (brokers restarting
// under them: TestChaos at_least_once seed 7). Asked again before the
// positions, it writes no position and commits no offset: its changes
// have no position of their own, which every restore leaves out, and
// the partitions' next owner is not covered over.
func TestCommitAtLeastOnceZombieWhileWriting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process() // and commits: the first commit is due at once
		h.produce(txnInput, `{"sid":"c","t":13000}`)
		h.stepUntil(int64(len(txnInputs))) // applied, not committed
		changelog := h.c.cfg.State.ChangelogTopic
		var armed, dropped atomic.Bool
		h.kc.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			if armed.Load() {
				dropped.Store(true) // the session ends while the commit's writes are on their way
			}
			return nil, nil, false
		})
		h.kc.ControlKey(kmsg.Heartbeat.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			h.kc.KeepControl()
			if !dropped.Load() {
				return nil, nil, false
			}
			resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		})
		before := h.endOffsets(changelog)
		armed.Store(true)
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("commit = %v, want nil (the zombie rejoins)", err)
		}
		if after := h.endOffsets(changelog); after[changelog] <= before[changelog] {
			t.Errorf("changelog end offset %d after the commit, was %d: its changes were not written (the first question passed)", after[changelog], before[changelog])
		}
		if !dropped.Load() {
			t.Fatal("the session never ended during the commit: the test tests nothing")
		}
		if got := testutil.ToFloat64(h.c.m.Commits.WithLabelValues("rejected")); got != 1 {
			t.Errorf("aggregator_commits_total{result=rejected} = %v, want 1", got)
		}
		h.c.mu.Lock()
		n := len(h.c.parts.byTP)
		h.c.mu.Unlock()
		if n != 0 {
			t.Errorf("the zombie holds %d partitions after its commit, want none (dropped)", n)
		}
		if pos, ok := h.changelogPosition(); !ok || pos.Offset != int64(len(txnInputs)) {
			t.Errorf("the changelog's position = %+v (%v), want the last commit's, offset %d (none of the zombie's)", pos, ok, len(txnInputs))
		}
		if off := h.committedOffset(); off != int64(len(txnInputs)) {
			t.Errorf("committed offset = %d, want the last commit's, %d", off, len(txnInputs))
		}
	})
}

// TestZombieTakesBackKeptPartitions: a zombie's commit drops every
// partition, but the client may keep them (an offset commit refused with
// ILLEGAL_GENERATION: the member rejoins owning them, and a cooperative
// rebalance that leaves them to it names them in no callback, as in
// TestChaos at_least_once seed 15: nobody processed them again). The next
// assignment callback, whatever it adds, takes them back, to be restored.
func TestZombieTakesBackKeptPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, "at_least_once")
		h.process()
		h.produce(txnInput, `{"sid":"c","t":13000}`)
		h.stepUntil(int64(len(txnInputs)))
		h.kc.ControlKey(kmsg.Heartbeat.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
			resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		})
		h.c.mu.Lock()
		held := len(h.c.parts.byTP)
		h.c.mu.Unlock()
		if held == 0 {
			t.Fatal("the harness holds no partition")
		}
		if err := h.commit(h.ctx); err != nil {
			t.Fatalf("commit = %v, want nil (the zombie rejoins)", err)
		}
		h.c.mu.Lock()
		dropped := len(h.c.parts.byTP)
		h.c.mu.Unlock()
		if dropped != 0 {
			t.Fatalf("the zombie holds %d partitions after its commit, want none", dropped)
		}
		h.c.assigned(h.ctx, nil, map[string][]int32{}) // a rejoin that kept them: nothing added
		h.c.mu.Lock()
		back, unrestored := len(h.c.parts.byTP), len(h.c.core.Unrestored())
		h.c.mu.Unlock()
		if back != held || unrestored != held {
			t.Errorf("after the rejoin the consumer holds %d partitions, %d to restore; want the %d the client kept, each to restore", back, unrestored, held)
		}
	})
}

// endOffsets are the end offsets of partition 0 of each topic.
func (h *txnHarness) endOffsets(topics ...string) map[string]int64 {
	h.t.Helper()
	ends, err := kadm.NewClient(h.client()).ListEndOffsets(h.ctx, topics...)
	if err != nil {
		h.t.Fatalf("end offsets of %v: %v", topics, err)
	}
	out := map[string]int64{}
	for _, topic := range topics {
		end, _ := ends.Lookup(topic, 0)
		out[topic] = end.Offset
	}
	return out
}

// stepUntil polls and processes until a poll returned the input
// partition's record at offset last; it fails after a deadline.
func (h *txnHarness) stepUntil(last int64) {
	h.t.Helper()
	c, f := h.c, h.c.fetch
	deadline := time.Now().Add(30 * time.Second)
	for {
		if time.Now().After(deadline) {
			h.t.Fatalf("the consumer did not apply offset %d within 30s", last)
		}
		p, nerr := f.next(h.ctx)
		if nerr != nil {
			h.t.Fatalf("commit before a rebalance: %v", nerr)
		}
		f.poll(h.ctx, p)
		p.decoding.Wait()
		done := slices.ContainsFunc(p.parts, func(pp polledPart) bool {
			return pp.hi > pp.lo && pp.records[len(pp.records)-1].Offset >= last
		})
		err := c.step(h.ctx, p)
		f.free <- p
		if err != nil {
			h.t.Fatalf("step: %v", err)
		}
		if done {
			return
		}
	}
}

// txnOffsetCommitFails answers a TxnOffsetCommit with code for every
// partition it names.
func txnOffsetCommitFails(code int16) func(kmsg.Request) kmsg.Response {
	return func(r kmsg.Request) kmsg.Response {
		req := r.(*kmsg.TxnOffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewTxnOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	}
}
