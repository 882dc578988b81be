package integration

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// Broker faults under exactly_once (docs/delivery.md#exactly_once-the-default): whatever the brokers answer,
// a read_committed reader of the outputs sees replay's results, late
// events and dead letters, each exactly once. Faults come from kfake's
// fault and control hooks, at the requests they name, so each test is as
// deterministic as the service: the input comes in three phases, each
// produced once the previous one is committed, which fixes the merged
// watermark at the phase boundaries whatever the partitions' interleaving.

// faultGroup is the consumer group of every test here (parseConfig's).
const faultGroup = "aggregator-test"

// faultChangelog is the changelog topic of faultGroup.
const faultChangelog = faultGroup + "-changelog"

// faultOpts make a hung member leave the group within a second or two,
// and clients retry sooner than by default: a fault that answers
// NOT_LEADER_FOR_PARTITION leaves the leader where it is, and kgo then
// waits for its metadata to age (5s by default) before it retries.
var faultOpts = []kgo.Opt{
	kgo.SessionTimeout(time.Second),
	kgo.HeartbeatInterval(100 * time.Millisecond),
	kgo.RebalanceTimeout(2 * time.Second),
	kgo.MetadataMinAge(50 * time.Millisecond),
	kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
}

// faultCluster starts a kfake cluster of n brokers with the input topic in
// 4 partitions and one-partition outputs; short session timeouts are
// allowed.
func faultCluster(t testing.TB, n int, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(n), kfake.SeedTopics(4, inTopic),
		kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// faultConfig is callsConfig(tumbling) plus extra YAML (a state block).
func faultConfig(t testing.TB, brokers []string, extra string) config.Config {
	t.Helper()
	return parseConfig(t, callsConfig(tumbling)+extra, brokers)
}

// startOpts is startWith with kgo options, which the consumer applies last
// to each of its clients.
func startOpts(t testing.TB, cfg config.Config, reg *prometheus.Registry, opts ...kgo.Opt) *service {
	t.Helper()
	c, err := consumer.NewWithClock(cfg, zerolog.Nop(), reg, time.Now,
		append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- c.Run(ctx) }()
	t.Cleanup(func() { s.crash() })
	return s
}

// exited waits up to d for Run to return; ok is false if it is still
// running. Once Run returned, the service shuts down as serve does it
// (Drain), and drainErr is Drain's error.
func (s *service) exited(d time.Duration) (runErr, drainErr error, ok bool) {
	select {
	case runErr = <-s.done:
	case <-time.After(d):
		return nil, nil, false
	}
	s.cancel()
	s.cancel = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return runErr, s.c.Drain(ctx), true
}

// A faultPhase is records produced at once, line i to partition parts[i].
type faultPhase struct {
	lines []string
	parts []int32
}

func (p *faultPhase) add(part int32, line string) {
	p.lines = append(p.lines, line)
	p.parts = append(p.parts, part)
}

func (p faultPhase) produce(t testing.TB, brokers []string) {
	t.Helper()
	produce(t, brokers, p.lines, func(i int) int32 { return p.parts[i] })
}

// faultPhases returns three phases over 4 partitions, key sid_k in
// partition k%4, with times going up within each partition:
//
//  1. on-time records 100ms apart and some that are not JSON (dead
//     letters). The merged watermark ends at base+80.6s: window [75s, 80s)
//     has fired and is within its allowed lateness, [70s, 75s) is closed.
//  2. per key, a record of [75s, 80s) (a late firing), one of [70s, 75s)
//     (a late event) and one of the open [80s, 85s) (state that a later
//     firing shows), and a dead letter; none moves the watermark.
//  3. on-time records again.
func faultPhases() []faultPhase {
	const n1 = 820
	ps := make([]faultPhase, 3)
	onTime := func(p *faultPhase, from, to int) {
		for i := from; i < to; i++ {
			key := i % 8
			if i%97 == 50 {
				p.add(int32(key%4), fmt.Sprintf("not json %d", i))
			}
			p.add(int32(key%4), fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, key, base+int64(i)*100, i%10))
		}
	}
	onTime(&ps[0], 0, n1)
	for k := range int64(8) {
		ps[1].add(int32(k%4), fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, k, base+77_000+k, k))
		ps[1].add(int32(k%4), fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, k, base+72_000+k, k))
		ps[1].add(int32(k%4), fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, k, base+80_700+k, 100+k))
	}
	ps[1].add(1, "not json either")
	onTime(&ps[2], n1, n1+400)
	return ps
}

