package pipeline_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// committedLog is a changelog written by a processor of yaml fed ins,
// committing after every few records (seeded), so that it holds each
// entry's changes and its tombstones commit after commit.
func committedLog(t *testing.T, yaml string, ins []crashInput, parts int32, rng *rand.Rand) changelog {
	t.Helper()
	p, _ := newProcessor(t, yaml)
	for id := range parts {
		p.Assign(id, 0)
	}
	log := changelog{}
	for lo := 0; lo < len(ins); {
		hi := min(len(ins), lo+1+rng.IntN(25))
		feed(p, ins[lo:hi], nil)
		log.write(p.Checkpoint())
		lo = hi
	}
	return log
}

// runWarm is runRestored with every partition taken over from a standby
// copy: each copy, on a goroutine of its own (beside the others'), is
// given its changelog records one by one and drained at random points,
// then finished with the rest of its records read as a takeover's tail
// (BuildWarm), and attached.
func runWarm(t *testing.T, yaml string, log changelog, parts int32, ins []crashInput, seed uint64) restoreRun {
	t.Helper()
	p, out := newProcessor(t, yaml)
	for id := range parts {
		p.Assign(id, 0)
	}
	bs := make([]*pipeline.Built, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for id := range parts {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(id)))
			w := p.Warm(id)
			recs := log[id]
			tail := rng.IntN(len(recs) + 1) // the records the takeover reads
			every := 1 + rng.IntN(20)
			add := func(w *pipeline.Warm, recs []logRecord) error {
				for _, rec := range recs {
					var tag []byte
					if rec.value == nil {
						tag = state.AppendTag(nil, rec.tag)
					}
					if err := w.Restorer().Add(rec.key, rec.value, tag); err != nil {
						return err
					}
				}
				return nil
			}
			for i := range recs {
				if err := add(w, recs[i:i+1]); err != nil {
					errs[id] = err
					return
				}
				if i < tail && rng.IntN(every) == 0 {
					err := p.Drain(w)
					if errors.Is(err, pipeline.ErrRebuild) { // the shell makes the copy again
						w = p.Warm(id)
						err = add(w, recs[:i+1])
					}
					if err != nil {
						errs[id] = fmt.Errorf("Drain after record %d: %w", i, err)
						return
					}
				}
			}
			bs[id] = p.BuildWarm(w)
			if errors.Is(bs[id].Err(), pipeline.ErrRebuild) { // the takeover restores from the start
				bs[id] = p.Build(id, log.restorer(t, id))
			}
		})
	}
	wg.Wait()
	return attachAndFeed(p, out, parts, ins, func(id int32) state.Result {
		if errs[id] != nil {
			t.Fatalf("copy of %d: %v", id, errs[id])
		}
		res, err := p.Attach(bs[id], 0)
		if err != nil {
			t.Fatalf("attach of %d's copy: %v", id, err)
		}
		return res
	})
}

// sameAsWarm checks that taking every partition over from its standby
// copy gives what restoring it from the changelog gives: the same
// results of the restores (position, next tag, repairs, entries), the
// same outputs after, and the same commit after (tombstones of what the
// previous owner had dropped included, in any order).
func sameAsWarm(t *testing.T, yaml string, log changelog, parts int32, ins []crashInput, seed uint64) {
	t.Helper()
	want := runRestored(t, yaml, log, parts, ins, false)
	got := runWarm(t, yaml, log, parts, ins, seed)
	sorted := func(rs []pipeline.ChangelogRecord) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = describeRecord(t, r)
		}
		sort.Strings(out)
		return out
	}
	switch {
	case !reflect.DeepEqual(got.results, want.results):
		t.Errorf("seed %d: takeovers returned\n%+v\nrestores\n%+v", seed, got.results, want.results)
	case !reflect.DeepEqual(got.reports, want.reports):
		t.Errorf("seed %d: generation reports\n%+v\nwant\n%+v", seed, got.reports, want.reports)
	case !reflect.DeepEqual(got.out, want.out):
		t.Errorf("seed %d: outputs differ:\n%s", seed, firstDiff(got.out.results, want.out.results))
	case !reflect.DeepEqual(sorted(got.commit[0]), sorted(want.commit[0])) || !reflect.DeepEqual(got.commit[1], want.commit[1]):
		t.Errorf("seed %d: the commit after differs:\n%s", seed, firstDiff(sorted(got.commit[0]), sorted(want.commit[0])))
	}
}

