package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
)

// The session variant of the durability stream. Each partition's slots
// (one every durStep*parts ms, as in the tumbling stream, so the merged
// watermark moves alike) go to its keys in runs of 3 to 16 slots, the
// partition's keys taking turns. Within a run a key's records are
// durStep*parts = 100ms apart, less than durGap: one session. Between runs
// the key pauses at least 400ms, more than durGap: its session closes, and
// after a run of 3 to 5 slots of another key the pause is at most
// 2*durGap, so a record in between can bridge the two sessions: the
// stream puts one there now and then, out of order but within
// max_out_of_orderness of its partition, while both sessions are open.
// With lateness, committed chunks also hold records late by less than the
// lateness into sessions that fired and cannot have been dropped: they
// extend a session, bridge two, fall inside one or start one alone, and
// fire at once (a late firing), retracting every session they merged.
//
// The outcome of each record does not depend on how partitions or
// instances interleave, as for tumbling windows: a session fires only once
// its partition has passed its end (it is complete), normal records only
// touch open sessions, and late records only sessions whose firing and
// dropping are decided whichever watermark between low and high the
// instance has. The stream keeps each key's sessions as intervals (the
// engine's merging, docs/semantics.md#sessions, on intervals), which tells it what each late
// record touches, and so counts the retractions and late firings it
// makes; the reference run must give the same counts.
const durGap = 300 // ms, window.gap of the session variant

// A durSession is a session's bounds, [start, end).
type durSession struct{ start, end int64 }

func durSessionConfig(lateness int64, delivery string) string {
	return durWindowConfig(fmt.Sprintf("{type: session, gap: %dms, allowed_lateness: %dms}", durGap, lateness), delivery)
}

// newDurSessionStream is newDurStream's session variant, described above.
func newDurSessionStream(parts int32, keys int, lateness int64) *durStream {
	s := newDurStream(parts, keys, lateness)
	s.gap, s.sess = durGap, map[int][]durSession{}
	s.runKey, s.runLeft = make([]int, parts), make([]int, parts)
	return s
}

// touching returns the sessions of key that a record at t touches,
// key's sessions [lo, hi), and the session they merge into.
func (s *durStream) touching(key int, t int64) (lo, hi int, merged durSession) {
	ss := s.sess[key]
	merged = durSession{t, t + s.gap}
	// Sessions never intersect, so ends are in order too.
	lo = sort.Search(len(ss), func(i int) bool { return ss[i].end >= t })
	hi = lo
	for hi < len(ss) && ss[hi].start <= merged.end {
		merged = durSession{min(merged.start, ss[hi].start), max(merged.end, ss[hi].end)}
		hi++
	}
	return lo, hi, merged
}

// add records a record of key at t that is not late, and returns the
// number of sessions it retracts if they all fired.
func (s *durStream) add(key int, t int64) (retracts int) {
	lo, hi, m := s.touching(key, t)
	ss := s.sess[key]
	if hi-lo == 1 && ss[lo] == m { // inside one session: no merge
		return 0
	}
	s.sess[key] = slices.Replace(ss, lo, hi, m)
	return hi - lo
}

// sessionRecords makes the normal records of a session chunk.
func (s *durStream) sessionRecords(rng *rand.Rand, n int) []durRecord {
	per := s.keys / int(s.parts)
	var recs []durRecord
	for range n {
		p := s.g % int(s.parts)
		fresh := s.runLeft[p] == 0
		if fresh {
			s.runKey[p] = (s.runKey[p] + 1) % per
			s.runLeft[p] = 3 + rng.IntN(14)
		}
		s.runLeft[p]--
		key := p + int(s.parts)*s.runKey[p]
		recs = append(recs, s.record(rng, key, s.next))
		s.add(key, s.next)
		if ss := s.sess[key]; fresh && len(ss) >= 2 && s.next <= ss[len(ss)-2].end+s.gap && rng.IntN(2) == 0 {
			// Between the key's previous session and this one, touching
			// both: it bridges them. Both are open: the partition's
			// watermark is s.next-durOoO-1, below either's end - 1.
			prev := ss[len(ss)-2]
			t := s.next - s.gap + rng.Int64N(prev.end-(s.next-s.gap)+1)
			recs = append(recs, s.record(rng, key, t))
			s.add(key, t)
		}
		s.g++
		s.next += durStep
	}
	return recs
}

// sessionLate is the late records of a session chunk whose normal records
// are before to, given the merged watermark is at least low: late events,
// and with lateness, records that merge into sessions that fired.
func (s *durStream) sessionLate(rng *rand.Rand, low, to int64) []durRecord {
	high := to - durOoO - 1 // no partition's watermark passes it in this chunk
	var extra []durRecord
	// pick draws keys and times until ok holds.
	pick := func(what string, ok func(key int, t int64) bool, at func(key int) int64) (int, int64) {
		for range 1000 {
			key := s.randomKey(rng, rng.Int32N(s.parts))
			if t := at(key); ok(key, t) {
				return key, t
			}
		}
		panic(fmt.Sprintf("no %s for a chunk ending at %d with lateness %d", what, to, s.lateness))
	}
	for range 1 + rng.IntN(3) {
		// Its window and every session it touches were dropped:
		// cleanup = end - 1 + lateness <= low.
		key, t := pick("late event", func(key int, t int64) bool {
			_, _, m := s.touching(key, t)
			return m.end-1+s.lateness <= low
		}, func(int) int64 { return low - 500 - s.lateness - s.gap - rng.Int64N(30_000) })
		extra = append(extra, s.record(rng, key, t))
		s.late++
	}
	if s.lateness == 0 {
		return extra
	}
	// Every session it touches and the merged one fired (end - 1 <= low)
	// and none is dropped (end >= t, and t - 1 + lateness > high).
	first, last := high-s.lateness+2, low-s.gap+1
	if first > last {
		panic(fmt.Sprintf("chunk ending at %d is too long for lateness %d", to, s.lateness))
	}
	for range 1 + rng.IntN(4) {
		key, t := pick("late merge", func(key int, t int64) bool {
			_, _, m := s.touching(key, t)
			return t >= first && m.end-1 <= low
		}, func(key int) int64 {
			t := first + rng.Int64N(last-first+1)
			if ss := s.sess[key]; rng.IntN(2) == 0 {
				// Between two sessions close enough to bridge, the first
				// of the next few after t; else near a session's end,
				// extending it.
				i := sort.Search(len(ss), func(i int) bool { return ss[i].end >= t })
				j := i
				for j+1 < min(len(ss), i+20) && ss[j+1].start-s.gap > ss[j].end {
					j++
				}
				if j+1 < len(ss) && ss[j+1].start-s.gap <= ss[j].end {
					t = ss[j+1].start - s.gap + rng.Int64N(ss[j].end-(ss[j+1].start-s.gap)+1)
				} else if i < len(ss) {
					t = ss[i].end - rng.Int64N(s.gap/2)
				}
			}
			return t
		})
		extra = append(extra, s.record(rng, key, t))
		s.retract += s.add(key, t)
		s.lateFire++
	}
	return extra
}
