package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// Generations (docs/changing-config.md#generations-and-the-cut-over): the operators of two or three generations of
// windows side by side, each fed every record, cut over at run time.

// seamCase is one window kind's behaviour at a seam T = 20: a record at
// T-1 and one at T, given to the old generation (cut over at T) and to the
// new one (From T), and the windows each then holds.
func TestGenerationSeam(t *testing.T) {
	const T = 20
	count := []windowing.Aggregate{{Fn: windowing.FnCount}}
	early := windowing.EarlySpec{Every: 1000, Event: true}
	tests := map[string]struct {
		spec           windowing.Spec
		old, new       [2]windowing.Outcome // of the records at T-1 and T
		oldWins, newWs []string             // their windows at the end: "[start,end) n=count"
	}{
		"tumbling": {windowing.Spec{Kind: windowing.KindTumbling, Size: 10},
			[2]windowing.Outcome{windowing.Aggregated, windowing.OtherGeneration}, [2]windowing.Outcome{windowing.OtherGeneration, windowing.Aggregated},
			[]string{"[10,20) n=1 on_time"}, []string{"[20,30) n=1 on_time"}},
		// The old generation's window [15, 25) starts before T: it takes
		// the record at T too. The new one's first window starts at T.
		"sliding": {windowing.Spec{Kind: windowing.KindSliding, Size: 10, Slide: 5},
			[2]windowing.Outcome{windowing.Aggregated, windowing.Aggregated}, [2]windowing.Outcome{windowing.OtherGeneration, windowing.Aggregated},
			[]string{"[10,20) n=1 on_time", "[15,25) n=2 on_time"}, []string{"[20,30) n=1 on_time"}},
		"calendar": {windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: time.UTC},
			[2]windowing.Outcome{windowing.Aggregated, windowing.OtherGeneration}, [2]windowing.Outcome{windowing.OtherGeneration, windowing.Aggregated},
			[]string{"[-86400000,0) n=1 on_time"}, []string{"[0,86400000) n=1 on_time"}},
		"session": {windowing.Spec{Kind: windowing.KindSession, Gap: 5},
			[2]windowing.Outcome{windowing.Aggregated, windowing.OtherGeneration}, [2]windowing.Outcome{windowing.OtherGeneration, windowing.Aggregated},
			[]string{"[19,24) n=1 on_time"}, []string{"[20,25) n=1 on_time"}},
		// The global window fired Final at the cut-over and is gone: a
		// record before T is late in the old generation, and the new one
		// takes none before T.
		"global": {windowing.Spec{Kind: windowing.KindGlobal, Early: early},
			[2]windowing.Outcome{windowing.LateEvent, windowing.OtherGeneration}, [2]windowing.Outcome{windowing.OtherGeneration, windowing.Aggregated},
			[]string{"global n=2 final"}, []string{"global n=1 final"}},
		// Count windows are cut by arrival: the old generation takes no
		// record after the cut-over, and its partial window fired Final.
		"count": {windowing.Spec{Kind: windowing.KindCount, Size: 3},
			[2]windowing.Outcome{windowing.OtherGeneration, windowing.OtherGeneration}, [2]windowing.Outcome{windowing.Aggregated, windowing.Aggregated},
			[]string{"[5,11) n=2 final"}, []string{"[19,21) n=2 final"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			T := int64(T)
			if tt.spec.Kind == windowing.KindCalendar {
				T = 0 // midnight
			}
			key, fields := textKey("a")
			r := func(ts int64) *record.Record {
				return &record.Record{Time: ts, Key: key, KeyFields: fields, Values: []record.Value{{}}}
			}
			spec := tt.spec
			spec.Aggregates = count
			oldOut, newOut := &collector{}, &collector{}
			old := newOperator(t, spec, oldOut)
			if tt.spec.Kind == windowing.KindGlobal || tt.spec.Kind == windowing.KindCount {
				for _, ts := range []int64{5, 10} { // what the old generation holds at the cut-over
					if o := old.Add(r(ts)); o.Kind != windowing.Aggregated {
						t.Fatalf("old.Add(t=%d) = %v before the cut-over", ts, o)
					}
				}
			}
			old.CutOver(T)
			spec.From, spec.FromSet = T, true
			nw := newOperator(t, spec, newOut)
			for i, ts := range []int64{T - 1, T} {
				if o := old.Add(r(ts)); o.Kind != tt.old[i] {
					t.Errorf("old.Add(t=%d) = %v, want %v", ts, o.Kind, tt.old[i])
				}
				if o := nw.Add(r(ts)); o.Kind != tt.new[i] {
					t.Errorf("new.Add(t=%d) = %v, want %v", ts, o.Kind, tt.new[i])
				}
			}
			if tt.spec.Kind == windowing.KindGlobal || tt.spec.Kind == windowing.KindCount {
				nw.CutOver(1000) // its partial windows fire Final too
			}
			for _, op := range []windowing.Operator{old, nw} {
				op.Advance(math.MaxInt64 - 1)
				windowing.CheckInvariants(op)
			}
			if got := windowsOf(oldOut.got); !slices.Equal(got, tt.oldWins) {
				t.Errorf("old generation's windows %q, want %q", got, tt.oldWins)
			}
			if got := windowsOf(newOut.got); !slices.Equal(got, tt.newWs) {
				t.Errorf("new generation's windows %q, want %q", got, tt.newWs)
			}
			if n := old.OpenWindows(); n != 0 {
				t.Errorf("old.OpenWindows() = %d after its last window dropped, want 0: retired", n)
			}
		})
	}
}