// TestWarmIsRestore: a partition taken over from a standby copy built
// as the changelog committed (drained at random points, the rest read as
// the takeover's tail) is the partition a restore from the changelog
// gives, to the letter, for every kind of window (tumbling, sliding and
// calendar windows are built; session, global and count windows keep
// records and are built at the takeover), early firings, and the
// generation cases: a cut-over to a new generation at the takeover, two
// and three live generations, a changelog written before generations.
func TestWarmIsRestore(t *testing.T) {
	const parts = 3
	n, seeds := 400, uint64(4)
	if testing.Short() || raceEnabled {
		n, seeds = 200, 2
	}
	ins := crashStream(41, n, parts, true)
	for name, yaml := range joinConfigs(crashConfigs, windowKindConfigs) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(seed, 39))
				cut := n/4 + rng.IntN(n/2)
				log := committedLog(t, yaml, ins[:cut], parts, rng)
				sameAsWarm(t, yaml, log, parts, ins, seed)
			}
		})
	}
	for _, scope := range scopes {
		old, next := inScope(genOld, scope), inScope(genChanges["1s to 5s"], scope)
		third := strings.Replace(inScope(genChanges["to sliding"], scope), "config_version: 2", "config_version: 3", 1)
		t.Run(scope+"/cut-over", func(t *testing.T) {
			ins := crashStream(31, 450, parts, false)
			log := committedLog(t, old, ins[:200], parts, rand.New(rand.NewPCG(1, 39)))
			sameAsWarm(t, next, log, parts, ins, 1)
		})
		t.Run(scope+"/generations", func(t *testing.T) {
			ins := crashStream(31, 450, parts, false)
			_, _, log := cutOverRun(t, old, next, ins[:160], 150, parts)
			for seed := range seeds {
				sameAsWarm(t, next, log, parts, ins, seed)
				sameAsWarm(t, third, log, parts, ins, seed)
			}
		})
	}
	t.Run("unrecorded", func(t *testing.T) {
		log := readBeforeGenerations(t)
		ins := []crashInput{{0, 3, `{"k": "z", "t": 60000, "v": 1}`}, {0, 4, `{"k": "a", "t": 130000, "v": 2}`}}
		sameAsWarm(t, countSumYAML, log, 1, ins, 0)
	})
}

// describeRecord describes a changelog record of a commit: an entry's
// record by its entry (whose sets and top_k counts encode in map order),
// any other by its bytes.
func describeRecord(t *testing.T, rec pipeline.ChangelogRecord) string {
	t.Helper()
	head := fmt.Sprintf("%d %q tag %d", rec.Partition, rec.Key, rec.Tag)
	if rec.Value == nil {
		return head + " tombstone"
	}
	r := state.NewRestorer()
	pos := state.AppendPosition(nil, state.Position{}, rec.Tag)
	if err := r.Add(rec.Key, rec.Value, nil); err != nil {
		t.Fatalf("record %s: %v", head, err)
	}
	if err := r.Add(state.PositionKey(nil, rec.Partition), pos, nil); err != nil {
		t.Fatal(err)
	}
	var desc []string
	_, err := r.FinishGenerations(func(_ int64, en *windowing.Entry) error {
		c := *en
		sk := make([]string, len(c.Sketches))
		for i, s := range c.Sketches {
			sk[i] = fmt.Sprint(s.GetCount(), s.GetZeroCount())
		}
		c.Sketches = nil
		desc = append(desc, fmt.Sprintf("%+v sketches %v", c, sk))
		return nil
	})
	if err != nil || len(desc) == 0 {
		return fmt.Sprintf("%s %q", head, rec.Value) // a generation's record
	}
	return head + " " + strings.Join(desc, " ")
}
