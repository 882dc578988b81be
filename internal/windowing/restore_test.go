package windowing_test

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// stateEngine is what the changelog helpers need of an Engine or Sessions.
type stateEngine interface {
	Changes(fn func(*windowing.Entry))
	Restore(en *windowing.Entry, dropped int64) error
	Watermark() int64
}

// entryID is what identifies a changelog entry.
type entryID struct {
	kind  windowing.EntryKind
	part  int32
	id    string
	start int64
}

// changelog is a test store: the latest entry per identity, as a compacted
// changelog topic keeps it, deep-copied out of Changes, and the engine's
// watermark at the last commit (what it had dropped by then).
type changelog struct {
	entries   map[entryID]windowing.Entry
	watermark int64
}

func newChangelog() *changelog {
	return &changelog{entries: map[entryID]windowing.Entry{}, watermark: math.MinInt64}
}

func (id entryID) String() string {
	return fmt.Sprintf("{kind %d, partition %d, id %q, start %d}", id.kind, id.part, id.id, id.start)
}

func idOf(en *windowing.Entry) entryID { return entryID{en.Kind, en.Partition, en.ID, en.Start} }

// commit applies e.Changes to c. It returns how many entries were handed
// out, and an error if Changes broke its contract: an identity twice in
// one call, a tombstone of an entry never handed out, a live entry with
// nothing in it, or anything in a second call right after.
func (c *changelog) commit(e stateEngine) (int, error) {
	n := 0
	seen := map[entryID]bool{}
	var err error
	e.Changes(func(en *windowing.Entry) {
		n++
		id := idOf(en)
		_, stored := c.entries[id]
		switch {
		case err != nil:
		case seen[id]:
			err = fmt.Errorf("Changes handed out %v twice in one call", id)
		case en.Deleted && !stored:
			err = fmt.Errorf("Changes handed out a tombstone of %v, which it never handed out", id)
		case !en.Deleted && en.Kind == windowing.SliceEntry && en.Count <= 0:
			err = fmt.Errorf("Changes handed out slice %v with count %d", id, en.Count)
		case !en.Deleted && en.Kind == windowing.WindowEntry && en.Revision <= 0:
			err = fmt.Errorf("Changes handed out window %v with revision %d", id, en.Revision)
		case !en.Deleted && en.Kind == windowing.SessionEntry && (en.Count <= 0 || en.End <= en.Start):
			err = fmt.Errorf("Changes handed out session %v [%d, %d) with count %d", id, en.Start, en.End, en.Count)
		}
		seen[id] = true
		if en.Deleted {
			delete(c.entries, id)
			return
		}
		c.entries[id] = copyEntry(en)
	})
	c.watermark = e.Watermark()
	again := 0
	e.Changes(func(*windowing.Entry) { again++ })
	if err == nil && again > 0 {
		err = fmt.Errorf("Changes right after Changes handed out %d entries, want 0", again)
	}
	return n, err
}

// copyEntry deep-copies what Changes lends.
func copyEntry(en *windowing.Entry) windowing.Entry {
	cp := *en
	cp.Nums = slices.Clone(en.Nums)
	cp.Picks = slices.Clone(en.Picks)
	cp.Sets = nil
	for _, s := range en.Sets {
		cp.Sets = append(cp.Sets, maps.Clone(s))
	}
	cp.Sketches = nil
	for _, sk := range en.Sketches {
		cp.Sketches = append(cp.Sketches, sk.Copy())
	}
	cp.Exact = nil
	for _, vs := range en.Exact {
		cp.Exact = append(cp.Exact, slices.Clone(vs))
	}
	cp.Tops = nil
	for _, m := range en.Tops {
		cp.Tops = append(cp.Tops, maps.Clone(m))
	}
	return cp
}

// dropPartition forgets partition p's entries, as the reference does.
func (c *changelog) dropPartition(p int32) {
	maps.DeleteFunc(c.entries, func(id entryID, _ windowing.Entry) bool { return id.part == p })
}

