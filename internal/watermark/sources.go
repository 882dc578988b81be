package watermark

import (
	"cmp"
	"math"
	"slices"

	"aggregator/internal/config"
)

// A Mark is one source partition's watermark as a repartition stage
// reports it in a marker record: Source is the partition's dense id
// (partitions of all input topics numbered one after another), Count the
// number of source partitions the reporter knew.
type Mark struct {
	Source    int32
	Count     int32
	Watermark int64
	Idle      bool
}

// Source is what the second stage knows of one source partition in one
// repartition partition: the highest watermark reported, whether the
// last marker said idle, and the highest source offset applied (-1 none),
// so that a record a stage-1 retry wrote again is skipped.
type Source struct {
	Reported  bool
	Idle      bool
	Watermark int64
	Applied   int64
}

// Table is one repartition partition's view of the source partitions:
// Count is the number of source partitions the last marker reported (0:
// no marker yet); Sources is indexed by source id, and may be longer than
// Count (a data record from a source no marker has covered yet notes its
// offset).
type Table struct {
	Count   int32
	Sources []Source
}

// table is a Table of one repartition partition.
type table struct {
	id int32
	Table
	// low and allIdle are wm() as of the last time it was computed; fresh
	// says no marker may have changed it since. Each record of a
	// repartition partition marks its source twice, and the partition's
	// watermark is read after each.
	low     int64
	allIdle bool
	fresh   bool
}

// cached is wm(), computed again only when a marker may have changed it.
func (t *table) cached() (wm int64, idle bool) {
	if !t.fresh {
		t.low, t.allIdle = t.wm()
		t.fresh = true
	}
	return t.low, t.allIdle
}

// wm is the partition's watermark: the minimum over its sources that are
// not idle, math.MinInt64 until every source has reported; idle reports
// whether every source is idle (then wm is meaningless).
func (t *table) wm() (wm int64, idle bool) {
	if t.Count == 0 {
		return math.MinInt64, false
	}
	low, active := int64(math.MaxInt64), false
	for _, s := range t.Sources[:t.Count] {
		if !s.Reported {
			return math.MinInt64, false
		}
		if !s.Idle {
			low, active = min(low, s.Watermark), true
		}
	}
	return low, !active
}

// grow makes t hold at least n sources, the new ones unreported.
func (t *table) grow(n int) {
	for len(t.Sources) < n {
		t.Sources = append(t.Sources, Source{Watermark: math.MinInt64, Applied: -1})
	}
}

// Sources is the watermark of a stage that reads a repartition topic
// (docs/scaling.md#the-repartition-stage): per repartition partition, the table of source partitions
// its markers reported; a partition's watermark is the minimum over its
// sources that are not idle (minus infinity until all have reported), and
// W is the minimum over the partitions that are not all idle, never going
// down. Data records do not move it; markers do. When every source of
// every partition is idle, idle_advance moves W with the wall clock.
type Sources struct {
	ooo, idleTimeout int64
	idleAdvance      bool
	parts            []*table // sorted by id
	// byID is parts by id (nil: not assigned), as partition ids are
	// dense: each data record looks its partition up three times.
	byID []*table
	w    int64
}

// NewSources returns a Sources with no partitions and W = math.MinInt64.
func NewSources(cfg config.Watermark) *Sources {
	return &Sources{ooo: max(cfg.MaxOutOfOrderness.Milliseconds(), 0),
		idleTimeout: max(cfg.IdleTimeout.Milliseconds(), 0), idleAdvance: cfg.IdleAdvance, w: math.MinInt64}
}

func (s *Sources) find(p int32) (int, bool) {
	return slices.BinarySearchFunc(s.parts, p, func(t *table, p int32) int { return cmp.Compare(t.id, p) })
}

// lookup returns p's table, or nil if p is not assigned.
func (s *Sources) lookup(p int32) *table {
	if p < 0 || int(p) >= len(s.byID) {
		if p < 0 {
			if i, ok := s.find(p); ok {
				return s.parts[i]
			}
		}
		return nil
	}
	return s.byID[p]
}

func (s *Sources) table(p int32) *table {
	if t := s.lookup(p); t != nil {
		return t
	}
	i, ok := s.find(p)
	if ok { // p < 0: not in byID
		return s.parts[i]
	}
	t := &table{id: p}
	s.parts = slices.Insert(s.parts, i, t)
	if p >= 0 {
		for int(p) >= len(s.byID) {
			s.byID = append(s.byID, nil)
		}
		s.byID[p] = t
	}
	return t
}

// Assign adds repartition partition p with an empty table (holding W at
// minus infinity until its sources report); an assigned p keeps its table.
func (s *Sources) Assign(p int32) { s.table(p) }

// Revoke forgets p; W may rise.
func (s *Sources) Revoke(p int32) {
	if i, ok := s.find(p); ok {
		s.parts = slices.Delete(s.parts, i, i+1)
		if p >= 0 {
			s.byID[p] = nil
		}
		s.recompute()
	}
}

