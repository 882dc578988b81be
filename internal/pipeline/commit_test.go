package pipeline_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// The commit protocol, step by step: a shell writes the core's Readies to
// an in-memory cluster as the consumer writes them to Kafka, and the
// process is thrown away after each step of a commit; a new one restarts
// from what the cluster holds. A read_committed reader's view of the
// outputs must then be an uninterrupted run's: exactly with exactly_once,
// and with at_least_once the same once repeats are dropped, each repeat
// identical to its first copy.

// cluster is what the brokers hold durably: the outputs as a
// read_committed reader sees them, the changelog and the group's offsets.
type cluster struct {
	outputs []string
	log     changelog
	offsets map[int32]int64
}

// txn is an open transaction: nothing in it is visible until it commits.
type txn struct {
	outputs []string
	log     []pipeline.ChangelogRecord
}

// step is where a commit can be cut short.
type step int

const (
	noCrash        step = iota
	afterOutputs        // the commit Ready's outputs are written
	afterChangelog      // and its changelog records
	afterPositions      // and its positions: the offsets are not committed yet
	afterOffsets        // the offsets are committed (exactly_once: the transaction), not yet accepted
	midAbort            // writing the positions fails; the shell aborts, then dies before it restores
)

var steps = []step{afterOutputs, afterChangelog, afterPositions, afterOffsets, midAbort}

func (s step) String() string {
	return [...]string{"no crash", "after outputs", "after changelog", "after positions", "after offsets", "mid-abort"}[s]
}

// shell drives a core over a stream as the consumer does: it applies the
// records in stream order from each partition's fetch position, writes
// each Ready, and commits every commitEvery records.
type shell struct {
	t           *testing.T
	exactlyOnce bool
	p           *pipeline.Processor
	dec         *record.Decoder
	rec         record.Record
	c           *cluster
	tx          *txn            // exactly_once: the open transaction
	fetch       map[int32]int64 // by assigned partition: the next offset the client returns
	applied     int             // records applied: a commit follows every commitEvery
	commits     int             // commits begun
	// fail, if set, is called once each commit's changelog records are
	// written, before its positions: true means the commit fails there
	// (the core aborts and the shell restores). lost, if set, is called
	// after such an abort, before the restore: the partitions a lost
	// session took are revoked and assigned again there.
	fail func(s *shell, commit int) bool
	lost func(s *shell)
	// pause, if set, is called in each commit once its outputs are
	// written, before its changelog records: the process stops there
	// (SIGSTOP) while the hook runs.
	pause func(s *shell, commit int)
}

const commitEvery = 9

// newShell starts a process with the partitions parts assigned.
func newShell(t *testing.T, yaml string, exactlyOnce bool, c *cluster, parts ...int32) *shell {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := pipeline.New(cfg, pipeline.Mode{Checkpointed: true})
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	dec, err := p.NewDecoder()
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	s := &shell{t: t, exactlyOnce: exactlyOnce, p: p, dec: dec, c: c, tx: &txn{}, fetch: map[int32]int64{}}
	for _, id := range parts {
		p.Assign(id, 0)
	}
	s.rejoin()
	return s
}

func newCluster() *cluster { return &cluster{log: changelog{}, offsets: map[int32]int64{}} }

// rejoin restores every partition waiting for it from the changelog, as
// the consumer reads it, and rewinds the fetch positions to the committed
// offsets, as the client does after an abort or an assignment.
func (s *shell) rejoin() {
	for _, id := range s.p.Unrestored() {
		if _, err := s.p.Restore(id, s.c.log.restorer(s.t, id), 0); err != nil {
			s.t.Fatalf("Restore(%d): %v", id, err)
		}
		s.fetch[id] = s.c.offsets[id]
	}
	s.write(s.p.Step().Outputs) // restored windows that were due fire
}

