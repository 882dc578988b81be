package pipeline_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/ready"
)

// runSettingsRun runs records of key a at the event times before under
// config old on partition 0, commits, restores a processor of config next
// from the changelog, and runs the times after; it returns what the
// second processor fired ("[start,end) firing rN count C") and the times
// it found late.
func runSettingsRun(t *testing.T, old, next string, before, after []int64) (fired []string, late []int64) {
	t.Helper()
	first, _ := newProcessor(t, old)
	first.Assign(0, 0)
	for i, ts := range before {
		first.Process(&ready.Input{Offset: int64(i), Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, ts))}, math.MaxInt64)
	}
	log := changelog{}
	data, positions := first.Checkpoint()
	log.write(data)
	log.write(positions)
	second, out := newProcessor(t, next)
	second.Assign(0, 0)
	if _, err := second.Restore(0, log.restorer(t, 0), 0); err != nil {
		t.Fatalf("Restore under %s: %v", next, err)
	}
	times := map[int64]int64{}
	for i, ts := range after {
		off := int64(len(before) + i)
		times[off] = ts
		second.Process(&ready.Input{Offset: off, Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, ts))}, math.MaxInt64)
	}
	for _, r := range out.results {
		fired = append(fired, fmt.Sprintf("[%d,%d) %v r%d count %d", r.Window.Start, r.Window.End, r.Firing, r.Revision, r.Count))
	}
	for _, off := range out.late {
		late = append(late, times[off])
	}
	return fired, late
}

// TestRunSettingsChange: allowed_lateness and emit are run settings
// (docs/changing-config.md#three-kinds-of-key): a restore under other values keeps every window in state and
// applies them from then on, as if they had always been in force from
// then. 1-second windows of one key hold 500 ([0,1000)) and 1500
// ([1000,2000)) and a record at 3200 moves the watermark to 2199, which
// fires both; the restore is there.
//   - lateness 1s to 5s: [1000,2000) (cleanup 3000 under 1s) stays
//     open past 3000, and a record for it at watermark 3499 fires it
//     late, revision 1; [0,1000) (cleanup 1999 under 1s) was dropped
//     at 2199 and stays dropped: a record for it is late, though its
//     cleanup time under 5s is 5999.
//   - sliding (2s, slide 1s), 1s to 5s: a record at 600 belongs to
//     [-1000,1000), dropped under 1s, and to [0,2000), open: it is
//     partially late, and fires [0,2000) late only.
//   - lateness 5s to 0s: both fired windows are past their cleanup time
//     at the restored watermark: dropped at the restore, never fired
//     again, and a record for one is late; [3000,4000) goes on.
//   - on_watermark to on_close: the fired windows fire once more, final,
//     at their cleanup time, revisions counting on; a late record
//     updates one without a firing.
//   - on_close to on_watermark: the windows past their end that never
//     fired fire on time at the next watermark, once, then late.
func TestRunSettingsChange(t *testing.T) {
	const aggs = "[{name: n, fn: count}]"
	window := func(lateness, emit string) string {
		return genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: "+lateness+emit+"}", aggs)
	}
	sliding := func(lateness string) string {
		return genConfig("1", "{type: sliding, size: 2s, slide: 1s, allowed_lateness: "+lateness+"}", aggs)
	}
	before := []int64{500, 1500, 3200}
	cases := []struct {
		name, old, next string
		after           []int64
		fired           []string
		late            []int64
	}{
		{"lateness 1s to 5s", window("1s", ""), window("5s", ""), []int64{4500, 1700, 600},
			[]string{"[1000,2000) late r1 count 2"}, []int64{600}},
		{"sliding lateness 1s to 5s", sliding("1s"), sliding("5s"), []int64{4500, 600},
			[]string{"[1000,3000) on_time r0 count 1", "[0,2000) late r1 count 3"}, nil},
		{"lateness 5s to 0s", window("5s", ""), window("0s", ""), []int64{1600, 3300, 5100},
			[]string{"[3000,4000) on_time r0 count 2"}, []int64{1600}},
		{"on_watermark to on_close", window("5s", ""), window("5s", ", emit: on_close"), []int64{1600, 7100, 12100},
			[]string{"[0,1000) final r1 count 1", "[1000,2000) final r1 count 2", "[3000,4000) final r0 count 1"}, nil},
		{"on_close to on_watermark", window("5s", ", emit: on_close"), window("5s", ""), []int64{3300, 1600, 12100},
			[]string{"[0,1000) on_time r0 count 1", "[1000,2000) on_time r0 count 1", "[1000,2000) late r1 count 2", "[3000,4000) on_time r0 count 2"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fired, late := runSettingsRun(t, c.old, c.next, before, c.after)
			if !slices.Equal(fired, c.fired) || !slices.Equal(late, c.late) {
				t.Errorf("after the restore: fired %q, late %v; want fired %q, late %v", fired, late, c.fired, c.late)
			}
		})
	}
}