// restore gives every stored entry to e, with the watermark of the last
// commit as what was dropped: slices before windows. With rng,
// the order within a kind is shuffled, and half the time the partitions
// are restored one after another (each its slices, then its windows)
// rather than all slices of every partition first. The entries are passed
// as stored, so an engine that kept or changed what it was given would
// corrupt the store and fail a later restore.
func (c *changelog) restore(e stateEngine, rng *rand.Rand) error {
	ids := slices.SortedFunc(maps.Keys(c.entries), func(a, b entryID) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.part, b.part), cmp.Compare(a.id, b.id), cmp.Compare(a.start, b.start))
	})
	var groups [][]entryID // restored in order; shuffled within
	if rng != nil && rng.IntN(2) == 0 {
		byPart := map[int32][4][]entryID{}
		for _, id := range ids {
			g := byPart[id.part]
			g[id.kind-windowing.SliceEntry] = append(g[id.kind-windowing.SliceEntry], id)
			byPart[id.part] = g
		}
		parts := slices.Sorted(maps.Keys(byPart))
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		for _, p := range parts {
			groups = append(groups, byPart[p][0], byPart[p][1], byPart[p][2], byPart[p][3])
		}
	} else {
		i, _ := slices.BinarySearchFunc(ids, windowing.WindowEntry, func(id entryID, k windowing.EntryKind) int { return cmp.Compare(id.kind, k) })
		groups = [][]entryID{ids[:i], ids[i:]}
	}
	for _, g := range groups {
		if rng != nil {
			rng.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		}
		for _, id := range g {
			en := c.entries[id]
			if err := e.Restore(&en, c.watermark); err != nil {
				return fmt.Errorf("Restore(%v): %w", id, err)
			}
		}
	}
	return nil
}

// at is one step after a restore: records added (t, v), then an Advance.
type at struct {
	adds    [][2]float64
	advance int64
}

// TestRestoreAtOtherWatermark: engine A has seen records of key k at 6, 8
// and 11 and its watermark is 12, so [0,10) has fired; its state (with 12
// as what A had dropped) is restored into an engine at another watermark.
// Lower (3): the restored
// fired window does not fire on time again (R1) and a record for it fires
// it late at once with its whole state (R2). Higher (20): what is due fires
// on time at FinishRestore, and what is past cleanup drops, in on_close
// with its Final firing (R3).
func TestRestoreAtOtherWatermark(t *testing.T) {
	k, _ := textKey("k")
	tumbling := params{"tumbling", 10, 0, 0, 5, "on_watermark"}
	sliding := params{"sliding", 10, 5, 0, 5, "on_watermark"}
	tumblingClose := params{"tumbling", 10, 0, 0, 5, "on_close"}
	slidingClose := params{"sliding", 10, 5, 0, 5, "on_close"}
	tests := map[string]struct {
		p        params
		wm       int64 // the restoring engine's watermark
		atFinish []brief
		steps    []at
		after    []brief // results of the steps
		open     int     // OpenWindows() after the steps
	}{
		"tumbling lower: no on-time firing again": {tumbling, 3, nil,
			[]at{{nil, 9}}, nil, 2},
		"tumbling lower: continues": {tumbling, 3, nil,
			[]at{{nil, 9}, {nil, 14}, {nil, 19}}, []brief{{k, 10, 1, 4, windowing.OnTime, 0, 19}}, 1},
		"tumbling lower: record for the fired window": {tumbling, 3, nil,
			[]at{{[][2]float64{{5, 8}}, 3}, {nil, 9}}, []brief{{k, 0, 3, 11, windowing.Late, 1, 3}}, 2},
		"tumbling lower: record for an unfired window": {tumbling, 3, nil,
			[]at{{[][2]float64{{12, 8}}, 3}, {nil, 9}}, nil, 2},
		"sliding lower: no on-time firing again": {sliding, 3, nil,
			[]at{{nil, 9}}, nil, 3},
		"sliding lower: continues": {sliding, 3, nil,
			[]at{{nil, 9}, {nil, 14}}, []brief{{k, 5, 3, 7, windowing.OnTime, 0, 14}}, 2},
		"sliding lower: record for the fired window": {sliding, 3, nil,
			[]at{{[][2]float64{{5, 8}}, 3}, {nil, 9}}, []brief{{k, 0, 3, 11, windowing.Late, 1, 3}}, 3},
		"sliding lower: record for unfired windows": {sliding, 3, nil,
			[]at{{[][2]float64{{12, 8}}, 3}, {nil, 9}}, nil, 3},
		"tumbling same": {tumbling, 12, nil,
			[]at{{[][2]float64{{5, 8}}, 12}}, []brief{{k, 0, 3, 11, windowing.Late, 1, 12}}, 2},
		"sliding same": {sliding, 12, nil,
			[]at{{[][2]float64{{5, 8}}, 12}}, []brief{{k, 0, 3, 11, windowing.Late, 1, 12}}, 3},
		"tumbling higher": {tumbling, 20, []brief{{k, 10, 1, 4, windowing.OnTime, 0, 20}},
			nil, nil, 1},
		"sliding higher": {sliding, 20, []brief{{k, 5, 3, 7, windowing.OnTime, 0, 20}, {k, 10, 1, 4, windowing.OnTime, 0, 20}},
			nil, nil, 1},
		"tumbling on_close higher": {tumblingClose, 20, []brief{{k, 0, 2, 3, windowing.Final, 0, 20}},
			nil, nil, 1},
		"sliding on_close higher": {slidingClose, 20, []brief{{k, 0, 2, 3, windowing.Final, 0, 20}, {k, 5, 3, 7, windowing.Final, 0, 20}},
			nil, nil, 1},
		"sliding on_close lower": {slidingClose, 3, nil,
			[]at{{[][2]float64{{5, 8}}, 3}, {nil, 14}}, []brief{{k, 0, 3, 11, windowing.Final, 0, 14}}, 2},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a, _ := newEngine(t, tt.p.spec(sumCount...))
			feed(a, 0, [][2]float64{{6, 1}, {8, 2}, {11, 4}})
			a.Advance(12)
			store := newChangelog()
			if _, err := store.commit(a); err != nil {
				t.Fatal(err)
			}
			b, c := newEngine(t, tt.p.spec(sumCount...))
			b.Advance(tt.wm)
			if err := store.restore(b, nil); err != nil {
				t.Fatal(err)
			}
			b.FinishRestore()
			if got := briefs(c.got); !slices.Equal(got, tt.atFinish) {
				t.Errorf("FinishRestore() at %d emitted %v, want %v", tt.wm, got, tt.atFinish)
			}
			c.got = nil
			for i, s := range tt.steps {
				feed(b, int64(i+1)*100, s.adds)
				b.Advance(s.advance)
			}
			if got := briefs(c.got); !slices.Equal(got, tt.after) {
				t.Errorf("steps %v emitted %v, want %v", tt.steps, got, tt.after)
			}
			if n := b.OpenWindows(); n != tt.open {
				t.Errorf("OpenWindows() = %d, want %d", n, tt.open)
			}
		})
	}
}