func windowsOf(rs []windowing.Result) []string {
	var out []string
	for _, r := range rs {
		if r.Firing == windowing.Early {
			continue
		}
		w := fmt.Sprintf("[%d,%d)", r.Window.Start, r.Window.End)
		if r.Window.IsGlobal() {
			w = "global"
		}
		out = append(out, fmt.Sprintf("%s n=%d %v", w, r.Count, r.Firing))
	}
	return out
}

// TestGenerationsMatchReference feeds the operators of two or three
// generations of time windows the same random stream, cutting over at
// run time at the first window start of the new generation after the
// latest time seen, with changelog commits and crashes (the generation's
// operator restored from its changelog, its bounds given again), and
// requires each generation's results to be the reference's for its
// settings over every record, for the windows that start in its span
// [From, T) (sessions: of the records whose time is in it). Every record
// is in a window of some generation: none is lost at a seam.
func TestGenerationsMatchReference(t *testing.T) {
	gens := map[string][]params{
		"tumbling 5 to 10":              {{"tumbling", 5, 0, 0, 2, "on_watermark"}, {"tumbling", 10, 0, 0, 2, "on_watermark"}},
		"tumbling 10 to 4, offset":      {{"tumbling", 10, 0, 0, 3, "on_watermark"}, {"tumbling", 4, 0, 1, 0, "on_close"}},
		"tumbling to sliding to tumbl.": {{"tumbling", 5, 0, 0, 2, "on_watermark"}, {"sliding", 9, 3, 0, 4, "on_watermark"}, {"tumbling", 6, 0, 2, 1, "on_close"}},
		"sliding to sliding":            {{"sliding", 6, 2, 0, 3, "on_watermark"}, {"sliding", 10, 4, -1, 3, "on_watermark"}},
		"three sliding, on_close":       {{"sliding", 7, 3, 0, 4, "on_close"}, {"sliding", 8, 1, 0, 2, "on_close"}, {"sliding", 12, 4, 3, 0, "on_watermark"}},
		"session to session":            {{"session", 4, 0, 0, 3, "on_watermark"}, {"session", 9, 0, 0, 0, "on_watermark"}},
		"three sessions":                {{"session", 3, 0, 0, 2, "on_watermark"}, {"session", 6, 0, 0, 5, "on_close"}, {"session", 2, 0, 0, 1, "on_watermark"}},
	}
	for name, ps := range gens {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for seed := range max(1, propertySeeds()/3) { // 13 seeds, 2 under -race or -short
				for _, aggs := range [][]windowing.Aggregate{allAggs, fifoAggs} {
					runGenerations(t, ps, aggs, windowing.EarlySpec{}, seed)
				}
			}
		})
	}
	// Early firings (event time) in every generation.
	t.Run("early firings", func(t *testing.T) {
		t.Parallel()
		for seed := range max(1, propertySeeds()/6) {
			runGenerations(t, gens["tumbling to sliding to tumbl."], allAggs, windowing.EarlySpec{Every: 3, Event: true}, seed)
			runGenerations(t, gens["session to session"], allAggs, windowing.EarlySpec{Every: 4, Event: true}, seed)
		}
	})
}

// generation is one generation in runGenerations: its operator and
// changelog, its reference over every record (time windows) or over the
// records of its span (sessions), and its span.
type generation struct {
	p           params
	spec        windowing.Spec
	op          windowing.Operator
	out         *collector
	ref         model
	store       *changelog
	from, until int64
}

func (g *generation) takes(ts int64) bool { return ts >= g.from && ts < g.until }

