package pipeline_test

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/windowing"
)

// genConfig is a config of the generation tests: one window state per
// partition, state.config_version version, the window and aggregates
// given.
func genConfig(version, window, aggregates string, state ...string) string {
	return `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {max_out_of_orderness: 1s, scope: partition}
window: ` + window + `
aggregates: ` + aggregates + `
state: {config_version: ` + version + strings.Join(state, "") + `}
`
}

// scopes are the two watermark scopes of by_key a generation test runs
// in: each partition's windows following its own watermark, or all of
// them the merged one (the default), each partition with its own list of
// generations either way.
var scopes = []string{"partition", "global"}

// inScope is a generation test's config (scope partition) in scope.
func inScope(yaml, scope string) string {
	return strings.Replace(yaml, "scope: partition", "scope: "+scope, 1)
}

var genOld = genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]")

// genChanges are state setting changes to genOld, each at a higher
// state.config_version: a new generation.
var genChanges = map[string]string{
	"1s to 5s":            genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"),
	"an added max":        genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: m, fn: max, field: v}]"),
	"to sliding":          genConfig("2", "{type: sliding, size: 3s, slide: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"),
	"to sessions":         genConfig("2", "{type: session, gap: 700ms, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"),
	"2s, a sum only":      genConfig("2", "{type: tumbling, size: 2s, allowed_lateness: 1s}", "[{name: s, fn: sum, field: v}]"),
	"state.cutover":       genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]", ", cutover: 1970-01-01T00:00:30Z"),
	"cutover in the past": genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]", ", cutover: 1970-01-01T00:00:01Z"),
}

// sortResults orders results by partition, key, window, firing.
func sortResults(rs []windowing.Result) []windowing.Result {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b windowing.Result) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), strings.Compare(a.Key, b.Key), cmp.Compare(a.Window.Start, b.Window.Start),
			cmp.Compare(a.Window.End, b.Window.End), cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.Firing, b.Firing))
	})
	return rs
}

// replayOf is the results of yaml over every record of ins, flushed: the
// reference a generation's windows are judged by.
func replayOf(t *testing.T, yaml string, ins []crashInput, parts int32) []windowing.Result {
	t.Helper()
	p, out := newProcessor(t, yaml)
	for id := range parts {
		p.Assign(id, 0)
	}
	feed(p, ins, nil)
	p.Flush()
	return out.results
}

// cutOverRun runs old over ins[:at], commits, and restores a processor
// of config next from the changelog, which goes on from the restored
// positions to the end and flushes. It returns both runs' results, the
// second processor and the changelog.
func cutOverRun(t *testing.T, old, next string, ins []crashInput, at int, parts int32) ([]windowing.Result, core, changelog) {
	t.Helper()
	first, out1 := newProcessor(t, old)
	for id := range parts {
		first.Assign(id, 0)
	}
	feed(first, ins[:at], nil)
	log := changelog{}
	data, positions := first.Checkpoint()
	log.write(data)
	log.write(positions)
	second, out2 := newProcessor(t, next)
	from := map[int32]int64{}
	for id := range parts {
		second.Assign(id, 0)
	}
	for id := range parts {
		res, err := second.Restore(id, log.restorer(t, id), 0)
		if err != nil {
			t.Fatalf("Restore(%d) of a changelog of the old config: %v", id, err)
		}
		if res.HasPosition {
			from[id] = res.Position.Offset
		}
	}
	feed(second, ins, from)
	log.write(second.Checkpoint())
	second.Flush()
	return append(out1.results, out2.results...), second, log
}

// TestGenerationCutOver: a config with other state settings and a higher
// state.config_version, restored from a changelog of the old one, starts
// a new generation at the cut-over T of each partition: every window
// that starts before T is the old config's replay of the same input,
// every window from T on the new config's (docs/changing-config.md#generations-and-the-cut-over), whatever the
// window kind, with aggregates added or removed, with state.cutover in
// the future and in the past.
func TestGenerationCutOver(t *testing.T) {
	const parts = 2
	ins := crashStream(21, 400, parts, false)
	for _, scope := range scopes {
		for name, next := range genChanges {
			t.Run(scope+"/"+name, func(t *testing.T) { cutOverCase(t, inScope(genOld, scope), inScope(next, scope), name, ins, parts) })
		}
	}
}

// cutOverCase is TestGenerationCutOver from old to next.
func cutOverCase(t *testing.T, old, next, name string, ins []crashInput, parts int32) {
	want1, want2 := replayOf(t, old, ins, parts), replayOf(t, next, ins, parts)
	for _, at := range []int{40, 200, 399} {
		got, second, _ := cutOverRun(t, old, next, ins, at, parts)
		for id := range int32(parts) {
			rep := second.GenerationReport(id)
			if rep.Verdict != config.NewGeneration || rep.Stored != 1 || rep.Running != 2 || len(rep.Changes) == 0 {
				t.Fatalf("at %d: partition %d's report %+v, want a new generation 2 over 1 with its changes", at, id, rep)
			}
			T := rep.Cutover
			if name == "state.cutover" && ((at == 40) != (T == 30_000) || (T == 30_000) == rep.PastCutover) {
				t.Errorf("at %d: partition %d cut over at %d (past state.cutover: %v), want state.cutover 30000 before its state reaches it, its own T after", at, id, T, rep.PastCutover)
			}
			if name == "cutover in the past" && !rep.PastCutover {
				t.Errorf("at %d: partition %d: state.cutover is past what its state has seen, and the report does not say so", at, id)
			}
			before := func(r windowing.Result) bool { return r.Partition != id || r.Window.Start >= T }
			// A session of the new config's replay that starts before
			// T and reaches past it holds records before T, which the
			// new generation's sessions do not take: its key's
			// sessions up to its end are not compared.
			seam := map[string]int64{}
			for _, r := range want2 {
				if r.Partition == id && r.Window.Start < T && r.Window.End > T {
					seam[r.Key] = max(seam[r.Key], r.Window.End)
				}
			}
			after := func(r windowing.Result) bool {
				return r.Partition != id || r.Window.Start < T || r.Window.Start < seam[r.Key]
			}
			if g, w := sortResults(slices.DeleteFunc(slices.Clone(got), before)), sortResults(slices.DeleteFunc(slices.Clone(want1), before)); !reflect.DeepEqual(g, w) {
				t.Fatalf("at %d: partition %d's windows before T=%d differ from the old config's replay:\n%s", at, id, T, firstDiff(g, w))
			}
			if g, w := sortResults(slices.DeleteFunc(slices.Clone(got), after)), sortResults(slices.DeleteFunc(slices.Clone(want2), after)); !reflect.DeepEqual(g, w) {
				t.Fatalf("at %d: partition %d's windows from T=%d differ from the new config's replay:\n%s", at, id, T, firstDiff(g, w))
			}
			if !slices.ContainsFunc(got, func(r windowing.Result) bool { return r.Partition == id && r.Window.Start >= T }) && at < 300 {
				t.Fatalf("at %d: partition %d has no window of the new generation: the seam goes untested", at, id)
			}
		}
	}
}