// Mark applies a marker read from p. A source's watermark never goes
// down. A marker with a higher source count than the table's starts the
// table's wait again: none of the sources is reported, and the offsets
// applied are forgotten (the input topics gained partitions: when an
// earlier topic grew, the ids of the later ones name other partitions
// now, and their offsets would skip records never applied). A marker with
// a lower count is from a reporter that has not seen the partitions grow
// yet (they never shrink): it is ignored, as its ids may not hold, and it
// would reopen the wait again and again. Mark reports whether p's
// watermark, its idleness or W may have changed (a data record's mark
// mostly changes nothing: its source's watermark stayed).
func (s *Sources) Mark(p int32, m Mark) (changed bool) {
	if m.Count <= 0 || m.Source < 0 || m.Source >= m.Count {
		return false
	}
	t := s.table(p)
	switch {
	case m.Count < t.Count:
		return false
	case m.Count > t.Count:
		t.grow(int(m.Count))
		for i := range t.Sources {
			src := &t.Sources[i]
			src.Reported, src.Idle, src.Watermark = false, false, math.MinInt64
			if t.Count > 0 { // the first marker: what data records noted holds
				src.Applied = -1
			}
		}
		t.Count = m.Count
	}
	src := &t.Sources[m.Source]
	if src.Reported && !src.Idle && !m.Idle {
		// Most marks are a data record's: its source's watermark rose or
		// stayed. W is recomputed only if the source may have held it
		// (its watermark was at or below W): else another source does.
		old := src.Watermark
		src.Watermark = max(old, m.Watermark)
		if src.Watermark != old && (!t.fresh || old <= t.low) {
			t.fresh = false // the source may have held the partition's watermark
		}
		if src.Watermark != old && old <= s.w {
			s.recompute()
		}
		return src.Watermark != old
	}
	t.fresh = false
	if src.Reported {
		src.Watermark = max(src.Watermark, m.Watermark)
	} else {
		src.Watermark = m.Watermark
	}
	src.Reported, src.Idle = true, m.Idle
	s.recompute()
	return true
}

// recompute raises W to the minimum over the partitions that are not all
// idle and reports whether there was any.
func (s *Sources) recompute() bool {
	low, any := int64(math.MaxInt64), false
	for _, t := range s.parts {
		if wm, idle := t.cached(); !idle {
			low, any = min(low, wm), true
		}
	}
	if any {
		s.w = max(s.w, low)
	}
	return any
}

// Tick applies idle_advance when every source of every partition is idle
// (or none is assigned): W = max(W, now - max_out_of_orderness -
// idle_timeout).
func (s *Sources) Tick(now int64) {
	if s.recompute() || !s.idleAdvance || s.idleTimeout == 0 {
		return
	}
	s.w = max(s.w, idleWatermark(now, s.ooo, s.idleTimeout))
}

// Current returns W.
func (s *Sources) Current() int64 { return s.w }

// Lower lowers W to wm if it is above: a partition restored with that
// watermark joined.
func (s *Sources) Lower(wm int64) { s.w = min(s.w, wm) }

// Partition returns p's watermark and whether every source of it is idle.
func (s *Sources) Partition(p int32) (wm int64, idle bool) {
	t := s.lookup(p)
	if t == nil {
		return math.MinInt64, false
	}
	return t.cached()
}

// Table returns p's table (zero: no marker and no record yet), for its
// changelog position; its Sources are p's own until the next Mark or Seen.
func (s *Sources) Table(p int32) Table {
	if t := s.lookup(p); t != nil {
		return t.Table
	}
	return Table{}
}

// Restore replaces p's table with a copy of t (from its changelog
// position), assigning p if needed.
func (s *Sources) Restore(p int32, t Table) {
	tb := s.table(p)
	tb.Table, tb.fresh = Table{Count: t.Count, Sources: slices.Clone(t.Sources)}, false
	s.recompute()
}

// Seen reports whether p already applied source record offset of source
// src (a stage-1 producer keeps each partition's order, so a repeat has
// an offset at or below the highest applied), and notes it as applied
// otherwise.
func (s *Sources) Seen(p, src int32, offset int64) bool {
	if src < 0 {
		return false
	}
	t := s.table(p)
	t.grow(int(src) + 1)
	a := &t.Sources[src]
	if offset <= a.Applied {
		return true
	}
	a.Applied = offset
	return false
}

// Unreported counts p's sources no marker has reported yet; -1 before
// the first marker (p does not know how many there are).
func (s *Sources) Unreported(p int32) int {
	i, ok := s.find(p)
	if !ok || s.parts[i].Count == 0 {
		return -1
	}
	n := 0
	for _, src := range s.parts[i].Sources[:s.parts[i].Count] {
		if !src.Reported {
			n++
		}
	}
	return n
}

// Partitions returns the assigned partitions in ascending order.
func (s *Sources) Partitions() []int32 {
	ps := make([]int32, len(s.parts))
	for i, t := range s.parts {
		ps[i] = t.id
	}
	return ps
}
