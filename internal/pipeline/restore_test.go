package pipeline_test

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// changelog is a changelog topic in memory, partition by partition, in
// write order. It copies what it is given, as a broker does: the core
// reuses a commit's buffer once the commit is accepted.
type changelog map[int32][]logRecord

type logRecord struct {
	key, value []byte
	tag        uint64
}

func (c changelog) write(recs ...[]pipeline.ChangelogRecord) {
	for _, rs := range recs {
		for _, r := range rs {
			c[r.Partition] = append(c[r.Partition], logRecord{slices.Clone(r.Key), slices.Clone(r.Value), r.Tag})
		}
	}
}

func (c changelog) restorer(t testing.TB, part int32) *state.Restorer {
	t.Helper()
	r := state.NewRestorer()
	for _, rec := range c[part] {
		var tag []byte
		if rec.value == nil {
			tag = state.AppendTag(nil, rec.tag)
		}
		if err := r.Add(rec.key, rec.value, tag); err != nil {
			t.Fatalf("Restorer.Add: %v", err)
		}
	}
	return r
}

// crashInput is one record of a crash test stream.
type crashInput struct {
	part   int32
	offset int64
	value  string
}

// crashStream makes n records over parts partitions, interleaved at
// random, with disorder, late records, malformed ones and ties; with gaps,
// one in ten records has its own session gap g (which also makes the
// stream of the other configs: the one that found a sliding window dropped
// by another partition's progress restored again, see partPos.merged).
func crashStream(seed uint64, n, parts int, gaps bool) []crashInput {
	rng := rand.New(rand.NewPCG(seed, 1))
	next := make([]int64, parts)
	maxTs := int64(10_000)
	var out []crashInput
	for range n {
		p := rng.IntN(parts)
		var v string
		switch r := rng.IntN(100); {
		case r < 2:
			v = `{"k": "a", "t": "not a time"}`
		case r < 8:
			v = fmt.Sprintf(`{"k": "k%d", "t": %d, "v": %d}`, rng.IntN(5), maxTs-3000-rng.Int64N(4000), rng.IntN(9))
		case gaps && r < 18:
			maxTs += rng.Int64N(300)
			v = fmt.Sprintf(`{"k": "k%d", "t": %d, "v": %d, "g": %d}`, rng.IntN(5), maxTs-rng.Int64N(1500), rng.IntN(9), 1+rng.Int64N(2500))
		default:
			maxTs += rng.Int64N(300)
			k, t, x := rng.IntN(5), maxTs-rng.Int64N(1500), rng.IntN(9)
			field := fmt.Sprintf(`, "v": %d`, x)
			switch x { // one in nine without v, one in nine with v null: skipped by the aggregates of v
			case 7:
				field = `, "v": null`
			case 8:
				field = ""
			}
			v = fmt.Sprintf(`{"k": "k%d", "t": %d%s}`, k, t, field)
		}
		out = append(out, crashInput{int32(p), next[p], v})
		next[p]++
	}
	return out
}

// crashConfigs cover tumbling, sliding and session windows, both emit
// modes, lateness 0 and > 0, and aggregates of every state kind.
var crashConfigs = map[string]string{
	"tumbling": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 2s, allowed_lateness: 1s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: f, fn: first, field: v}, {name: d, fn: count_distinct, field: v}, {name: q, fn: quantile, field: v, q: 0.5}, {name: nv, fn: count, field: v}]
`,
	"sliding": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 500ms}
window: {type: sliding, size: 3s, slide: 1s, allowed_lateness: 1500ms}
aggregates: [{name: n, fn: count}, {name: mx, fn: max, field: v}, {name: l, fn: last, field: v}]
`,
	"on_close": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: sliding, size: 2s, slide: 1s, allowed_lateness: 1s, emit: on_close}
aggregates: [{name: n, fn: count}, {name: a, fn: avg, field: v}]
`,
	"session": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: session, gap: 500ms, gap_field: g, allowed_lateness: 2s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: f, fn: first, field: v}, {name: d, fn: count_distinct, field: v}, {name: q, fn: quantile, field: v, q: 0.5}]
`,
	"session_on_close": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: session, gap: 600ms, gap_field: g, allowed_lateness: 1s, emit: on_close}
aggregates: [{name: n, fn: count}, {name: l, fn: last, field: v}]
`,
	"no_lateness": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 1s}
aggregates: [{name: n, fn: count}]
`,
}

// windowKindConfigs add top_k, early firings, calendar, global and count windows
// to TestRestoreAtEveryOffset (not to the move tests: their checks count
// every firing of a window, early ones included, as an on-time firing).
var windowKindConfigs = map[string]string{
	"early_top_k": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 2s, allowed_lateness: 1s, early_firings: {every: 300ms, time: event}}
