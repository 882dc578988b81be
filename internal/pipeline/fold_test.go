package pipeline_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Two-phase aggregation (docs/design.md#two-phase-aggregation) where
// stage 1 cannot know what stage 2's watermark is: each scenario runs
// twice on the same schedule, with state.repartition_format 4 (stage 1
// folds) and 3 (every record alone), and a reader must see the same
// results, late events and dead letters. The scenarios are built so that
// stage 1's rule folds records that stage 2 must judge late or in a late
// firing: stage 2 unfolds them.

// foldYaml is twoStageYaml with allowed lateness and idleness.
const foldYaml = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: repartition}
watermark: {max_out_of_orderness: 1s, idle_timeout: 1s}
window: {type: tumbling, size: 2s, allowed_lateness: 2s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`

// withFormat is yaml with state.repartition_format format (and more
// state settings, "key: value, ...").
func withFormat(yaml string, format int, state string) string {
	if state != "" {
		state = ", " + state
	}
	return yaml + fmt.Sprintf("state: {repartition_format: %d%s}\n", format, state)
}

// stepper drives a twoStage one step at a time.
type stepper struct{ *twoStage }

// feed appends records to source partition p's input and reads them in
// stage 1.
func (s stepper) feed(p int, recs ...string) {
	for _, r := range recs {
		s.c.input[p] = append(s.c.input[p], r)
	}
	for s.fetch1[p] < int64(len(s.c.input[p])) {
		off := s.fetch1[p]
		s.fetch1[p]++
		s.apply(inputOf(p, off, s.c.input[p][off]), nil, int64(len(s.c.input[p])))
	}
	s.write(s.core.Step(s.now).Outputs, -1)
}

// drain reads every repartition record in stage 2.
func (s stepper) drain() {
	for more := true; more; {
		more = false
		for r := range s.fetch2 {
			if s.fetch2[r] >= int64(len(s.c.repart[r])) {
				continue
			}
			off := s.fetch2[r]
			s.fetch2[r]++
			rec := s.c.repart[r][off]
			s.apply(repartInput(int32(r), off, rec), rec.header, int64(len(s.c.repart[r])))
			more = true
		}
	}
	s.write(s.core.Step(s.now).Outputs, -1)
}

// commit commits; it must succeed.
func (s stepper) commit() {
	if _, ok := s.twoStage.commit(-1, noCrash); !ok {
		s.t.Fatal("the commit failed")
	}
}

// cycle is a commit, stage 2 reading what it wrote, and a commit.
func (s stepper) cycle() {
	s.commit()
	s.drain()
	s.commit()
}

// tick moves the wall clock to now.
func (s stepper) tick(now int64) {
	s.now = now
	s.core.Tick(now)
	s.write(s.core.Step(now).Outputs, -1)
}

// rec is an input record of key k at time t with value v.
func foldRec(k string, t, v int) string { return fmt.Sprintf(`{"k":%q,"t":%d,"v":%d}`, k, t, v) }

// foldScenario runs scenario with formats 4 and 3 and compares what a
// reader sees; it returns the outputs of format 4 and the records its
// stage 2 read back (unfolded).
//
// start starts a process of the config yaml (foldYaml if ""), whose
// state settings are state, with the format of the run, holding the
// input partitions, the repartition partitions or both ("1", "2", "").
func foldScenario(t *testing.T, exactlyOnce bool, scenario func(t *testing.T, start func(yaml, state, roles string) stepper)) (outs []string, unfolded int) {
	t.Helper()
	views := map[int][]string{}
	for _, format := range []int{4, 3} {
		c := &cluster2{input: make([][]string, sourceParts), repart: make([][]repRecord, repartParts), log: changelog{},
			off1: map[int32]int64{}, off2: map[int32]int64{}}
		started := []*twoStage{}
		start := func(yaml, state, roles string) stepper {
			if yaml == "" {
				yaml = foldYaml
			}
			p := newTwoStageRoles(t, withFormat(yaml, format, state), exactlyOnce, c, roles != "2", roles != "1")
			p.now = 1 // idleness needs a clock
			started = append(started, p)
			return stepper{p}
		}
		scenario(t, start)
		views[format] = twoStageView(c.outputs, exactlyOnce)
		if format == 4 {
			outs = c.outputs
			for _, p := range started {
				unfolded += p.unfolded
			}
		}
	}
	if !slices.Equal(views[4], views[3]) {
		t.Fatalf("stage 1 folding: a reader sees\n%s\nsending every record alone:\n%s", strings.Join(views[4], "\n"), strings.Join(views[3], "\n"))
	}
	return outs, unfolded
}

// cycle is a commit of in (stage 1), out reading what it wrote (stage 2),
// and a commit of out.
func cycle(in, out stepper) {
	in.commit()
	out.drain()
	out.commit()
}

// instances are the two layouts the scenarios run in: one instance with
// both stages (which sends alone what its own stage 2 would find late),
// and stage 1 and stage 2 on two instances (stage 1 knows nothing of
// stage 2's watermark, and stage 2 unfolds).
var instances = []struct {
	name    string
	in, out string // the roles of the two processes (the same process for "")
	unfolds bool
}{{"one instance", "", "", false}, {"two instances", "1", "2", true}}

// processes starts a process of both stages, or two that split them.
func processes(start func(yaml, state, roles string) stepper, in, out string) (stepper, stepper) {
	if in == "" {
		s := start("", "", "")
		return s, s
	}
	return start("", "", in), start("", "", out)
}

// TestFoldNewOwnerLateRecords: a new owner of a source partition starts
// with a fresh generator, below the watermark the one before reported;
// records behind that watermark (one in the allowed-lateness band, twice,
// and one past it) are above the fresh generator: with stage 2 on the
// same instance, stage 1 sends them alone (their panes closed there);
// on another, it folds them and stage 2, whose watermark is the old
// one, unfolds them. Two late firings and a late event either way, as
// when they are sent alone.
func TestFoldNewOwnerLateRecords(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		for _, layout := range instances {
			t.Run(mode(exactlyOnce)+"/"+layout.name, func(t *testing.T) {
				outs, unfolded := foldScenario(t, exactlyOnce, func(t *testing.T, start func(yaml, state, roles string) stepper) {
					s := start("", "", "")
					s.feed(0, foldRec("a", 10_000, 1), foldRec("a", 10_100, 1))
					s.feed(1, foldRec("b", 20_000, 1))
					s.feed(2, foldRec("b", 20_000, 1))
					s.cycle()
					// A rebalance: new owners, stage 1 from the committed
					// offsets, stage 2 from the changelog.
					in, out := processes(start, layout.in, layout.out)
					in.feed(0, foldRec("a", 6_500, 1), foldRec("a", 6_600, 1), foldRec("a", 4_500, 1))
					cycle(in, out)
				})
				if want := map[bool]int{true: 3}[layout.unfolds]; unfolded != want {
					t.Errorf("stage 2 read back %d records, want %d", unfolded, want)
				}
				lateFirings, late := 0, 0
				for _, o := range outs {
					if strings.Contains(o, " late rev ") {
						lateFirings++
					}
					if strings.HasPrefix(o, "late") {
						late++
					}
				}
				if lateFirings != 2 || late != 1 {
					t.Errorf("%d late firings and %d late events, want 2 and 1:\n%s", lateFirings, late, strings.Join(outs, "\n"))
				}
			})
		}
	}
}

// TestFoldIdleSourceComesBack: a source partition goes idle, the others
// take the watermark far past it, and it comes back with records above
// its own watermark but behind the others': late, as when they are sent
// alone (with stage 2 on another instance, stage 1 folds them and stage
// 2 unfolds them). Then it catches up past the others, and its records
// fold and merge again.
func TestFoldIdleSourceComesBack(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		for _, layout := range instances {
			t.Run(mode(exactlyOnce)+"/"+layout.name, func(t *testing.T) {
				outs, unfolded := foldScenario(t, exactlyOnce, func(t *testing.T, start func(yaml, state, roles string) stepper) {
					in, out := processes(start, layout.in, layout.out)
					in.feed(0, foldRec("a", 10_000, 1))
					in.feed(1, foldRec("b", 10_000, 1))
					in.feed(2, foldRec("c", 10_000, 1))
					cycle(in, out)
					in.tick(5_000) // source 0 is caught up and quiet: idle
					in.feed(1, foldRec("b", 30_000, 1))
					in.feed(2, foldRec("c", 30_000, 1))
					cycle(in, out)
					in.feed(0, foldRec("a", 12_000, 2), foldRec("a", 12_500, 3))
					cycle(in, out)
					in.feed(0, foldRec("a", 40_000, 4), foldRec("a", 40_100, 5), foldRec("a", 43_500, 6))
					in.feed(1, foldRec("b", 50_000, 1))
					in.feed(2, foldRec("c", 50_000, 1))
					cycle(in, out)
				})
				if want := map[bool]int{true: 2}[layout.unfolds]; unfolded != want {
					t.Errorf("stage 2 read back %d records, want %d", unfolded, want)
				}
				late := 0
				for _, o := range outs {
					if strings.HasPrefix(o, "late") {
						late++
					}
				}
				if late != 2 || !slices.ContainsFunc(outs, func(o string) bool {
					return strings.Contains(o, `{"k":"a"} [40000,42000)`) && strings.Contains(o, "count 2")
				}) {
					t.Errorf("%d late events, want 2, and a's window at 40 s with both its records:\n%s", late, strings.Join(outs, "\n"))
				}
			})
		}
	}
}

// TestFoldRollout: an instance of the old config folded records that an
// instance of the new one reads (a rolling upgrade that changes the
// aggregates): the new one's partitions hold two generations, whose
// records each judges under its own settings, so it unfolds the old
// config's groups (and stage 1 sends every record alone while its
// stage 2 holds two generations).
func TestFoldRollout(t *testing.T) {
	newConfig := strings.Replace(foldYaml, "{name: s, fn: sum, field: v}", "{name: s, fn: sum, field: v}, {name: m, fn: max, field: v}", 1)
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(mode(exactlyOnce), func(t *testing.T) {
			_, unfolded := foldScenario(t, exactlyOnce, func(t *testing.T, start func(yaml, state, roles string) stepper) {
				s := start("", "", "")
				s.feed(0, foldRec("a", 1_000, 1))
				s.feed(1, foldRec("b", 1_000, 1))
				s.feed(2, foldRec("c", 1_000, 1))
				s.cycle()
				s.feed(0, foldRec("a", 2_500, 2), foldRec("a", 2_600, 3))
				s.feed(1, foldRec("b", 2_500, 2))
				s.feed(2, foldRec("c", 2_500, 2))
				s.commit() // the old config's groups, not read by its stage 2
				s = start(newConfig, "config_version: 1", "")
				s.drain()
				s.commit()
				s.feed(0, foldRec("a", 9_000, 4), foldRec("a", 9_100, 5))
				s.feed(1, foldRec("b", 9_000, 4))
				s.feed(2, foldRec("c", 9_000, 4))
				s.cycle()
			})
			if unfolded == 0 {
				t.Error("stage 2 read nothing back: the scenario does not test the unfold")
			}
		})
	}
}

// TestFoldMatchesRecordsAlone: on the random streams of the two-stage
// tests (disorder, late records, dead letters of both stages), folding
// changes nothing a reader sees.
func TestFoldMatchesRecordsAlone(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(mode(exactlyOnce), func(t *testing.T) {
			for seed := range uint64(8) {
				views := map[int][]string{}
				for _, format := range []int{4, 3} {
					c := newCluster2(seed)
					s := newTwoStageOf(t, withFormat(twoStageYaml, format, ""), exactlyOnce, c)
					s.run(-1, noCrash)
					if format == 4 && s.groups == 0 {
						t.Fatalf("seed %d: stage 1 folded nothing", seed)
					}
					views[format] = twoStageView(c.outputs, exactlyOnce)
				}
				if !slices.Equal(views[4], views[3]) {
					t.Fatalf("seed %d: folding: a reader sees\n%q\nwithout:\n%q", seed, views[4], views[3])
				}
			}
		})
	}
}

// TestFoldPunctuated: with punctuated watermarks, marker records move a
// source's watermark and are not forwarded; what stage 1 folds between
// them reaches stage 2 as it would alone, on one instance and on two.
func TestFoldPunctuated(t *testing.T) {
	punctuated := strings.Replace(foldYaml, "watermark: {max_out_of_orderness: 1s, idle_timeout: 1s}",
		"watermark: {strategy: punctuated, marker_field: wm}", 1)
	marker := func(t int) string { return fmt.Sprintf(`{"wm":%d}`, t) }
	for _, exactlyOnce := range []bool{true, false} {
		for _, layout := range instances {
			t.Run(mode(exactlyOnce)+"/"+layout.name, func(t *testing.T) {
				outs, _ := foldScenario(t, exactlyOnce, func(t *testing.T, start func(yaml, state, roles string) stepper) {
					in := start(punctuated, "", layout.in)
					out := in
					if layout.out != "" {
						out = start(punctuated, "", layout.out)
					}
					for p := range sourceParts {
						in.feed(p, foldRec("a", 1_000, 1), foldRec("b", 1_500, 2), marker(3_000), foldRec("a", 2_500, 3), foldRec("b", 3_500, 4))
					}
					cycle(in, out)
					for p := range sourceParts {
						in.feed(p, foldRec("a", 2_200, 5), marker(6_500), foldRec("a", 3_900, 6), foldRec("b", 6_000, 7), marker(9_000))
					}
					cycle(in, out)
				})
				if !slices.ContainsFunc(outs, func(o string) bool { return strings.Contains(o, " late rev ") || strings.HasPrefix(o, "late") }) ||
					!slices.ContainsFunc(outs, func(o string) bool { return strings.Contains(o, "on_time") }) {
					t.Fatalf("outputs without a late record and an on-time firing: the scenario tests nothing:\n%s", strings.Join(outs, "\n"))
				}
			})
		}
	}
}