// run applies ins in order and commits every commitEvery records; it
// stops at the crash step of commit number crashAt, and reports whether
// it crashed. A final commit ends a run that did not.
func (s *shell) run(ins []crashInput, crashAt int, crash step) bool {
	for {
		rewound := false
		for _, in := range ins {
			next, assigned := s.fetch[in.part]
			if !assigned || in.offset < next {
				continue // not ours, or before the fetch position: polled already, or in a committed state
			}
			s.fetch[in.part] = in.offset + 1
			input := ready.Input{Partition: in.part, Offset: in.offset, Value: []byte(in.value)}
			kind, err := s.dec.Decode(&input, &s.rec)
			s.p.Apply(&input, &s.rec, kind, err, math.MaxInt64)
			s.write(s.p.Step().Outputs)
			if s.applied++; s.applied%commitEvery != 0 {
				continue
			}
			crashed, ok := s.commit(crashAt, crash)
			if crashed {
				return true
			}
			if !ok { // the client rewound: go on from the committed offsets
				rewound = true
				break
			}
		}
		if rewound {
			continue
		}
		crashed, ok := s.commit(crashAt, crash)
		if crashed || ok {
			return crashed
		}
	}
}

// write writes outputs: into the open transaction, or at once.
func (s *shell) write(outs []ready.Output) {
	for i := range outs {
		o := outputString(&outs[i])
		if s.exactlyOnce {
			s.tx.outputs = append(s.tx.outputs, o)
		} else {
			s.c.outputs = append(s.c.outputs, o)
		}
	}
}

func (s *shell) writeLog(recs []pipeline.ChangelogRecord) {
	if s.exactlyOnce {
		s.tx.log = append(s.tx.log, recs...)
	} else {
		s.c.log.write(recs)
	}
}

// commit takes a commit Ready and writes it step by step; it reports
// whether the process died at crash of this commit, and whether the
// commit succeeded (else the core aborted and the client rewound).
func (s *shell) commit(crashAt int, crash step) (crashed, ok bool) {
	n := s.commits
	s.commits++
	at := func(st step) bool { return n == crashAt && crash == st }
	rd := s.p.Commit()
	s.write(rd.Outputs)
	if at(afterOutputs) {
		return true, false
	}
	if s.pause != nil {
		s.pause(s, n)
	}
	s.writeLog(rd.Changelog)
	if at(afterChangelog) {
		return true, false
	}
	if at(midAbort) {
		s.abort()
		return true, false
	}
	if s.fail != nil && s.fail(s, n) {
		s.abort()
		if s.lost != nil {
			s.lost(s)
		}
		s.rejoin()
		return false, false
	}
	s.writeLog(rd.Positions)
	if at(afterPositions) {
		return true, false
	}
	if s.exactlyOnce {
		s.c.outputs = append(s.c.outputs, s.tx.outputs...)
		s.c.log.write(s.tx.log)
		s.tx = &txn{}
	}
	for _, o := range rd.Offsets {
		s.c.offsets[o.Partition] = o.Offset
	}
	if at(afterOffsets) {
		return true, false
	}
	s.p.Accept()
	return false, true
}

// abort is a failed commit: the transaction is dropped and the core goes
// back to the last accepted state.
func (s *shell) abort() {
	s.tx = &txn{}
	s.p.Abort(0)
}

// outputString names an output by everything a reader sees of it.
func outputString(o *ready.Output) string {
	switch o.Kind {
	case ready.Result:
		r := &o.Result
		return fmt.Sprintf("result p%d %s [%d,%d)#%d %s rev %d count %d %v wm %d", r.Partition, r.Key, r.Window.Start, r.Window.End, r.Seq,
			r.Firing, r.Revision, r.Count, r.Aggregates, r.Watermark)
	case ready.Late:
		return fmt.Sprintf("late p%d@%d wm %d", o.Event.In.Partition, o.Event.In.Offset, o.Event.Watermark)
	}
	return fmt.Sprintf("dead p%d@%d %v", o.Event.In.Partition, o.Event.In.Offset, o.Event.Err)
}

// revoke drops partitions from the core and the fetch.
func (s *shell) revoke(ids ...int32) {
	for _, id := range ids {
		s.p.Revoke(id)
		delete(s.fetch, id)
	}
}

