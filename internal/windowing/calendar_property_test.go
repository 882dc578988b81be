package windowing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// quarter is the grid of the brute-force calendar: every zone offset and
// every transition of the zones tested is a multiple of 15 minutes.
const quarter = 15 * 60 * 1000

// bruteMidnight is where local date y-m-d begins in loc, from docs/windows.md's
// words alone: the first instant whose wall clock reads that date's 00:00
// or later, found by walking a 15-minute grid (no zone bounds, no offsets).
func bruteMidnight(loc *time.Location, y int, m time.Month, d int) int64 {
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	at := day.UnixMilli() - 15*3600*1000 // before any offset could put it
	for {
		wall := time.UnixMilli(at).In(loc)
		if !time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), 0, 0, time.UTC).Before(day) {
			return at
		}
		at += quarter
	}
}

// bruteCalendar assigns ts to its local day, week or month by bruteMidnight.
func bruteCalendar(loc *time.Location, unit windowing.CalendarUnit) func(int64) windowing.Window {
	period := func(y int, m time.Month, d int) windowing.Window {
		switch unit {
		case windowing.CalendarWeek:
			for time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday() != time.Monday {
				d--
			}
			return windowing.Window{Start: bruteMidnight(loc, y, m, d), End: bruteMidnight(loc, y, m, d+7)}
		case windowing.CalendarMonth:
			return windowing.Window{Start: bruteMidnight(loc, y, m, 1), End: bruteMidnight(loc, y, m+1, 1)}
		}
		return windowing.Window{Start: bruteMidnight(loc, y, m, d), End: bruteMidnight(loc, y, m, d+1)}
	}
	memo := map[time.Time]windowing.Window{} // by local date: the walk is slow
	cached := func(y int, m time.Month, d int) windowing.Window {
		date := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		w, ok := memo[date]
		if !ok {
			w = period(y, m, d)
			memo[date] = w
		}
		return w
	}
	return func(ts int64) windowing.Window {
		y, m, d := time.UnixMilli(ts).In(loc).Date()
		w := cached(y, m, d)
		for ts >= w.End { // after a second midnight the wall clock reads the day before
			d++
			w = cached(y, m, d)
		}
		return w
	}
}

// calendarZones are zones with the cases that matter: a 23- and a 25-hour
// day (Berlin), a midnight skipped and one that comes twice (Havana),
// 30-minute shifts (Lord Howe), and no DST at all.
var calendarZones = []string{"Europe/Berlin", "America/Havana", "Australia/Lord_Howe", "Asia/Beirut", "America/Santiago", "UTC", "Asia/Kolkata"}

// TestCalendarMatchesBrute: Calendar.Assign equals the brute force at
// random instants of 2029–2031 and of 1950–2100 in every zone and unit,
// and at every quarter hour of the days around each DST change of
// 2029–2031.
func TestCalendarMatchesBrute(t *testing.T) {
	from, to := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, zone := range calendarZones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, unit := range []windowing.CalendarUnit{windowing.CalendarDay, windowing.CalendarWeek, windowing.CalendarMonth} {
			c, brute := &windowing.Calendar{Unit: unit, Loc: loc}, bruteCalendar(loc, unit)
			rng := rand.New(rand.NewPCG(uint64(unit), 3))
			check := func(ts int64) {
				if got, want := c.Assign(ts), brute(ts); got != want {
					t.Fatalf("Calendar{%d, %s}.Assign(%s) = [%s, %s), want [%s, %s)", unit, zone, time.UnixMilli(ts).In(loc).Format(time.RFC3339Nano),
						time.UnixMilli(got.Start).In(loc).Format(time.RFC3339), time.UnixMilli(got.End).In(loc).Format(time.RFC3339),
						time.UnixMilli(want.Start).In(loc).Format(time.RFC3339), time.UnixMilli(want.End).In(loc).Format(time.RFC3339))
				}
			}
			for range 300 {
				check(from + rng.Int64N(to-from))
			}
			wideFrom, wideTo := time.Date(1950, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			for range 200 { // past rules, and years after 2037 that the zone's rule string makes
				check(wideFrom + rng.Int64N(wideTo-wideFrom))
			}
			if unit != windowing.CalendarDay {
				continue
			}
			for ts := from; ts < to; {
				_, end := time.UnixMilli(ts).In(loc).ZoneBounds()
				if end.IsZero() || end.UnixMilli() >= to {
					break
				}
				for at := end.UnixMilli() - 30*3600*1000; at < end.UnixMilli()+30*3600*1000; at += quarter {
					check(at - 1)
					check(at)
				}
				ts = end.UnixMilli()
			}
		}
	}
}

