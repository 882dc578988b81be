package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// durKinds are the crash harness's window kinds beyond plain tumbling and
// session windows (newDurKindStream). Count windows run without a
// timeout: a timeout fires by the watermark, which depends on how
// partitions interleave (a partial window's content would too), so
// without one every count firing is decided by its key's own records, all
// on one partition, in offset order.
// "repartition" is tumbling windows with the repartition stage, over input
// whose keys are spread over the partitions (durStream.spread).
var durKinds = []string{"early_tumbling", "early_session", "global", "count", "count_sliding", "calendar", "repartition"}

// A durKind says which checks fit a window kind's results.
type durKind struct {
	// early: the window kind has early firings (global windows have only
	// those). How many a window gets depends on how partitions
	// interleave, and so does the revision of its later firings; an early
	// session that grows is retracted, which the reference run need not
	// do. durCheckEarly compares what is deterministic.
	early  bool
	global bool
	// count windows: size and slide in records (0: time windows).
	count, slide int64
}

// lateless says no record is late: global and count windows aggregate
// every record, the stream's late ones too.
func (k durKind) lateless() bool { return k.global || k.count > 0 }

// The calendar variant: days in Europe/Berlin from 29 March 2030, across
// the spring DST change (31 March is 23 hours), normal records 15 minutes
// apart (an hour per partition), so a chunk is 3 to 9 days; closers are 3
// days ahead, past the end of any day the chunk touched.
const (
	durCalendarZone = "Europe/Berlin"
	durCalendarStep = 15 * 60_000
	durDay          = 24 * 3600_000
)

// newDurKindStream returns the stream, config and allowed_lateness of one
// of durKinds for seed.
func newDurKindStream(t testing.TB, kind string, seed uint64, delivery string) (*durStream, string, int64) {
	t.Helper()
	lateness := int64(0)
	if seed%2 == 1 { // lateness for the one default seed: late firings after early ones
		lateness = 30_000
	}
	early := fmt.Sprintf("early_firings: {every: %dms, time: event}", durSize/10)
	switch kind {
	case "early_tumbling":
		s := newDurStream(4, 8, lateness)
		s.kind = durKind{early: true}
		return s, durWindowConfig(fmt.Sprintf("{type: tumbling, size: %dms, allowed_lateness: %dms, %s}", durSize, lateness, early), delivery), lateness
	case "early_session":
		s := newDurSessionStream(4, 8, lateness)
		s.kind = durKind{early: true}
		return s, durWindowConfig(fmt.Sprintf("{type: session, gap: %dms, allowed_lateness: %dms, %s}", durGap, lateness, early), delivery), lateness
	case "repartition":
		s := newDurStream(4, 8, lateness)
		s.spread, s.interleaved = true, true
		cfg := strings.Replace(durConfig(lateness, delivery), "partitioning: by_key", "partitioning: repartition", 1)
		return s, cfg, lateness
	case "global":
		// The closers move the watermark past a tick once every record is
		// in: the last firing of each key holds all of its records.
		s := newDurStream(4, 8, 0)
		s.kind = durKind{early: true, global: true}
		return s, durWindowConfig("{type: global, early_firings: {every: 1s, time: event}}", delivery), 0
	case "count":
		s := newDurStream(4, 8, 0)
		s.kind = durKind{count: 7}
		return s, durWindowConfig("{type: count, size: 7}", delivery), 0
	case "count_sliding":
		s := newDurStream(4, 8, 0)
		s.kind = durKind{count: 10, slide: 4}
		return s, durWindowConfig("{type: count, size: 10, slide: 4}", delivery), 0
	case "calendar":
		if seed%2 == 1 {
			lateness = 288 * 3600_000 // 12 days: longer than a chunk and a day
		}
		zone, err := time.LoadLocation(durCalendarZone)
		if err != nil {
			t.Fatal(err)
		}
		s := newDurStream(4, 8, lateness)
		s.zone, s.size, s.step, s.closeAt = zone, 0, durCalendarStep, 3*durDay
		s.next = time.Date(2030, 3, 29, 0, 0, 0, 0, zone).UnixMilli()
		return s, durWindowConfig(fmt.Sprintf("{type: tumbling, calendar: day, timezone: %s, allowed_lateness: %dms}", durCalendarZone, lateness), delivery), lateness
	}
	t.Fatalf("no window kind %q", kind)
	return nil, "", 0
}

// maxSize bounds the length of the stream's windows: a calendar day is at
// most 25 hours.
func (s *durStream) maxSize() int64 {
	if s.size == 0 {
		return durDay + 3600_000
	}
	return s.size
}

// dayEnd is the end of the calendar day holding t: the next local midnight.
func (s *durStream) dayEnd(t int64) int64 {
	y, m, d := time.UnixMilli(t).In(s.zone).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, s.zone).UnixMilli()
}