// assign gives the shell partitions; rejoin restores them.
func (s *shell) assign(ids ...int32) {
	for _, id := range ids {
		s.p.Assign(id, 0)
		s.fetch[id] = 0
	}
}

func allParts(n int32) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

// identity is what names an output whatever the watermark at its firing
// or judgement: with at_least_once a repeat may differ only there.
func identity(o string) string {
	if i := strings.LastIndex(o, " wm "); i >= 0 {
		return o[:i]
	}
	return o
}

// readerView is what a reader makes of the outputs: with at_least_once,
// repeats dropped once checked identical to their first copy (but for
// the watermark).
func readerView(t *testing.T, outs []string, exactlyOnce bool) []string {
	t.Helper()
	if exactlyOnce {
		return outs
	}
	seen := map[string]bool{}
	var view []string
	for _, o := range outs {
		id := identity(o)
		if seen[id] {
			continue
		}
		seen[id] = true
		view = append(view, id)
	}
	return view
}

func mode(exactlyOnce bool) string {
	if exactlyOnce {
		return "exactly_once"
	}
	return "at_least_once"
}

// commitConfigs are the configs the protocol tests run: one of each
// engine, with lateness, (windowKindConfigs) event-time early firings,
// a global window and sliding count windows, and (scopeConfigs) one
// operator per partition, each following its partition's watermark.
var commitConfigs = []string{"tumbling", "session", "early_top_k", "global", "count_sliding", "scope_tumbling", "scope_session"}

// commitYAML is the config named name in commitConfigs.
func commitYAML(name string) string {
	return joinConfigs(joinConfigs(crashConfigs, windowKindConfigs), scopeConfigs)[name]
}

// reference is an uninterrupted run's outputs, as a reader sees them.
func reference(t *testing.T, yaml string, exactlyOnce bool, ins []crashInput, parts int32) (view []string, commits int) {
	t.Helper()
	c := newCluster()
	s := newShell(t, yaml, exactlyOnce, c, allParts(parts)...)
	if s.run(ins, -1, noCrash) {
		t.Fatal("the reference run crashed")
	}
	if len(c.outputs) == 0 {
		t.Fatal("the reference run has no outputs")
	}
	return readerView(t, c.outputs, exactlyOnce), s.commits
}

// Crash after every step of every commit, restart from what the cluster
// holds, finish the stream: a reader sees an uninterrupted run's outputs.
func TestCommitCrashAtEveryStep(t *testing.T) {
	const parts = 3
	n := 150
	if testing.Short() || raceEnabled {
		n = 80
	}
	ins := crashStream(3, n, parts, true)
	for _, name := range commitConfigs {
		for _, exactlyOnce := range []bool{true, false} {
			t.Run(name+"/"+mode(exactlyOnce), func(t *testing.T) {
				yaml := commitYAML(name)
				want, commits := reference(t, yaml, exactlyOnce, ins, parts)
				for crashAt := range commits {
					for _, st := range steps {
						c := newCluster()
						if !newShell(t, yaml, exactlyOnce, c, allParts(parts)...).run(ins, crashAt, st) {
							t.Fatalf("commit %d, %v: no crash", crashAt, st)
						}
						newShell(t, yaml, exactlyOnce, c, allParts(parts)...).run(ins, -1, noCrash)
						if got := readerView(t, c.outputs, exactlyOnce); !slices.Equal(got, want) {
							t.Fatalf("crash at commit %d, %v: outputs differ from an uninterrupted run:\n%s", crashAt, st, firstDiff(got, want))
						}
					}
				}
			})
		}
	}
}

