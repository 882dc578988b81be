package state_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

var matchLogs = flag.Int("match.logs", 3000, "TestRestorerMatchesReference: random changelogs per kind")

// randomLog is a changelog partition written by several owners (epochs)
// whose commits are cut short, interleaved (a stale writer, a zombie
// that writes after the next owner) and repaired or not, with
// tombstones, sliding windows' revisions, records tagged 0 (before
// positions had tags) and, with gens, generation records and entries of
// generation keys beside version-1 keys.
func randomLog(rng *rand.Rand, n int, gens bool) []rec {
	type writer struct{ tag uint64 }
	ws := []*writer{{tag: uint64(rng.IntN(2))}}
	var log []rec
	pick := func() *writer {
		if rng.IntN(10) < 8 {
			return ws[len(ws)-1] // the current owner, mostly
		}
		return ws[rng.IntN(len(ws))]
	}
	keys := []string{"a", "b", "c", "d", "e"}
	written := []int64{3} // the generations whose records were written
	legacy := rng.IntN(2) == 0
	if gens {
		g := gen3
		g.LegacyKeys = legacy
		log = append(log, genRec(g, ws[0].tag), posRec(ws[0].tag, 0))
		ws[0].tag++
	}
	genEntry := func() bool { return gens && (!legacy || rng.IntN(3) == 0) }
	for range n {
		w := pick()
		k, start := keys[rng.IntN(len(keys))], int64(rng.IntN(3))*1000
		switch x := rng.IntN(100); {
		case x < 40:
			if genEntry() {
				log = append(log, genPut(written[rng.IntN(len(written))], k, start, int64(1+rng.IntN(9)), w.tag))
			} else {
				log = append(log, put(k, start, int64(1+rng.IntN(9)), w.tag))
			}
		case x < 52:
			if genEntry() {
				log = append(log, genDel(written[rng.IntN(len(written))], k, start, w.tag))
			} else {
				log = append(log, del(k, start, w.tag))
			}
		case x < 60:
			r := fired(k, start, int64(1+rng.IntN(3)), w.tag)
			if genEntry() {
				r.key = state.AppendGenerationKey(nil, written[rng.IntN(len(written))], windowEn(k, start, 1))
			}
			log = append(log, r)
		case x < 62 && gens:
			g := []state.Generation{gen3, gen4}[rng.IntN(2)]
			g.LegacyKeys = legacy && g.Version == 3
			if rng.IntN(6) == 0 {
				log = append(log, genRetired(g.Version, w.tag))
			} else {
				log = append(log, genRec(g, w.tag))
				if !slices.Contains(written, g.Version) {
					written = append(written, g.Version)
				}
			}
		case x < 88:
			log = append(log, posRec(w.tag, int64(len(log))))
			w.tag++
		case x < 92: // a new owner: the next epoch
			ws = append(ws, &writer{tag: state.NextOwner(ws[len(ws)-1].tag)})
		case x < 94: // a position tombstone
			log = append(log, rec{key: state.PositionKey(nil, 0), tag: state.AppendTag(nil, w.tag)})
		default: // a commit of the current owner cut short: its next tag
			ws[len(ws)-1].tag++
		}
	}
	return log
}

// finished is what a Restorer or the reference made of a log.
type finished struct {
	entries []string // "gen describe", sorted
	res     state.Result
	err     error
}

type finisher interface {
	Add(key, value, tag []byte) error
	Generations() ([]state.Generation, error)
	FinishGenerations(func(int64, *windowing.Entry) error) (state.Result, error)
}

// finish adds log to r, asking for its generations midway (as a standby
// copy may), and finishes it.
func finish(r finisher, log []rec) finished {
	var out finished
	for i, x := range log {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			out.err = err
			return out
		}
		if i == len(log)/2 {
			_, _ = r.Generations()
		}
	}
	out.res, out.err = r.FinishGenerations(func(gen int64, en *windowing.Entry) error {
		out.entries = append(out.entries, fmt.Sprintf("%d %s", gen, describe(en)))
		return nil
	})
	slices.Sort(out.entries)
	return out
}

// TestRestorerMatchesReference: over random changelogs, the Restorer
// (its arena compacting as often as it can, or never) restores what the
// release before it restored: the same entries of the same generations,
// repairs, position, next tag, stale records, errors.
func TestRestorerMatchesReference(t *testing.T) {
	n := *matchLogs
	switch {
	case testing.Short():
		n /= 10
	case raceEnabled:
		n /= 3
	}
	for _, gens := range []bool{false, true} {
		for seed := range uint64(n) {
			rng := rand.New(rand.NewPCG(seed, map[bool]uint64{false: 1, true: 2}[gens]))
			log := randomLog(rng, 5+rng.IntN(60), gens)
			want := finish(state.NewReference(), log)
			for _, r := range []*state.Restorer{state.NewRestorer(), state.NewRestorerCompacting(1)} {
				got := finish(r, log)
				if fmt.Sprint(got.err) != fmt.Sprint(want.err) || !slices.Equal(got.entries, want.entries) || !reflect.DeepEqual(got.res, want.res) {
					t.Fatalf("gens %v seed %d: the Restorer (%d compactions) restores\n%v\n%q\n%+v\nthe reference\n%v\n%q\n%+v\nlog:\n%v",
						gens, seed, r.Compactions(), got.err, got.entries, got.res, want.err, want.entries, want.res, log)
				}
			}
		}
	}
}

// TestRestorerCompacts: a changelog that writes its keys again and again
// keeps the Restorer about the size of its live records, however long.
func TestRestorerCompacts(t *testing.T) {
	r := state.NewRestorer()
	tag := uint64(1)
	var peak int64
	for round := range 2000 {
		for k := range 100 {
			x := put(fmt.Sprint("k", k), 0, int64(1+round%9), tag)
			if err := r.Add(x.key, x.value, x.tag); err != nil {
				t.Fatal(err)
			}
		}
		p := posRec(tag, int64(round))
		if err := r.Add(p.key, p.value, nil); err != nil {
			t.Fatal(err)
		}
		tag++
		peak = max(peak, r.Bytes())
	}
	if r.Compactions() == 0 || peak > 8<<20 {
		t.Errorf("200,000 records of 100 keys: %d compactions, peak %d bytes; want some, and at most 8 MiB", r.Compactions(), peak)
	}
	got := 0
	if _, err := r.Finish(func(*windowing.Entry) error { got++; return nil }); err != nil || got != 100 {
		t.Errorf("Finish() = %d entries, %v; want 100, nil", got, err)
	}
}
