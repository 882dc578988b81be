package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/producer"
)

var (
	crashSeeds        = flag.Int("crash.seeds", 2, "TestCrashHarness: seeds per delivery mode (1..N)")
	crashSeed         = flag.Uint64("crash.seed", 0, "TestCrashHarness, TestScaleOneThreeOne: run this seed only (0: the default seeds)")
	crashSessionSeeds = flag.Int("crash.session-seeds", 1, "TestCrashHarness: session-window seeds per delivery mode (1..N)")
	crashRounds       = flag.Int("crash.rounds", 4, "TestCrashHarness: crash rounds per seed")
	crashKindSeeds    = flag.Int("crash.kind-seeds", 1, "TestCrashHarness: seeds per delivery mode for each of the other window kinds "+
		"(early firings, global, count, calendar; 1..N)")
	crashKindRounds = flag.Int("crash.kind-rounds", 3, "TestCrashHarness: crash rounds per seed for the other window kinds")
	crashEvict      = flag.Bool("crash.evict", true, "TestCrashHarness: after a SIGKILL, remove the dead member from the group "+
		"as its session timeout would (false: wait out kgo's 45s session timeout)")
)

// durTxnTimeout is state.transaction_timeout in the durability tests: a
// SIGKILLed instance leaves its transaction open, and read_committed
// readers (the restarted instance's restore among them) wait until the
// broker aborts it. Short, but not so short that an instance slowed down
// by the race detector on a loaded machine has its own transactions
// aborted by the broker (which ends its process: PRODUCER_FENCED).
const durTxnTimeout = "5s"

// The stream of the durability tests. Normal records are durStep ms apart
// over all partitions, key g%keys on partition key%parts, so within a
// partition times only go up and no normal record is ever late, under any
// interleaving of partitions or instances: a window's result depends only
// on its own partition. Mixed in are malformed records (dead letters),
// records late under any interleaving, and (allowed_lateness > 0) records
// late by less than the lateness into windows that fired but cannot have
// been dropped: those fire late, deterministically. The last two kinds are
// only in chunks produced once the previous chunks are committed (see
// durStream.chunk).
const (
	durStep = 25     // ms between normal records
	durSize = 5000   // the window size
	durOoO  = 1000   // max_out_of_orderness
	closeAt = 3600e3 // closers are this far after the last normal record
)

func durConfig(lateness int64, delivery string) string {
	return durWindowConfig(fmt.Sprintf("{type: tumbling, size: %dms, allowed_lateness: %dms}", durSize, lateness), delivery)
}

// durWindowConfig is callsConfig with the durability tests' watermark and
// a top_k aggregate, whose counts are state that merges across sessions
// and must survive every crash as sums do.
func durWindowConfig(window, delivery string) string {
	cfg := strings.Replace(callsConfig(window),
		"max_out_of_orderness: 1s", fmt.Sprintf("max_out_of_orderness: %dms", durOoO), 1)
	cfg += "  - {name: top, fn: top_k, field: d, k: 3}\n"
	cfg += "delivery: " + delivery + "\n"
	if delivery == "exactly_once" {
		cfg += "state: {transaction_timeout: " + durTxnTimeout + "}\n"
	}
	return cfg
}

// durStream is the input of a durability test, in chunks.
type durStream struct {
	parts    int32
	keys     int
	lateness int64
	kind     durKind
	step     int64          // ms between normal records
	size     int64          // the tumbling window size (0: calendar days)
	closeAt  int64          // closers are this far after the last normal record
	zone     *time.Location // calendar days' zone
	next     int64          // time of the next normal record
	g        int            // normal records so far
	lines    []string
	part     []int32
	chunks   []int // chunks[r]: end of chunk r in lines
	// how many records of each kind were generated
	late, dead, lateFire, closers int
	// Session streams (gap > 0): the retractions the stream makes, and the
	// bookkeeping behind them (newDurSessionStream).
	retract int
	gap     int64
	sess    map[int][]durSession // each key's sessions, by start
	runKey  []int                // each partition's key in its current run
	runLeft []int                // and the records left in that run
	// spread: keys spread over the partitions (the repartition stage's
	// input, keyed by something else): normal record g is on partition
	// g%parts with key (g/parts)%keys, a late record on any partition.
	// Within a partition times still only go up.
	spread bool
	// interleaved: with spread keys and several instances, the late
	// records of one window may come from several input partitions, and
	// their order in the repartition partition is how the instances'
	// stage 1 interleaved them, not the reference's: a window's
	// intermediate revisions may then hold them in another order. The
	// checks are the rest: every revision once (exactly_once), none going
	// backwards, the latest per window the reference's.
	interleaved bool
}

func newDurStream(parts int32, keys int, lateness int64) *durStream {
	if keys%int(parts) != 0 {
		panic("keys must be a multiple of parts")
	}
	return &durStream{parts: parts, keys: keys, lateness: lateness, next: base, step: durStep, size: durSize, closeAt: closeAt}
}

type durRecord struct {
	line string
	part int32
}