func runGenerations(t *testing.T, ps []params, aggs []windowing.Aggregate, early windowing.EarlySpec, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	name := fmt.Sprintf("seed %d, %d aggregates", seed, len(aggs))
	sg := &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, wm: math.MinInt64, gap: 3, age: 20}
	start := func(p params, from int64, fromSet bool, wm int64) *generation {
		g := &generation{p: p, spec: p.spec(aggs...), out: &collector{}, store: newChangelog(), from: math.MinInt64, until: math.MaxInt64}
		g.spec.Early = early
		if fromSet {
			g.spec.From, g.spec.FromSet, g.from = from, true, from
		}
		g.op = newOperator(t, g.spec, g.out)
		if p.typ == "session" {
			ref := newSessionRef(p.size, p.lateness, p.emit == "on_close", aggs)
			ref.early = early
			g.ref = ref
		} else {
			ref := newReference(p, aggs)
			ref.early = early
			g.ref = ref
		}
		g.op.Advance(wm)
		g.ref.Advance(wm)
		return g
	}
	gens := []*generation{start(ps[0], 0, false, math.MinInt64)}
	const steps = 600
	cutAt := steps / len(ps)
	for step := range steps {
		if step > 0 && step%cutAt == 0 && step/cutAt < len(ps) {
			// The change: T is the next generation's first window start
			// after every time seen.
			next := ps[step/cutAt]
			T := next.spec().CutoverStart(sg.maxTs + 1)
			last := gens[len(gens)-1]
			last.op.CutOver(T)
			last.until = T
			gens = append(gens, start(next, T, true, sg.wm))
		}
		switch r := rng.IntN(1000); {
		case r < 700:
			rec := sg.record()
			taken := false
			for _, g := range gens {
				o := g.op.Add(rec)
				taken = taken || o.Kind != windowing.OtherGeneration
				if g.p.typ != "session" || g.takes(rec.Time) {
					g.ref.Add(rec)
				}
			}
			if !taken {
				t.Fatalf("%s: step %d: a record at %d is in no generation's windows (spans %v)", name, step, rec.Time, spans(gens))
			}
		case r < 950:
			sg.wm = max(sg.wm, sg.maxTs-rng.Int64N(8))
			for _, g := range gens {
				g.op.Advance(sg.wm)
				g.ref.Advance(sg.wm)
			}
		case r < 980:
			for _, g := range gens {
				if _, err := g.store.commit(g.op); err != nil {
					t.Fatalf("%s: step %d: commit: %v", name, step, err)
				}
			}
		default:
			g := gens[rng.IntN(len(gens))]
			g.op = crashGeneration(t, fmt.Sprintf("%s: step %d", name, step), g, rng)
		}
		for i, g := range gens {
			windowing.CheckInvariants(g.op)
			checkGeneration(t, fmt.Sprintf("%s: step %d: generation %d", name, step, i), g, aggs)
		}
	}
	for i, g := range gens {
		g.op.Advance(math.MaxInt64)
		g.ref.Advance(math.MaxInt64)
		checkGeneration(t, fmt.Sprintf("%s: flush: generation %d", name, i), g, aggs)
		if n := g.op.OpenWindows(); n != 0 {
			t.Errorf("%s: generation %d: OpenWindows() = %d at the end of time, want 0", name, i, n)
		}
		if len(g.out.got) == 0 {
			t.Errorf("%s: generation %d (span [%d,%d)) fired nothing: the stream misses it", name, i, g.from, g.until)
		}
	}
}

// crashGeneration is crashOperator for a generation: its operator gets
// its cut-over, if it had one, before its restore.
func crashGeneration(t *testing.T, at string, g *generation, rng *rand.Rand) windowing.Operator {
	t.Helper()
	if _, err := g.store.commit(g.op); err != nil {
		t.Fatalf("%s: crash: commit: %v", at, err)
	}
	r := newOperator(t, g.spec, g.out)
	if g.until != math.MaxInt64 {
		r.CutOver(g.until)
	}
	r.Advance(g.op.Watermark())
	if err := g.store.restore(r, rng); err != nil {
		t.Fatalf("%s: crash: %v", at, err)
	}
	r.FinishRestore()
	var changed []entryID
	r.Changes(func(en *windowing.Entry) { changed = append(changed, idOf(en)) })
	if len(changed) > 0 {
		t.Fatalf("%s: crash: Changes after the restore at the same watermark handed out %v, want nothing", at, changed)
	}
	return r
}

func spans(gens []*generation) []string {
	var out []string
	for _, g := range gens {
		out = append(out, fmt.Sprintf("[%d,%d)", g.from, g.until))
	}
	return out
}