// A write that fails (the brokers restarting) aborts the commit; the shell
// restores, goes on from the committed offsets and the next commit
// succeeds: a reader sees an uninterrupted run's outputs.
func TestCommitWriteFailsThenSucceeds(t *testing.T) {
	const parts = 3
	ins := crashStream(4, 120, parts, true)
	for _, name := range commitConfigs {
		for _, exactlyOnce := range []bool{true, false} {
			t.Run(name+"/"+mode(exactlyOnce), func(t *testing.T) {
				yaml := commitYAML(name)
				want, commits := reference(t, yaml, exactlyOnce, ins, parts)
				for failAt := range commits {
					c := newCluster()
					s := newShell(t, yaml, exactlyOnce, c, allParts(parts)...)
					s.fail = func(_ *shell, n int) bool { return n == failAt }
					s.run(ins, -1, noCrash)
					if got := readerView(t, c.outputs, exactlyOnce); !slices.Equal(got, want) {
						t.Fatalf("commit %d failed: outputs differ from an uninterrupted run:\n%s", failAt, firstDiff(got, want))
					}
				}
			})
		}
	}
}

// laggingStream is crashStream with partition 0's event time 5s behind the
// others': it holds the merged watermark back, and once it is dropped the
// others' windows are due.
func laggingStream(seed uint64, n int, parts int) []crashInput {
	ins := crashStream(seed, n, parts, false)
	for i := range ins {
		if ins[i].part == 0 {
			ins[i].value = lagged(ins[i].value, 5000)
		}
	}
	return ins
}

// lagged moves the "t" of a JSON record back by d ms (a record whose t is
// not a number stays as it is); the rest, v or its absence, stays.
func lagged(v string, d int64) string {
	var k string
	var t int64
	head, rest, ok := strings.Cut(v, `, "v"`)
	if n, _ := fmt.Sscanf(head, `{"k": "%2s", "t": %d`, &k, &t); n != 2 {
		return v
	}
	if !ok {
		rest = "}"
	} else {
		rest = `, "v"` + rest
	}
	return fmt.Sprintf(`{"k": "%s", "t": %d`, k, t-d) + rest
}

// The group session is lost in the middle of a transaction (exactly_once):
// the commit aborts, and every partition is revoked and assigned again.
// Dropping partition 0, which holds the merged watermark back, lets the
// other partitions' windows fire: whether the core hears of the
// revocations before or after the abort, nothing fired from the aborted
// state reaches the next transaction, and a reader sees an uninterrupted
// run's outputs (each once). Not count windows: they fire by their
// records, not the watermark, so a revocation fires none; nor scope
// partition, where no partition holds another's windows back.
func TestCommitSessionLostMidTransaction(t *testing.T) {
	const parts = 3
	ins := laggingStream(6, 150, parts)
	for _, name := range commitConfigs {
		if name == "count_sliding" || strings.HasPrefix(name, "scope_") {
			continue
		}
		for _, revokeFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/revoked_before_abort=%v", name, revokeFirst), func(t *testing.T) {
				yaml := commitYAML(name)
				want, commits := reference(t, yaml, true, ins, parts)
				fired := 0 // outputs the revocations fired from the aborted state
				for lostAt := range commits {
					c := newCluster()
					s := newShell(t, yaml, true, c, allParts(parts)...)
					s.fail = func(s *shell, n int) bool {
						if n == lostAt && revokeFirst {
							// Fires what partition 0 held back; Abort must drop it.
							s.revoke(allParts(parts)...)
						}
						return n == lostAt
					}
					if revokeFirst {
						probe := newShell(t, yaml, true, newCluster(), allParts(parts)...)
						probe.fail = func(s *shell, n int) bool {
							if n == lostAt {
								s.revoke(allParts(parts)...)
								fired += len(s.p.Step().Outputs)
								return true
							}
							return false
						}
						probe.lost = func(s *shell) { s.assign(allParts(parts)...) }
						probe.run(ins, -1, noCrash)
					}
					s.lost = func(s *shell) {
						if !revokeFirst {
							s.revoke(allParts(parts)...)
							s.write(s.p.Step().Outputs)
						}
						s.assign(allParts(parts)...)
					}
					s.run(ins, -1, noCrash)
					checkRevisions(t, c.outputs)
					if !slices.Equal(c.outputs, want) {
						t.Fatalf("session lost at commit %d: outputs differ from an uninterrupted run:\n%s", lostAt, firstDiff(c.outputs, want))
					}
				}
				if revokeFirst && fired == 0 {
					t.Fatal("no revocation fired anything: the stream does not test the aborted state's firings")
				}
			})
		}
	}
}

