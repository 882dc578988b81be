package windowing_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// sketchBound is the quantile sketch's relative accuracy.
const sketchBound = 0.01

var allAggs = []windowing.Aggregate{
	{Fn: windowing.FnCount},
	{Fn: windowing.FnSum},
	{Fn: windowing.FnMin},
	{Fn: windowing.FnMax},
	{Fn: windowing.FnAvg},
	{Fn: windowing.FnFirst},
	{Fn: windowing.FnLast},
	{Fn: windowing.FnCountDistinct},
	{Fn: windowing.FnQuantile, Q: 0.5},
	{Fn: windowing.FnQuantile, Q: 0.9},
	{Fn: windowing.FnTopK, K: 2},
	{Fn: windowing.FnCountField},
}

// fifoAggs are the aggregates windows merge through the two-stacks
// (fifoAgg) path when they span 3 panes or more; allAggs, with
// count_distinct, quantile and top_k, always take the plain merge. The
// record's values are positional: count(field) reads value 7 there.
var fifoAggs = append(allAggs[:7:7], windowing.Aggregate{Fn: windowing.FnCountField})

var propertyCombos = map[string]params{
	"tumbling":                          {"tumbling", 5, 0, 0, 0, "on_watermark"},
	"tumbling lateness offset":          {"tumbling", 5, 0, 2, 3, "on_watermark"},
	"tumbling negative offset":          {"tumbling", 4, 0, -3, 6, "on_watermark"},
	"tumbling on_close":                 {"tumbling", 5, 0, 1, 4, "on_close"},
	"sliding multiple":                  {"sliding", 6, 2, 0, 0, "on_watermark"},
	"sliding multiple lateness":         {"sliding", 6, 2, 1, 5, "on_watermark"},
	"sliding not multiple":              {"sliding", 7, 3, 0, 4, "on_watermark"},
	"sliding not multiple offset":       {"sliding", 10, 4, -1, 3, "on_watermark"},
	"sliding not multiple on_close":     {"sliding", 7, 3, 2, 4, "on_close"},
	"sliding slide equals size":         {"sliding", 3, 3, 1, 2, "on_watermark"},
	"sliding many windows on_close":     {"sliding", 8, 1, 0, 2, "on_close"},
	"sliding many windows on_watermark": {"sliding", 8, 1, 0, 2, "on_watermark"},
	"sliding 10 panes offset lateness":  {"sliding", 20, 2, 3, 7, "on_watermark"},
	"sliding 9 panes not multiple":      {"sliding", 9, 2, -1, 5, "on_watermark"},
	"sliding 12 panes on_close":         {"sliding", 12, 1, 5, 6, "on_close"},
}

// propertySeeds is how many random streams each property test case runs:
// 40, or 6 under -short or the race detector, which has nothing to find in
// the one-goroutine engine and slows it ~6× (CI runs both: the plain run
// covers every seed). -property.seeds overrides it.
func propertySeeds() uint64 {
	switch {
	case *seedsFlag > 0:
		return *seedsFlag
	case testing.Short() || raceEnabled:
		return 6
	}
	return 40
}

var seedsFlag = flag.Uint64("property.seeds", 0, "random streams per property test case (0: 40, or 6 under -short or -race)")

// TestEngineMatchesReference drives the engine and the naive reference with
// the same random streams (random keys and partitions, out-of-order times,
// random watermark advances, removed partitions, changelog commits, and
// crashes: the engine replaced by a fresh one restored from the changelog
// at the same watermark) and requires the same outcomes, results and open
// windows. The reference knows nothing of commits and crashes.
func TestEngineMatchesReference(t *testing.T) {
	for name, p := range propertyCombos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var seen seen
			for seed := range propertySeeds() {
				for _, aggs := range [][]windowing.Aggregate{allAggs, fifoAggs} {
					for _, gap := range []int64{3, 25} {
						compareWithReference(t, p, windowing.EarlySpec{}, aggs, gap, seed, 400, &seen)
					}
				}
			}
			if seen.outcomes[windowing.LateEvent] == 0 || p.typ == "sliding" && p.size > p.slide && seen.outcomes[windowing.PartiallyLate] == 0 {
				t.Errorf("outcomes seen %v: the streams miss late or partially late records", seen.outcomes)
			}
			if seen.restored[windowing.SliceEntry] == 0 || p.typ == "sliding" && p.size > p.slide && p.lateness > 0 && p.emit == "on_watermark" && seen.restored[windowing.WindowEntry] == 0 {
				t.Errorf("entries restored %v: the crashes miss slices or sliding windows", seen.restored)
			}
		})
	}
}

// seen counts what the random streams exercised.
type seen struct {
	outcomes [3]int                         // by Outcome
	restored [windowing.WindowEntry + 1]int // by EntryKind
	early    int                            // early firings
}

type streamGen struct {
	rng     *rand.Rand
	offsets [3]int64
	maxTs   int64
	wm      int64
	gap     int64 // the latest time advances by up to gap-1 per record
	age     int64 // a record is up to age-1 older than the latest time
}