// TestGenerationRetires: once the old generation's last window is
// dropped its record is tombstoned in the commit, and a restore finds the
// new generation only; before that a restore finds both, and goes on
// with both.
func TestGenerationRetires(t *testing.T) {
	const parts = 1
	ins := crashStream(4, 300, parts, false)
	next := genChanges["1s to 5s"]
	first, _ := newProcessor(t, genOld)
	first.Assign(0, 0)
	feed(first, ins[:100], nil)
	log := changelog{}
	log.write(first.Checkpoint())
	second, _ := newProcessor(t, next)
	second.Assign(0, 0)
	res, err := second.Restore(0, log.restorer(t, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.GenerationReport(0).Live; got != 2 {
		t.Fatalf("after the cut-over the partition has %d live generations, want 2", got)
	}
	log.write(second.Checkpoint()) // the new generation's record
	third, _ := newProcessor(t, next)
	third.Assign(0, 0)
	if _, err := third.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatalf("restore of a changelog of two generations: %v", err)
	}
	if rep := third.GenerationReport(0); rep.Live != 2 || rep.Verdict != config.Nothing {
		t.Fatalf("a restore right after the cut-over: %+v, want two live generations and nothing new", rep)
	}
	feed(second, ins, map[int32]int64{0: res.Position.Offset})
	data, positions := second.Checkpoint()
	log.write(data, positions)
	if got := second.Generations(); got != 1 {
		t.Fatalf("at the end of the input the partition has %d generations, want 1: the old one's windows are all dropped", got)
	}
	fourth, _ := newProcessor(t, next)
	fourth.Assign(0, 0)
	if _, err := fourth.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if rep := fourth.GenerationReport(0); rep.Live != 1 || rep.Running != 2 {
		t.Fatalf("a restore after the old generation retired: %+v, want generation 2 alone", rep)
	}
}

// TestGenerationRefusals: against a non-empty state, other state settings
// at the same state.config_version, or another source.key, refuse the
// config (a config error: exit 2) naming the setting, as plan does; the
// default watermark.scope, global, cuts over as partition does. Run
// settings restore; a lower version runs the stored generation.
func TestGenerationRefusals(t *testing.T) {
	ins := crashStream(8, 100, 1, false)
	tests := map[string]struct {
		config string
		want   string // in the refusal; "" restores
	}{
		"equal version, 5s": {genConfig("1", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"), "state.config_version"},
		"another key":       {strings.Replace(genChanges["1s to 5s"], "key: [k]", "key: [v]", 1), "source.key"},
		"scope global":      {inScope(genChanges["1s to 5s"], "global"), ""},
		"lateness only":     {genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 0s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"), ""},
		"lower version":     {genConfig("0", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			old := genOld
			if strings.Contains(tt.config, "scope: global") {
				old = inScope(genOld, "global")
			}
			first, _ := newProcessor(t, old)
			first.Assign(0, 0)
			feed(first, ins, nil)
			log := changelog{}
			log.write(first.Checkpoint())
			second, _ := newProcessor(t, tt.config)
			second.Assign(0, 0)
			_, err := second.Restore(0, log.restorer(t, 0), 0)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				return
			}
			var ke *config.KeyError
			if !errors.As(err, &ke) || ke.Key != tt.want || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Restore = %v, want a refusal naming %s", err, tt.want)
			}
		})
	}
}

// TestGenerationOlder: a lower state.config_version (a pod of the
// previous release during a rollout) runs the partition's newest stored
// generation, under its settings: its results are the stored config's.
func TestGenerationOlder(t *testing.T) {
	const parts = 1
	ins := crashStream(12, 300, parts, false)
	older := genConfig("0", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]")
	got, second, _ := cutOverRun(t, genOld, older, ins, 120, parts)
	if rep := second.GenerationReport(0); rep.Verdict != config.Older || rep.Running != 1 {
		t.Fatalf("report %+v, want older, running generation 1", rep)
	}
	if want := replayOf(t, genOld, ins, parts); !reflect.DeepEqual(sortResults(got), sortResults(want)) {
		t.Fatalf("an older config ran the stored generation other than its replay:\n%s", firstDiff(sortResults(got), sortResults(want)))
	}
	_ = math.MaxInt64
}

// cutOverConfigs are a scope-partition config of genOld's kind and the
// configs a cut-over goes to from it, at a higher state.config_version.
var cutOverConfigs = map[string]string{
	"to 5s":       genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]"),
	"to sessions": genConfig("2", "{type: session, gap: 700ms, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"),
	"to count":    genConfig("2", "{type: count, size: 4}", "[{name: s, fn: sum, field: v}]"),
}

// copyCluster is what a cluster holds, copied.
func copyCluster(c *cluster) *cluster {
	cp := &cluster{outputs: slices.Clone(c.outputs), log: changelog{}, offsets: maps.Clone(c.offsets)}
	for id, recs := range c.log {
		cp.log[id] = slices.Clone(recs)
	}
	return cp
}

// TestCommitCrashDuringCutOver: a process of the old config commits half
// the stream; a process of the new config restores from it and cuts over
// (the new generation's record in its first commit, with the old
// generation's count windows fired Final), and dies after each step of
// each of its commits in turn; a third process of the new config restores
// from what the cluster holds and finishes the stream. A reader sees what
// a run of the same two processes without a crash wrote, in both
// delivery modes, for every window kind the cut-over goes to.
func TestCommitCrashDuringCutOver(t *testing.T) {
	const parts = 2
	n := 150
	if testing.Short() || raceEnabled {
		n = 80
	}
	ins := crashStream(17, n, parts, false)
	for _, scope := range scopes {
		for name, next := range cutOverConfigs {
			for _, exactlyOnce := range []bool{true, false} {
				t.Run(scope+"/"+name+"/"+mode(exactlyOnce), func(t *testing.T) {
					crashDuringCutOver(t, inScope(genOld, scope), inScope(next, scope), config.NewGeneration, exactlyOnce, ins, parts)
				})
			}
		}
	}
}

// TestCommitCrashAfterLatenessRaise is TestCommitCrashDuringCutOver for a
// raised allowed_lateness (1s to 5s, a run setting): a crash at any step
// of any commit of the new config (the first writes the generation record
// with the new run settings and the dropped bound) changes nothing a
// reader sees. TestRaisedLatenessKeepsDropped's second restart is the
// case that needs the bound stored.
func TestCommitCrashAfterLatenessRaise(t *testing.T) {
	const parts = 2
	n := 150
	if testing.Short() || raceEnabled {
		n = 80
	}
	ins := crashStream(17, n, parts, false)
	next := genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 5s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]")
	for _, scope := range scopes {
		for _, exactlyOnce := range []bool{true, false} {
			t.Run(scope+"/"+mode(exactlyOnce), func(t *testing.T) {
				crashDuringCutOver(t, inScope(genOld, scope), inScope(next, scope), config.RunSettingsChange, exactlyOnce, ins, parts)
			})
		}
	}
}