// A zombie (at_least_once): the process is paused in a commit, after its
// outputs, past its session; another instance takes every partition over
// from the changelog and commits a while; then the zombie wakes and
// writes the commit's changelog records and positions after them (its
// offset commit is refused, and it stops). A fresh instance restores
// every partition (the zombie's records must not make that impossible,
// nor win over the new owner's state) and finishes the stream: a reader
// sees an uninterrupted run's outputs.
func TestCommitZombieWritesAfterTakeover(t *testing.T) {
	const parts = 3
	ins := crashStream(9, 150, parts, true)
	for _, name := range commitConfigs {
		t.Run(name, func(t *testing.T) {
			yaml := commitYAML(name)
			want, commits := reference(t, yaml, false, ins, parts)
			for pausedAt := 1; pausedAt < commits-1; pausedAt++ {
				c := newCluster()
				zombie := newShell(t, yaml, false, c, allParts(parts)...)
				zombie.pause = func(_ *shell, n int) {
					if n == pausedAt {
						owner := newShell(t, yaml, false, c, allParts(parts)...)
						owner.run(ins[:min(len(ins), (pausedAt+2)*commitEvery*2)], -1, noCrash)
					}
				}
				if !zombie.run(ins, pausedAt, afterPositions) {
					t.Fatalf("commit %d: the zombie did not stop", pausedAt)
				}
				newShell(t, yaml, false, c, allParts(parts)...).run(ins, -1, noCrash)
				if got := readerView(t, c.outputs, false); !slices.Equal(got, want) {
					t.Fatalf("zombie paused in commit %d: outputs differ from an uninterrupted run:\n%s", pausedAt, firstDiff(got, want))
				}
			}
		})
	}
}

// A partition is revoked while the windows it holds back are due (its
// event time lags), and goes to another instance: the windows of the
// partitions left fire at the revocation. The process then crashes after
// each step of the next commit and restarts with the partitions left;
// the other instance takes partition 0 over from the changelog. Each
// window's results have consecutive revisions from 0, none twice.
func TestCommitRevokedWhileWindowsDue(t *testing.T) {
	const parts = 3
	ins := laggingStream(8, 150, parts)
	for _, name := range commitConfigs {
		for _, exactlyOnce := range []bool{true, false} {
			t.Run(name+"/"+mode(exactlyOnce), func(t *testing.T) {
				yaml := commitYAML(name)
				half := len(ins) / 2
				for _, st := range append([]step{noCrash}, steps...) {
					c := newCluster()
					a := newShell(t, yaml, exactlyOnce, c, allParts(parts)...)
					if a.run(ins[:half], -1, noCrash) {
						t.Fatal("crashed before the revocation")
					}
					before := len(c.outputs)
					a.revoke(0) // committed first, as the consumer does before a rebalance
					rd := a.p.Step()
					fired := len(rd.Outputs)
					a.write(rd.Outputs)
					b := newShell(t, yaml, exactlyOnce, c, 0)
					a2 := a
					if a.run(ins, a.commits, st) {
						a2 = newShell(t, yaml, exactlyOnce, c, 1, 2)
						a2.run(ins, -1, noCrash)
					}
					b.run(ins, -1, noCrash)
					if st == noCrash && fired == 0 && len(c.outputs) == before {
						t.Fatal("nothing fired after the revocation: the stream does not test it")
					}
					checkRevisions(t, readerView(t, c.outputs, exactlyOnce))
				}
			})
		}
	}
}

// checkRevisions fails if an output is in outs twice, or if a window's
// results do not have rising revisions.
func checkRevisions(t *testing.T, outs []string) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, o := range outs {
		id := identity(o)
		if seen[id] {
			t.Fatalf("output twice: %s", id)
		}
		seen[id] = true
		var part int32
		var key, window, firing string
		var rev int64
		if n, _ := fmt.Sscanf(o, "result p%d %s %s %s rev %d", &part, &key, &window, &firing, &rev); n != 5 || firing == windowing.Retract.String() {
			continue
		}
		w := fmt.Sprintf("p%d %s %s", part, key, window)
		if prev, ok := last[w]; ok && rev <= prev {
			t.Fatalf("%s: revision %d after %d", w, rev, prev)
		}
		last[w] = rev
	}
}

