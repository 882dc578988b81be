package windowing

import (
	"math"
	"time"
)

// CalendarUnit is the length of a calendar window.
type CalendarUnit uint8

const (
	CalendarDay   CalendarUnit = iota + 1 // a local day, midnight to midnight
	CalendarWeek                          // an ISO week, Monday's midnight to the next Monday's
	CalendarMonth                         // a month, the 1st's midnight to the next 1st's
)

// Calendar assigns each timestamp to its local day, ISO week or month in
// Loc (docs/windows.md#calendar-windows-days-weeks-and-months-in-a-time-zone). A window starts at the instant of the
// local midnight that begins its day (the first, where the clock turns
// back over midnight; where midnight is skipped, the first instant of the
// day) and ends where the next one starts, so days are 23 or 25 hours
// long across a DST change (23.5 or 24.5 on Lord Howe). It keeps the last
// two windows it found: records of one day cost a comparison. Not safe
// for concurrent use.
type Calendar struct {
	Unit       CalendarUnit
	Loc        *time.Location
	last, prev Window // the windows found last: a firing's and the records'
}

// Assign returns the window that holds ts.
func (c *Calendar) Assign(ts int64) Window {
	if c.last.Start <= ts && ts < c.last.End {
		return c.last
	}
	if c.prev.Start <= ts && ts < c.prev.End {
		c.last, c.prev = c.prev, c.last
		return c.last
	}
	lt := time.UnixMilli(ts).In(c.Loc)
	y, m, d := lt.Date()
	w := c.period(y, m, d)
	// A clock turned back over midnight gives instants after the day's
	// first midnight a local date before it; no instant precedes its
	// local date's first midnight, but a wrong zone table could say so.
	// Each step must move on, so a zone table that contradicts itself
	// cannot make it loop.
	for ts >= w.End && w.End != math.MaxInt64 {
		y, m, d = time.UnixMilli(w.End).In(c.Loc).Date()
		next := c.period(y, m, d)
		if next.End <= w.End {
			break
		}
		w = next
	}
	for ts < w.Start && w.Start != math.MinInt64 {
		y, m, d = time.UnixMilli(w.Start - 1).In(c.Loc).Date()
		prev := c.period(y, m, d)
		if prev.Start >= w.Start {
			break
		}
		w = prev
	}
	c.last, c.prev = w, c.last
	return w
}

// period returns the window of the day, week or month holding local date
// y-m-d.
func (c *Calendar) period(y int, m time.Month, d int) Window {
	switch c.Unit {
	case CalendarWeek:
		wd := (int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday()) + 6) % 7 // Monday 0
		return Window{Start: c.midnight(y, m, d-wd), End: c.midnight(y, m, d-wd+7)}
	case CalendarMonth:
		return Window{Start: c.midnight(y, m, 1), End: c.midnight(y, m+1, 1)}
	}
	return Window{Start: c.midnight(y, m, d), End: c.midnight(y, m, d+1)}
}

// dayReach bounds how far a local midnight is from the same wall time in
// UTC: zone offsets stay within ±26 hours.
const dayReach = 26 * 3600

// midnight returns the instant, in ms, at which local date y-m-d
// (normalized, so d may be 0 or 32) begins in c.Loc: the first instant
// whose wall clock reads its 00:00 under the offset then in effect, or,
// if the clock skips 00:00, the instant of that jump.
func (c *Calendar) midnight(y int, m time.Month, d int) int64 {
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // 00:00 read as UTC
	first, jump := int64(math.MaxInt64), int64(math.MaxInt64)
	t := time.Unix(wall-dayReach, 0).In(c.Loc)
	// Go's zone bounds for years past the table (made from the zone's
	// rule) include bounds at each new year that change nothing, and can
	// name the instant asked about: such a bound steps on a minute.
	for range 64 {
		_, off := t.Zone()
		// 00:00 under this offset is real if that instant has this offset.
		if at := wall - int64(off); at < first {
			if _, o := time.Unix(at, 0).In(c.Loc).Zone(); o == off {
				first = at
			}
		}
		_, end := t.ZoneBounds()
		if end.IsZero() || end.Unix() > wall+dayReach {
			break
		}
		if !end.After(t) {
			end = t.Add(time.Minute)
		}
		next := end.In(c.Loc)
		_, off2 := next.Zone()
		// The clock jumps from end+off to end+off2: 00:00 in between is skipped.
		if e := end.Unix(); e+int64(off) <= wall && wall < e+int64(off2) {
			jump = min(jump, e)
		}
		t = next
	}
	return secondsToMs(min(first, jump))
}

// secondsToMs converts s to ms, saturating at the int64 range.
func secondsToMs(s int64) int64 {
	switch {
	case s > math.MaxInt64/1000:
		return math.MaxInt64
	case s < math.MinInt64/1000:
		return math.MinInt64
	}
	return s * 1000
}