// crashDuringCutOver is TestCommitCrashDuringCutOver from genOld to next,
// whose restore is verdict.
func crashDuringCutOver(t *testing.T, genOld, next string, verdict config.Verdict, exactlyOnce bool, ins []crashInput, parts int32) {
	n := len(ins)
	before := newCluster()
	if newShell(t, genOld, exactlyOnce, before, allParts(parts)...).run(ins[:n/2], -1, noCrash) {
		t.Fatal("the old config's run crashed")
	}
	ref := copyCluster(before)
	s := newShell(t, next, exactlyOnce, ref, allParts(parts)...)
	if rep := s.p.GenerationReport(0); rep.Verdict != verdict {
		t.Fatalf("the new config's restore: %+v, want verdict %v", rep, verdict)
	}
	if s.run(ins, -1, noCrash) {
		t.Fatal("the reference run crashed")
	}
	want, commits := readerView(t, ref.outputs, exactlyOnce), s.commits
	for crashAt := range commits {
		for _, st := range steps {
			c := copyCluster(before)
			if !newShell(t, next, exactlyOnce, c, allParts(parts)...).run(ins, crashAt, st) {
				t.Fatalf("commit %d, %v: no crash", crashAt, st)
			}
			newShell(t, next, exactlyOnce, c, allParts(parts)...).run(ins, -1, noCrash)
			if got := readerView(t, c.outputs, exactlyOnce); !slices.Equal(got, want) && !sameByPartition(next, got, want) {
				t.Fatalf("crash at commit %d, %v: outputs differ from a run without a crash:\n%s", crashAt, st, firstDiff(got, want))
			}
		}
	}
}

// sameByPartition reports whether outputs got and want hold each
// partition's outputs in the same order, for a config of
// watermark.scope global: there a partition that cut over has a list of
// operators of its own until its next restore (then it goes back to the
// operator its partitions of one generation share), which a crash brings
// sooner, so the order across partitions within one step of the
// watermark depends on where the crashes fell. Each partition's order
// does not.
func sameByPartition(yaml string, got, want []string) bool {
	return strings.Contains(yaml, "scope: global") && reflect.DeepEqual(perPartition(got), perPartition(want))
}

// sameResultsByPartition is sameByPartition of results.
func sameResultsByPartition(yaml string, got, want []windowing.Result) bool {
	if !strings.Contains(yaml, "scope: global") {
		return false
	}
	for id := range int32(8) {
		if !reflect.DeepEqual(resultsOfPartition(got, id), resultsOfPartition(want, id)) {
			return false
		}
	}
	return len(got) == len(want)
}

// copyCluster2 is what a two-stage cluster holds, copied.
func copyCluster2(c *cluster2) *cluster2 {
	cp := &cluster2{input: c.input, outputs: slices.Clone(c.outputs), log: changelog{}, off1: maps.Clone(c.off1), off2: maps.Clone(c.off2)}
	for _, r := range c.repart {
		cp.repart = append(cp.repart, slices.Clone(r))
	}
	for id, recs := range c.log {
		cp.log[id] = slices.Clone(recs)
	}
	return cp
}

// TestTwoStageCrashDuringCutOver is TestCommitCrashDuringCutOver with
// source.partitioning repartition: stage 2's partitions cut over (from
// 2-second tumbling windows to 5-second ones with another aggregate), and
// the process dies after each step of each commit of the new config.
func TestTwoStageCrashDuringCutOver(t *testing.T) {
	next := strings.Replace(strings.Replace(twoStageYaml, "size: 2s", "size: 5s", 1), "fn: sum, field: v}]", "fn: sum, field: v}, {name: m, fn: max, field: v}]", 1) +
		"state: {config_version: 1}\n"
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(mode(exactlyOnce), func(t *testing.T) {
			const seed = 5
			before := newCluster2(seed)
			if !newTwoStageOf(t, twoStageYaml, exactlyOnce, before).run(6, afterOffsets) {
				t.Fatal("the old config's run did not stop")
			}
			ref := copyCluster2(before)
			s := newTwoStageOf(t, next, exactlyOnce, ref)
			for r := range int32(repartParts) {
				rep := s.core.GenerationReport(r)
				t.Logf("partition %d: %+v", r, rep)
				if rep.Verdict != config.NewGeneration {
					t.Fatalf("repartition partition %d's restore: %+v, want a new generation", r, rep)
				}
			}
			if s.run(-1, noCrash) {
				t.Fatal("the reference run crashed")
			}
			want, commits := twoStageView(ref.outputs, exactlyOnce), s.commits
			size := func(o string) int64 { // a result's window size
				var p, start, end int64
				var key string
				if n, _ := fmt.Sscanf(o, "result p%d %s [%d,%d)", &p, &key, &start, &end); n != 4 {
					return 0
				}
				return end - start
			}
			if !slices.ContainsFunc(ref.outputs, func(o string) bool { return size(o) == 5000 }) ||
				!slices.ContainsFunc(ref.outputs[len(before.outputs):], func(o string) bool { return size(o) == 2000 }) {
				t.Fatalf("the run has no window of one generation or the other: the cut-over goes untested\n%q", ref.outputs)
			}
			crashSteps := []step{afterOutputs, afterChangelog, afterPositions, afterOffsets}
			for _, st := range crashSteps {
				for crashAt := range commits {
					c := copyCluster2(before)
					if !newTwoStageOf(t, next, exactlyOnce, c).run(crashAt, st) {
						t.Fatalf("%v of commit %d: did not crash", st, crashAt)
					}
					newTwoStageOf(t, next, exactlyOnce, c).run(-1, noCrash)
					if got := twoStageView(c.outputs, exactlyOnce); !slices.Equal(got, want) {
						t.Fatalf("crash %v of commit %d: a reader sees\n%q\nwant\n%q", st, crashAt, got, want)
					}
				}
			}
		})
	}
}

// TestGenerationDeadLetters: a record is a dead letter when every live
// generation's decoding fails on it, or the one whose span holds its
// time fails and no other takes it; one that a generation aggregates and
// another cannot decode (a text where its sum needs a number) is
// aggregated, and counted (aggregator_generation_skipped_records_total).
func TestGenerationDeadLetters(t *testing.T) {
	old := genConfig("1", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]")
	next := genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: s, fn: sum, field: v}]")
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	for i, ts := range []int{10_000, 10_200, 10_500} {
		first.Process(&ready.Input{Offset: int64(i), Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, ts))}, math.MaxInt64)
	}
	log := changelog{}
	log.write(first.Checkpoint())
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if T := second.GenerationReport(0).Cutover; T != 11_000 {
		t.Fatalf("cut-over at %d, want 11000: the old generation's window [10000, 15000) spans it", T)
	}
	steps := []struct {
		value string
		want  pipeline.Outcome
		skips int64
	}{
		{`{"k":"a","t":11200,"v":"x"}`, pipeline.Aggregated, 1}, // the old generation counts it; the new one's sum cannot read it
		{`{"k":"a","t":11300,"v":2}`, pipeline.Aggregated, 0},   // both
		{`{"k":"a","t":"soon"}`, pipeline.DeadLetter, 0},        // neither
		{`{"k":"a","t":15200,"v":"x"}`, pipeline.DeadLetter, 0}, // the old generation reads it but its windows end at 15000: the new one's, which cannot
		{`{"k":"a","t":15300,"v":3}`, pipeline.Aggregated, 0},   // the new one's
	}
	for i, s := range steps {
		if got := second.Process(&ready.Input{Offset: int64(10 + i), Value: []byte(s.value)}, math.MaxInt64); got != s.want {
			t.Errorf("%s: %v, want %v", s.value, got, s.want)
		}
		if got := second.TakeGenerationSkips(); got != s.skips {
			t.Errorf("%s: %d records skipped by a generation, want %d", s.value, got, s.skips)
		}
	}
	if len(out.dead) != 2 || len(out.late) != 0 {
		t.Errorf("dead letters %v, late %v; want two dead letters (the record neither generation decodes, the one the generation of its time cannot), no late event", out.dead, out.late)
	}
}