aggregates: [{name: n, fn: count}, {name: top, fn: top_k, field: v, k: 2}]
`,
	"early_sliding_on_close": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: sliding, size: 3s, slide: 1s, allowed_lateness: 1s, emit: on_close, early_firings: {every: 500ms, time: event}}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}]
`,
	"early_session": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: session, gap: 500ms, gap_field: g, allowed_lateness: 2s, early_firings: {every: 400ms, time: event}}
aggregates: [{name: n, fn: count}, {name: top, fn: top_k, field: v, k: 3}]
`,
	"global": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: global, early_firings: {every: 700ms, time: event}}
aggregates: [{name: n, fn: count}, {name: top, fn: top_k, field: v, k: 2}]
`,
	"count_timeout": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: count, size: 4, timeout: 1500ms}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: top, fn: top_k, field: v, k: 2}]
`,
	"count_sliding": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {type: count, size: 6, slide: 4}
aggregates: [{name: n, fn: count}, {name: f, fn: first, field: v}, {name: q, fn: quantile, field: v, q: 0.5}]
`,
	"calendar": `
source: {key: [k], timestamp: {field: t, layout: unix_ms}}
window: {calendar: day, timezone: Australia/Lord_Howe, allowed_lateness: 1s}
aggregates: [{name: n, fn: count}, {name: f, fn: first, field: v}]
`,
}

// feed runs ins through p, skipping records below each partition's
// resume offset.
func feed(p core, ins []crashInput, from map[int32]int64) {
	for _, in := range ins {
		if in.offset < from[in.part] {
			continue
		}
		p.Process(&ready.Input{Partition: in.part, Offset: in.offset, Value: []byte(in.value)}, math.MaxInt64)
	}
}

// TestRestoreAtEveryOffset: commit after every record in turn, crash, and
// restore into a new processor from the changelog; what the first
// processor emitted up to the commit and the second one after it must be
// what an uninterrupted run emits, exactly (an exactly_once reader's
// view). Commits are also taken every few records before the crash, so
// restores read incremental changelogs with tombstones.
func TestRestoreAtEveryOffset(t *testing.T) {
	const parts = 3
	n := 400
	if testing.Short() || raceEnabled {
		n = 150
	}
	configs := joinConfigs(crashConfigs, windowKindConfigs)
	scopes := []string{"scope_tumbling", "scope_sliding_early"} // scope_session: in the commit tests
	if raceEnabled {
		scopes = scopes[:1] // CI's time: the plain run restores both
	}
	for _, name := range scopes {
		configs[name] = scopeConfigs[name]
	}
	for name, yaml := range configs {
		t.Run(name, func(t *testing.T) {
			const seed = 11
			ins := crashStream(seed, n, parts, true)
			want, wantOut := newProcessor(t, yaml)
			for p := range int32(parts) {
				want.Assign(p, 0)
			}
			feed(want, ins, nil)
			want.Flush()
			if name == "session" && !slices.ContainsFunc(wantOut.results, func(r windowing.Result) bool { return r.Firing == windowing.Retract }) {
				t.Fatalf("the session stream has no retraction: restores of sessions merged after firing go untested")
			}
			if early := strings.HasPrefix(name, "early") || name == "global"; early && !slices.ContainsFunc(wantOut.results, func(r windowing.Result) bool { return r.Firing == windowing.Early }) {
				t.Fatalf("the stream has no early firing: restores between ticks go untested")
			}
			if name == "count_timeout" && !slices.ContainsFunc(wantOut.results, func(r windowing.Result) bool { return r.Firing == windowing.Timeout }) {
				t.Fatalf("the stream has no timeout firing: restores of timeouts go untested")
			}
			for crash := range len(ins) + 1 {
				first, out1 := newProcessor(t, yaml)
				for p := range int32(parts) {
					first.Assign(p, 0)
				}
				log := changelog{}
				for i := range crash {
					feed(first, ins[i:i+1], nil)
					if i%7 == 3 {
						log.write(first.Checkpoint())
					}
				}
				data, positions := first.Checkpoint()
				log.write(data)
				log.write(positions)

				second, out2 := newProcessor(t, yaml)
				from := map[int32]int64{}
				for p := range int32(parts) {
					second.Assign(p, 0) // all assigned before the first restore, as the consumer does
				}
				for p := range int32(parts) {
					res, err := second.Restore(p, log.restorer(t, p), 0)
					if err != nil {
						t.Fatalf("crash at %d (seed %d): Restore(%d): %v", crash, seed, p, err)
					}
					if res.HasPosition {
						from[p] = res.Position.Offset
					}
				}
				feed(second, ins, from)
				second.Flush()
				got := append(out1.results, out2.results...)
				if !reflect.DeepEqual(got, wantOut.results) {
					t.Fatalf("crash at %d (seed %d): results differ from an uninterrupted run:\n%s", crash, seed, firstDiff(got, wantOut.results))
				}
				if l := append(out1.late, out2.late...); !reflect.DeepEqual(l, wantOut.late) {
					t.Fatalf("crash at %d (seed %d): late events %v, want %v", crash, seed, l, wantOut.late)
				}
			}
		})
	}
}