// TestCalendarEngineMatchesReference drives Engine with calendar days
// and the naive reference (tumbling windows assigned by bruteCalendar) with
// the property test's random streams, commits and crashes with restores,
// one stream time unit being 15 minutes from a few days before a DST
// change, so that the streams cross it.
func TestCalendarEngineMatchesReference(t *testing.T) {
	starts := map[string]time.Time{
		"Europe/Berlin":       time.Date(2030, 3, 28, 0, 0, 0, 0, time.UTC),
		"America/Havana":      time.Date(2030, 11, 1, 0, 0, 0, 0, time.UTC),
		"Australia/Lord_Howe": time.Date(2030, 10, 3, 0, 0, 0, 0, time.UTC),
		"Asia/Beirut":         time.Date(2030, 3, 28, 0, 0, 0, 0, time.UTC),
	}
	for zone, start := range starts {
		for _, emit := range []string{"on_watermark", "on_close", "on_watermark, early every 3h"} {
			t.Run(zone+" "+emit, func(t *testing.T) {
				t.Parallel()
				loc, err := time.LoadLocation(zone)
				if err != nil {
					t.Fatal(err)
				}
				late, restored := 0, 0
				for seed := range extraSeeds() {
					l, r := compareCalendar(t, loc, start.UnixMilli(), emit, seed, 600)
					if t.Failed() {
						return
					}
					late, restored = late+l, restored+r
				}
				if late == 0 || restored == 0 {
					t.Errorf("%d late events, %d entries restored: the streams miss late records or restores", late, restored)
				}
			})
		}
	}
}

func compareCalendar(t *testing.T, loc *time.Location, base int64, emit string, seed uint64, steps int) (late, restored int) {
	t.Helper()
	const lateness = 30 * quarter
	rng := rand.New(rand.NewPCG(seed, 13))
	spec := windowing.Spec{Kind: windowing.KindCalendar, Calendar: windowing.CalendarDay, Zone: loc, Lateness: lateness, OnClose: emit == "on_close", Aggregates: allAggs}
	if emit != "on_close" && emit != "on_watermark" {
		spec.Early, emit = windowing.EarlySpec{Every: 12 * quarter, Event: true}, "on_watermark"
	}
	ref := newReference(params{"tumbling", 0, 0, 0, lateness, emit}, allAggs)
	ref.early = spec.Early
	ref.cal = bruteCalendar(loc, windowing.CalendarDay)
	// Times in units of 15 minutes: 2 units a record at most, up to 140
	// (35 hours) back, so records reach the day before and its lateness.
	g := &streamGen{rng: rng, maxTs: 0, wm: math.MinInt64, gap: 3, age: 140}
	scale := func(u int64) int64 { return base + u*quarter }
	s := &stream{name: fmt.Sprintf("seed %d", seed), spec: spec, ref: ref, rng: rng, gen: g,
		add: 725, tick: 945, commit: 965, crash: 975,
		record: func() *record.Record {
			rec := g.record()
			rec.Time = scale(rec.Time)
			return rec
		},
		watermark: func() int64 {
			g.wm = max(g.wm, g.maxTs-rng.Int64N(8))
			return scale(g.wm) - rng.Int64N(2) // on and just before the grid
		},
		show: func(ms int64) string { return time.UnixMilli(ms).In(loc).Format(time.RFC3339Nano) }}
	tl := s.run(t, steps)
	for _, n := range tl.restored {
		restored += n
	}
	return tl.outcomes[windowing.LateEvent], restored
}