// feed adds records of key k at (time, value), from offset off.
func feed(e *windowing.Engine, off int64, tvs [][2]float64) {
	k, kf := textKey("k")
	for i, tv := range tvs {
		e.Add(rec(0, off+int64(i), k, kf, int64(tv[0]), tv[1]))
	}
}

// TestRestoreSkipsDroppedWindows: a sliding slice outlives the earlier of
// its windows. Engine A (records at 1 and 4, then 11) is at watermark 12:
// [-5,5) fired on time at 4 (on_close: Final at its cleanup, 9) and was
// dropped at 9, while the slice [0,5) stays for [0,10). Restored with 12
// as what A had dropped, [-5,5) must not come back and fire again, at A's
// watermark or any other.
func TestRestoreSkipsDroppedWindows(t *testing.T) {
	k, _ := textKey("k")
	tests := map[string]struct {
		emit string
		wm   int64
		want []brief // FinishRestore, then Advance(14)
	}{
		"on_watermark same":   {"on_watermark", 12, []brief{{k, 5, 1, 4, windowing.OnTime, 0, 14}}},
		"on_watermark lower":  {"on_watermark", 3, []brief{{k, 5, 1, 4, windowing.OnTime, 0, 14}}},
		"on_watermark higher": {"on_watermark", 14, []brief{{k, 5, 1, 4, windowing.OnTime, 0, 14}}},
		"on_close same":       {"on_close", 12, []brief{{k, 0, 2, 3, windowing.Final, 0, 14}}},
		"on_close lower":      {"on_close", 3, []brief{{k, 0, 2, 3, windowing.Final, 0, 14}}},
		"on_close higher":     {"on_close", 14, []brief{{k, 0, 2, 3, windowing.Final, 0, 14}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := params{"sliding", 10, 5, 0, 5, tt.emit}
			a, _ := newEngine(t, p.spec(sumCount...))
			feed(a, 0, [][2]float64{{1, 1}, {4, 2}, {11, 4}})
			a.Advance(12)
			store := newChangelog()
			if _, err := store.commit(a); err != nil {
				t.Fatal(err)
			}
			b, c := newEngine(t, p.spec(sumCount...))
			b.Advance(tt.wm)
			if err := store.restore(b, nil); err != nil {
				t.Fatal(err)
			}
			b.FinishRestore()
			b.Advance(14)
			if got := briefs(c.got); !slices.Equal(got, tt.want) {
				t.Errorf("restored at %d, FinishRestore() and Advance(14) emitted %v, want %v", tt.wm, got, tt.want)
			}
		})
	}
}