// Records processed after the last commit are processed again after a
// crash (at_least_once): the repeated outputs are identical.
func TestRestoreRepeatsIdentically(t *testing.T) {
	ins := crashStream(5, 300, 2, false)
	yaml := crashConfigs["sliding"]
	want, wantOut := newProcessor(t, yaml)
	want.Assign(0, 0)
	want.Assign(1, 0)
	feed(want, ins, nil)
	for _, commitAt := range []int{0, 50, 120, 299} {
		first, out1 := newProcessor(t, yaml)
		first.Assign(0, 0)
		first.Assign(1, 0)
		feed(first, ins[:commitAt], nil)
		log := changelog{}
		data, positions := first.Checkpoint()
		log.write(data)
		log.write(positions)
		before := len(out1.results)
		feed(first, ins[commitAt:], nil) // outputs after the commit, then a crash

		second, out2 := newProcessor(t, yaml)
		from := map[int32]int64{}
		second.Assign(0, 0)
		second.Assign(1, 0)
		for p := range int32(2) {
			res, err := second.Restore(p, log.restorer(t, p), 0)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			from[p] = res.Position.Offset
		}
		feed(second, ins, from)
		if repeated := out1.results[before:]; len(out2.results)+len(repeated) > 0 && !reflect.DeepEqual(out2.results, repeated) {
			t.Fatalf("commit at %d: repeated results differ:\n%s", commitAt, firstDiff(out2.results, out1.results[before:]))
		}
		if !reflect.DeepEqual(out1.results, wantOut.results) {
			t.Fatalf("commit at %d: first run differs from the reference", commitAt)
		}
	}
}

// A commit cut short (at_least_once: some of its changelog records were
// written, not its positions) is left out of a restore as a whole, and
// the restore repairs the keys it touched.
func TestRestoreLeavesOutACommitCutShort(t *testing.T) {
	yaml := crashConfigs["tumbling"]
	ins := crashStream(9, 200, 1, false)
	p1, _ := newProcessor(t, yaml)
	p1.Assign(0, 0)
	feed(p1, ins[:100], nil)
	log := changelog{}
	data, positions := p1.Checkpoint()
	log.write(data)
	log.write(positions)
	feed(p1, ins[100:150], nil)
	data, _ = p1.Checkpoint() // its positions are never written
	log.write(data[:len(data)/2+1])

	restoreAt := func(log changelog) (core, *tape, state.Result) {
		p, out := newProcessor(t, yaml)
		p.Assign(0, 0)
		res, err := p.Restore(0, log.restorer(t, 0), 0)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		return p, out, res
	}
	clean := changelog{0: log[0][:len(log[0])-len(data[:len(data)/2+1])]}
	_, _, want := restoreAt(clean)
	p2, out2, got := restoreAt(log)
	if !reflect.DeepEqual(got.Position, want.Position) || len(got.Repairs) == 0 {
		t.Fatalf("restore with a commit cut short: position %+v, %d repairs; want position %+v and repairs", got.Position, len(got.Repairs), want.Position)
	}
	p3, out3, _ := restoreAt(clean)
	feed(p2, ins, map[int32]int64{0: got.Position.Offset})
	feed(p3, ins, map[int32]int64{0: want.Position.Offset})
	if !reflect.DeepEqual(out2.results, out3.results) {
		t.Fatalf("after a commit cut short:\n%s", firstDiff(out2.results, out3.results))
	}
	// The repairs, written with the next commit, supersede the records
	// cut short: the changelog alone then restores the same state.
	log.write(p2.Checkpoint())
	p4, out4, _ := restoreAt(log)
	p5, out5, _ := restoreAt(changelog{0: log[0][len(clean[0]):]})
	feed(p4, ins, nil)
	feed(p5, ins, nil)
	_ = out5
	if len(out4.results) == 0 {
		t.Fatal("no results after restoring a repaired changelog")
	}
}

func firstDiff[T any](got, want []T) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf("at %d of %d/%d:\n got %+v\nwant %+v", i, len(got), len(want), got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d, want %d", len(got), len(want))
}