// chunk appends a chunk: n normal records with malformed ones mixed in
// and, if committed (every earlier chunk is committed when this one is
// produced), records late under any interleaving and, with lateness,
// records that fire a window late. With closers, the chunk ends with one
// record per partition far ahead, so every window but theirs fires.
// Session streams (gap > 0) have their own normal and late records
// (newDurSessionStream); the rest is shared.
func (s *durStream) chunk(rng *rand.Rand, n int, committed, closers bool) {
	from := s.next // T_r
	var recs []durRecord
	if s.gap > 0 {
		recs = s.sessionRecords(rng, n)
	} else {
		for range n {
			key, p := s.g%s.keys, int32(s.g%s.keys%int(s.parts))
			if s.spread {
				key, p = s.g/int(s.parts)%s.keys, int32(s.g%int(s.parts))
			}
			recs = append(recs, s.recordOn(rng, key, p, s.next))
			s.g++
			s.next += s.step
		}
	}
	to := s.next // T_{r+1}: every normal record of the chunk is before it
	var extra []durRecord
	for range 1 + rng.IntN(3) {
		p := rng.Int32N(s.parts)
		t := from + rng.Int64N(to-from)
		key := s.randomKey(rng, p)
		bad := []string{
			fmt.Sprintf(`not json %d`, rng.IntN(1000)),
			fmt.Sprintf(`{"sid":"sid_%d","d":1}`, key),
			fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":"many"}`, key, t),
			fmt.Sprintf(`{"t":%d,"d":1}`, t),
		}
		extra = append(extra, durRecord{bad[rng.IntN(len(bad))], p})
		s.dead++
	}
	if committed && len(s.chunks) > 0 {
		// Every partition has a record at or after from-durStep*parts in
		// the committed chunks, so the merged watermark is at least low
		// whichever instance owns which partitions.
		low := from - s.step*int64(s.parts) - durOoO - 1
		if s.gap > 0 {
			extra = append(extra, s.sessionLate(rng, low, to)...)
		} else {
			extra = append(extra, s.tumblingLate(rng, low, to)...)
		}
	}
	// Mixed in at random, in the order made: a partition sees two late
	// records into one session in the order the stream's bookkeeping
	// assumed.
	at := 0
	for _, e := range extra {
		i := at + rng.IntN(len(recs)-at+1)
		recs = slices.Insert(recs, i, e)
		at = i + 1
	}
	if closers {
		for p := range s.parts {
			recs = append(recs, durRecord{fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":0}`, p, to+s.closeAt), p})
			s.closers++
		}
	}
	for _, r := range recs {
		s.lines, s.part = append(s.lines, r.line), append(s.part, r.part)
	}
	s.chunks = append(s.chunks, len(s.lines))
}

// record is a normal record of key at t, on the key's partition (spread:
// on any partition).
func (s *durStream) record(rng *rand.Rand, key int, t int64) durRecord {
	p := int32(key % int(s.parts))
	if s.spread {
		p = rng.Int32N(s.parts)
	}
	return s.recordOn(rng, key, p, t)
}

// recordOn is a normal record of key at t on partition p.
func (s *durStream) recordOn(rng *rand.Rand, key int, p int32, t int64) durRecord {
	return durRecord{fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, key, t, rng.IntN(100)), p}
}

// randomKey is one of partition p's keys (spread: any key).
func (s *durStream) randomKey(rng *rand.Rand, p int32) int {
	if s.spread {
		return rng.IntN(s.keys)
	}
	return int(p) + int(s.parts)*rng.IntN(s.keys/int(s.parts))
}

// tumblingLate is the late records of a tumbling chunk whose normal
// records are before to, given the merged watermark is at least low.
func (s *durStream) tumblingLate(rng *rand.Rand, low, to int64) []durRecord {
	var extra []durRecord
	for range 1 + rng.IntN(3) {
		// cleanup = start + size - 1 + lateness <= t + size - 1 + lateness < low
		t := low - 500 - s.lateness - s.maxSize() - rng.Int64N(30_000)
		extra = append(extra, s.record(rng, s.randomKey(rng, rng.Int32N(s.parts)), t))
		s.late++
	}
	if s.lateness > 0 && s.size == 0 {
		return append(extra, s.calendarLateFire(rng, low, to)...)
	}
	if s.lateness > 0 {
		// The window fired (end-1 <= low) and is not dropped: its
		// partition's watermark stays below to-durStep-durOoO-1,
		// so W < cleanup = start + size - 1 + lateness.
		lo := durCeilDiv(to-s.size-1-s.lateness-durOoO, s.size)
		hi := durFloorDiv(low-500-s.size+1, s.size)
		if lo > hi {
			panic(fmt.Sprintf("chunk ending at %d is too long for lateness %d", to, s.lateness))
		}
		for range 1 + rng.IntN(4) {
			start := (lo + rng.Int64N(hi-lo+1)) * s.size
			extra = append(extra, s.record(rng, s.randomKey(rng, rng.Int32N(s.parts)), start+rng.Int64N(s.size)))
			s.lateFire++
		}
	}
	return extra
}

func durFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func durCeilDiv(a, b int64) int64 { return -durFloorDiv(-a, b) }

// chunkLines returns chunk r's lines and their partitions.
func (s *durStream) chunkLines(r int) ([]string, []int32) {
	lo := 0
	if r > 0 {
		lo = s.chunks[r-1]
	}
	return s.lines[lo:s.chunks[r]], s.part[lo:s.chunks[r]]
}

// inputs is the reference order of chunks 0..r: chunk by chunk, and
// within a chunk partition by partition, offsets as Kafka gives them.
func (s *durStream) inputs(r int) []input {
	var out []input
	off := make([]int64, s.parts)
	for c := range r + 1 {
		lines, parts := s.chunkLines(c)
		for p := range s.parts {
			for i, l := range lines {
				if parts[i] == p {
					out = append(out, input{p, off[p], l})
					off[p]++
				}
			}
		}
	}
	return out
}

// ends returns each partition's end offset once chunks 0..r are produced.
func (s *durStream) ends(r int) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range s.part[:s.chunks[r]] {
		out[p]++
	}
	return out
}