// record returns a random record: one of 6 keys (numbers and strings), on
// one of 3 partitions, up to g.age-1 ms older than the latest time seen. A large
// gap leaves keys with gaps between their panes. Its two fields, a number n
// and a number or text x, are missing or null (the null Value) about one
// time in five and one in eight.
func (g *streamGen) record() *record.Record {
	part := g.rng.Int32N(3)
	var key string
	var fields []record.Value
	if k := g.rng.IntN(6); k < 3 {
		key, fields = numKey(float64(k*7 - 5))
	} else {
		key, fields = textKey(string(rune('a' + k)))
	}
	g.maxTs += g.rng.Int64N(g.gap)
	ts := g.maxTs - g.rng.Int64N(g.age)
	// The nulls take no draws of their own, so the streams' times, keys
	// and values stay those the tests were tuned with.
	n := record.Number(float64(g.rng.IntN(41) - 20))
	if n.Num > 12 {
		n = record.NullValue
	}
	x := record.Number(float64(g.rng.IntN(5)))
	if g.rng.IntN(2) == 0 {
		x = record.Text(string(rune('p' + g.rng.IntN(4))))
		if x.Str == "s" {
			x = record.NullValue
		}
	}
	g.offsets[part]++
	return &record.Record{Partition: part, Offset: g.offsets[part], Time: ts, Key: key, KeyFields: fields,
		Values: []record.Value{{}, n, n, n, n, x, x, x, n, n, x, x}}
}

func compareWithReference(t *testing.T, p params, early windowing.EarlySpec, aggs []windowing.Aggregate, gap int64, seed uint64, steps int, seen *seen) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	spec := p.spec(aggs...)
	spec.Early = early
	ref := newReference(p, aggs)
	ref.early = early
	s := &stream{name: fmt.Sprintf("seed %d, %d aggregates, gap %d", seed, len(aggs), gap), spec: spec, ref: ref, rng: rng,
		gen: &streamGen{rng: rng, maxTs: rng.Int64N(40) - 30, wm: math.MinInt64, gap: gap, age: max(13, p.size+p.lateness+4)},
		add: 725, tick: 945, commit: 965, crash: 970}
	tl := s.run(t, steps)
	for k, n := range tl.outcomes {
		seen.outcomes[k] += n
	}
	for k := range seen.restored {
		seen.restored[k] += tl.restored[k]
	}
	for _, r := range tl.results {
		if r.Firing == windowing.Early {
			seen.early++
		}
	}
}

func sameResult(got, want windowing.Result, aggs []windowing.Aggregate) error {
	ga, wa := got.Aggregates, want.Aggregates
	got.Aggregates, want.Aggregates = nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("result differs")
	}
	for i, a := range aggs {
		if a.Fn != windowing.FnQuantile {
			if ga[i] != wa[i] {
				return fmt.Errorf("fn %d = %+v, want %+v", a.Fn, ga[i], wa[i])
			}
			continue
		}
		switch w := wa[i].Num; {
		case ga[i].Null != wa[i].Null:
			return fmt.Errorf("fn %d %v = %+v, want %+v", a.Fn, a.Q, ga[i], wa[i])
		case want.Count <= 256 && ga[i] != wa[i]: // at most 256 values: exact (docs/semantics.md#aggregates)
			return fmt.Errorf("fn %d %v = %v, want %v exactly", a.Fn, a.Q, ga[i].Num, w)
		case math.Abs(ga[i].Num-w) > sketchBound*math.Abs(w):
			return fmt.Errorf("fn %d %v = %v, want %v within %v", a.Fn, a.Q, ga[i].Num, w, sketchBound)
		}
	}
	return nil
}

// earlyCombos are the window configurations the early-firing property
// test runs, each with event-time and processing-time early firings.
var earlyCombos = []string{"tumbling", "tumbling lateness offset", "tumbling on_close", "sliding multiple lateness",
	"sliding not multiple on_close", "sliding 10 panes offset lateness", "sliding many windows on_watermark"}

// TestEngineEarlyMatchesReference is TestEngineMatchesReference with early
// firings: every 3 and 7 in event time (ticks often crossed several at
// once, and at windows' maxTimestamps), every 5 in processing time.
func TestEngineEarlyMatchesReference(t *testing.T) {
	for _, name := range earlyCombos {
		p := propertyCombos[name]
		for _, early := range []windowing.EarlySpec{{Every: 3, Event: true}, {Every: 7, Event: true}, {Every: 5}} {
			t.Run(fmt.Sprintf("%s/every %d event %v", name, early.Every, early.Event), func(t *testing.T) {
				t.Parallel()
				var seen seen
				for seed := range extraSeeds() {
					for _, aggs := range [][]windowing.Aggregate{allAggs, fifoAggs} {
						compareWithReference(t, p, early, aggs, 3, seed, 400, &seen)
					}
				}
				if seen.restored[windowing.SliceEntry] == 0 || seen.early == 0 {
					t.Errorf("entries restored %v, %d early firings: the streams miss restores or early firings", seen.restored, seen.early)
				}
			})
		}
	}
}

// extraSeeds is how many streams the property tests of the extra window
// kinds (early firings, calendar windows) run per case: a fifth of
// propertySeeds, at least 2, as they multiply the cases.
func extraSeeds() uint64 { return max(2, propertySeeds()/5) }