// TestGenerationPunctuatedMarker: a punctuated watermark's marker in a
// partition of two generations moves the partition's watermark once and
// fires both generations' windows it makes due, the old generation's
// first.
func TestGenerationPunctuatedMarker(t *testing.T) {
	conf := func(version, window, aggregates string) string {
		return strings.Replace(genConfig(version, window, aggregates), "watermark: {max_out_of_orderness: 1s, scope: partition}",
			"watermark: {strategy: punctuated, marker_field: wm, scope: partition}", 1)
	}
	old := conf("1", "{type: tumbling, size: 5s}", "[{name: n, fn: count}]")
	next := conf("2", "{type: tumbling, size: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]")
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	first.Process(&ready.Input{Value: []byte(`{"k":"a","t":1000,"v":1}`)}, 0)
	first.Process(&ready.Input{Offset: 1, Value: []byte(`{"wm":1500}`)}, 0)
	log := changelog{}
	data, positions := first.Checkpoint()
	log.write(data)
	log.write(positions)
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if rep := second.GenerationReport(0); rep.Live != 2 || rep.Cutover != 2000 {
		t.Fatalf("after the cut-over: %+v, want two generations, T 2000", rep)
	}
	if got := second.Process(&ready.Input{Offset: 2, Value: []byte(`{"k":"a","t":2500,"v":2}`)}, 0); got != pipeline.Aggregated {
		t.Fatalf("a record in both generations: %v", got)
	}
	if got := second.Process(&ready.Input{Offset: 3, Value: []byte(`{"wm":9000}`)}, 0); got != pipeline.Marker {
		t.Fatalf("Process(marker) = %v, want marker", got)
	}
	var fired []string
	for _, r := range out.results {
		fired = append(fired, fmt.Sprintf("gen %d [%d,%d) n %s", r.Generation, r.Window.Start, r.Window.End, r.Aggregates[0].Raw))
	}
	if want := []string{"gen 1 [0,5000) n 2", "gen 2 [2000,3000) n 1"}; !slices.Equal(fired, want) {
		t.Errorf("the marker fired %q, want %q", fired, want)
	}
}

// TestGenerationRestoreAtEveryOffset: after a cut-over, the process of the
// new config commits every few records and at the crash, which comes
// after each record in turn; a third process restores the changelog of
// two generations (at every offset: before the old one retires, and
// after) and finishes the stream. What the second process emitted up to
// its last commit and the third after it is what the second emits in a
// run without a crash, exactly.
func TestGenerationRestoreAtEveryOffset(t *testing.T) {
	const parts = 2
	n := 240
	if raceEnabled {
		n = 120
	}
	ins := crashStream(31, n, parts, false)
	at := n / 3
	for _, scope := range scopes {
		for name, next := range cutOverConfigs {
			t.Run(scope+"/"+name, func(t *testing.T) {
				restoreAtEveryOffset(t, inScope(genOld, scope), inScope(next, scope), ins, at, parts)
			})
		}
	}
}

// restoreAtEveryOffset is TestGenerationRestoreAtEveryOffset from old to
// next, cut over after at records.
func restoreAtEveryOffset(t *testing.T, old, next string, ins []crashInput, at int, parts int32) {
	first, _ := newProcessor(t, old)
	for id := range int32(parts) {
		first.Assign(id, 0)
	}
	feed(first, ins[:at], nil)
	base := changelog{}
	data, positions := first.Checkpoint()
	base.write(data)
	base.write(positions)
	restore := func(log changelog) (core, *tape, map[int32]int64) {
		p, out := newProcessor(t, next)
		from := map[int32]int64{}
		for id := range int32(parts) {
			p.Assign(id, 0)
		}
		for id := range int32(parts) {
			res, err := p.Restore(id, log.restorer(t, id), 0)
			if err != nil {
				t.Fatalf("Restore(%d): %v", id, err)
			}
			if res.HasPosition {
				from[id] = res.Position.Offset
			}
		}
		return p, out, from
	}
	want, wantOut, from := restore(base)
	feed(want, ins, from)
	want.Flush()
	retired := false
	for crash := at; crash <= len(ins); crash++ {
		log := changelog{}
		for id, recs := range base {
			log[id] = slices.Clone(recs)
		}
		second, out2, from := restore(log)
		for i := at; i < crash; i++ {
			feed(second, ins[i:i+1], from)
			if i%7 == 3 {
				log.write(second.Checkpoint())
			}
		}
		data, positions := second.Checkpoint()
		log.write(data)
		log.write(positions)
		third, out3, from3 := restore(log)
		retired = retired || third.Generations() == int(parts)
		feed(third, ins, from3)
		third.Flush()
		if got := append(out2.results, out3.results...); !reflect.DeepEqual(got, wantOut.results) && !sameResultsByPartition(next, got, wantOut.results) {
			t.Fatalf("crash after record %d: results differ from a run without a crash:\n%s", crash, firstDiff(got, wantOut.results))
		}
		if l := append(out2.late, out3.late...); !reflect.DeepEqual(l, wantOut.late) {
			t.Fatalf("crash after record %d: late events %v, want %v", crash, l, wantOut.late)
		}
	}
	if !retired {
		t.Errorf("no restore found the old generation retired: the restores of one generation after a cut-over go untested")
	}
}

// TestGenerationsThree: three generations live in one partition at once
// (an hour's windows, then 5-second ones, then 1-second ones with another
// aggregate, each restored from the last's changelog): each generation's
// windows, those that start from its cut-over to the next one's, are its
// config's replay of the whole stream.
func TestGenerationsThree(t *testing.T) {
	for _, scope := range scopes {
		t.Run(scope, func(t *testing.T) { threeGenerations(t, scope) })
	}
}

