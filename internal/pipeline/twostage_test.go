package pipeline_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
)

// The two-stage commit protocol of source.partitioning repartition, step
// by step, as commit_test.go does it for one stage: one process runs one
// pipeline.Core, which holds both stages, over an in-memory cluster (input partitions, the repartition
// topic, the outputs, the changelog, the group's offsets of both), one
// commit holds both stages' outputs and offsets, and the process is
// thrown away after each step of a commit. What a reader sees of the
// outputs must be what an uninterrupted run gives: every (key, window)
// fires once with the same count, and the same records are late and
// dead letters (the order may differ: a restarted process reads the
// repartition partitions in another interleaving, which this input's
// outcome does not depend on).

const twoStageYaml = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: repartition}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`

const (
	sourceParts = 3
	repartParts = 2
	twoStageNow = 0 // no wall clock: no heartbeat, no future guard
)

// repRecord is a record of the repartition topic: its header (nil: a
// format 2 data record, which has none), key and value.
type repRecord struct{ header, key, value []byte }

// cluster2 is what the brokers hold durably.
type cluster2 struct {
	input   [][]string    // by source partition
	repart  [][]repRecord // by repartition partition: what a read_committed reader sees
	outputs []string
	log     changelog
	off1    map[int32]int64 // stage 1's committed input offsets
	off2    map[int32]int64 // stage 2's committed repartition offsets
}

// txn2 is an open transaction (exactly_once).
type txn2 struct {
	repart  map[int32][]repRecord
	outputs []string
	log     []pipeline.ChangelogRecord
}

// The topics of the two-stage tests.
const (
	inTopic     = "in"
	repartTopic = "in-repartition"
)

// twoStage is one process: its core and the fetch positions.
type twoStage struct {
	t           *testing.T
	exactlyOnce bool
	c           *cluster2
	tx          *txn2
	core        *pipeline.Core
	dec         *record.Decoder
	recs        []pipeline.Decoded // the record being applied
	counts      pipeline.Counts
	fetch1      [sourceParts]int64
	fetch2      [repartParts]int64
	rounds      int
	commits     int
	failAt      int // the commit whose positions fail to write (the cores abort); -1 none
}

// midMarkers is where an at_least_once commit dies half-way through its
// markers: data before them is durable, the markers of some partitions not.
const midMarkers step = 100

func newTwoStage(t *testing.T, exactlyOnce bool, c *cluster2) *twoStage {
	t.Helper()
	return newTwoStageOf(t, twoStageYaml, exactlyOnce, c)
}

// newTwoStageOf is newTwoStage of the config yaml.
func newTwoStageOf(t *testing.T, yaml string, exactlyOnce bool, c *cluster2) *twoStage {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	cfg.Source.Topics, cfg.State.RepartitionTopic, cfg.State.RepartitionPartitions = []string{inTopic}, repartTopic, repartParts
	s := &twoStage{t: t, exactlyOnce: exactlyOnce, c: c, tx: &txn2{repart: map[int32][]repRecord{}}, failAt: -1,
		recs: make([]pipeline.Decoded, 1)}
	if s.core, err = pipeline.NewCore(pipeline.Spec{Config: cfg, Partitions: []int32{sourceParts}}); err != nil {
		t.Fatalf("pipeline.NewCore: %v", err)
	}
	if s.dec, err = record.NewDecoder(cfg.RecordSpec(), nil); err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	for p := range int32(sourceParts) {
		s.core.Assign(inTopic, p, twoStageNow)
	}
	for r := range int32(repartParts) {
		s.core.Assign(repartTopic, r, twoStageNow)
	}
	s.rejoin()
	return s
}

// rejoin restarts both stages from what the cluster holds: stage 1 from
// its committed input offsets, stage 2 from its changelog.
func (s *twoStage) rejoin() {
	for p := range s.fetch1 {
		s.fetch1[p] = s.c.off1[int32(p)]
	}
	for _, r := range s.core.Unrestored() {
		res, err := s.core.Restore(r, s.c.log.restorer(s.t, r), twoStageNow)
		if err != nil {
			s.t.Fatalf("Restore(%d): %v", r, err)
		}
		s.fetch2[r] = s.c.off2[r]
		if res.HasPosition {
			s.fetch2[r] = res.Position.Offset
		}
	}
	s.write(s.core.Step(twoStageNow).Outputs, -1)
}

func partitionOf(key string) int32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % repartParts)
}

// write writes a Ready's outputs; with n >= 0 only those before marker
// n+1 (stage 1's outputs come first, its markers after its data).
func (s *twoStage) write(outs []ready.Output, n int) {
	put := func(r int32, rec repRecord) {
		if s.exactlyOnce {
			s.tx.repart[r] = append(s.tx.repart[r], rec)
		} else {
			s.c.repart[r] = append(s.c.repart[r], rec)
		}
	}
	for i := range outs {
		o := &outs[i]
		switch o.Kind {
		case ready.Repartition:
			// Records of odd offsets the filter accepts go in format 1, as a
			// release before format 2 wrote them (a rolling upgrade): stage 2
			// decodes their values. The others as stage 1 encoded them.
			rec := repRecord{key: []byte(o.Repart.Key), value: slices.Clone(o.Repart.Encoded)}
			if o.Repart.Header != "" {
				rec.header, rec.value = slices.Clone(o.Repart.Encoded), slices.Clone(o.Repart.In.Value)
			}
			if o.Repart.In.Offset%2 == 1 && !o.Repart.Filtered {
				rec.header, rec.value = repartition.AppendData(nil, &o.Repart.In), slices.Clone(o.Repart.In.Value)
			}
			put(partitionOf(o.Repart.Key), rec)
		case ready.Marker:
			if n == 0 {
				return
			}
			n--
			for r := range int32(repartParts) {
				put(r, repRecord{header: repartition.AppendMarker(nil, o.Repart.Mark)})
			}
		case ready.DeadLetter: // named by its source record: stage 1's, or stage 2's of a value no generation's aggregates read
			s.output(fmt.Sprintf("dead src%d@%d %v", o.Event.In.KafkaPartition, o.Event.In.Offset, o.Event.Err))
		case ready.Late: // named by its source record
			s.output(fmt.Sprintf("late src%d@%d p%d wm %d", o.Event.In.KafkaPartition, o.Event.In.Offset, o.Event.In.Partition, o.Event.Watermark))
		default:
			s.output(outputString(o))
		}
	}
}

func (s *twoStage) output(o string) {
	if s.exactlyOnce {
		s.tx.outputs = append(s.tx.outputs, o)
	} else {
		s.c.outputs = append(s.c.outputs, o)
	}
}

// round reads one record of every source partition and of every
// repartition partition, and reports whether there was any.
func (s *twoStage) round() bool {
	any := false
	for p := range s.fetch1 {
		if s.fetch1[p] >= int64(len(s.c.input[p])) {
			continue
		}
		off := s.fetch1[p]
		s.fetch1[p]++
		s.apply(ready.Input{Topic: inTopic, KafkaPartition: int32(p), Offset: off, Value: []byte(s.c.input[p][off])}, nil, int64(len(s.c.input[p])))
		any = true
	}
	s.write(s.core.Step(twoStageNow).Outputs, -1)
	for r := range s.fetch2 {
		if s.fetch2[r] >= int64(len(s.c.repart[r])) {
			continue
		}
		off := s.fetch2[r]
		s.fetch2[r]++
		rec := s.c.repart[r][off]
		s.apply(ready.Input{Topic: repartTopic, KafkaPartition: int32(r), Offset: off, Key: rec.key, Value: rec.value}, rec.header, int64(len(s.c.repart[r])))
		any = true
	}
	s.write(s.core.Step(twoStageNow).Outputs, -1)
	return any
}

// apply decodes and applies one fetched record (with its repartition
// header, if it has one), of a partition whose high watermark is hwm.
func (s *twoStage) apply(in ready.Input, header []byte, hwm int64) {
	id := s.core.Layout().ID(in.Topic, in.KafkaPartition)
	in.Partition = id
	d := &s.recs[0]
	d.In, d.Control = in, false
	s.core.Decode(s.dec, d, header != nil, header)
	var de *record.DecodeError
	if in.Topic == repartTopic && errors.As(d.Err, &de) && de.Reason == record.ReasonBadRepartitionRecord {
		s.t.Fatalf("a repartition record stage 2 cannot read: %v", d.Err)
	}
	s.core.Apply(id, s.recs, hwm, twoStageNow, &s.counts)
}

const roundsPerCommit = 3

// run goes on until both stages are done; it stops at the crash step of
// commit number crashAt, and reports whether it crashed.
func (s *twoStage) run(crashAt int, crash step) bool {
	idle := 0
	for idle < 2 { // two quiet commits: the last one's repartition records are read
		any := s.round()
		if s.rounds++; any && s.rounds%roundsPerCommit != 0 {
			continue
		}
		before := s.visible()
		crashed, ok := s.commit(crashAt, crash)
		if crashed {
			return true
		}
		if !ok {
			s.rejoin()
		}
		if any || s.visible() != before {
			idle = 0
		} else {
			idle++
		}
	}
	return false
}

func (s *twoStage) visible() int {
	n := len(s.c.outputs)
	for _, rs := range s.c.repart {
		n += len(rs)
	}
	return n
}

// commit writes both stages' commit Readies, step by step, as one
// transaction with exactly_once; it reports whether the process died at
// crash of this commit and whether the commit succeeded (else the cores
// aborted: the shell rewinds and restores).
func (s *twoStage) commit(crashAt int, crash step) (crashed, ok bool) {
	n := s.commits
	s.commits++
	at := func(st step) bool { return n == crashAt && crash == st }
	rd := s.core.Commit(twoStageNow)
	if at(midMarkers) {
		s.write(rd.Outputs, 1)
		return true, false
	}
	s.write(rd.Outputs, -1)
	if at(afterOutputs) {
		return true, false
	}
	s.writeLog(rd.Changelog)
	if at(afterChangelog) {
		return true, false
	}
	if n == s.failAt {
		s.tx = &txn2{repart: map[int32][]repRecord{}}
		s.core.Abort(twoStageNow)
		return false, false
	}
	s.writeLog(rd.Positions)
	if at(afterPositions) {
		return true, false
	}
	for _, o := range rd.Offsets { // one list, named by topic
		switch o.Topic {
		case inTopic:
			s.c.off1[o.Partition] = o.Offset
		case repartTopic:
			s.c.off2[o.Partition] = o.Offset
		default:
			s.t.Fatalf("offset of topic %q", o.Topic)
		}
	}
	if s.exactlyOnce {
		for r, rs := range s.tx.repart {
			s.c.repart[r] = append(s.c.repart[r], rs...)
		}
		s.c.outputs = append(s.c.outputs, s.tx.outputs...)
		s.c.log.write(s.tx.log)
		s.tx = &txn2{repart: map[int32][]repRecord{}}
	}
	if at(afterOffsets) {
		return true, false
	}
	s.core.Accept()
	return false, true
}

func (s *twoStage) writeLog(recs []pipeline.ChangelogRecord) {
	if s.exactlyOnce {
		s.tx.log = append(s.tx.log, recs...)
	} else {
		s.c.log.write(recs)
	}
}

// twoStageInput is sourceParts partitions of records keyed by a request
// id, grouped by k: each partition's event times rise with disorder
// within max_out_of_orderness (so whether a record is late does not
// depend on how partitions interleave), a few malformed records (a bad
// time: stage 1's dead letters; a sum's value that is not a number:
// stage 2's, format 3), and a few far behind every watermark (late
// wherever they are judged).
func twoStageInput(seed uint64) [][]string {
	rng := rand.New(rand.NewPCG(seed, 17))
	in := make([][]string, sourceParts)
	for p := range in {
		t := int64(0)
		for i := range 40 {
			t += int64(rng.IntN(600))
			v := fmt.Sprintf(`{"k":"%c","t":%d,"v":%d}`, 'a'+rng.IntN(5), t-int64(rng.IntN(900)), rng.IntN(100))
			switch {
			case i%13 == 7:
				v = `{"k":"a","t":"soon"}`
			case i%11 == 4:
				v = fmt.Sprintf(`{"k":"c","t":%d,"v":"x"}`, t)
			case i > 30 && i%5 == 0:
				v = fmt.Sprintf(`{"k":"b","t":%d,"v":1}`, rng.IntN(100))
			}
			in[p] = append(in[p], v)
		}
	}
	return in
}

func newCluster2(seed uint64) *cluster2 {
	return &cluster2{input: twoStageInput(seed), repart: make([][]repRecord, repartParts), log: changelog{},
		off1: map[int32]int64{}, off2: map[int32]int64{}}
}

// twoStageView is what a reader makes of the outputs: the multiset of
// outputs without the watermark they were fired or judged at (with
// at_least_once, repeats dropped).
func twoStageView(outs []string, exactlyOnce bool) []string {
	view := make([]string, 0, len(outs))
	seen := map[string]bool{}
	for _, o := range outs {
		id := identity(o)
		if !exactlyOnce && seen[id] {
			continue
		}
		seen[id] = true
		view = append(view, id)
	}
	slices.Sort(view)
	return view
}

func twoStageReference(t *testing.T, exactlyOnce bool, seed uint64) (view []string, commits int) {
	t.Helper()
	c := newCluster2(seed)
	s := newTwoStage(t, exactlyOnce, c)
	if s.run(-1, noCrash) {
		t.Fatal("the reference run crashed")
	}
	var late, dead, dead2, results int
	for _, o := range c.outputs {
		switch o[:4] {
		case "late":
			late++
		case "dead":
			dead++
			if strings.Contains(o, record.ReasonNonNumeric) {
				dead2++
			}
		default:
			results++
		}
	}
	if late == 0 || dead2 == 0 || dead == dead2 || results == 0 {
		t.Fatalf("the reference run has %d results, %d late events, %d dead letters (%d of stage 2): the test tests nothing", results, late, dead, dead2)
	}
	return twoStageView(c.outputs, exactlyOnce), s.commits
}

// TestTwoStageCrashEveryStep crashes the process at every step of every
// commit; a new process goes on from what the cluster holds.
func TestTwoStageCrashEveryStep(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(mode(exactlyOnce), func(t *testing.T) {
			const seed = 5
			want, commits := twoStageReference(t, exactlyOnce, seed)
			crashSteps := []step{afterOutputs, afterChangelog, afterPositions, afterOffsets}
			if !exactlyOnce {
				crashSteps = append(crashSteps, midMarkers) // one transaction has no such step
			}
			for _, st := range crashSteps {
				for crashAt := range commits {
					c := newCluster2(seed)
					if !newTwoStage(t, exactlyOnce, c).run(crashAt, st) {
						t.Fatalf("%v of commit %d: did not crash", st, crashAt)
					}
					newTwoStage(t, exactlyOnce, c).run(-1, noCrash)
					if got := twoStageView(c.outputs, exactlyOnce); !slices.Equal(got, want) {
						t.Fatalf("crash %v of commit %d: a reader sees\n%q\nwant\n%q", st, crashAt, got, want)
					}
				}
			}
		})
	}
}

// TestTwoStageAbort: a commit fails, both cores abort, and the process
// goes on from the committed offsets and the changelog.
func TestTwoStageAbort(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(mode(exactlyOnce), func(t *testing.T) {
			const seed = 9
			want, commits := twoStageReference(t, exactlyOnce, seed)
			for failAt := range commits {
				c := newCluster2(seed)
				s := newTwoStage(t, exactlyOnce, c)
				s.failAt = failAt
				s.run(-1, noCrash)
				if got := twoStageView(c.outputs, exactlyOnce); !slices.Equal(got, want) {
					t.Fatalf("commit %d aborted: a reader sees\n%q\nwant\n%q", failAt, got, want)
				}
			}
		})
	}
}

// TestTwoStageBurstIsOneStage: a burst of one source partition, read by
// stage 2 before any marker says the source's watermark (no commit in
// between), is judged as one stage judges it: each data record carries
// its source's watermark just before and after it. Each repartition
// partition's windows follow that partition's own watermark (the source's
// as of the last record it got), so with one or two repartition
// partitions on one instance the outputs are one stage's exactly (but for
// the partition a result names and the watermark it fired at): the same
// results and late records.
func TestTwoStageBurstIsOneStage(t *testing.T) {
	for _, parts := range []int32{1, 2} {
		t.Run(fmt.Sprintf("repartitions=%d", parts), func(t *testing.T) {
			got, want := burstTwoStages(t, parts)
			if !slices.ContainsFunc(want, func(o string) bool { return strings.HasPrefix(o, "late") }) {
				t.Fatal("the burst has no late record: the test tests nothing")
			}
			if !slices.Equal(got, want) {
				t.Errorf("two stages:\n%s\none stage:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// burstTwoStages runs a burst through two stages with parts repartition
// partitions and through one stage, and returns both outputs, sorted.
func burstTwoStages(t *testing.T, parts int32) (got, want []string) {
	t.Helper()
	cfg, err := config.Parse([]byte(twoStageYaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	one, err := pipeline.New(cfg, pipeline.Mode{})
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	s1, err := repartition.New(cfg, 1, nil)
	if err != nil {
		t.Fatalf("repartition.New: %v", err)
	}
	s2, err := pipeline.New(cfg, pipeline.Mode{Repartitioned: true})
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	dec, err := s2.NewDecoder()
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	one.Assign(0, twoStageNow)
	s1.Assign(0, twoStageNow)
	for r := range parts {
		s2.Assign(r, twoStageNow)
		if _, err := s2.Restore(r, changelog{}.restorer(t, r), twoStageNow); err != nil {
			t.Fatalf("Restore(%d): %v", r, err)
		}
	}
	view := func(dst []string, outs []ready.Output) []string {
		for i := range outs {
			if o := &outs[i]; o.Kind == ready.Late {
				dst = append(dst, fmt.Sprintf("late @%d", o.Event.In.Offset))
			} else {
				r := *o
				r.Result.Partition = 0 // one stage's results name partition 0
				dst = append(dst, identity(outputString(&r)))
			}
		}
		return dst
	}
	rng := rand.New(rand.NewPCG(3, 5))
	var rec record.Record
	next := make([]int64, parts)
	tm := int64(0)
	for off := range int64(300) {
		tm += int64(rng.IntN(200))
		v := fmt.Sprintf(`{"k":"%c","t":%d,"v":1}`, 'a'+rng.IntN(4), tm-int64(rng.IntN(4000)))
		in := ready.Input{Topic: "in", Partition: 0, Offset: off, Value: []byte(v)}
		one.Process(&in, twoStageNow)
		want = view(want, one.Step().Outputs)
		s1.Process(&in, twoStageNow)
		for _, o := range s1.Step(twoStageNow).Outputs {
			r := partitionOf(o.Repart.Key) % parts
			var rin ready.Input
			form, filtered, err := repartition.ParseValue(repartition.AppendValue3(nil, &o.Repart.In, o.Repart.Record, o.Repart.Filtered), r, next[r], nil, &rin)
			if err != nil {
				t.Fatalf("ParseValue: %v", err)
			}
			next[r]++
			kind, err := repartition.Decode(dec, form, filtered, []byte(o.Repart.Key), &rin, &rec)
			s2.Apply(&rin, &rec, kind, err, twoStageNow)
			got = view(got, s2.Step().Outputs)
		}
	}
	one.Flush()
	want = view(want, one.Step().Outputs)
	s2.Flush()
	got = view(got, s2.Step().Outputs)
	slices.Sort(want)
	slices.Sort(got)
	return got, want
}