// TestRestoreKeepsArrivalOrder: first and last break ties of event time by
// arrival, so a record added after a restore is later than every restored
// one at the same time.
func TestRestoreKeepsArrivalOrder(t *testing.T) {
	aggs := allAggs[5:7] // first, last of x
	k, kf := textKey("k")
	add := func(e *windowing.Engine, off int64, x string) {
		e.Add(&record.Record{Partition: 0, Offset: off, Time: 5, Key: k, KeyFields: kf,
			Values: []record.Value{record.Text(x), record.Text(x)}})
	}
	for name, p := range map[string]params{
		"tumbling": {"tumbling", 10, 0, 0, 0, "on_watermark"},
		"sliding":  {"sliding", 10, 5, 0, 0, "on_watermark"},
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := newEngine(t, p.spec(aggs...))
			for i, x := range []string{"a", "b", "c"} {
				add(a, int64(i), x)
			}
			store := newChangelog()
			if _, err := store.commit(a); err != nil {
				t.Fatal(err)
			}
			b, c := newEngine(t, p.spec(aggs...))
			if err := store.restore(b, nil); err != nil {
				t.Fatal(err)
			}
			b.FinishRestore()
			add(b, 3, "d")
			b.Advance(9)
			if len(c.got) == 0 {
				t.Fatalf("Advance(9) after the restore emitted nothing")
			}
			got := c.got[len(c.got)-1]
			if first, last := got.Aggregates[0].Str, got.Aggregates[1].Str; first != "a" || last != "d" {
				t.Errorf("[%d,%d) first, last = %q, %q, want \"a\", \"d\"", got.Window.Start, got.Window.End, first, last)
			}
		})
	}
}

// short is what TestChanges checks of an entry.
type short struct {
	Kind     windowing.EntryKind
	Start    int64
	Deleted  bool
	Count    int64
	Revision int64
}

func shortChanges(e *windowing.Engine) []short {
	var out []short
	e.Changes(func(en *windowing.Entry) {
		out = append(out, short{en.Kind, en.Start, en.Deleted, en.Count, en.Revision})
	})
	slices.SortFunc(out, func(a, b short) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Start, b.Start))
	})
	return out
}