// produceSlices produces chunk r in len(pauses)+1 slices, pausing between
// them, from a goroutine of its own; the returned channel gets its error,
// or nil once all is produced.
func (s *durStream) produceSlices(cl *kgo.Client, r int, pauses []time.Duration) <-chan error {
	lines, parts := s.chunkLines(r)
	done := make(chan error, 1)
	go func() {
		lo, n := 0, len(pauses)+1
		for i := range n {
			hi := len(lines) * (i + 1) / n
			recs := make([]*kgo.Record, 0, hi-lo)
			for j := lo; j < hi; j++ {
				recs = append(recs, &kgo.Record{Topic: inTopic, Partition: parts[j], Value: []byte(lines[j]),
					Key: []byte(fmt.Sprintf("k%d", j)), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(j))})
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				done <- fmt.Errorf("produce chunk %d: %w", r, err)
				return
			}
			lo = hi
			if i < len(pauses) {
				time.Sleep(pauses[i])
			}
		}
		done <- nil
	}()
	return done
}

// reference runs replay over the stream and checks that the stream is
// what it is meant to be: every kind of record gave its outcome. emitted[r]
// is how many results the service must have written once chunks 0..r are
// processed: with early firings, those that are not early (how many early
// ones there are depends on how partitions interleave).
func (s *durStream) reference(t testing.TB, cfgYAML string, brokers []string) (want expected, emitted []int) {
	t.Helper()
	cfg := parseConfig(t, cfgYAML, brokers)
	for r := range s.chunks {
		n := 0
		for _, v := range replay(t, cfg, s.inputs(r), noWallClock).results {
			if r := parseDurResult(t, v); !s.kind.early || r.Firing != "early" && r.Firing != "retract" {
				n++
			}
		}
		emitted = append(emitted, n)
	}
	want = replay(t, cfg, s.inputs(len(s.chunks)-1), noWallClock)
	var rs []durResult
	for _, v := range want.results {
		rs = append(rs, parseDurResult(t, v))
	}
	transient := durTransient(rs)
	firings := map[string]int{}
	for _, r := range rs {
		if !transient[r.window()] {
			firings[r.Firing]++
		}
	}
	late := s.late
	if s.kind.lateless() {
		late = 0 // global and count windows aggregate every record
	}
	if len(want.late) != late || len(want.dead) != s.dead || firings["late"] != s.lateFire || firings["retract"] != s.retract {
		t.Fatalf("reference run: %d late events, %d dead letters, %d late firings, %d retractions; the stream has %d, %d, %d, %d",
			len(want.late), len(want.dead), firings["late"], firings["retract"], late, s.dead, s.lateFire, s.retract)
	}
	return want, emitted
}

// durProgress waits until topic holds at least n committed records, as
// waitCount does, but gives up after d with an error rather than a fatal
// one: the checks at the end then say what is missing.
func durProgress(t testing.TB, brokers []string, topic string, n int64, d time.Duration) {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var total int64
	for total < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Errorf("progress: %s holds %d records after %v, want %d; going on", topic, total, d, n)
			return
		}
		total += int64(fs.NumRecords())
	}
}

// durWaitCommitted waits until group has committed at least want[p] for
// every partition p of the input topic: everything before is durable
// (exactly_once: its transaction committed; at_least_once: its outputs
// and changelog records were acknowledged before the offsets).
func durWaitCommitted(t testing.TB, brokers []string, group string, want map[int32]int64) {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var got map[int32]int64
	if !pollUntil(waitTimeout, func() bool {
		got = map[int32]int64{}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		offs, err := adm.FetchOffsets(ctx, group)
		cancel()
		if err != nil {
			return false
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == inTopic && o.Err == nil {
				got[o.Partition] = o.At
			}
		})
		for p, n := range want {
			if got[p] < n {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("group %s committed %v after %v, want %v", group, got, waitTimeout, want)
	}
}

// durEvict removes every member of group, as the broker does once a
// dead member's session times out; the restarted instance then joins
// without waiting for that.
func durEvict(t testing.TB, brokers []string, group string) {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe %s: %v", group, err)
	}
	g, ok := gs[group]
	if !ok || len(g.Members) == 0 {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range g.Members {
		rm := kmsg.NewLeaveGroupRequestMember()
		rm.MemberID = m.MemberID
		req.Members = append(req.Members, rm)
	}
	if _, err := req.RequestWith(ctx, cl); err != nil {
		t.Fatalf("evict members of %s: %v", group, err)
	}
}

// A durProc is one run of the binary, its output kept for failure reports.
type durProc struct {
	cmd  *exec.Cmd
	out  *durBuffer
	done chan error // Wait's result
	what string     // how it ended
}

type durBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *durBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *durBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startDurProc is startProcess, with output that can be read at any time.
func startDurProc(t testing.TB, path string) *durProc {
	t.Helper()
	needBinary(t)
	p := &durProc{cmd: exec.Command(binary, "run", "--config", path), out: &durBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	})
	return p
}

func (p *durProc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
	p.what = "SIGKILL"
}

// waitLog waits until the run has logged a line with message msg.
func (p *durProc) waitLog(t testing.TB, msg string) {
	t.Helper()
	if !pollUntil(waitTimeout, func() bool {
		if strings.Contains(p.out.String(), `"message":"`+msg+`"`) {
			return true
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("exited (%v) before logging %q", err, msg)
		default:
		}
		return false
	}) {
		t.Fatalf("no %q logged after %v", msg, waitTimeout)
	}
}

// term is sigterm: SIGTERM and a clean exit within the drain bound. It
// waits until the service handles SIGTERM (it logs "starting" once it
// does): before, SIGTERM kills it as SIGKILL would.
func (p *durProc) term(t testing.TB) {
	t.Helper()
	p.waitLog(t, "starting")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.what = "SIGTERM"
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
}

// logTail is the service's own log lines of a run (not the Kafka
// client's, unless a warning or error), the last n of them.
func (p *durProc) logTail(n int) string {
	var keep []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		if l == "" {
			continue
		}
		if !strings.Contains(l, `"component":"kafka_`) || !strings.Contains(l, `"level":"info"`) && !strings.Contains(l, `"level":"debug"`) {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = append([]string{fmt.Sprintf("... %d lines before", len(keep)-n)}, keep[len(keep)-n:]...)
	}
	return strings.Join(keep, "\n")
}

// durSeeds is the seeds to run: -crash.seed, or 1..n.
func durSeeds(n int) []uint64 {
	if *crashSeed != 0 {
		return []uint64{*crashSeed}
	}
	var out []uint64
	for s := range n {
		out = append(out, uint64(s+1))
	}
	return out
}

// The service as a subprocess (4 input partitions, one instance) through a
// seeded random schedule of chunks, SIGKILLs, SIGTERMs and restarts, with
// tumbling windows and allowed_lateness 0 (odd seeds) and 30s (even seeds),
// and with session windows (newDurSessionStream) and allowed_lateness 30s
// (odd seeds: merges after firing, so retractions, need lateness) and 0
// (even seeds): the latest result per window is the uninterrupted run's
// (a retraction's tombstone included), every input record is accounted
// for, and exactly_once outputs are exact while at_least_once repeats are
// identical. The other window kinds (durKinds: early firings, global,
// count and calendar windows, and tumbling windows with the repartition
// stage over keys spread across the partitions) run with checks that fit each
// (durCheckEarly, durCountAccounting). Long runs: -crash.seeds 50
// -crash.session-seeds 50 -crash.rounds 10 -crash.kind-seeds 20
// -crash.kind-rounds 8; one seed: -crash.seed 7.
func TestCrashHarness(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			for _, seed := range durSeeds(*crashSeeds) {
				t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
					t.Parallel()
					durCrashHarness(t, delivery, "tumbling", seed, *crashRounds)
				})
			}
			for _, seed := range durSeeds(*crashSessionSeeds) {
				t.Run(fmt.Sprintf("session_seed_%d", seed), func(t *testing.T) {
					t.Parallel()
					durCrashHarness(t, delivery, "session", seed, *crashRounds)
				})
			}
			for _, kind := range durKinds {
				for _, seed := range durSeeds(*crashKindSeeds) {
					t.Run(fmt.Sprintf("%s_seed_%d", kind, seed), func(t *testing.T) {
						t.Parallel()
						durCrashHarness(t, delivery, kind, seed, *crashKindRounds)
					})
				}
			}
		})
	}
}

