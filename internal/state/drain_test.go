package state_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// built is a built copy's state as a map: an entry's describe by its
// changelog key, and its value, what the built state answers a repair
// with.
type built struct {
	entries map[string]*windowing.Entry
	gens    map[string]int64
}

func newBuilt() *built {
	return &built{entries: map[string]*windowing.Entry{}, gens: map[string]int64{}}
}

// recordKey is the changelog key of en of generation gen (VersionOne: a
// version-1 key).
func recordKey(gen int64, en *windowing.Entry) string {
	if gen == state.VersionOne {
		return string(state.AppendKey(nil, en))
	}
	return string(state.AppendGenerationKey(nil, gen, en))
}

// apply is a Drain's fn: a put replaces, a deletion removes.
func (b *built) apply(gen int64, en *windowing.Entry) error {
	k := recordKey(gen, en)
	if en.Deleted {
		delete(b.entries, k)
		delete(b.gens, k)
		return nil
	}
	b.entries[k], b.gens[k] = kept(en), gen
	return nil
}

// committed answers FinishDrained for a drained key.
func (b *built) committed(key []byte) ([]byte, error) {
	en, ok := b.entries[string(key)]
	if !ok {
		return nil, errors.New("not in the built state")
	}
	return state.AppendValue(nil, en, 0), nil
}

// finishDrained adds log to a draining r, draining where cut says, and
// finishes it into a built state.
func finishDrained(r *state.Restorer, log []rec, cut func(i int) bool) finished {
	var out finished
	b := newBuilt()
	for i, x := range log {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			out.err = err
			return out
		}
		if cut(i) {
			if err := r.Drain(b.apply); err != nil {
				out.err = err
				return out
			}
		}
	}
	out.res, out.err = r.FinishDrained(b.apply, b.committed)
	if out.err != nil {
		return out
	}
	legacy := int64(0)
	for _, g := range out.res.Generations {
		if g.LegacyKeys {
			legacy = g.Version
		}
	}
	for k, en := range b.entries {
		gen := b.gens[k]
		if gen == state.VersionOne {
			gen = legacy
		}
		out.entries = append(out.entries, fmt.Sprintf("%d %s", gen, describe(en)))
	}
	slices.Sort(out.entries)
	return out
}

// TestDrainMatchesFinish: over random changelogs (several owners, commits
// cut short, stale writers, tombstones, sliding windows' revisions,
// generations), drains at random points applied to a built state, then
// FinishDrained, leave the entries, repairs, position, next tag, stale
// count and errors of one FinishGenerations at the end; with the arena
// compacting as often as it can, and never.
func TestDrainMatchesFinish(t *testing.T) {
	n := *matchLogs
	switch {
	case testing.Short():
		n /= 10
	case raceEnabled:
		n /= 3
	}
	for _, gens := range []bool{false, true} {
		for seed := range uint64(n) {
			rng := rand.New(rand.NewPCG(seed, map[bool]uint64{false: 3, true: 4}[gens]))
			log := randomLog(rng, 5+rng.IntN(60), gens)
			want := finish(state.NewRestorer(), log)
			every := 1 + rng.IntN(8)
			cuts := map[string]func(int) bool{
				"never":  func(int) bool { return false },
				"always": func(int) bool { return true },
				"random": func(int) bool { return rng.IntN(every) == 0 },
			}
			for name, cut := range cuts {
				for _, r := range []*state.Restorer{state.NewDraining(), state.NewDrainingCompacting(1)} {
					got := finishDrained(r, log, cut)
					if fmt.Sprint(got.err) != fmt.Sprint(want.err) || !slices.Equal(got.entries, want.entries) || !reflect.DeepEqual(got.res, want.res) {
						t.Fatalf("gens %v seed %d drains %s: the drained Restorer (%d compactions) restores\n%v\n%q\n%+v\nFinishGenerations\n%v\n%q\n%+v\nlog:\n%v",
							gens, seed, name, r.Compactions(), got.err, got.entries, got.res, want.err, want.entries, want.res, log)
					}
				}
			}
		}
	}
}

// TestDrainForgetsValues: a draining Restorer that tails a changelog
// writing its keys again and again keeps their keys, not their values,
// whether they are large or about the size of a key.
func TestDrainForgetsValues(t *testing.T) {
	for _, nums := range []int{64, 2} {
		t.Run(fmt.Sprintf("%d sums", nums), func(t *testing.T) { drainForgets(t, nums) })
	}
}

func drainForgets(t *testing.T, nums int) {
	big := make([]float64, nums)
	tag := uint64(1)
	const keys = 3_000 // 10,000 took 30 s under -race, and the ratio is the same
	// run returns the bytes r holds at the end: drained after each
	// commit, or not.
	run := func(r *state.Restorer, drain bool) int64 {
		b := newBuilt()
		for round := range 10 {
			for k := range keys {
				en := sliceEn(fmt.Sprint("k", k), 0, int64(1+round%9))
				en.Nums = big
				x := entryRec(en, tag)
				if err := r.Add(x.key, x.value, x.tag); err != nil {
					t.Fatal(err)
				}
			}
			p := posRec(tag, int64(round))
			if err := r.Add(p.key, p.value, nil); err != nil {
				t.Fatal(err)
			}
			tag++
			if drain {
				if err := r.Drain(b.apply); err != nil {
					t.Fatal(err)
				}
			}
		}
		return r.Bytes()
	}
	whole, drained := run(state.NewRestorerCompacting(1), false), run(state.NewDrainingCompacting(1), true)
	t.Logf("%d keys of %d sums: %d bytes drained, %d whole", keys, nums, drained, whole)
	if want := map[int]int64{64: 8, 2: 2}[nums]; drained*want >= whole {
		t.Errorf("%d keys of %d sums: a draining Restorer holds %d bytes, one that keeps the values %d; want less than 1/%d", keys, nums, drained, whole, want)
	}
}

// TestDrainMisuse: Drain needs NewDraining, and a Restorer that Drain
// handed entries from ends with FinishDrained.
func TestDrainMisuse(t *testing.T) {
	if err := state.NewRestorer().Drain(newBuilt().apply); err == nil {
		t.Error("Drain on NewRestorer() = nil, want an error")
	}
	r := state.NewDraining()
	for _, x := range []rec{put("a", 0, 1, 1), posRec(1, 0)} {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Drain(newBuilt().apply); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FinishGenerations(func(int64, *windowing.Entry) error { return nil }); err == nil {
		t.Error("FinishGenerations after a Drain handed an entry = nil, want an error")
	}
}