// TestChanges: what each Changes call hands out, for one key with
// lateness 5: after a record at 6; again at once; after firing [0,10) at
// 9; after dropping it (and firing [5,15)) at 14; after the record's last
// window drops at 19; and for a record at 31 whose windows fire and drop
// between two calls. A stored entry that drops gives one tombstone; one
// that never was stored gives none.
func TestChanges(t *testing.T) {
	slice, window := windowing.SliceEntry, windowing.WindowEntry
	tests := map[string]struct {
		p    params
		want [6][]short
	}{
		"tumbling": {params{"tumbling", 10, 0, 0, 5, "on_watermark"}, [6][]short{
			{{slice, 0, false, 1, 0}},
			nil,
			{{slice, 0, false, 1, 1}},
			{{slice, 0, true, 0, 0}},
			nil,
			nil,
		}},
		"sliding": {params{"sliding", 10, 5, 0, 5, "on_watermark"}, [6][]short{
			{{slice, 5, false, 1, 0}},
			nil,
			{{window, 0, false, 0, 1}},
			{{window, 0, true, 0, 0}, {window, 5, false, 0, 1}},
			{{slice, 5, true, 0, 0}, {window, 5, true, 0, 0}},
			nil,
		}},
		"sliding on_close": {params{"sliding", 10, 5, 0, 5, "on_close"}, [6][]short{
			{{slice, 5, false, 1, 0}},
			nil,
			nil,
			nil,
			{{slice, 5, true, 0, 0}},
			nil,
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, tt.p.spec(sumCount...))
			var got [6][]short
			feed(e, 0, [][2]float64{{6, 1}})
			got[0] = shortChanges(e)
			got[1] = shortChanges(e)
			e.Advance(9)
			got[2] = shortChanges(e)
			e.Advance(14)
			got[3] = shortChanges(e)
			e.Advance(19)
			got[4] = shortChanges(e)
			feed(e, 1, [][2]float64{{31, 1}})
			e.Advance(100)
			got[5] = shortChanges(e)
			for i := range got {
				if !slices.Equal(got[i], tt.want[i]) {
					t.Errorf("Changes call %d handed out %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestRestoreRejects: entries that do not fit the config are refused with
// an error, not a panic. Each case changes a valid entry of key k (a
// record at 6 with allAggs) before restoring it into a fresh engine.
func TestRestoreRejects(t *testing.T) {
	tumbling := params{"tumbling", 10, 0, 0, 5, "on_watermark"}
	sliding := params{"sliding", 10, 5, 0, 5, "on_watermark"}
	otherMapping, err := ddsketch.NewDefaultDDSketch(0.05)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		p       params
		change  func(en *windowing.Entry)
		ok      bool
		dropped int64 // the previous owner's watermark: 0 drops no window of a record at 6
	}{
		"valid tumbling slice":            {tumbling, func(*windowing.Entry) {}, true, 0},
		"valid sliding slice":             {sliding, func(*windowing.Entry) {}, true, 0},
		"a nums slot too many":            {tumbling, func(en *windowing.Entry) { en.Nums = append(en.Nums, 0) }, false, 0},
		"a nums slot too few":             {sliding, func(en *windowing.Entry) { en.Nums = en.Nums[1:] }, false, 0},
		"no picks":                        {tumbling, func(en *windowing.Entry) { en.Picks = nil }, false, 0},
		"a set too many":                  {tumbling, func(en *windowing.Entry) { en.Sets = append(en.Sets, map[string]struct{}{}) }, false, 0},
		"a sketch too few":                {sliding, func(en *windowing.Entry) { en.Sketches = en.Sketches[1:] }, false, 0},
		"written before value counters":   {tumbling, func(en *windowing.Entry) { en.Nums = en.Nums[:len(en.Nums)-3] }, true, 0},
		"written before exact quantiles":  {tumbling, func(en *windowing.Entry) { en.Exact = nil }, true, 0},
		"an exact quantile too few":       {tumbling, func(en *windowing.Entry) { en.Exact = en.Exact[1:] }, false, 0},
		"257 exact values":                {tumbling, func(en *windowing.Entry) { en.Exact[0] = make([]float64, 257) }, false, 0},
		"nil sketch":                      {tumbling, func(en *windowing.Entry) { en.Sketches[0] = nil }, false, 0},
		"sketch of another kind":          {tumbling, func(en *windowing.Entry) { en.Sketches[0] = otherMapping }, false, 0},
		"tumbling slice off its boundary": {tumbling, func(en *windowing.Entry) { en.Start = 3 }, false, 0},
		"sliding slice off its boundary":  {sliding, func(en *windowing.Entry) { en.Start = 7 }, false, 0},
		"window entry for tumbling": {tumbling, func(en *windowing.Entry) {
			*en = windowing.Entry{Kind: windowing.WindowEntry, ID: en.ID, Split: en.Split, Start: 0, Revision: 1}
		}, false, 0},
		"window entry without its slice": {sliding, func(en *windowing.Entry) {
			*en = windowing.Entry{Kind: windowing.WindowEntry, ID: en.ID, Split: en.Split, Start: 20, Revision: 1}
		}, false, 0},
		"window entry off its boundary": {sliding, func(en *windowing.Entry) {
			*en = windowing.Entry{Kind: windowing.WindowEntry, ID: en.ID, Split: en.Split, Start: 3, Revision: 1}
		}, false, 0},
		"window entry never fired": {sliding, func(en *windowing.Entry) {
			*en = windowing.Entry{Kind: windowing.WindowEntry, ID: en.ID, Split: en.Split, Start: 0, Revision: 0}
		}, false, 0},
		"unknown kind":                  {tumbling, func(en *windowing.Entry) { en.Kind = 9 }, false, 0},
		"split past the id":             {tumbling, func(en *windowing.Entry) { en.Split = len(en.ID) + 1 }, false, 0},
		"negative split":                {tumbling, func(en *windowing.Entry) { en.Split = -1 }, false, 0},
		"key is not an object":          {tumbling, func(en *windowing.Entry) { en.ID = en.ID[:en.Split] + `"k"` }, false, 0},
		"slice of dropped windows only": {sliding, func(*windowing.Entry) {}, true, 19}, // already dropped: TestRestoreUnderLowerLateness
		"slice of one dropped window":   {sliding, func(*windowing.Entry) {}, true, 14},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a, _ := newEngine(t, tt.p.spec(allAggs...))
			k, kf := textKey("k")
			x := record.Text("x")
			n := record.Number(3)
			a.Add(&record.Record{Time: 6, Key: k, KeyFields: kf, Values: []record.Value{{}, n, n, n, n, x, x, x, n, n, x, x}})
			var en windowing.Entry
			a.Changes(func(e *windowing.Entry) { en = copyEntry(e) })
			tt.change(&en)
			b, _ := newEngine(t, tt.p.spec(allAggs...))
			err, panicked := restoreOne(b, &en, tt.dropped)
			if panicked != nil {
				t.Fatalf("Restore(%v, %d) panicked: %v", idOf(&en), tt.dropped, panicked)
			}
			if got := err == nil; got != tt.ok {
				t.Errorf("Restore(%v, %d) = %v, want an error: %v", idOf(&en), tt.dropped, err, !tt.ok)
			}
		})
	}
}

// TestRestoreUnderLowerLateness: allowed_lateness is a run setting
// (docs/changing-config.md#three-kinds-of-key): state written under 5 ms of lateness restores under 0. A window
// past the lower lateness at the previous owner's watermark is already
// dropped: its slice (and a sliding window's entry) is not restored,
// nothing fires for it, its tombstone goes in the next commit, and a
// record for it is late. The windows still open restore and fire as
// usual.
func TestRestoreUnderLowerLateness(t *testing.T) {
	k, kf := textKey("k")
	for _, p := range []params{{"tumbling", 10, 0, 0, 5, "on_watermark"}, {"sliding", 10, 5, 0, 5, "on_watermark"}} {
		t.Run(p.typ, func(t *testing.T) {
			a, _ := newEngine(t, p.spec(sumCount...))
			feed(a, 0, [][2]float64{{1, 1}, {11, 4}})
			a.Advance(12) // [0,10) fired, kept until 14 by the lateness
			store := newChangelog()
			if _, err := store.commit(a); err != nil {
				t.Fatal(err)
			}
			lower := p
			lower.lateness = 0
			b, c := newEngine(t, lower.spec(sumCount...))
			b.Advance(12) // the restored position's watermark
			if err := store.restore(b, nil); err != nil {
				t.Fatalf("restore under a lower lateness: %v", err)
			}
			b.FinishRestore()
			if len(c.got) != 0 {
				t.Errorf("FinishRestore emitted %v, want nothing (no window fires twice on time)", briefs(c.got))
			}
			var gone []int64
			b.Changes(func(en *windowing.Entry) {
				if en.Deleted {
					gone = append(gone, en.Start)
				}
			})
			if !slices.Contains(gone, 0) {
				t.Errorf("Changes after the restore handed out tombstones at %v, want the slice at 0's", gone)
			}
			if out := b.Add(&record.Record{Time: 2, Key: k, KeyFields: kf, Values: []record.Value{record.Number(1), {}}}); out.Kind != windowing.LateEvent {
				t.Errorf("a record at 2 after the restore is %v, want late: its window is dropped", out.Kind)
			}
			b.Advance(100)
			var sums []float64
			for _, r := range c.got {
				sums = append(sums, r.Aggregates[0].Num)
			}
			if want := map[string][]float64{"tumbling": {4}, "sliding": {4, 4}}[p.typ]; !slices.Equal(sums, want) {
				t.Errorf("after Advance(100) the sums fired are %v, want %v (the windows of the record at 11)", sums, want)
			}
		})
	}
}

// restoreOne is e.Restore(en, dropped), with a panic recovered.
func restoreOne(e *windowing.Engine, en *windowing.Entry, dropped int64) (err error, panicked any) {
	defer func() { panicked = recover() }()
	return e.Restore(en, dropped), nil
}

// TestChangesAfterRemovePartition: removing a partition forgets its
// pending changes only. Key c of partition 1 had the pool's pane before
// it was dropped; key d of partition 0 has it now.
func TestChangesAfterRemovePartition(t *testing.T) {
	e, _ := newEngine(t, params{"tumbling", 5, 0, 0, 0, "on_watermark"}.spec(sumCount...))
	c, cf := textKey("c")
	d, df := textKey("d")
	e.Add(rec(1, 0, c, cf, 1, 1))
	e.Advance(4) // [0,5) fires and drops: c's pane is free
	e.Add(rec(0, 0, d, df, 6, 1))
	e.RemovePartition(1)
	got := shortChanges(e)
	if want := []short{{windowing.SliceEntry, 5, false, 1, 0}}; !slices.Equal(got, want) {
		t.Errorf("Changes after RemovePartition(1) handed out %v, want %v", got, want)
	}
}
