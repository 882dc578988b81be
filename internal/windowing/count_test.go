package windowing_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// countRef is the naive count-window engine: it keeps every record of a
// key's open window (without a slide) or all of a key's records (with
// one), and recomputes each firing from them.
type countRef struct {
	n, s, timeout int64
	aggs          []windowing.Aggregate
	wm            int64
	seq           uint64
	keys          map[refKey]*countRefKey
	out           []windowing.Result
}

type countRefKey struct {
	fields []record.Value
	recs   []refRec // the open window's (tumbling) or all (sliding)
	window int64    // tumbling: the open window's index
}

func newCountRef(n, s, timeout int64, aggs []windowing.Aggregate) *countRef {
	if s == 0 {
		s = n
	}
	return &countRef{n: n, s: s, timeout: timeout, aggs: aggs, wm: math.MinInt64, keys: map[refKey]*countRefKey{}}
}

// Add counts rec; nothing is late in a count window.
func (r *countRef) Add(rec *record.Record) windowing.AddResult {
	r.seq++
	id := refKey{rec.Partition, rec.Key}
	k := r.keys[id]
	if k == nil {
		k = &countRefKey{fields: slices.Clone(rec.KeyFields)}
		r.keys[id] = k
	}
	k.recs = append(k.recs, refRec{rec.Time, r.seq, slices.Clone(rec.Values)})
	switch seen := int64(len(k.recs)); {
	case r.s == r.n && seen == r.n:
		r.fire(id, k, k.recs, k.window, windowing.OnTime)
		k.recs, k.window = nil, k.window+1
	case r.s == r.n && r.timeout > 0 && seen == 1 && k.recs[0].t+r.timeout <= r.wm:
		r.fire(id, k, k.recs, k.window, windowing.Timeout)
		k.recs, k.window = nil, k.window+1
	case r.s != r.n && seen%r.s == 0:
		r.fire(id, k, k.recs[max(0, seen-r.n):], seen/r.s-1, windowing.OnTime)
	}
	return windowing.AddResult{Kind: windowing.Aggregated}
}

// ProcessingTime does nothing: count windows have no early firings.
func (r *countRef) ProcessingTime(int64) {}

func (r *countRef) fire(id refKey, k *countRefKey, recs []refRec, seq int64, f windowing.Firing) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, rc := range recs {
		lo, hi = min(lo, rc.t), max(hi, rc.t)
	}
	res := windowing.Result{Partition: id.part, Key: id.key, Window: windowing.Window{Start: lo, End: hi + 1}, Count: int64(len(recs)),
		Firing: f, Watermark: r.wm, Seq: seq}
	for i, a := range r.aggs {
		res.Aggregates = append(res.Aggregates, aggregate(a, i, recs))
	}
	r.out = append(r.out, res)
}

// Advance fires the open windows whose first record's time + timeout
// the watermark reached, by due time, then window end, then key, then partition.
func (r *countRef) Advance(wm int64) {
	if wm <= r.wm {
		return
	}
	r.wm = wm
	if r.timeout == 0 || r.s != r.n {
		return
	}
	var due []refKey
	for id, k := range r.keys {
		if len(k.recs) > 0 && k.recs[0].t+r.timeout <= wm {
			due = append(due, id)
		}
	}
	slices.SortFunc(due, func(a, b refKey) int {
		ka, kb := r.keys[a], r.keys[b]
		if c := cmp.Compare(ka.recs[0].t, kb.recs[0].t); c != 0 {
			return c
		}
		end := func(k *countRefKey) int64 {
			return slices.MaxFunc(k.recs, func(a, b refRec) int { return cmp.Compare(a.t, b.t) }).t
		}
		if c := cmp.Compare(end(ka), end(kb)); c != 0 { // then window end (docs/windows.md#count-windows-every-n-records-of-a-key)
			return c
		}
		for i := range ka.fields {
			if c := record.Compare(ka.fields[i], kb.fields[i]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.part, b.part), cmp.Compare(a.key, b.key))
	})
	for _, id := range due {
		k := r.keys[id]
		r.fire(id, k, k.recs, k.window, windowing.Timeout)
		k.recs, k.window = nil, k.window+1
	}
}

func (r *countRef) RemovePartition(p int32) {
	for id := range r.keys {
		if id.part == p {
			delete(r.keys, id)
		}
	}
}

// TestCountsMatchReference drives Counts and countRef with the property
// test's random streams (disordered times, several keys and partitions,
// watermark advances, removed partitions, commits and crashes with a
// restore from the changelog): the same results in the same order. Sizes
// and slides co-prime (slices of one record) and not.
func TestCountsMatchReference(t *testing.T) {
	for _, c := range []struct{ n, s, timeout int64 }{
		{3, 0, 0}, {1, 0, 0}, {4, 0, 9}, {5, 0, 3}, {3, 2, 0}, {4, 2, 0}, {6, 4, 0}, {5, 1, 0}, {4, 4, 0},
	} {
		t.Run(fmt.Sprintf("size %d slide %d timeout %d", c.n, c.s, c.timeout), func(t *testing.T) {
			t.Parallel()
			firings := map[windowing.Firing]int{}
			for seed := range extraSeeds() * 2 {
				compareCounts(t, c.n, c.s, c.timeout, seed, 400, firings)
			}
			if firings[windowing.OnTime] == 0 || c.timeout > 0 && firings[windowing.Timeout] == 0 {
				t.Errorf("firings %v: the streams miss full windows or timeouts", firings)
			}
		})
	}
}

func compareCounts(t *testing.T, n, s, timeout int64, seed uint64, steps int, firings map[windowing.Firing]int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 17))
	st := &stream{name: fmt.Sprintf("seed %d", seed), ref: newCountRef(n, s, timeout, allAggs), rng: rng,
		spec: windowing.Spec{Kind: windowing.KindCount, Size: n, Slide: s, Timeout: timeout, Aggregates: allAggs},
		gen:  &streamGen{rng: rng, maxTs: 0, wm: math.MinInt64, gap: 4, age: 12},
		add:  700, tick: 920, commit: 960, crash: 980}
	for _, r := range st.run(t, steps).results {
		firings[r.Firing]++
	}
}

func newCounts(t testing.TB, spec windowing.Spec, sink windowing.Sink) *windowing.Counts {
	t.Helper()
	e, err := windowing.NewCounts(spec, sink)
	if err != nil {
		t.Fatalf("NewCounts(%+v) = %v", spec, err)
	}
	e.TrackChanges()
	return e
}