// threeGenerations is TestGenerationsThree in scope.
func threeGenerations(t *testing.T, scope string) {
	const parts = 2
	ins := crashStream(41, 300, parts, false)
	configs := []string{
		inScope(genConfig("1", "{type: tumbling, size: 1h, allowed_lateness: 1s}", "[{name: n, fn: count}]"), scope),
		inScope(genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"), scope),
		inScope(genConfig("3", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: m, fn: max, field: v}]"), scope),
	}
	stops := []int{100, 200, len(ins)}
	log := changelog{}
	var tapes []*tape
	cut := map[int32][]int64{} // by partition: each generation's cut-over
	from := map[int32]int64{}
	var last core
	for g, yaml := range configs {
		p, out := newProcessor(t, yaml)
		for id := range int32(parts) {
			p.Assign(id, 0)
		}
		for id := range int32(parts) {
			res, err := p.Restore(id, log.restorer(t, id), 0)
			if err != nil {
				t.Fatalf("generation %d: Restore(%d): %v", g+1, id, err)
			}
			if res.HasPosition {
				from[id] = res.Position.Offset
			}
			rep := p.GenerationReport(id)
			if g > 0 && (rep.Verdict != config.NewGeneration || rep.Live != g+1) {
				t.Fatalf("generation %d: partition %d's restore %+v, want a new generation and %d live", g+1, id, rep, g+1)
			}
			cut[id] = append(cut[id], rep.Cutover)
		}
		lo := 0
		if g > 0 {
			lo = stops[g-1]
		}
		feed(p, ins[lo:stops[g]], from)
		data, positions := p.Checkpoint()
		log.write(data)
		log.write(positions)
		tapes, last = append(tapes, out), p
	}
	last.Flush()
	var got []windowing.Result
	for _, tp := range tapes {
		got = append(got, tp.results...)
	}
	for g, yaml := range configs {
		replay := replayOf(t, yaml, ins, parts)
		for id := range int32(parts) {
			lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
			if g > 0 {
				lo = cut[id][g]
			}
			if g+1 < len(configs) {
				hi = cut[id][g+1]
			}
			span := func(r windowing.Result) bool { return r.Partition == id && r.Window.Start >= lo && r.Window.Start < hi }
			var want, have []windowing.Result
			for _, r := range replay {
				if span(r) {
					want = append(want, r)
				}
			}
			for _, r := range got {
				if span(r) && r.Generation == int64(g+1) {
					have = append(have, r)
				}
			}
			if len(want) == 0 {
				t.Fatalf("generation %d, partition %d: no window in [%d, %d): the case tests nothing", g+1, id, lo, hi)
			}
			if w, h := sortResults(want), sortResults(have); !reflect.DeepEqual(h, w) {
				t.Errorf("generation %d, partition %d: its windows in [%d, %d) differ from its replay:\n%s", g+1, id, lo, hi, firstDiff(h, w))
			}
		}
	}
	for _, r := range got {
		g := r.Generation - 1
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if g > 0 {
			lo = cut[r.Partition][g]
		}
		if g+1 < int64(len(configs)) {
			hi = cut[r.Partition][g+1]
		}
		if r.Window.Start < lo || r.Window.Start >= hi {
			t.Errorf("generation %d fired %v, outside its span [%d, %d)", r.Generation, r.Window, lo, hi)
		}
	}
}

// TestGenerationSeam: a record at T - 1 ms is the old generation's (its
// window starts before T), one at T the new one's, and neither is the
// other's: 1-second windows cut over to 5-second ones at T = 15000.
func TestGenerationSeam(t *testing.T) {
	old := genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]")
	next := genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 1s}", "[{name: n, fn: count}]")
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	first.Process(&ready.Input{Value: []byte(`{"k":"a","t":10500,"v":1}`)}, math.MaxInt64)
	log := changelog{}
	data, positions := first.Checkpoint()
	log.write(data)
	log.write(positions)
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if T := second.GenerationReport(0).Cutover; T != 15_000 {
		t.Fatalf("cut-over at %d, want 15000: the first 5-second window start after 10500", T)
	}
	for i, ts := range []int{14_999, 15_000} {
		if got := second.Process(&ready.Input{Offset: int64(1 + i), Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, ts))}, math.MaxInt64); got != pipeline.Aggregated {
			t.Fatalf("the record at %d: %v, want aggregated", ts, got)
		}
	}
	second.Flush()
	var fired []string
	for _, r := range out.results {
		fired = append(fired, fmt.Sprintf("gen %d [%d,%d) n %s", r.Generation, r.Window.Start, r.Window.End, r.Aggregates[0].Raw))
	}
	if want := []string{"gen 1 [10000,11000) n 1", "gen 1 [14000,15000) n 1", "gen 2 [15000,20000) n 1"}; !slices.Equal(fired, want) {
		t.Errorf("fired %q, want %q", fired, want)
	}
}

// TestGenerationFromCount: count and global windows have no time span: at
// the cut-over the old generation's partial window fires once, Final, with
// what it holds, and is dropped, so the old generation retires in the
// commit that records the new one, and a restore of it finds the new one
// alone.
func TestGenerationFromCount(t *testing.T) {
	for _, scope := range scopes {
		for name, window := range map[string]string{"count": "{type: count, size: 3}", "global": "{type: global, early_firings: {every: 700ms, time: event}}"} {
			t.Run(scope+"/"+name, func(t *testing.T) { fromCountOrGlobal(t, window, scope) })
		}
	}
}

// fromCountOrGlobal is TestGenerationFromCount from window: its partial
// window is one record.
func fromCountOrGlobal(t *testing.T, window, scope string) {
	old := inScope(genConfig("1", window, "[{name: n, fn: count}]"), scope)
	if strings.Contains(window, "count") {
		old = strings.Replace(old, "max_out_of_orderness: 1s, ", "", 1)
	}
	next := inScope(genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), scope)
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	n := 4 // count: a full window, and one record of the next
	if strings.Contains(window, "global") {
		n = 1
	}
	for i := range n {
		first.Process(&ready.Input{Offset: int64(i), Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, 1000+i))}, math.MaxInt64)
	}
	log := changelog{}
	data, positions := first.Checkpoint()
	log.write(data)
	log.write(positions)
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if len(out.results) != 1 || out.results[0].Firing != windowing.Final || out.results[0].Count != 1 || out.results[0].Generation != 1 {
		t.Fatalf("the cut-over fired %+v, want the old generation's partial window, Final, with its one record", out.results)
	}
	log.write(second.Checkpoint())
	if got := second.Generations(); got != 1 {
		t.Errorf("after the cut-over's commit: %d generations, want 1 (the count windows are gone)", got)
	}
	third, out3 := newProcessor(t, next)
	third.Assign(0, 0)
	if _, err := third.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	rep := third.GenerationReport(0)
	if rep.Live != 1 || rep.Running != 2 || len(out3.results) != 0 {
		t.Errorf("a restore after the cut-over's commit: %+v, results %v; want generation 2 alone, nothing fired again", rep, out3.results)
	}
	// A record before T read after that restore: late, the old
	// generation's windows gone (docs/changing-config.md); the new
	// generation makes no window before T in either scope. With scope
	// global the restore gave the partition the operator its one
	// generation shares with the others, which has no T: it made one.
	in := &ready.Input{Offset: int64(n), Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, rep.Cutover-1))}
	if got := third.Process(in, math.MaxInt64); got != pipeline.LateEvent {
		t.Errorf("a record before T = %d after the restore: %v, want late", rep.Cutover, got)
	}
}