// The core keeps each partition's progress: a partition waits for its
// restore (its records are not applied meanwhile), then its position, lag
// and offset follow the records applied; an abort sends every partition
// back to its restore.
func TestPartitionProgress(t *testing.T) {
	s := newShell(t, crashConfigs["tumbling"], true, newCluster())
	p := s.p
	p.Assign(0, 0)
	p.Assign(1, 0)
	if got := p.Unrestored(); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("Unrestored = %v, want [0 1]", got)
	}
	rec := func(off int64) *ready.Input {
		return &ready.Input{Partition: 0, Offset: off, Value: []byte(fmt.Sprintf(`{"k": "a", "t": %d, "v": 1}`, 1000+off))}
	}
	apply := func(in *ready.Input) bool {
		kind, err := s.dec.Decode(in, &s.rec)
		_, ok := p.Apply(in, &s.rec, kind, err, math.MaxInt64)
		return ok
	}
	if apply(rec(0)) {
		t.Fatal("a record applied before its partition's restore")
	}
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		t.Fatalf("Restore = %v", err)
	}
	if got := p.Unfetched(); len(got) != 1 || got[0] != -1 {
		t.Fatalf("Unfetched = %v, want partition 0 without a position", got)
	}
	for off := range int64(5) {
		if !apply(rec(off)) {
			t.Fatalf("record %d not applied", off)
		}
	}
	if apply(rec(3)) {
		t.Fatal("a record below the position applied again")
	}
	p.Fetched(0, 10, 0)
	if lag, ok := p.Lag(0); !ok || lag != 5 {
		t.Errorf("Lag = %d, %v, want 5", lag, ok)
	}
	if got := p.Unfetched(); len(got) != 0 {
		t.Errorf("Unfetched = %v after a fetch", got)
	}
	if rd := p.Commit(); !slices.Equal(rd.Offsets, []ready.Offset{{Partition: 0, Offset: 5}}) {
		t.Errorf("Offsets = %v, want partition 0 at 5 (partition 1 is not restored)", rd.Offsets)
	}
	p.Abort(0)
	if got := p.Unrestored(); !slices.Equal(got, []int32{0, 1}) {
		t.Errorf("Unrestored after Abort = %v, want [0 1]", got)
	}
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		t.Errorf("Restore after Abort = %v", err)
	}
	if _, err := p.Restore(0, state.NewRestorer(), 0); err == nil {
		t.Error("Restore of a restored partition succeeded")
	}
}

// PositionsUnwritten: the positions of a Checkpoint that were not written
// (at_least_once: a zombie's commit stops before them) are written by the
// next Checkpoint, though the partition has not moved since.
func TestPositionsUnwritten(t *testing.T) {
	cfg, err := config.Parse([]byte(commitYAML("tumbling")), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := pipeline.New(cfg, pipeline.Mode{Checkpointed: true})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := p.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	p.Assign(0, 0)
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		t.Fatal(err)
	}
	in := ready.Input{Partition: 0, Offset: 0, Value: []byte(crashStream(1, 1, 1, false)[0].value)}
	var rec record.Record
	kind, derr := dec.Decode(&in, &rec)
	p.Apply(&in, &rec, kind, derr, math.MaxInt64)
	if _, pos := p.Checkpoint(); len(pos) != 1 {
		t.Fatalf("first Checkpoint: %d positions, want 1", len(pos))
	}
	if _, pos := p.Checkpoint(); len(pos) != 0 {
		t.Fatalf("Checkpoint with nothing moved: %d positions, want 0", len(pos))
	}
	p.PositionsUnwritten()
	if _, pos := p.Checkpoint(); len(pos) != 1 || pos[0].Partition != 0 {
		t.Fatalf("Checkpoint after PositionsUnwritten: %d positions, want partition 0's", len(pos))
	}
}