// TestRaisedLatenessKeepsDropped: a window dropped under a lower
// allowed_lateness stays dropped after a restore under a higher one
// (docs/changing-config.md#three-kinds-of-key), for sessions too, and after a second restart under the higher
// lateness before the watermark passes what it would drop by itself: the
// generation record keeps the bound (state.Generation.DroppedTo); in
// both watermark scopes.
func TestRaisedLatenessKeepsDropped(t *testing.T) {
	for _, scope := range scopes {
		t.Run(scope, func(t *testing.T) { raisedLatenessKeepsDropped(t, scope) })
	}
}

func raisedLatenessKeepsDropped(t *testing.T, scope string) {
	const aggs = "[{name: n, fn: count}]"
	inScope := func(yaml string) string {
		return strings.Replace(yaml, "scope: partition", "scope: "+scope, 1)
	}
	session := func(lateness string) string {
		return inScope(genConfig("1", "{type: session, gap: 1s, allowed_lateness: "+lateness+"}", aggs))
	}
	tumbling := func(lateness string) string {
		return inScope(genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: "+lateness+"}", aggs))
	}
	sliding := func(lateness string) string {
		return inScope(genConfig("1", "{type: sliding, size: 2s, slide: 1s, allowed_lateness: "+lateness+"}", aggs))
	}
	t.Run("sliding", func(t *testing.T) {
		fired, late := runSettingsRun(t, sliding("1s"), sliding("5s"), []int64{500, 1500, 3200}, []int64{4500, 600})
		if want := []string{"[1000,3000) on_time r0 count 1", "[0,2000) late r1 count 3"}; !slices.Equal(fired, want) || len(late) != 0 {
			t.Errorf("fired %q, late %v; want fired %q, nothing late", fired, late, want)
		}
	})
	t.Run("session", func(t *testing.T) {
		// [500,1500) fires at watermark 2699 and is dropped (cleanup
		// 2499 under 1s); under 5s its cleanup would be 6499.
		fired, late := runSettingsRun(t, session("1s"), session("5s"), []int64{500, 3700}, []int64{4500, 600})
		if len(fired) != 0 || !slices.Equal(late, []int64{600}) {
			t.Errorf("fired %q, late %v; want nothing fired, late [600]", fired, late)
		}
	})
	t.Run("calendar", func(t *testing.T) {
		// Days in UTC, 1h to 5h: day 0 (cleanup 89999999 under 1h) is
		// dropped at watermark 91998999; under 5h its cleanup would be
		// 104399999.
		days := func(lateness string) string {
			return inScope(genConfig("1", "{type: tumbling, calendar: day, timezone: UTC, allowed_lateness: "+lateness+"}", aggs))
		}
		fired, late := runSettingsRun(t, days("1h"), days("5h"), []int64{43200000, 92000000}, []int64{43200600, 92000600})
		if len(fired) != 0 || !slices.Equal(late, []int64{43200600}) {
			t.Errorf("fired %q, late %v; want nothing fired, late [43200600]", fired, late)
		}
	})
	t.Run("second restart", func(t *testing.T) {
		// 1s: [0,1000) dropped at watermark 2199. Restart under 5s, a
		// record at 4500 (watermark 3499), restart under 5s again: a
		// record at 600 is still late, and [1000,2000) is still open
		// (cleanup 6999 under 5s).
		log := changelog{}
		off := int64(0)
		run := func(yaml string, restore bool, times ...int64) *tape {
			c, out := newProcessor(t, yaml)
			c.Assign(0, 0)
			if restore {
				if _, err := c.Restore(0, log.restorer(t, 0), 0); err != nil {
					t.Fatalf("Restore under %s: %v", yaml, err)
				}
			}
			for _, ts := range times {
				c.Process(&ready.Input{Offset: off, Value: []byte(fmt.Sprintf(`{"k":"a","t":%d,"v":1}`, ts))}, math.MaxInt64)
				off++
			}
			data, positions := c.Checkpoint()
			log.write(data)
			log.write(positions)
			return out
		}
		run(tumbling("1s"), false, 500, 1500, 3200)
		run(tumbling("5s"), true, 4500)
		out := run(tumbling("5s"), true, 600, 1700)
		var fired []string
		for _, r := range out.results {
			fired = append(fired, fmt.Sprintf("[%d,%d) %v r%d count %d", r.Window.Start, r.Window.End, r.Firing, r.Revision, r.Count))
		}
		if want := []string{"[1000,2000) late r1 count 2"}; !slices.Equal(fired, want) || !slices.Equal(out.late, []int64{4}) {
			t.Errorf("after the second restart: fired %q, late offsets %v; want fired %q, late offsets [4] (the record at 600)", fired, out.late, want)
		}
	})
}