// A faultRun is a fault test's input: the phases of faultPhases, each
// partition's end offset after each phase, and replay's outputs of them all.
type faultRun struct {
	ps   []faultPhase
	ends []map[int32]int64
	want expected
}

func newFaultRun(t testing.TB, cfg config.Config) *faultRun {
	ps := faultPhases()
	inputs, ends := phaseInputs(ps)
	return &faultRun{ps: ps, ends: ends, want: replay(t, cfg, inputs, noWallClock)}
}

// phase produces phase i and waits until svc has committed all of it.
func (r *faultRun) phase(t testing.TB, brokers []string, i int, svc *service) {
	r.ps[i].produce(t, brokers)
	waitCommitted(t, brokers, r.ends[i], svc)
}

// phaseInputs numbers the phases' records with their offsets, phase by
// phase and within a phase partition by partition: the order replay
// processes them in. ends[i] is each partition's end offset after phase i.
func phaseInputs(ps []faultPhase) (inputs []input, ends []map[int32]int64) {
	next := map[int32]int64{}
	for _, ph := range ps {
		for p := range int32(4) {
			for i, l := range ph.lines {
				if ph.parts[i] == p {
					inputs = append(inputs, input{p, next[p], l})
					next[p]++
				}
			}
		}
		end := map[int32]int64{}
		for p, n := range next {
			end[p] = n
		}
		ends = append(ends, end)
	}
	return inputs, ends
}

// waitCommitted waits until the group's committed offsets of the input
// partitions are ends: every record before them is processed and its
// outputs are committed. It fails at once if the Run of one of svcs
// returns.
func waitCommitted(t testing.TB, brokers []string, ends map[int32]int64, svcs ...*service) {
	t.Helper()
	waitCommittedWithin(t, waitTimeout, brokers, ends, svcs...)
}

func waitCommittedWithin(t testing.TB, d time.Duration, brokers []string, ends map[int32]int64, svcs ...*service) {
	t.Helper()
	waitGroupCommittedWithin(t, d, brokers, faultGroup, ends, svcs...)
}