func joinConfigs(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// A slice whose every window is cleaned up at the restored position (a
// stale writer's record: at_least_once, a zombie's commit landing whole
// between the new owner's restore and its first write) is left out of a
// restore, counted (Result.Spent) and deleted by the next commit: no
// restore stops at it (TestChaos at_least_once: "slice ... has
// no open window", every instance exiting on the partition). Here the
// tombstones of the second commit are left out of the log, so that the
// slices of the windows it fired and cleaned up are still its latest.
func TestRestoreLeavesOutSpentSlices(t *testing.T) {
	yaml := crashConfigs["tumbling"]
	ins := crashStream(9, 400, 1, false)
	p1, _ := newProcessor(t, yaml)
	p1.Assign(0, 0)
	feed(p1, ins[:100], nil)
	log := changelog{}
	data, positions := p1.Checkpoint()
	log.write(data, positions)
	feed(p1, ins[100:], nil)
	data, positions = p1.Checkpoint()
	var kept []pipeline.ChangelogRecord
	for _, r := range data {
		if r.Value != nil {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(data) {
		t.Fatal("the second commit deleted nothing: no window fired and was cleaned up")
	}
	log.write(kept, positions)

	p2, _ := newProcessor(t, yaml)
	p2.Assign(0, 0)
	_, err := p2.Restore(0, log.restorer(t, 0), 0)
	if err != nil {
		t.Fatalf("Restore with spent slices = %v, want nil", err)
	}
	// Left out quietly (their windows are past lateness at the restored
	// watermark: windowing drops them as their owner would have), and
	// deleted by the next commit: restored again, nothing is spent.
	next, nextPositions := p2.Checkpoint()
	tombstones := 0
	for _, r := range next {
		if r.Value == nil {
			tombstones++
		}
	}
	if tombstones == 0 {
		t.Fatalf("the commit after the restore deletes nothing, want the slices whose tombstones were left out (%d)", len(data)-len(kept))
	}
	log.write(next, nextPositions)
	p3, _ := newProcessor(t, yaml)
	p3.Assign(0, 0)
	again, err := p3.Restore(0, log.restorer(t, 0), 0)
	if err != nil || again.Spent != 0 {
		t.Errorf("Restore after the next commit = Spent %d, %v; want 0, nil", again.Spent, err)
	}
}

// TestRestoreUnderLowerLateness: allowed_lateness is a run setting
// (docs/changing-config.md#three-kinds-of-key): a changelog written under a longer one restores under a shorter
// one at every commit, in every window kind whose windows are dropped by
// lateness (before, a slice whose windows were all past the shorter
// lateness failed the restore, "no open window"). A window already past
// it is dropped quietly: no firing of a (key, window, revision) twice.
func TestRestoreUnderLowerLateness(t *testing.T) {
	const parts = 2
	for _, name := range []string{"tumbling", "sliding", "on_close", "session"} {
		t.Run(name, func(t *testing.T) {
			yaml := crashConfigs[name]
			lower := regexp.MustCompile(`allowed_lateness: \w+`).ReplaceAllString(yaml, "allowed_lateness: 0s")
			if lower == yaml {
				t.Fatalf("config %s has no allowed_lateness to lower", name)
			}
			ins := crashStream(3, 200, parts, false)
			restoredPast := false
			for crash := 0; crash <= len(ins); crash += 5 {
				first, out1 := newProcessor(t, yaml)
				for p := range int32(parts) {
					first.Assign(p, 0)
				}
				feed(first, ins[:crash], nil)
				log := changelog{}
				data, positions := first.Checkpoint()
				log.write(data)
				log.write(positions)
				second, out2 := newProcessor(t, lower)
				from := map[int32]int64{}
				for p := range int32(parts) {
					second.Assign(p, 0)
				}
				for p := range int32(parts) {
					res, err := second.Restore(p, log.restorer(t, p), 0)
					if err != nil {
						t.Fatalf("commit after %d records: Restore(%d) under allowed_lateness 0s: %v", crash, p, err)
					}
					if res.HasPosition {
						from[p] = res.Position.Offset
					}
				}
				if d, _ := second.Checkpoint(); slices.ContainsFunc(d, func(r pipeline.ChangelogRecord) bool { return r.Value == nil }) {
					restoredPast = true // tombstones of what the shorter lateness dropped
				}
				feed(second, ins, from)
				second.Flush()
				type fired struct {
					part     int32
					key      string
					firing   windowing.Firing
					w        windowing.Window
					revision int64
				}
				seen := map[fired]bool{}
				for _, r := range append(out1.results, out2.results...) {
					f := fired{r.Partition, r.Key, r.Firing, r.Window, r.Revision}
					if seen[f] {
						t.Fatalf("commit after %d records: %s %v revision %d fired twice", crash, r.Key, r.Window, r.Revision)
					}
					seen[f] = true
				}
			}
			if !restoredPast {
				t.Fatalf("no restore found a window past the shorter lateness: the case goes untested")
			}
		})
	}
}