// checkGeneration requires g's operator to have emitted its reference's
// results: for time windows those of the windows that start in g's span.
func checkGeneration(t *testing.T, at string, g *generation, aggs []windowing.Aggregate) {
	t.Helper()
	want := g.ref.results()
	if g.p.typ != "session" {
		want = slices.DeleteFunc(slices.Clone(want), func(r windowing.Result) bool { return !g.takes(r.Window.Start) })
	}
	got := g.out.got
	if len(got) != len(want) {
		t.Fatalf("%s (span [%d,%d)): %d results, want %d\ngot  %v\nwant %v", at, g.from, g.until, len(got), len(want), got, want)
	}
	for i := range got {
		if err := sameResult(got[i], want[i], aggs); err != nil {
			t.Fatalf("%s: result %d: %v\ngot  %+v\nwant %+v", at, i, err, got[i], want[i])
		}
	}
}

// TestCountGenerations: count windows are cut by arrival. The old
// generation's partial windows fire Final at the cut-over with what they
// hold, by key, and it takes no record after; every record is counted in
// one window of each key and generation.
func TestCountGenerations(t *testing.T) {
	for name, spec := range map[string]windowing.Spec{
		"tumbling":              {Kind: windowing.KindCount, Size: 3},
		"tumbling with timeout": {Kind: windowing.KindCount, Size: 4, Timeout: 5},
		"sliding":               {Kind: windowing.KindCount, Size: 4, Slide: 2},
		"sliding not multiple":  {Kind: windowing.KindCount, Size: 5, Slide: 3},
	} {
		t.Run(name, func(t *testing.T) {
			spec.Aggregates = []windowing.Aggregate{{Fn: windowing.FnCount}, {Fn: windowing.FnSum}}
			rng := rand.New(rand.NewPCG(3, 5))
			oldOut, newOut := &collector{}, &collector{}
			old := newOperator(t, spec, oldOut)
			var nw windowing.Operator
			seen := map[string]int64{} // records of each key in the old generation
			ref := newCountRef(spec.Size, spec.Slide, spec.Timeout, spec.Aggregates)
			refAfter := newCountRef(spec.Size, spec.Slide, spec.Timeout, spec.Aggregates)
			var before int
			store := newChangelog()
			for i := range 200 {
				if i == 60 || i == 101 {
					if _, err := store.commit(old); err != nil {
						t.Fatal(err)
					}
				}
				key, fields := textKey(string(rune('a' + rng.IntN(4))))
				r := &record.Record{Time: int64(i), Key: key, KeyFields: fields, Values: []record.Value{{}, record.Number(float64(i))}}
				if i == 100 {
					before = len(oldOut.got)
					old.CutOver(100)
					nw = newOperator(t, spec, newOut)
				}
				if nw == nil {
					if o, want := old.Add(r), ref.Add(r); o != want {
						t.Fatalf("old.Add(%d) = %v, want %v", i, o, want)
					}
					seen[key]++
					continue
				}
				if o := old.Add(r); o.Kind != windowing.OtherGeneration {
					t.Fatalf("old.Add(%d) after the cut-over = %v, want OtherGeneration", i, o)
				}
				if o, want := nw.Add(r), refAfter.Add(r); o != want {
					t.Fatalf("new.Add(%d) = %v, want %v", i, o, want)
				}
			}
			checkOperator(t, "new generation", nw, refAfter, spec.Aggregates, newOut.got, 0)
			got := oldOut.got
			if err := sameResults(got[:before], ref.out, spec.Aggregates); err != nil {
				t.Fatalf("old generation before the cut-over: %v", err)
			}
			finals := got[before:]
			keys := map[string]bool{}
			for i, r := range finals {
				if r.Firing != windowing.Final || keys[r.Key] || i > 0 && finals[i-1].Key >= r.Key {
					t.Fatalf("cut-over firing %d: %+v, want Final, one per key, by key", i, r)
				}
				keys[r.Key] = true
			}
			// Without a slide, every record of the old generation is in
			// exactly one of its windows.
			if spec.Slide == 0 {
				counted := map[string]int64{}
				for _, r := range got {
					counted[r.Key] += r.Count
				}
				for k, n := range seen {
					if counted[k] != n {
						t.Errorf("key %s: %d records counted in the old generation's windows, want %d", k, counted[k], n)
					}
				}
			} else {
				for _, r := range finals {
					want := min(spec.Size, seen[r.Key]-(seen[r.Key]-1)/spec.Slide*spec.Slide+spec.Size-spec.Slide)
					if r.Count != want || r.Seq != (seen[r.Key]+spec.Slide-1)/spec.Slide-1 {
						t.Errorf("key %s (%d records): Final count %d seq %d, want %d and %d", r.Key, seen[r.Key], r.Count, r.Seq, want, (seen[r.Key]+spec.Slide-1)/spec.Slide-1)
					}
				}
			}
			if n := old.OpenWindows(); n != 0 {
				t.Errorf("old.OpenWindows() = %d after the cut-over, want 0: retired", n)
			}
			windowing.CheckInvariants(old)
			// Its changelog holds no record: a tumbling key's one entry
			// says no window is open (Count 0), a slice is tombstoned.
			for id, en := range store.entries {
				if en.Count != 0 {
					t.Errorf("the old generation's changelog after the cut-over holds %v with %d records", id, en.Count)
				}
			}
			r := newOperator(t, spec, &collector{})
			r.CutOver(100)
			if err := store.restore(r, rng); err != nil {
				t.Fatalf("restore after the cut-over: %v", err)
			}
			r.FinishRestore()
			if n := r.OpenWindows(); n != 0 {
				t.Errorf("restored after the cut-over: OpenWindows() = %d, want 0", n)
			}
		})
	}
}