// waitGroupCommittedWithin is waitCommittedWithin for group; it returns
// when the offsets were seen committed.
func waitGroupCommittedWithin(t testing.TB, d time.Duration, brokers []string, group string, ends map[int32]int64, svcs ...*service) time.Time {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	var offs kadm.OffsetResponses
	var err error
	waitForf(t, d, pollEvery, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		offs, err = adm.FetchOffsets(ctx, group)
		cancel()
		done := err == nil
		for p, end := range ends {
			o, ok := offs.Lookup(inTopic, p)
			done = done && ok && o.Err == nil && o.At == end
		}
		if done {
			return true
		}
		for _, s := range svcs {
			select {
			case err := <-s.done:
				s.done <- err // for stop or crash
				t.Fatalf("Run returned before %s was committed to %v: %v", inTopic, ends, err)
			default:
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%s committed to %v (%v, %v)", inTopic, ends, offs, err) })
	return time.Now()
}

// checkOutputs reads every output topic (read_committed) and checks that
// each holds what replay emits, each result revision and each late event
// or dead letter once.
func checkOutputs(t testing.TB, brokers []string, want expected) {
	t.Helper()
	results := readAll(t, brokers, resultsTopic)
	checkOnce(t, results)
	if got, want := contents(values(results)), contents(want.results); !slices.Equal(got, want) {
		t.Errorf("results differ from replay:\n%s", diff(got, want))
	}
	checkEvents(t, "late events", events(readAll(t, brokers, lateTopic)), want.late)
	checkEvents(t, "dead letters", events(readAll(t, brokers, dlqTopic)), want.dead)
}

// checkOnce fails if a (key, window, revision) is in recs twice; the key
// of a result names its group key and window.
func checkOnce(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range recs {
		k := string(r.Key) + revision(r.Value)
		if seen[k] {
			t.Errorf("result %s twice (offset %d): %s", k, r.Offset, r.Value)
		}
		seen[k] = true
	}
}

// checkEvents fails if an event is in got twice, or if got and want
// differ as sets (the output topic interleaves the partitions' events).
func checkEvents(t testing.TB, what string, got, want []lateEvent) {
	t.Helper()
	seen := map[lateEvent]bool{}
	twice := 0
	for _, e := range got {
		if seen[e] {
			if twice++; twice <= 3 {
				t.Errorf("%s: %s [%s] twice", what, e.value, e.headers)
			}
		}
		seen[e] = true
	}
	byText := func(a, b lateEvent) int {
		return cmp.Or(cmp.Compare(a.value, b.value), cmp.Compare(a.headers, b.headers))
	}
	got, want = slices.Clone(got), slices.Clone(want)
	slices.SortFunc(got, byText)
	slices.SortFunc(want, byText)
	if !slices.Equal(got, want) {
		t.Errorf("%s: %d (%d repeats), want replay's %d", what, len(got), twice, len(want))
	}
}

// gathered returns the sum of the samples of the named counter or
// histogram (the sum of its observations) whose labels include labels,
// given as name, value pairs.
func gathered(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

// changelogProduce returns a function reporting whether a request is a
// transactional produce to the changelog. Produce v13 names topics by ID
// only.
func changelogProduce(t testing.TB, kc *kfake.Cluster) func(kmsg.Request) bool {
	t.Helper()
	info := kc.TopicInfo(faultChangelog)
	if info == nil {
		t.Fatalf("no topic %s", faultChangelog)
	}
	return func(req kmsg.Request) bool {
		r, ok := req.(*kmsg.ProduceRequest)
		if !ok || r.TransactionID == nil {
			return false
		}
		return slices.ContainsFunc(r.Topics, func(t kmsg.ProduceRequestTopic) bool {
			return t.Topic == faultChangelog || t.TopicID == info.TopicID
		})
	}
}

// A faultCase is faults to install (kfake's Fault answers the requests it
// names with its error instead of the broker, Count times).
type faultCase struct {
	name   string
	faults []kfake.Fault
}

// Retriable and abortable broker errors on the requests of a transaction
// (produce, TxnOffsetCommit and EndTxn: with KIP-890 there is no
// AddOffsetsToTxn), on heartbeats, and on the reads of the restore that
// follows an abort, installed before phases 2 and 3: the service keeps
// running (Run returns nil at shutdown) and its outputs are replay's,
// exactly once.
func TestTransientFaults(t *testing.T) {
	t.Parallel() // its own broker
	produceErr := func(topic string, err *kerr.Error, n int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: n}
	}
	on := func(key kmsg.Key, err *kerr.Error, n int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{key}, Err: err, Count: n}
	}
	abort := on(kmsg.EndTxn, kerr.TransactionAbortable, 1) // the transaction aborts: state is restored from the changelog
	cases := []faultCase{
		{"produce/results NOT_LEADER_FOR_PARTITION", []kfake.Fault{produceErr(resultsTopic, kerr.NotLeaderForPartition, 3)}},
		{"produce/late NOT_LEADER_FOR_PARTITION", []kfake.Fault{produceErr(lateTopic, kerr.NotLeaderForPartition, 2)}},
		{"produce/changelog NOT_ENOUGH_REPLICAS", []kfake.Fault{produceErr(faultChangelog, kerr.NotEnoughReplicas, 3)}},
		{"produce/results REQUEST_TIMED_OUT after append", []kfake.Fault{produceErr(resultsTopic, kerr.RequestTimedOut, 2)}},
		{"produce/changelog NOT_ENOUGH_REPLICAS_AFTER_APPEND", []kfake.Fault{produceErr(faultChangelog, kerr.NotEnoughReplicasAfterAppend, 2)}},
		{"TxnOffsetCommit/COORDINATOR_NOT_AVAILABLE", []kfake.Fault{on(kmsg.TxnOffsetCommit, kerr.CoordinatorNotAvailable, 3)}},
		{"TxnOffsetCommit/NOT_COORDINATOR", []kfake.Fault{on(kmsg.TxnOffsetCommit, kerr.NotCoordinator, 2)}},
		{"TxnOffsetCommit/REQUEST_TIMED_OUT after commit", []kfake.Fault{on(kmsg.TxnOffsetCommit, kerr.RequestTimedOut, 1)}},
		{"TxnOffsetCommit/ILLEGAL_GENERATION", []kfake.Fault{on(kmsg.TxnOffsetCommit, kerr.IllegalGeneration, 1)}},
		{"TxnOffsetCommit/UNKNOWN_MEMBER_ID", []kfake.Fault{on(kmsg.TxnOffsetCommit, kerr.UnknownMemberID, 1)}},
		{"EndTxn/COORDINATOR_NOT_AVAILABLE", []kfake.Fault{on(kmsg.EndTxn, kerr.CoordinatorNotAvailable, 3)}},
		{"EndTxn/NOT_COORDINATOR", []kfake.Fault{on(kmsg.EndTxn, kerr.NotCoordinator, 2)}},
		{"EndTxn/CONCURRENT_TRANSACTIONS", []kfake.Fault{on(kmsg.EndTxn, kerr.ConcurrentTransactions, 2)}},
		{"EndTxn/TRANSACTION_ABORTABLE", []kfake.Fault{abort}},
		{"EndTxn/UNKNOWN_SERVER_ERROR", []kfake.Fault{on(kmsg.EndTxn, kerr.UnknownServerError, 1)}},
		// The fault answers the commit without ending the transaction
		// (as a coordinator that had aborted it at its timeout would):
		// the service renews its producer as when fenced, whose new
		// InitProducerID aborts the transaction left open.
		{"EndTxn/INVALID_TXN_STATE", []kfake.Fault{on(kmsg.EndTxn, kerr.InvalidTxnState, 1)}},
		{"Heartbeat/REBALANCE_IN_PROGRESS", []kfake.Fault{on(kmsg.Heartbeat, kerr.RebalanceInProgress, 1)}},
		{"restore/fetch NOT_LEADER_FOR_PARTITION", []kfake.Fault{abort,
			{Keys: []kmsg.Key{kmsg.Fetch}, Topic: faultChangelog, Err: kerr.NotLeaderForPartition, Count: 2}}},
		{"restore/ListOffsets NOT_LEADER_FOR_PARTITION", []kfake.Fault{abort,
			{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: faultChangelog, Err: kerr.NotLeaderForPartition, Count: 2}}},
		// A batch refused for a record in it: the transaction aborts, and
		// the refused records, processed again, are produced again each
		// alone in its batch, which the broker takes this time.
		{"produce/results INVALID_RECORD", []kfake.Fault{produceErr(resultsTopic, kerr.InvalidRecord, 1)}},
		{"produce/results INVALID_RECORD while ending", []kfake.Fault{produceErr(resultsTopic, kerr.NotLeaderForPartition, 6),
			produceErr(resultsTopic, kerr.InvalidRecord, 1)}},
		{"produce/late MESSAGE_TOO_LARGE", []kfake.Fault{produceErr(lateTopic, kerr.MessageTooLarge, 1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kc := faultCluster(t, 1)
			brokers := kc.ListenAddrs()
			cfg := faultConfig(t, brokers, "")
			fault := newFaultRun(t, cfg)
			reg := prometheus.NewRegistry()
			s := startOpts(t, cfg, reg, faultOpts...)
			var hs []*kfake.FaultHandle
			for i, ph := range fault.ps {
				if i > 0 {
					hs = append(hs, kc.Fault(tc.faults...))
				}
				ph.produce(t, brokers)
				waitCommitted(t, brokers, fault.ends[i], s)
			}
			s.stop(t)
			hits := 0
			for _, h := range hs {
				hits += h.Hits()
				h.Remove()
			}
			if hits == 0 {
				t.Errorf("no request was faulted")
			}
			checkOutputs(t, brokers, fault.want)
			t.Logf("%d requests faulted; commits: %v committed, %v aborted", hits,
				gathered(t, reg, "aggregator_commits_total", "result", "committed"),
				gathered(t, reg, "aggregator_commits_total", "result", "aborted"))
		})
	}
}

// A group error that ends the member's group session while a transaction
// ends. The heartbeat loop meets it while the transaction's changelog
// records are on their way (a control holds them in the broker until a
// heartbeat has been answered with the error), so the session ends before
// End asks for a heartbeat of its own; outside tests, a member that missed
// a rebalance or its session timeout meets ILLEGAL_GENERATION or
// UNKNOWN_MEMBER_ID so. The transaction commits or aborts at once, Run goes
// on, and the outputs are replay's, exactly once.
func TestGroupErrorDuringCommit(t *testing.T) {
	t.Parallel() // its own broker
	for _, e := range []*kerr.Error{kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.UnknownMemberID} {
		t.Run(e.Message, func(t *testing.T) {
			t.Parallel()
			kc := faultCluster(t, 1)
			brokers := kc.ListenAddrs()
			cfg := faultConfig(t, brokers, "")
			fault := newFaultRun(t, cfg)
			s := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
			fault.phase(t, brokers, 0, s)

			var hits atomic.Int64
			toChangelog := changelogProduce(t, kc)
			kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				if !toChangelog(req) {
					return nil, nil, false
				}
				kc.DropControl()
				h := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: e})
				kc.SleepControl(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_ = h.Wait(ctx, 1)
					hits.Store(int64(h.Hits()))
				})
				return nil, nil, false
			})
			began := time.Now()
			fault.ps[1].produce(t, brokers)
			waitCommittedWithin(t, 10*time.Second, brokers, fault.ends[1], s)
			t.Logf("phase 2 committed after %v", time.Since(began).Round(time.Millisecond))
			if hits.Load() == 0 {
				t.Errorf("no heartbeat was answered with %s", e.Message)
			}
			fault.phase(t, brokers, 2, s)
			s.stop(t)
			checkOutputs(t, brokers, fault.want)
		})
	}
}