func durCrashHarness(t *testing.T, delivery, window string, seed uint64, rounds int) {
	data := rand.New(rand.NewPCG(seed, 1))
	sched := rand.New(rand.NewPCG(seed, 2))
	lateness := int64(0)
	if seed%2 == 0 {
		lateness = 30_000
	}
	s, yaml, name := newDurStream(4, 8, lateness), durConfig(lateness, delivery), fmt.Sprintf("seed_%d", seed)
	switch window {
	case "tumbling":
	case "session":
		lateness = 30_000 - lateness
		s, yaml, name = newDurSessionStream(4, 8, lateness), durSessionConfig(lateness, delivery), "session_"+name
	default:
		s, yaml, lateness = newDurKindStream(t, window, seed, delivery)
		name = window + "_" + name
	}
	for r := range rounds {
		s.chunk(data, 300+data.IntN(600), r > 0, r == rounds-1)
	}
	kc := newCluster(t, s.parts)
	brokers := kc.ListenAddrs()
	path := writeConfig(t, yaml, brokers)
	const group = "aggregator-bin" // writeConfig's
	want, emitted := s.reference(t, yaml, brokers)
	repartition := !parseConfig(t, yaml, brokers).Source.ByKey()

	var log []string // the schedule, for failure reports
	var runs []*durProc
	began := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("seed %d (%s, %s, allowed_lateness %dms): reproduce with\n  go test ./integration -run 'TestCrashHarness/%s/%s$' -crash.seed %d -crash.rounds %d\nschedule:\n  %s",
			seed, window, delivery, lateness, delivery, name, seed, rounds, strings.Join(log, "\n  "))
		for i, p := range runs {
			t.Logf("run %d (ended by %s), service log:\n%s", i, p.what, p.logTail(60))
		}
	})
	step := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%6.2fs ", time.Since(began).Seconds())+fmt.Sprintf(format, args...))
	}
	start := func() *durProc {
		p := startDurProc(t, path)
		runs = append(runs, p)
		step("start run %d", len(runs)-1)
		return p
	}
	kill := func(p *durProc) {
		p.kill(t)
		if *crashEvict {
			durEvict(t, brokers, group)
		}
	}

	// The input is produced by a client of the test's, in slices from a
	// goroutine of its own, so crashes find it under way.
	pcl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	p := start()
	for r := range rounds {
		lines, _ := s.chunkLines(r)
		pauses := make([]time.Duration, sched.IntN(4))
		for i := range pauses {
			pauses[i] = time.Duration(sched.IntN(60)) * time.Millisecond
		}
		produced := s.produceSlices(pcl, r, pauses)
		step("produce chunk %d: %d records in %d slices, pauses %v", r, len(lines), len(pauses)+1, pauses)
		prev := 0
		if r > 0 {
			prev = emitted[r-1]
		}
		n := prev + sched.IntN(emitted[r]-prev+1)
		durProgress(t, brokers, resultsTopic, int64(n), waitTimeout)
		var delay time.Duration
		if sched.IntN(3) > 0 {
			delay = time.Duration(sched.IntN(150)) * time.Millisecond
		}
		step("waited for %d results; %v later:", n, delay)
		time.Sleep(delay) // the moment of the crash is random; no check depends on it
		if sched.IntN(2) == 0 {
			kill(p)
		} else {
			p.term(t)
		}
		step("%s", p.what)
		p = start()
		if sched.IntN(4) == 0 { // crash again, while restoring or soon after
			delay := time.Duration(sched.IntN(500)) * time.Millisecond
			time.Sleep(delay)
			kill(p)
			step("%v later: SIGKILL", delay)
			p = start()
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		durWaitCommitted(t, brokers, group, s.ends(r))
		if repartition {
			// Stage 2 too: the next chunk's late records are late only
			// once it has taken in this chunk's watermarks.
			durWaitDrained(t, brokers, group, group+"-repartition", delivery == "exactly_once")
		}
		step("chunks 0..%d committed", r)
	}
	p.term(t)
	step("SIGTERM")
	durCheck(t, brokers, s, want, delivery)
	t.Logf("seed %d (%s, %s, allowed_lateness %dms): %d records, %d results, %d late events, %d dead letters, %d late firings, %d retractions; "+
		"%d runs in %v; results topic: %d records uncommitted or repeated",
		seed, window, delivery, lateness, len(s.lines), len(want.results), s.late, s.dead, s.lateFire, s.retract,
		len(runs), time.Since(began).Round(time.Millisecond), durUncommitted(t, brokers, resultsTopic)-len(want.results))
}

