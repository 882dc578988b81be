package pipeline_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/windowing"
)

// calendarStream is n records over parts partitions, 5 keys, one every
// 5 to 10 minutes of event time in order from midnight of 29 March 2030
// in Europe/Berlin (the spring DST change, a 23-hour day, two days in):
// about three days.
func calendarStream(seed uint64, n, parts int) []crashInput {
	zone, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	t := time.Date(2030, 3, 29, 0, 0, 0, 0, zone).UnixMilli()
	next := make([]int64, parts)
	var out []crashInput
	for range n {
		t += 300_000 + rng.Int64N(300_000)
		p := rng.IntN(parts)
		out = append(out, crashInput{int32(p), next[p], fmt.Sprintf(`{"k": "k%d", "t": %d, "v": %d}`, rng.IntN(5), t, rng.IntN(9))})
		next[p]++
	}
	return out
}

// TestGenerationCutOverCalendar: calendar windows cut over both ways
// (docs/changing-config.md#where-t-falls): 6-hour windows to local days in Europe/Berlin (T on the
// next local midnight), and local days to 6-hour windows (T on the next
// 6-hour boundary, inside the old generation's day, which it finishes).
// Each partition's windows that start before its T are the old config's
// replay of the whole stream, those from T the new one's, across the
// 23-hour day.
func TestGenerationCutOverCalendar(t *testing.T) {
	const parts = 2
	const aggs = "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"
	hours := genConfig("1", "{type: tumbling, size: 6h, allowed_lateness: 1h}", aggs)
	days := genConfig("1", "{type: tumbling, calendar: day, timezone: Europe/Berlin, allowed_lateness: 1h}", aggs)
	ins := calendarStream(5, 600, parts)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ old, next string }{
		"6h to days": {hours, days[:len(days)-len("1}\n")] + "2}\n"},
		"days to 6h": {days, hours[:len(hours)-len("1}\n")] + "2}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			want1, want2 := replayOf(t, c.old, ins, parts), replayOf(t, c.next, ins, parts)
			short := false // a new-generation window shorter than 24h: the DST day
			for _, at := range []int{100, 250, 400} {
				got, second, _ := cutOverRun(t, c.old, c.next, ins, at, parts)
				for id := range int32(parts) {
					rep := second.GenerationReport(id)
					if rep.Verdict != config.NewGeneration || rep.Live != 2 {
						t.Fatalf("at %d: partition %d's restore %+v, want a new generation beside the old one", at, id, rep)
					}
					T := rep.Cutover
					if name == "6h to days" && time.UnixMilli(T).In(berlin).Format("15:04") != "00:00" || name == "days to 6h" && T%(6*3600_000) != 0 {
						t.Errorf("at %d: partition %d cut over at %s, want a window start of the new generation", at, id, time.UnixMilli(T).In(berlin))
					}
					side := func(before bool) func(r windowing.Result) bool {
						return func(r windowing.Result) bool { return r.Partition != id || (r.Window.Start < T) != before }
					}
					for _, s := range []struct {
						before bool
						want   []windowing.Result
					}{{true, want1}, {false, want2}} {
						g := sortResults(slices.DeleteFunc(slices.Clone(got), side(s.before)))
						w := sortResults(slices.DeleteFunc(slices.Clone(s.want), side(s.before)))
						if len(w) == 0 {
							t.Fatalf("at %d: partition %d has no window on one side of T=%d: the seam goes untested", at, id, T)
						}
						if !reflect.DeepEqual(g, w) {
							t.Fatalf("at %d: partition %d's windows (before T=%d: %v) differ from the replay:\n%s", at, id, T, s.before, firstDiff(g, w))
						}
					}
					for _, r := range got {
						if r.Partition == id && r.Window.Start >= T && r.Window.End-r.Window.Start == 23*3600_000 {
							short = true
						}
					}
				}
			}
			if name == "6h to days" && !short {
				t.Errorf("no window of the new generation is the 23-hour day: the DST change goes untested")
			}
		})
	}
}