// TestGenerationFilterChange: a new generation of another source.filter
// (by_key). A record goes to the generation whose span holds it only if
// that generation's filter accepts it: before T one only the new filter
// accepts is filtered (not late), at or after T one only the old filter
// accepts is filtered; each window holds what its generation's filter
// accepts.
func TestGenerationFilterChange(t *testing.T) {
	withFilter := func(yaml, field string) string {
		return strings.Replace(yaml, "partitioning: by_key}", "partitioning: by_key, filter: [{field: "+field+", equals: 1}]}", 1)
	}
	old := withFilter(genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), "a")
	next := withFilter(genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), "b")
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	for i, ts := range []int{10_000, 10_200, 10_500} {
		first.Process(&ready.Input{Offset: int64(i), Value: []byte(fmt.Sprintf(`{"k":"x","t":%d,"a":1,"b":0}`, ts))}, math.MaxInt64)
	}
	log := changelog{}
	log.write(first.Checkpoint())
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if rep := second.GenerationReport(0); rep.Verdict != config.NewGeneration || rep.Cutover != 11_000 {
		t.Fatalf("report %+v, want a new generation cut over at 11000", rep)
	}
	steps := []struct {
		value string
		want  pipeline.Outcome
	}{
		{`{"k":"x","t":10600,"a":1,"b":0}`, pipeline.Aggregated}, // before T, the old filter's: the old generation
		{`{"k":"x","t":10700,"a":0,"b":1}`, pipeline.Filtered},   // before T, the new filter's only
		{`{"k":"x","t":11100,"a":0,"b":1}`, pipeline.Aggregated}, // from T, the new filter's: the new generation
		{`{"k":"x","t":11200,"a":1,"b":0}`, pipeline.Filtered},   // from T, the old filter's only
		{`{"k":"x","t":11300,"a":0,"b":0}`, pipeline.Filtered},   // neither
		{`{"k":"x","t":11400,"a":1,"b":1}`, pipeline.Aggregated}, // both: the new generation's span
	}
	for i, s := range steps {
		if got := second.Process(&ready.Input{Offset: int64(10 + i), Value: []byte(s.value)}, math.MaxInt64); got != s.want {
			t.Errorf("%s: %v, want %v", s.value, got, s.want)
		}
	}
	second.Flush()
	counts := map[string]int64{}
	for _, r := range out.results {
		counts[fmt.Sprintf("gen %d [%d,%d)", r.Generation, r.Window.Start, r.Window.End)] = r.Count
	}
	if want := map[string]int64{"gen 1 [10000,11000)": 4, "gen 2 [11000,12000)": 2}; !maps.Equal(counts, want) {
		t.Errorf("windows %v, want %v", counts, want)
	}
	if len(out.late) != 0 || len(out.dead) != 0 {
		t.Errorf("late %v, dead letters %v; want none", out.late, out.dead)
	}
}

// TestFilterChangeRefusal: with source.partitioning repartition a new
// generation of another filter is refused unless every stage 1 that may
// feed the partition forwards what its filter rejects: format 3 in the
// config and in the stored generation's run settings.
func TestFilterChangeRefusal(t *testing.T) {
	filter := []config.Change{{Key: "source.filter", Old: `[a="1"]`, New: `[b="1"]`}}
	window := []config.Change{{Key: "window.size", Old: "1s", New: "2s"}}
	formatRun := []config.Change{{Key: "state.repartition_format", Old: "2", New: "3"}}
	tests := map[string]struct {
		partitioning string
		format       int32
		plan         config.Plan
		refused      bool
	}{
		"format 3":                         {"repartition", 3, config.Plan{Verdict: config.NewGeneration, Changes: filter}, false},
		"format 2":                         {"repartition", 2, config.Plan{Verdict: config.NewGeneration, Changes: filter}, true},
		"format 1":                         {"repartition", 1, config.Plan{Verdict: config.NewGeneration, Changes: filter}, true},
		"format 3, the stored one's not":   {"repartition", 3, config.Plan{Verdict: config.NewGeneration, Changes: filter, Run: formatRun}, true},
		"format 2, the window only":        {"repartition", 2, config.Plan{Verdict: config.NewGeneration, Changes: window}, false},
		"by_key":                           {"by_key", 0, config.Plan{Verdict: config.NewGeneration, Changes: filter}, false},
		"format 2, an older config's plan": {"repartition", 2, config.Plan{Verdict: config.Older, Changes: filter}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var cfg config.Config
			cfg.Source.Key, cfg.Source.Partitioning, cfg.State.RepartitionFormat = []string{"k"}, tt.partitioning, tt.format
			cfg.Watermark.Scope = "partition" // by_key: one window state per partition
			err := pipeline.Refusal(cfg, tt.plan, 1)
			var ke *config.KeyError
			if tt.refused != (err != nil) || err != nil && (!errors.As(err, &ke) || ke.Key != "source.filter") {
				t.Errorf("Refusal = %v, want refused %v (naming source.filter)", err, tt.refused)
			}
		})
	}
}

// TestTwoStageFilterChange: a new generation of another source.filter
// with source.partitioning repartition (format 3). Stage 1 runs the new
// config and forwards what its filter rejects; stage 2 gives each
// record to the generation whose span holds it only if that generation's
// filter accepts it, and counts every record once: a record only the
// old filter accepts before T is in the old generation's window, one
// only the new filter accepts from T in the new one's, the others
// filtered.
func TestTwoStageFilterChange(t *testing.T) {
	conf := func(field, version string) string {
		return strings.Replace(twoStageYaml, "partitioning: repartition}", "partitioning: repartition, filter: [{field: "+field+", equals: 1}]}", 1) +
			"state: {config_version: " + version + "}\n"
	}
	c := &cluster2{input: make([][]string, sourceParts), repart: make([][]repRecord, repartParts), log: changelog{},
		off1: map[int32]int64{}, off2: map[int32]int64{}}
	add := func(p int, k string, ts, a, b int) {
		c.input[p] = append(c.input[p], fmt.Sprintf(`{"k":"%s","t":%d,"v":1,"a":%d,"b":%d}`, k, ts, a, b))
	}
	for _, ts := range []int{1000, 1500, 2500, 3500} {
		add(0, "x", ts, 1, 0)
		add(1, "z", ts, 1, 1)
		add(2, "z", ts, 1, 1)
	}
	if newTwoStageOf(t, conf("a", "0"), true, c).run(-1, noCrash) {
		t.Fatal("the old config's run crashed")
	}
	before := len(c.outputs)
	steps := []struct {
		ts, a, b int
		want     pipeline.Outcome
	}{
		{3600, 1, 0, pipeline.Aggregated}, // before T = 4000, the old filter's
		{3700, 0, 1, pipeline.Filtered},   // before T, the new filter's only
		{4100, 0, 1, pipeline.Aggregated}, // from T, the new filter's
		{4200, 1, 0, pipeline.Filtered},   // from T, the old filter's only
		{4300, 0, 0, pipeline.Filtered},   // neither: forwarded by stage 1, filtered by stage 2
		{4400, 1, 1, pipeline.Aggregated}, // both: the new generation's span
		{9000, 1, 1, pipeline.Aggregated}, // moves the watermark past both windows
	}
	var want pipeline.Counts
	for _, st := range steps {
		add(0, "x", st.ts, st.a, st.b)
		want[st.want]++
	}
	add(1, "z", 9000, 1, 1)
	add(2, "z", 9000, 1, 1)
	want[pipeline.Aggregated] += 2
	s := newTwoStageOf(t, conf("b", "1"), true, c)
	xPart := partitionOf(`{"k":"x"}`)
	if rep := s.core.GenerationReport(xPart); rep.Verdict != config.NewGeneration || rep.Cutover != 4000 {
		t.Fatalf("x's partition: %+v, want a new generation cut over at 4000", rep)
	}
	if s.run(-1, noCrash) {
		t.Fatal("the new config's run crashed")
	}
	if s.counts != want {
		t.Errorf("outcomes %v, want %v: each record counted once", s.counts, want)
	}
	var got []string
	for _, o := range c.outputs[before:] {
		if strings.Contains(o, `{"k":"x"}`) {
			got = append(got, o[:strings.Index(o, " [{")])
		}
	}
	if want := []string{ // the window of 9000 stays open
		`result p` + fmt.Sprint(xPart) + ` {"k":"x"} [2000,4000)#0 on_time rev 0 count 3`, // 2500, 3500, 3600
		`result p` + fmt.Sprint(xPart) + ` {"k":"x"} [4000,6000)#0 on_time rev 0 count 2`, // 4100, 4400
	}; !slices.Equal(got, want) {
		t.Errorf("x's results after the change:\n%s", strings.Join(c.outputs[before:], "\n"))
	}
}