// durUncommitted counts the records of topic a read_uncommitted reader
// sees (aborted ones too, not control records).
func durUncommitted(t testing.TB, brokers []string, topic string) int {
	t.Helper()
	acl := client(t, brokers)
	defer acl.Close()
	ends, err := kadm.NewClient(acl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				n++
			}
		})
	}
	return n
}

// durResult is the part of a results-topic value the checks need.
type durResult struct {
	Key        json.RawMessage `json:"key"`
	Start      json.RawMessage `json:"window_start"` // null for a global window
	End        json.RawMessage `json:"window_end"`
	Seq        *int64          `json:"seq"` // count windows
	Count      int64           `json:"count"`
	Aggregates json.RawMessage `json:"aggregates"`
	Firing     string          `json:"firing"`
	Revision   int64           `json:"revision"`
	value      string          // the whole value, less its watermark
	raw        string          // the whole value
}

// window names the (group key, window) of a result as its Kafka record
// key does (the same for every revision; a count window's has its seq).
func (r durResult) window() string {
	if r.Seq != nil {
		return fmt.Sprintf(`{"key":%s,"window_start":%s,"window_end":%s,"seq":%d}`, r.Key, r.Start, r.End, *r.Seq)
	}
	return fmt.Sprintf(`{"key":%s,"window_start":%s,"window_end":%s}`, r.Key, r.Start, r.End)
}

// parseDurResult parses a result's value, or a retraction as capture
// gives it.
func parseDurResult(t testing.TB, v string) durResult {
	t.Helper()
	var r durResult
	if key, ok := strings.CutPrefix(v, retractPrefix); ok {
		if err := json.Unmarshal([]byte(key), &r); err != nil {
			t.Fatalf("retraction %s: %v", v, err)
		}
		r.Firing, r.value, r.raw = "retract", v, v
		return r
	}
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		t.Fatalf("result %s: %v", v, err)
	}
	r.value, r.raw = watermarkField.ReplaceAllString(v, ""), v
	return r
}

// durRecordResult is a results-topic record's result: its value's, or a
// tombstone's (a retraction: the retracted session is in the record key).
func durRecordResult(t testing.TB, rec *kgo.Record) durResult {
	t.Helper()
	if rec.Value == nil {
		return parseDurResult(t, retractPrefix+string(rec.Key))
	}
	return parseDurResult(t, string(rec.Value))
}

// durByWindow returns each window's values (less their watermark), in
// the order given.
func durByWindow(rs []durResult) map[string][]string {
	out := map[string][]string{}
	for _, r := range rs {
		out[r.window()] = append(out[r.window()], r.value)
	}
	return out
}

// durLatest returns the last result of each window, in the order given: a
// retraction if the window's last record is its tombstone.
func durLatest(rs []durResult) map[string]durResult {
	out := map[string]durResult{}
	for _, r := range rs {
		out[r.window()] = r
	}
	return out
}

// durProvenance is the source partition and offset a late event or dead
// letter names in its headers.
func durProvenance(r *kgo.Record) string {
	var p, o string
	for _, h := range r.Headers {
		switch h.Key {
		case producer.HeaderSourcePartition:
			p = string(h.Value)
		case producer.HeaderSourceOffset:
			o = string(h.Value)
		}
	}
	return p + "/" + o
}

// durSansWatermark is a late event or dead letter less the watermark it was
// judged at, which depends on how partitions interleave.
func durSansWatermark(e lateEvent) lateEvent {
	var keep []string
	for _, h := range strings.Split(e.headers, ";") {
		if h != "" && !strings.HasPrefix(h, producer.HeaderWatermark+"=") {
			keep = append(keep, h+";")
		}
	}
	return lateEvent{e.value, strings.Join(keep, "")}
}

func durComparables(es []lateEvent) []string {
	out := make([]string, len(es))
	for i, e := range es {
		e = durSansWatermark(e)
		out[i] = e.value + " | " + e.headers
	}
	slices.Sort(out)
	return out
}