// calendarLateFire is tumblingLate's records that fire a window late, for
// calendar days: the day fired (end - 1 <= low - 500) and is not dropped
// (its partition's watermark stays below to-durOoO-1, at most its
// cleanup end - 1 + lateness).
func (s *durStream) calendarLateFire(rng *rand.Rand, low, to int64) []durRecord {
	lo, hi := to-1-s.lateness-durOoO, low-499 // the day's end
	if lo > hi {
		panic(fmt.Sprintf("chunk ending at %d is too long for lateness %d", to, s.lateness))
	}
	var extra []durRecord
	for range 1 + rng.IntN(4) {
		for tries := 0; ; tries++ {
			if tries == 1000 {
				panic(fmt.Sprintf("no day ending in [%d, %d]", lo, hi))
			}
			t := lo - s.maxSize() + rng.Int64N(hi-lo+s.maxSize())
			if e := s.dayEnd(t); e >= lo && e <= hi {
				extra = append(extra, s.record(rng, s.randomKey(rng, rng.Int32N(s.parts)), t))
				s.lateFire++
				break
			}
		}
	}
	return extra
}

var revisionField = regexp.MustCompile(`"revision":[0-9]+`)

// durNorm is a result less its watermark and revision: with early
// firings, the revision of a window's on-time and late firings counts the
// early ones before them.
func durNorm(r durResult) string { return revisionField.ReplaceAllString(r.value, `"revision":_`) }

// durResultsByWindow returns each window's results, in the order given.
func durResultsByWindow(rs []durResult) map[string][]durResult {
	out := map[string][]durResult{}
	for _, r := range rs {
		out[r.window()] = append(out[r.window()], r)
	}
	return out
}

// durTransient returns the windows that only fired early and were then
// retracted: early sessions that grew, which depend on how partitions
// interleave.
func durTransient(rs []durResult) map[string]bool {
	out := map[string]bool{}
	for w, ws := range durResultsByWindow(rs) {
		retracted, early := false, true
		for _, r := range ws {
			retracted = retracted || r.Firing == "retract"
			early = early && (r.Firing == "early" || r.Firing == "retract")
		}
		if retracted && early {
			out[w] = true
		}
	}
	return out
}

// durCheckEarly is durCheckResults for window kinds with early firings:
// exactly_once: each window's revisions are 0, 1, … once each, its counts
// never go down and a retraction is its last record; at_least_once: the
// counts of its firings that are not early never go down and no early
// count is above the latest; both: the firings that are not early (on
// time, late, retractions) are the reference run's, in its order, less
// revisions (at_least_once: their first reads), and the latest result of
// each window is the reference's, less its revision. Early sessions
// retracted after early firings only are left out on either side. It
// returns the latest per window.
func durCheckEarly(t *testing.T, got, ref []durResult, delivery string) map[string]durResult {
	t.Helper()
	gotW, refW := durResultsByWindow(got), durResultsByWindow(ref)
	gotT, refT := durTransient(got), durTransient(ref)
	var errs []string
	for w, rs := range gotW {
		errs = append(errs, durEarlyRevisions(w, rs, delivery)...)
	}
	slices.Sort(errs)
	if len(errs) > 0 {
		t.Errorf("%s: %d windows' results go wrong: %s", delivery, len(errs), strings.Join(errs[:min(len(errs), 10)], "\n"))
	}

	all := map[string]bool{}
	for w := range gotW {
		all[w] = true
	}
	for w := range refW {
		all[w] = true
	}
	latest := map[string]durResult{}
	var differ []string
	stale := 0
	for w := range all {
		g, r := gotW[w], refW[w]
		if (gotT[w] || g == nil) && (refT[w] || r == nil) {
			continue
		}
		switch {
		case g == nil:
			differ = append(differ, "missing "+durNorm(r[len(r)-1]))
		case r == nil && delivery == "at_least_once" && durStale(g, ref):
			stale++
		case r == nil:
			differ = append(differ, "extra "+durNorm(g[len(g)-1]))
		default:
			latest[w] = g[len(g)-1]
			gf, rf := durFinal(g, delivery), durFinal(r, "exactly_once")
			if gl, rl := durNorm(g[len(g)-1]), durNorm(r[len(r)-1]); !slices.Equal(gf, rf) || gl != rl {
				differ = append(differ, fmt.Sprintf("\n%s:\n got %q, latest %s\nwant %q, latest %s", w, gf, gl, rf, rl))
			}
		}
	}
	slices.Sort(differ)
	if len(differ) > 0 {
		t.Errorf("%d of %d windows differ from the reference run: %s", len(differ), len(refW), strings.Join(differ[:min(len(differ), 10)], "\n"))
	}
	if stale > 0 {
		t.Logf("at_least_once: %d early sessions of a crashed run left without their tombstone", stale)
	}
	return latest
}