func sameResults(got, want []windowing.Result, aggs []windowing.Aggregate) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d results, want %d\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range got {
		if err := sameResult(got[i], want[i], aggs); err != nil {
			return fmt.Errorf("result %d: %v\ngot  %+v\nwant %+v", i, err, got[i], want[i])
		}
	}
	return nil
}

// TestGlobalGenerations: the old generation's global windows fire Final
// once at the cut-over with their running aggregate, by key, and are
// dropped; the new generation's take the records at or after T.
func TestGlobalGenerations(t *testing.T) {
	spec := windowing.Spec{Kind: windowing.KindGlobal, Early: windowing.EarlySpec{Every: 10, Event: true},
		Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}, {Fn: windowing.FnSum}}}
	oldOut, newOut := &collector{}, &collector{}
	old := newOperator(t, spec, oldOut)
	sums := map[string]float64{}
	add := func(op windowing.Operator, ts int64, k string) windowing.AddResult {
		key, fields := textKey(k)
		return op.Add(&record.Record{Time: ts, Key: key, KeyFields: fields, Values: []record.Value{{}, record.Number(float64(ts))}})
	}
	for ts := range int64(50) {
		k := string(rune('a' + ts%3))
		add(old, ts, k)
		sums[k] += float64(ts)
		old.Advance(ts - 2)
	}
	before := len(oldOut.got)
	store := newChangelog()
	if _, err := store.commit(old); err != nil || len(store.entries) != 3 {
		t.Fatalf("commit before the cut-over: %d entries, %v; want 3", len(store.entries), err)
	}
	old.CutOver(50)
	if _, err := store.commit(old); err != nil || len(store.entries) != 0 {
		t.Errorf("commit after the cut-over: %d entries left, %v; want every window tombstoned", len(store.entries), err)
	}
	spec.From, spec.FromSet = 50, true
	nw := newOperator(t, spec, newOut)
	nw.Advance(47)
	finals := oldOut.got[before:]
	if len(finals) != 3 || old.OpenWindows() != 0 {
		t.Fatalf("cut-over firings %v, open %d; want a Final for each of 3 keys, none open", finals, old.OpenWindows())
	}
	for i, r := range finals {
		k := string(rune('a' + i))
		if r.Firing != windowing.Final || r.Aggregates[1].Num != sums[k] || !r.Window.IsGlobal() {
			t.Errorf("cut-over firing %d: %+v, want key %s's Final with sum %v", i, r, k, sums[k])
		}
	}
	if o := add(old, 49, "a"); o.Kind != windowing.LateEvent {
		t.Errorf("old.Add(49) after the cut-over = %v, want LateEvent (its window is gone)", o)
	}
	if o := add(nw, 49, "a"); o.Kind != windowing.OtherGeneration {
		t.Errorf("new.Add(49) = %v, want OtherGeneration", o)
	}
	if o := add(nw, 50, "a"); o.Kind != windowing.Aggregated {
		t.Errorf("new.Add(50) = %v, want Aggregated", o)
	}
	nw.Advance(math.MaxInt64)
	if got := newOut.got; len(got) != 1 || got[0].Count != 1 || got[0].Aggregates[1].Num != 50 {
		t.Errorf("new generation's results %v, want one window of the record at 50", got)
	}
	if len(oldOut.got) != before+3 {
		t.Errorf("old generation fired %v after the cut-over, want nothing more", oldOut.got[before+3:])
	}
}