// durCheck checks the output topics against the reference run want:
// (a) the latest result per window, (b) every input record accounted
// for, (c) exactly_once: nothing twice; at_least_once: repeats identical
// and, without them, (a) and (b) hold; and that no window's result ever
// goes backwards.
func durCheck(t *testing.T, brokers []string, s *durStream, want expected, delivery string) {
	t.Helper()
	recs := readAll(t, brokers, resultsTopic)
	lateRecs := readAll(t, brokers, lateTopic)
	deadRecs := readAll(t, brokers, dlqTopic)

	var got, ref []durResult
	for _, r := range recs {
		got = append(got, durRecordResult(t, r))
		if w := got[len(got)-1].window(); string(r.Key) != w {
			t.Errorf("result %s has Kafka key %s, want %s", r.Value, r.Key, w)
		}
	}
	for _, v := range want.results {
		ref = append(ref, parseDurResult(t, v))
	}
	var gotLatest map[string]durResult
	if s.kind.early {
		gotLatest = durCheckEarly(t, got, ref, delivery)
	} else {
		gotLatest = durCheckResults(t, got, ref, delivery, !s.interleaved)
	}

	// Late events and dead letters: at most once per source record
	// (exactly_once), repeats identical (at_least_once), the reference's.
	distinct := func(name string, rs []*kgo.Record, want []lateEvent) []lateEvent {
		byProv := map[string]lateEvent{}
		var out []lateEvent
		for i, r := range rs {
			e := events(rs[i : i+1])[0]
			k := durProvenance(r)
			if prev, ok := byProv[k]; ok {
				if delivery == "exactly_once" {
					t.Errorf("exactly_once: %s of %s read twice: %q", name, k, e.value)
				} else if durSansWatermark(prev) != durSansWatermark(e) {
					t.Errorf("at_least_once: %s of %s repeated with another value or headers:\n%q\n%q", name, k, prev, e)
				}
				continue
			}
			byProv[k] = e
			out = append(out, e)
		}
		if g, w := durComparables(out), durComparables(want); !slices.Equal(g, w) {
			t.Errorf("%s differ from the reference run:\n%s", name, diff(g, w))
		}
		return out
	}
	late := distinct("late events", lateRecs, want.late)
	dead := distinct("dead letters", deadRecs, want.dead)

	// (b) every input record: aggregated into a window that fired (and
	// was not retracted: its records are in the session it merged into),
	// a late event, a dead letter, or a closer (in a window that never
	// fires; with early firings, and in a global window, it fires early).
	if s.kind.count > 0 {
		durCountAccounting(t, s, gotLatest)
		return
	}
	var counted int64
	for _, r := range gotLatest {
		if r.Firing != "retract" {
			counted += r.Count
		}
	}
	closers := s.closers
	if s.kind.early {
		closers = 0
	}
	if total := counted + int64(len(late)+len(dead)+closers); total != int64(len(s.lines)) {
		t.Errorf("accounting: %d aggregated + %d late + %d dead letters + %d closers = %d, want the %d input records",
			counted, len(late), len(dead), closers, total, len(s.lines))
	}
}

// durCheckResults checks the results got against the reference run's,
// ref, for window kinds whose every result is deterministic: (a) the
// latest result per window, (c) exactly_once: nothing twice, in the
// reference's order; at_least_once: repeats identical; and that no
// window's result ever goes backwards. It returns the latest per window.
func durCheckResults(t *testing.T, got, ref []durResult, delivery string, ordered bool) map[string]durResult {
	t.Helper()
	// (c) and monotonic: per window, in read order. A repeat (at_least_once)
	// is the same result but for its watermark field, which says when it
	// fired: after a restart that depends on how partitions interleave
	// (README, Delivery). A retraction (sessions) ends its window.
	type seen struct {
		rev, count int64
		byRev      map[int64]string // by revision: value less its watermark
		retracted  bool
	}
	windows := map[string]*seen{}
	gotRevs := map[string]bool{} // window#revision, window#retract
	for _, r := range got {
		w := windows[r.window()]
		if w == nil {
			w = &seen{rev: -1, count: -1, byRev: map[int64]string{}}
			windows[r.window()] = w
		}
		if r.Firing == "retract" {
			if w.retracted && delivery == "exactly_once" {
				t.Errorf("exactly_once: %s retracted twice", r.window())
			}
			w.retracted = true
			gotRevs[r.window()+"#retract"] = true
			continue
		}
		if w.retracted && delivery == "exactly_once" {
			t.Errorf("exactly_once: %s revision %d after its retraction", r.window(), r.Revision)
		}
		if v, ok := w.byRev[r.Revision]; ok {
			if delivery == "exactly_once" {
				t.Errorf("exactly_once: %s revision %d read twice:\n%s\n%s", r.window(), r.Revision, v, r.value)
			} else if v != r.value {
				t.Errorf("at_least_once: %s revision %d repeated with another value:\n%s\n%s", r.window(), r.Revision, v, r.value)
			}
			continue
		}
		w.byRev[r.Revision] = r.value
		gotRevs[fmt.Sprintf("%s#%d", r.window(), r.Revision)] = true
		if delivery == "exactly_once" && r.Revision != w.rev+1 {
			t.Errorf("exactly_once: %s revision %d follows revision %d", r.window(), r.Revision, w.rev)
		}
		if r.Revision < w.rev || r.Count < w.count {
			t.Errorf("%s went backwards: revision %d count %d after revision %d count %d", r.window(), r.Revision, r.Count, w.rev, w.count)
		}
		w.rev, w.count = max(w.rev, r.Revision), max(w.count, r.Count)
	}
	refRevs := map[string]bool{}
	for _, r := range ref {
		if r.Firing == "retract" {
			refRevs[r.window()+"#retract"] = true
		} else {
			refRevs[fmt.Sprintf("%s#%d", r.window(), r.Revision)] = true
		}
	}
	var missing, extra []string
	for k := range refRevs {
		if !gotRevs[k] {
			missing = append(missing, k)
		}
	}
	for k := range gotRevs {
		if !refRevs[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("results: %d (window, revision or retraction) missing, %d not in the reference run; missing %q, extra %q",
			len(missing), len(extra), missing[:min(len(missing), 10)], extra[:min(len(extra), 10)])
	}

	// exactly_once: each window's records (its Kafka key's) are the
	// reference run's, in its order, retraction included (ordered: see
	// durStream.interleaved).
	if delivery == "exactly_once" && ordered {
		gotSeq, refSeq := durByWindow(got), durByWindow(ref)
		var differ []string
		for w, rs := range refSeq {
			if !slices.Equal(gotSeq[w], rs) {
				differ = append(differ, fmt.Sprintf("\n%s:\n got %q\nwant %q", w, gotSeq[w], rs))
			}
		}
		slices.Sort(differ)
		if len(differ) > 0 {
			t.Errorf("exactly_once: %d of %d windows' results differ from the reference run's: %s", len(differ), len(refSeq), strings.Join(differ[:min(len(differ), 5)], ""))
		}
	}

	// (a) the latest result per window.
	gotLatest, refLatest := durLatest(got), durLatest(ref)
	var diffs []string
	for w, r := range refLatest {
		g, ok := gotLatest[w]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+r.value)
		case g.value != r.value:
			diffs = append(diffs, fmt.Sprintf("\n got %s\nwant %s", g.value, r.value))
		}
	}
	for w, g := range gotLatest {
		if _, ok := refLatest[w]; !ok {
			diffs = append(diffs, "extra "+g.value)
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Errorf("latest result per window: %d of %d differ from the reference run: %s", len(diffs), len(refLatest), strings.Join(diffs[:min(len(diffs), 10)], "\n"))
	}
	return gotLatest
}