// TestTwoStageFilterChangeAfterFiltered: a record the old generation's
// filter rejected leaves no window in state, but its time is one the
// state has seen: stage 2's position keeps it, and the cut-over T of a
// new generation with another filter comes after it (else the new
// generation's windows from T would miss it: it was read before the
// change). Read under the old config's form, and, stage 1 running the
// new config (a rollout), from the value under the old config's.
func TestTwoStageFilterChangeAfterFiltered(t *testing.T) {
	conf := func(field, version string) string {
		y := strings.Replace(twoStageYaml, "partitioning: repartition}", "partitioning: repartition, filter: [{field: "+field+", equals: 1}]}", 1)
		y = strings.Replace(y, "max_out_of_orderness: 1s}", "max_out_of_orderness: 1s, max_future_skew: 5s}", 1) // the wall clock is 0
		return y + "state: {config_version: " + version + "}\n"
	}
	for _, stage1 := range []string{"old", "new"} {
		t.Run("stage 1 of the "+stage1+" config", func(t *testing.T) {
			c := &cluster2{input: make([][]string, sourceParts), repart: make([][]repRecord, repartParts), log: changelog{},
				off1: map[int32]int64{}, off2: map[int32]int64{}}
			for p := range sourceParts {
				for _, ts := range []int{1000, 1500, 2500, 3500} {
					c.input[p] = append(c.input[p], fmt.Sprintf(`{"k":"x","t":%d,"v":1,"a":1,"b":0}`, ts))
				}
			}
			c.input[0] = append(c.input[0], `{"k":"x","t":4100,"v":1,"a":0,"b":1}`, // after the latest window, [2000,4000)
				`{"k":"x","t":60000,"v":1,"a":0,"b":1}`) // past the future guard: its time does not count
			s := newTwoStageOf(t, conf("a", "0"), true, c)
			if stage1 == "new" {
				// The old config's stage 2 reads what the new config's stage 1
				// wrote: a form of another spec, which it decodes again.
				s1 := newTwoStageOf(t, conf("b", "1"), true, &cluster2{input: c.input, repart: make([][]repRecord, repartParts), log: changelog{},
					off1: map[int32]int64{}, off2: map[int32]int64{}})
				if s1.run(-1, noCrash) {
					t.Fatal("crashed")
				}
				c.repart = s1.c.repart
				for p := range int32(sourceParts) {
					c.off1[p] = int64(len(c.input[p]))
				}
				s = newTwoStageOf(t, conf("a", "0"), true, c)
			}
			if s.run(-1, noCrash) {
				t.Fatal("the old config's run crashed")
			}
			next := newTwoStageOf(t, conf("b", "1"), true, c)
			if rep := next.core.GenerationReport(partitionOf(`{"k":"x"}`)); rep.Verdict != config.NewGeneration || rep.Cutover != 6000 {
				t.Fatalf("x's partition: %+v, want a new generation cut over at 6000, after the filtered record's 4100", rep)
			}
		})
	}
}