// Errors a client cannot retry, other than a record refused for itself
// (see TestTransientFaults): Run returns an error (the process exits and
// is restarted), and the next instance gives replay's outputs,
// exactly once. The failed instance must not leave its transaction open:
// an open transaction holds back read_committed readers, the next owner's
// restore among them, until the brokers abort it (after
// state.transaction_timeout, 5s here). The broker takes the failed
// instance's abort, so the next instance commits phase 2 well before
// that.
func TestFatalFaults(t *testing.T) {
	t.Parallel() // its own broker
	const txnTimeout = 5 * time.Second
	// failing answers a produce to topic with INVALID_RECORD, after
	// retries NOT_LEADER_FOR_PARTITION answers: each costs the client a
	// backoff (50ms), so that the failure comes once the transaction is
	// ending (the client is flushing it) rather than while it is open.
	failing := func(topic string, retries int) []kfake.Fault {
		invalid := kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord}
		if retries == 0 {
			return []kfake.Fault{invalid}
		}
		return []kfake.Fault{{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: retries}, invalid}
	}
	cases := []faultCase{
		{"produce/changelog INVALID_RECORD", failing(faultChangelog, 0)},
		{"produce/changelog INVALID_RECORD while ending", failing(faultChangelog, 3)},
		{"TxnOffsetCommit/GROUP_AUTHORIZATION_FAILED", []kfake.Fault{{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.GroupAuthorizationFailed}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kc := faultCluster(t, 1)
			brokers := kc.ListenAddrs()
			cfg := faultConfig(t, brokers, fmt.Sprintf("state: {transaction_timeout: %v}\n", txnTimeout))
			fault := newFaultRun(t, cfg)
			s := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
			fault.phase(t, brokers, 0, s)

			h := kc.Fault(tc.faults...)
			fault.ps[1].produce(t, brokers)
			began := time.Now()
			runErr, drainErr, ok := s.exited(15 * time.Second)
			if !ok {
				t.Fatalf("Run still running %v after a %s", time.Since(began), tc.name)
			}
			t.Logf("after %v: Run = %v; Drain = %v", time.Since(began).Round(time.Millisecond), runErr, drainErr)
			if runErr == nil {
				t.Errorf("Run = nil, want an error")
			}
			if h.Hits() == 0 {
				t.Errorf("no request was faulted")
			}

			restarted := time.Now()
			reg := prometheus.NewRegistry()
			s = startOpts(t, cfg, reg, faultOpts...)
			waitCommitted(t, brokers, fault.ends[1], s)
			took := time.Since(restarted)
			t.Logf("the next instance committed phase 2 after %v (restore %.2fs)", took.Round(time.Millisecond),
				gathered(t, reg, "aggregator_restore_duration_seconds"))
			if took > txnTimeout/2 {
				t.Errorf("the next instance committed phase 2 after %v: the failed one left its transaction open", took.Round(time.Millisecond))
			}
			fault.phase(t, brokers, 2, s)
			s.stop(t)
			checkOutputs(t, brokers, fault.want)
		})
	}
}