// durWaitDrained waits until group's stage 2 has committed every record
// of the repartition topic: what stage 1 committed is aggregated. With
// exactly_once a partition's last record is a transaction's control
// record, which a committed offset stays before.
func durWaitDrained(t testing.TB, brokers []string, group, topic string, exactlyOnce bool) {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	slack := int64(0)
	if exactlyOnce {
		slack = 1
	}
	var last string
	if !pollUntil(waitTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		drained := true
		ends.Each(func(e kadm.ListedOffset) {
			o, ok := offs.Lookup(topic, e.Partition)
			if e.Offset > 0 && (!ok || o.At < e.Offset-slack) {
				drained = false
				last = fmt.Sprintf("partition %d: committed %d, end %d", e.Partition, o.At, e.Offset)
			}
		})
		return drained
	}) {
		t.Fatalf("group %s did not commit the repartition topic %s to its end: %s", group, topic, last)
	}
}

// durWaitMembers waits until group is stable with n members, each
// assigned parts/n input partitions.
func durWaitMembers(t testing.TB, brokers []string, group string, n int, parts int) {
	t.Helper()
	cl := client(t, brokers)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	if !pollUntil(waitTimeout, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok {
			return false
		}
		split := g.State == "Stable" && len(g.Members) == n
		var counts []int
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			k := 0
			for _, tp := range c.Topics {
				k += len(tp.Partitions)
			}
			counts = append(counts, k)
			split = split && k == parts/n
		}
		last = fmt.Sprintf("%s, partitions per member %v", g.State, counts)
		return split
	}) {
		t.Fatalf("group %s never had %d members with %d partitions each: %s", group, n, parts/n, last)
	}
}

// In-process instances over 6 input partitions: one, then three (two join
// mid-stream), then one again (one drains, one crashes, mid-stream), with
// input produced throughout, for each delivery mode and allowed_lateness 0
// and 30s, by_key, and twice with the repartition stage: the checks of TestCrashHarness hold (the latest result per
// window is the uninterrupted run's, every input record is accounted for,
// exactly_once is exact, at_least_once repeats are identical), and no
// window's result ever goes backwards. -crash.seed picks another schedule.
func TestScaleOneThreeOne(t *testing.T) {
	t.Parallel()
	seed := uint64(1)
	if *crashSeed != 0 {
		seed = *crashSeed
	}
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		for _, lateness := range []int64{0, 30_000} {
			if raceEnabled && (delivery == "exactly_once") != (lateness > 0) {
				continue // CI's time: under the race detector, the same two as the repartition stage's below
			}
			t.Run(fmt.Sprintf("%s/lateness_%ds", delivery, lateness/1000), func(t *testing.T) {
				t.Parallel()
				durScale(t, delivery, lateness, seed, false)
			})
		}
	}
	// The same with the repartition stage (one delivery mode and lateness
	// each, for CI's time): the group holds the input and the repartition
	// topic, six partitions each.
	for _, run := range []struct {
		delivery string
		lateness int64
	}{{"exactly_once", 30_000}, {"at_least_once", 0}} {
		t.Run(fmt.Sprintf("repartition/%s/lateness_%ds", run.delivery, run.lateness/1000), func(t *testing.T) {
			t.Parallel()
			durScale(t, run.delivery, run.lateness, seed, true)
		})
	}
}