// durStale says whether a window's results, rs, are an at_least_once
// leftover: early firings only, of a session inside one of the
// reference's live sessions of its key. A crashed instance fired it early
// and did not commit; the restarted one, from the committed state, fired
// the session at other ticks, so it never knew to retract this one
// (docs/delivery.md).
func durStale(rs []durResult, ref []durResult) bool {
	for _, r := range rs {
		if r.Firing != "early" {
			return false
		}
	}
	start, end := durBound(rs[0].Start), durBound(rs[0].End)
	live := durLatest(ref)
	for _, r := range live {
		if r.Firing != "retract" && string(r.Key) == string(rs[0].Key) && durBound(r.Start) <= start && end <= durBound(r.End) {
			return true
		}
	}
	return false
}

// durBound is a window bound as a number.
func durBound(b json.RawMessage) int64 {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("window bound %s: %v", b, err))
	}
	return n
}

// durFinal is a window's results that are not early firings, less their
// revision; at_least_once: the first read of each.
func durFinal(rs []durResult, delivery string) []string {
	var out []string
	for _, r := range rs {
		if v := durNorm(r); r.Firing != "early" && (delivery == "exactly_once" || !slices.Contains(out, v)) {
			out = append(out, v)
		}
	}
	return out
}

// durEarlyRevisions is what goes wrong in one window's results, rs, in
// read order (see durCheckEarly).
func durEarlyRevisions(w string, rs []durResult, delivery string) []string {
	var errs []string
	count := int64(-1)
	if delivery == "exactly_once" {
		for i, r := range rs {
			switch {
			case r.Firing == "retract":
				if i != len(rs)-1 {
					errs = append(errs, fmt.Sprintf("%s retracted, then %d more results", w, len(rs)-1-i))
				}
			case r.Revision != int64(i):
				errs = append(errs, fmt.Sprintf("%s: revision %d is result %d", w, r.Revision, i))
			case r.Count < count:
				errs = append(errs, fmt.Sprintf("%s went backwards: count %d after %d", w, r.Count, count))
			}
			count = max(count, r.Count)
		}
		return errs
	}
	// at_least_once: after a restart, early firings come at other ticks,
	// so a repeated revision may hold another count; what is not early
	// is repeated as it was.
	last := rs[len(rs)-1]
	var seen []string
	for _, r := range rs {
		switch {
		case r.Firing == "retract":
		case r.Firing == "early":
			if last.Firing != "retract" && r.Count > last.Count {
				errs = append(errs, fmt.Sprintf("%s: early count %d above the latest %d", w, r.Count, last.Count))
			}
		case slices.Contains(seen, durNorm(r)):
		default:
			seen = append(seen, durNorm(r))
			if r.Count < count {
				errs = append(errs, fmt.Sprintf("%s went backwards: %s count %d after %d", w, r.Firing, r.Count, count))
			}
			count = r.Count
		}
	}
	return errs
}

// durCountAccounting is (b) for count windows: from its valid records
// (every one but the dead letters, late and closers included), each key
// fired the windows it must have, and the last of them held the records
// it must have. Without a slide: n/N windows of N records each (the n%N
// left wait for more); with slide S: n/S firings, the last with min(N,
// S·(n/S)) records.
func durCountAccounting(t *testing.T, s *durStream, latest map[string]durResult) {
	t.Helper()
	valid := map[string]int64{}
	for _, l := range s.lines {
		var r struct {
			Sid *string
			T   *json.Number
			D   *json.Number
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Sid != nil && r.T != nil && r.D != nil {
			valid[fmt.Sprintf(`{"sid":%q}`, *r.Sid)]++
		}
	}
	type fired struct{ n, lastSeq, lastCount int64 }
	byKey := map[string]*fired{}
	for _, r := range latest {
		f := byKey[string(r.Key)]
		if f == nil {
			f = &fired{lastSeq: -1}
			byKey[string(r.Key)] = f
		}
		f.n++
		if *r.Seq > f.lastSeq {
			f.lastSeq, f.lastCount = *r.Seq, r.Count
		}
		if s.kind.slide == 0 && r.Count != s.kind.count {
			t.Errorf("count window %s holds %d records, want %d", r.window(), r.Count, s.kind.count)
		}
	}
	var total int64
	for key, n := range valid {
		total += n
		f := byKey[key]
		if f == nil {
			f = &fired{lastSeq: -1}
		}
		every := s.kind.count
		if s.kind.slide > 0 {
			every = s.kind.slide
		}
		wantN := n / every
		wantLast := s.kind.count
		if s.kind.slide > 0 {
			wantLast = min(s.kind.count, every*wantN)
		}
		if f.n != wantN || f.lastSeq != wantN-1 || wantN > 0 && f.lastCount != wantLast {
			t.Errorf("accounting: key %s has %d valid records: %d firings, the last seq %d with %d records; want %d, seq %d with %d",
				key, n, f.n, f.lastSeq, f.lastCount, wantN, wantN-1, wantLast)
		}
	}
	if total+int64(s.dead) != int64(len(s.lines)) || len(byKey) > len(valid) {
		t.Errorf("accounting: %d valid records + %d dead letters, want the %d input records; %d keys fired, %d have records",
			total, s.dead, len(s.lines), len(byKey), len(valid))
	}
}