// With three brokers, the transaction and group coordinators move, and so
// do the leaders of the output and changelog partitions, while
// transactions end: clients meet NOT_COORDINATOR and
// NOT_LEADER_FOR_PARTITION, look the new ones up, and go on.
func TestCoordinatorMoves(t *testing.T) {
	t.Parallel() // its own broker
	kc := faultCluster(t, 3)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	fault := newFaultRun(t, cfg)
	s := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
	fault.phase(t, brokers, 0, s)

	var ended, moves atomic.Int32
	kc.ControlKey(int16(kmsg.EndTxn), func(r kmsg.Request) (kmsg.Response, error, bool) {
		// Every other end of a transaction, before the broker answers it
		// (so the one the client sends again to the new coordinator goes
		// through). The coordinator does move: a rehash can leave it where
		// it was, and an idle service commits nothing, so each phase may
		// end only one transaction.
		if n := ended.Add(1); n%2 == 1 && moves.Load() < 10 {
			moves.Add(1)
			id := r.(*kmsg.EndTxnRequest).TransactionalID
			for was, i := kc.CoordinatorFor(id), 0; kc.CoordinatorFor(id) == was && i < 100; i++ {
				kc.RehashCoordinators()
			}
			for _, tp := range []struct {
				topic string
				parts int32
			}{{resultsTopic, 1}, {lateTopic, 1}, {dlqTopic, 1}, {faultChangelog, 4}} {
				for p := range tp.parts {
					_ = kc.MoveTopicPartition(tp.topic, p, (kc.LeaderFor(tp.topic, p)+1)%3)
				}
			}
		}
		return nil, nil, false
	})
	for i := 1; i < len(fault.ps); i++ {
		fault.phase(t, brokers, i, s)
	}
	s.stop(t)
	checkOutputs(t, brokers, fault.want)
	if n := moves.Load(); n < 2 {
		t.Errorf("coordinators and leaders moved %d times, want 2 at least", n)
	}
}