func durScale(t *testing.T, delivery string, lateness int64, seed uint64, repartition bool) {
	data := rand.New(rand.NewPCG(seed, 3))
	sched := rand.New(rand.NewPCG(seed, 4))
	s := newDurStream(6, 12, lateness)
	// Late records only in chunks produced once the earlier ones are
	// committed: 1, 3 and 5.
	for r := range 6 {
		s.chunk(data, 300+data.IntN(600), r%2 == 1, r == 5)
	}
	kc := newCluster(t, s.parts)
	brokers := kc.ListenAddrs()
	yaml := durConfig(lateness, delivery)
	groupParts := int(s.parts) // what the group's members share
	if repartition {
		yaml = strings.Replace(yaml, "partitioning: by_key", "partitioning: repartition", 1)
		groupParts *= 2
	}
	cfg := parseConfig(t, yaml, brokers)
	group := cfg.Source.Group
	want, emitted := s.reference(t, yaml, brokers)

	var log []string
	began := time.Now()
	step := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%6.2fs ", time.Since(began).Seconds())+fmt.Sprintf(format, args...))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (%s, allowed_lateness %dms): reproduce with\n  go test ./integration -run '%s$' -crash.seed %d\nschedule:\n  %s",
				seed, delivery, lateness, t.Name(), seed, strings.Join(log, "\n  "))
		}
	})
	pcl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceChunk := func(r int) <-chan error {
		pauses := make([]time.Duration, 1+sched.IntN(4))
		for i := range pauses {
			pauses[i] = time.Duration(20+sched.IntN(80)) * time.Millisecond
		}
		lines, _ := s.chunkLines(r)
		step("produce chunk %d: %d records in %d slices, pauses %v", r, len(lines), len(pauses)+1, pauses)
		return s.produceSlices(pcl, r, pauses)
	}
	produced := func(ch <-chan error) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	progress := func(r int) { // some of chunk r's results
		prev := 0
		if r > 0 {
			prev = emitted[r-1]
		}
		n := prev + sched.IntN(emitted[r]-prev+1)
		durProgress(t, brokers, resultsTopic, int64(n), waitTimeout)
		step("waited for %d results", n)
	}
	committed := func(r int) {
		durWaitCommitted(t, brokers, group, s.ends(r))
		if repartition {
			durWaitDrained(t, brokers, group, cfg.State.RepartitionTopic, delivery == "exactly_once")
		}
		step("chunks 0..%d committed", r)
	}

	a := start(t, cfg, nil)
	step("a starts")
	produced(produceChunk(0))
	progress(0)
	committed(0)

	c1 := produceChunk(1)
	progress(1)
	b := start(t, cfg, nil)
	c := start(t, cfg, nil)
	step("b and c start")
	produced(c1)
	c2 := produceChunk(2)
	durWaitMembers(t, brokers, group, 3, groupParts)
	step("3 members, %d partitions each", groupParts/3)
	produced(c2)
	committed(2)

	c3 := produceChunk(3)
	progress(3)
	b.stop(t)
	step("b stops (drains)")
	produced(c3)
	c4 := produceChunk(4)
	progress(4)
	c.crash()
	step("c crashes")
	produced(c4)
	durWaitMembers(t, brokers, group, 1, groupParts)
	step("1 member, %d partitions", groupParts)
	committed(4)

	produced(produceChunk(5))
	committed(5)
	a.stop(t)
	step("a stops")
	durCheck(t, brokers, s, want, delivery)
	t.Logf("seed %d (%s, allowed_lateness %dms): %d records, %d results, %d late events, %d dead letters, %d late firings in %v; results topic: %d records uncommitted or repeated",
		seed, delivery, lateness, len(s.lines), len(want.results), s.late, s.dead, s.lateFire, time.Since(began).Round(time.Millisecond),
		durUncommitted(t, brokers, resultsTopic)-len(want.results))
}

// durOwns reports whether the instance with registry reg has partition p
// of the input topic (it has a watermark gauge for it).
func durOwns(t testing.TB, reg *prometheus.Registry, p int32) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "aggregator_partition_watermark_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" && l.GetValue() == strconv.Itoa(int(p)) {
					return true
				}
			}
		}
	}
	return false
}

// A partition whose records are behind moves (its owner drains) to an
// instance whose merged watermark is ahead: its records, on time in their
// partition, must stay on time (docs/scaling.md#the-merged-watermark-across-a-rebalance: state and its watermark move
// with the partition; the results are those of one uninterrupted run).
// allowed_lateness 0, so a record judged against the other instance's
// watermark is lost as a late event.
func TestPartitionMovesBehind(t *testing.T) {
	t.Parallel()
	kc := newCluster(t, 2)
	brokers := kc.ListenAddrs()
	yaml := durConfig(0, "exactly_once")
	cfg := parseConfig(t, yaml, brokers)
	// p0 (sid_0) runs 60s ahead of p1 (sid_1); then p1 goes on; then
	// closers make every window fire.
	rec := func(key int, t int64) string { return fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":1}`, key, t) }
	var chunks [3][]durRecord
	for t := int64(0); t < 60_000; t += 100 {
		chunks[0] = append(chunks[0], durRecord{rec(0, base+t), 0})
	}
	for t := int64(0); t < 12_000; t += 100 {
		chunks[0] = append(chunks[0], durRecord{rec(1, base+t), 1})
	}
	for t := int64(12_000); t < 30_000; t += 100 {
		chunks[1] = append(chunks[1], durRecord{rec(1, base+t), 1})
	}
	chunks[2] = []durRecord{{rec(0, base+closeAt), 0}, {rec(1, base+closeAt), 1}}
	s := &durStream{parts: 2}
	for _, c := range chunks {
		for _, r := range c {
			s.lines, s.part = append(s.lines, r.line), append(s.part, r.part)
		}
		s.chunks = append(s.chunks, len(s.lines))
	}
	s.closers = 2
	want := replay(t, cfg, s.inputs(2), noWallClock)

	ra, rb := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := startWith(t, cfg, nil, ra)
	b := startWith(t, cfg, nil, rb)
	durWaitMembers(t, brokers, cfg.Source.Group, 2, 2)
	lines, parts := s.chunkLines(0)
	produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	durWaitCommitted(t, brokers, cfg.Source.Group, s.ends(0))
	if durOwns(t, ra, 1) { // b is to own p1, the partition behind
		a, b = b, a
	}
	b.stop(t) // p1 moves to a, whose watermark is 48s ahead
	durWaitMembers(t, brokers, cfg.Source.Group, 1, 2)
	for r := 1; r <= 2; r++ {
		lines, parts := s.chunkLines(r)
		produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	}
	durWaitCommitted(t, brokers, cfg.Source.Group, s.ends(2))
	a.stop(t)
	if late := readAll(t, brokers, lateTopic); len(late) > 0 {
		t.Errorf("%d on-time records of the partition that moved are late events, the first %s", len(late), late[0].Value)
	}
	durCheck(t, brokers, s, want, "exactly_once")
}