// TestTwoStageDeadLettersPerGeneration: with source.partitioning
// repartition (format 3) a value the aggregates of the config's stage 1
// cannot read is a dead letter per generation, decided in stage 2: a
// record before T that the old generation's aggregates read is in its
// window (and counted as skipped by the new one), one from T, which the
// new generation's sum cannot read, is one dead letter, written by stage
// 2 under its source's partition and offset.
func TestTwoStageDeadLettersPerGeneration(t *testing.T) {
	conf := func(agg, version string) string {
		return strings.Replace(twoStageYaml, "{name: s, fn: sum, field: v}", "{name: s, fn: "+agg+", field: v}", 1) +
			"state: {config_version: " + version + "}\n"
	}
	c := &cluster2{input: make([][]string, sourceParts), repart: make([][]repRecord, repartParts), log: changelog{},
		off1: map[int32]int64{}, off2: map[int32]int64{}}
	add := func(p int, k string, ts int, v string) {
		c.input[p] = append(c.input[p], fmt.Sprintf(`{"k":"%s","t":%d,"v":%s}`, k, ts, v))
	}
	for _, ts := range []int{1000, 1500, 2500, 3500} {
		add(0, "x", ts, `"a"`)
		add(1, "z", ts, "1")
		add(2, "z", ts, "1")
	}
	if newTwoStageOf(t, conf("last", "0"), true, c).run(-1, noCrash) {
		t.Fatal("the old config's run crashed")
	}
	before := len(c.outputs)
	steps := []struct {
		ts   int
		v    string
		want pipeline.Outcome
	}{
		{3600, `"b"`, pipeline.Aggregated}, // before T = 4000: the old generation's last reads it, the new one's sum does not
		{4100, `"c"`, pipeline.DeadLetter}, // from T: the new generation's, which cannot read it
		{4200, "2", pipeline.Aggregated},   // the new generation's
		{9000, "1", pipeline.Aggregated},   // moves the watermark past both windows
	}
	var want pipeline.Counts
	for _, st := range steps {
		add(0, "x", st.ts, st.v)
		want[st.want]++
	}
	add(1, "z", 9000, "1")
	add(2, "z", 9000, "1")
	want[pipeline.Aggregated] += 2
	s := newTwoStageOf(t, conf("sum", "1"), true, c)
	xPart := partitionOf(`{"k":"x"}`)
	if rep := s.core.GenerationReport(xPart); rep.Verdict != config.NewGeneration || rep.Cutover != 4000 {
		t.Fatalf("x's partition: %+v, want a new generation cut over at 4000", rep)
	}
	if s.run(-1, noCrash) {
		t.Fatal("the new config's run crashed")
	}
	if s.counts != want {
		t.Errorf("outcomes %v, want %v: each record counted once", s.counts, want)
	}
	var got []string
	for _, o := range c.outputs[before:] {
		switch {
		case strings.HasPrefix(o, "dead"):
			got = append(got, o)
		case strings.Contains(o, `{"k":"x"}`):
			got = append(got, o[:strings.Index(o, " [{")])
		}
	}
	slices.Sort(got)
	if want := []string{ // the window of 9000 stays open
		`dead src0@5 non_numeric: field "v": "c" is not a number`,
		`result p` + fmt.Sprint(xPart) + ` {"k":"x"} [2000,4000)#0 on_time rev 0 count 3`, // 2500, 3500, 3600
		`result p` + fmt.Sprint(xPart) + ` {"k":"x"} [4000,6000)#0 on_time rev 0 count 1`, // 4200
	}; !slices.Equal(got, want) {
		t.Errorf("x's results and the dead letters after the change:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGenerationFilterChangeAfterFilteredByKey: with by_key a record the
// old filter rejected leaves no window and does not move the generator,
// but its time is one the partition has seen: the position keeps it (its
// FilteredLead), across a restart of the old config too, and the
// cut-over T of a new generation with another filter comes after it
// (else the new generation's windows from T would miss it: it was read
// before the change). A rejected record the future guard refuses does
// not count.
func TestGenerationFilterChangeAfterFilteredByKey(t *testing.T) {
	withFilter := func(yaml, field string) string {
		yaml = strings.Replace(yaml, "partitioning: by_key}", "partitioning: by_key, filter: [{field: "+field+", equals: 1}]}", 1)
		return strings.Replace(yaml, "max_out_of_orderness: 1s,", "max_out_of_orderness: 1s, max_future_skew: 5s,", 1)
	}
	old := withFilter(genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), "a")
	next := withFilter(genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: n, fn: count}]"), "b")
	const now = 20_000 // the wall clock: the guard refuses times past 25000
	for _, restarts := range []int{0, 1} {
		t.Run(fmt.Sprintf("%d restarts of the old config", restarts), func(t *testing.T) {
			first, _ := newProcessor(t, old)
			first.Assign(0, 0)
			values := []string{
				`{"k":"x","t":10000,"a":1,"b":0}`,
				`{"k":"x","t":10500,"a":1,"b":0}`,
				`{"k":"x","t":11500,"a":0,"b":1}`, // past the latest accepted time: filtered
				`{"k":"x","t":90000,"a":0,"b":1}`, // filtered, and past the future guard
			}
			for i, v := range values {
				first.Process(&ready.Input{Offset: int64(i), Value: []byte(v)}, now)
			}
			log := changelog{}
			log.write(first.Checkpoint())
			for i := range restarts {
				again, _ := newProcessor(t, old)
				again.Assign(0, 0)
				if _, err := again.Restore(0, log.restorer(t, 0), now); err != nil {
					t.Fatal(err)
				}
				again.Process(&ready.Input{Offset: int64(len(values) + i), Value: []byte(`{"k":"x","t":10600,"a":1,"b":0}`)}, now)
				log.write(again.Checkpoint())
			}
			second, out := newProcessor(t, next)
			second.Assign(0, 0)
			if _, err := second.Restore(0, log.restorer(t, 0), now); err != nil {
				t.Fatal(err)
			}
			if rep := second.GenerationReport(0); rep.Verdict != config.NewGeneration || rep.Cutover != 12_000 {
				t.Fatalf("%v cut over at %d, want a new generation cut over at 12000, after the filtered record's 11500", rep.Verdict, rep.Cutover)
			}
			for i, v := range []string{`{"k":"x","t":11600,"a":1,"b":0}`, `{"k":"x","t":12100,"a":0,"b":1}`} {
				if got := second.Process(&ready.Input{Offset: int64(10 + i), Value: []byte(v)}, now); got != pipeline.Aggregated {
					t.Errorf("%s: %v, want aggregated", v, got)
				}
			}
			second.Flush()
			counts := map[string]int64{}
			for _, r := range out.results {
				counts[fmt.Sprintf("gen %d [%d,%d)", r.Generation, r.Window.Start, r.Window.End)] = r.Count
			}
			if want := map[string]int64{"gen 1 [10000,11000)": 2 + int64(restarts), "gen 1 [11000,12000)": 1, "gen 2 [12000,13000)": 1}; !maps.Equal(counts, want) {
				t.Errorf("windows %v, want %v", counts, want)
			}
		})
	}
}

// TestGenerationAggregateChangeAfterDeadLetter: a record whose value the
// old generation's aggregates cannot read is a dead letter and leaves no
// window, but its time is one the partition has seen: the cut-over T of
// a new generation whose aggregates read it comes after it (else the new
// generation's windows from T would miss it), by_key and in stage 2.
func TestGenerationAggregateChangeAfterDeadLetter(t *testing.T) {
	old := genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: s, fn: sum, field: v}]")
	next := genConfig("2", "{type: tumbling, size: 1s, allowed_lateness: 1s}", "[{name: s, fn: last, field: v}]")
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	for i, v := range []string{`{"k":"x","t":10000,"v":1}`, `{"k":"x","t":10500,"v":2}`, `{"k":"x","t":11500,"v":"text"}`} {
		first.Process(&ready.Input{Offset: int64(i), Value: []byte(v)}, math.MaxInt64)
	}
	log := changelog{}
	log.write(first.Checkpoint())
	second, _ := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatal(err)
	}
	if rep := second.GenerationReport(0); rep.Verdict != config.NewGeneration || rep.Cutover != 12_000 {
		t.Errorf("by_key: %v cut over at %d, want a new generation cut over at 12000, after the dead letter's 11500", rep.Verdict, rep.Cutover)
	}
	// Stage 2: the dead letter is stage 2's (format 3), and its time is
	// kept in the repartition partition's position.
	conf := func(agg, version string) string {
		return strings.Replace(twoStageYaml, "{name: s, fn: sum, field: v}", "{name: s, fn: "+agg+", field: v}", 1) +
			"state: {config_version: " + version + "}\n"
	}
	c := &cluster2{input: make([][]string, sourceParts), repart: make([][]repRecord, repartParts), log: changelog{},
		off1: map[int32]int64{}, off2: map[int32]int64{}}
	for p := range sourceParts {
		c.input[p] = []string{`{"k":"x","t":1000,"v":1}`, `{"k":"x","t":3500,"v":1}`}
	}
	c.input[0] = append(c.input[0], `{"k":"x","t":4100,"v":"text"}`) // after the latest window, [2000,4000)
	if newTwoStageOf(t, conf("sum", "0"), true, c).run(-1, noCrash) {
		t.Fatal("the old config's run crashed")
	}
	s := newTwoStageOf(t, conf("last", "1"), true, c)
	if rep := s.core.GenerationReport(partitionOf(`{"k":"x"}`)); rep.Verdict != config.NewGeneration || rep.Cutover != 6000 {
		t.Fatalf("stage 2: %v cut over at %d, want a new generation cut over at 6000, after the dead letter's 4100", rep.Verdict, rep.Cutover)
	}
}