// Every partition's leader moves, the inputs' too, while the service is
// idle. kfake then answers the consumer's OffsetForLeaderEpoch for the old
// epoch with no end offset (a real broker answers the log end offset), and
// kgo reports lost records and fetches the input partitions again from
// offset 0 (a rewind that truncation after an unclean leader election
// causes too). The records the state holds already must not be applied
// again.
func TestInputLeaderMoves(t *testing.T) {
	t.Parallel() // its own broker
	kc := faultCluster(t, 3)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	fault := newFaultRun(t, cfg)
	s := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
	fault.phase(t, brokers, 0, s)

	input := kc.TopicInfo(inTopic).TopicID
	rewound := make(chan struct{})
	kc.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, ft := range req.(*kmsg.FetchRequest).Topics {
			if ft.Topic != inTopic && ft.TopicID != input {
				continue
			}
			for _, fp := range ft.Partitions {
				if fp.FetchOffset == 0 {
					kc.DropControl()
					close(rewound)
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	kc.ShufflePartitionLeaders()
	select {
	case <-rewound:
	case <-time.After(10 * time.Second):
		t.Log("the consumer did not fetch from offset 0 again")
	}
	for i := 1; i < len(fault.ps); i++ {
		fault.phase(t, brokers, i, s)
	}
	s.stop(t)
	checkOutputs(t, brokers, fault.want)
}

// The whole cluster stops while a transaction ends (its EndTxn has reached
// a broker, which has not answered it) and starts again on the same ports
// from its data directory: the client reconnects, ends the transaction,
// and goes on.
func TestBrokerRestart(t *testing.T) {
	t.Parallel() // its own broker, on ports below the ephemeral range (freePort)
	rc := newRestartable(t, 3)
	brokers := rc.kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	fault := newFaultRun(t, cfg)
	s := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
	fault.phase(t, brokers, 0, s)

	// The next transaction's end waits in the broker until it stops.
	ending := make(chan struct{})
	release := make(chan struct{})
	kc := rc.kc
	kc.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.DropControl()
		close(ending)
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	fault.ps[1].produce(t, brokers)
	select {
	case <-ending:
	case <-time.After(waitTimeout):
		t.Fatal("no transaction ended")
	}
	began := time.Now()
	rc.restart(t, release)
	waitCommitted(t, brokers, fault.ends[1], s)
	t.Logf("phase 2 committed %v after the restart began", time.Since(began).Round(time.Millisecond))
	fault.phase(t, brokers, 2, s)
	s.stop(t)
	checkOutputs(t, brokers, fault.want)
}

// restartable is a kfake cluster that keeps its data in a directory, so
// that it can stop and start again on the same ports.
type restartable struct {
	kc    *kfake.Cluster
	dir   string
	ports []int
}

func newRestartable(t *testing.T, n int) *restartable {
	t.Helper()
	rc := &restartable{dir: t.TempDir()}
	for range n {
		rc.ports = append(rc.ports, freePort(t)) // nothing else takes them while the cluster is down
	}
	rc.kc = faultCluster(t, n, kfake.DataDir(rc.dir), kfake.Ports(rc.ports...))
	t.Cleanup(func() { rc.kc.Close() })
	return rc
}

// restart closes the cluster, closes release (what its sleeping controls
// wait for), and starts it again from its data.
func (rc *restartable) restart(t *testing.T, release chan struct{}) {
	t.Helper()
	rc.kc.Close()
	close(release)
	kc, err := kfake.NewCluster(kfake.Ports(rc.ports...), kfake.DataDir(rc.dir),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("kfake restart: %v", err)
	}
	rc.kc = kc
}

// A freezer is a kgo.Dialer whose connections stop moving bytes while it
// is frozen, in both directions, and which dials nothing meanwhile: to the
// brokers the client is a process that hangs (SIGSTOP, a long GC pause, a
// network partition), and the client cannot tell until it thaws.
type freezer struct {
	mu     sync.Mutex
	thawed chan struct{} // nil unless frozen; closed by thaw
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed == nil {
		f.thawed = make(chan struct{})
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
}

// wait returns once the freezer is not frozen.
func (f *freezer) wait() {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (f *freezer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	f.wait()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return frozenConn{c, f}, nil
}

type frozenConn struct {
	net.Conn
	f *freezer
}

// Read holds what it read until the freezer thaws.
func (c frozenConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.f.wait()
	return n, err
}

func (c frozenConn) Write(b []byte) (int, error) {
	c.f.wait()
	return c.Conn.Write(b)
}

// An instance that hangs in the middle of a transaction, once the brokers
// hold its changelog records, is fenced: it leaves the group when its
// session times out, the brokers abort its transaction when that times
// out, and a second instance restores the partitions from the changelog
// and completes the outputs. When the first one wakes, nothing it had
// open commits.
//
// The hang: instance A dials through a freezer, and a kfake control on
// produce freezes it when its transactional produce to the changelog
// reaches the broker (the control lets the broker append the records).
// Nothing of A reaches the brokers from then on, heartbeats included,
// while A itself is left as it is: A hangs as a whole, as far as anyone
// else can tell, with no hook in the service.
func TestHungInstanceIsFenced(t *testing.T) {
	t.Parallel() // its own broker
	const txnTimeout = 5 * time.Second
	kc := faultCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, fmt.Sprintf("state: {transaction_timeout: %v}\n", txnTimeout))
	fault := newFaultRun(t, cfg)

	var fz freezer
	defer fz.thaw() // before the cleanups close A
	regA := prometheus.NewRegistry()
	a := startOpts(t, cfg, regA, append(slices.Clone(faultOpts), kgo.Dialer(fz.dial))...)
	fault.phase(t, brokers, 0, a)

	frozen := make(chan time.Time, 1)
	toChangelog := changelogProduce(t, kc)
	kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if toChangelog(req) {
			kc.DropControl()
			fz.freeze()
			frozen <- time.Now()
		}
		return nil, nil, false
	})
	fault.ps[1].produce(t, brokers)
	var hung time.Time
	select {
	case hung = <-frozen:
	case <-time.After(waitTimeout):
		t.Fatal("A produced nothing to the changelog")
	}
	since := func() time.Duration { return time.Since(hung).Round(time.Millisecond) }

	regB := prometheus.NewRegistry()
	b := startOpts(t, cfg, regB, faultOpts...)
	waitCommitted(t, brokers, fault.ends[1], b)
	t.Logf("B committed phase 2 %v after A hung (transaction timeout %v); B's restore took %.2fs of it",
		since(), txnTimeout, gathered(t, regB, "aggregator_restore_duration_seconds"))
	fault.phase(t, brokers, 2, b)
	checkOutputs(t, brokers, fault.want)

	fz.thaw()
	woke := time.Now()
	runErr, drainErr, exited := a.exited(10 * time.Second)
	if exited {
		t.Logf("A woke %v after it hung; its Run returned after %v: %v; Drain = %v", since(),
			time.Since(woke).Round(time.Millisecond), runErr, drainErr)
	} else {
		t.Logf("A woke %v after it hung and runs on (ready = %v, %v commits aborted)", since(), a.c.Serving(),
			gathered(t, regA, "aggregator_commits_total", "result", "aborted"))
		a.stop(t)
	}
	b.stop(t)
	checkOutputs(t, brokers, fault.want)
}
