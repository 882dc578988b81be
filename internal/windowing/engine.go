package windowing

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"aggregator/internal/record"
)

// smallInts is how many integer result values (0, 1, 2, ...) have their
// record.Value made once, so that typical counts and sums do not allocate
// per firing.
const smallInts = 1024

// numCacheBits sizes numbers.nums, the cache of other result values.
const numCacheBits = 8

// Engine holds the window state of every partition and fires windows as the
// merged watermark advances. It is not safe for concurrent use.
type Engine struct {
	sink     Sink
	size     int64
	slide    int64 // = size for tumbling windows
	paneLen  int64 // gcd(size, slide)
	offset   int64
	lateness int64
	onClose  bool
	tumbling bool // slide == size: a window is its one pane, which keeps its revision
	fifo     bool // windows merge through per-key fifoAggs
	agg      layout

	marks
	span    span   // the last record's pane
	nextDue int64  // no window fires or drops at a watermark below it
	seq     uint64 // arrival number of the last record, for first/last ties

	changes changes // what the changelog lacks (snapshot.go)
	track   bool    // TrackChanges was called
	// aheadUntil is the largest maxTimestamp of a restored window that
	// had fired under its previous owner's higher watermark; while the
	// watermark is below it, Add checks revisions (see fireAhead).
	aheadUntil int64
	// restoredMin is the earliest window start restored since the last
	// FinishRestore; math.MaxInt64 for none.
	restoredMin int64
	// unwins and unkeyed are what Updates took away (build.go): windows
	// still in their timers and keys left without panes, until sweep.
	unwins  []unwin
	unkeyed []int32
	sweepAt int

	keys keySlab[struct{}]
	// slides hold sliding windows' state of each key, by slab index, in
	// chunks of their own: a tumbling key has none, and so costs its
	// keyState only.
	slides []*[slabChunk]slideKey
	pool   panePool

	// buckets are the live window starts, sorted; in emit mode
	// on_watermark buckets[:fired] have had their on-time firing.
	buckets    []*bucket
	fired      int
	byStart    map[int64]*bucket
	lastBucket *bucket
	open       int

	idle     []idleKey // keys left without windows, oldest first
	idleMark int32     // the mark of the last idle entry

	// reused memory
	freeBuckets []*bucket
	sortKey     []byte
	sorted      []sortEntry
	acc         *ownPane
	res         Result
	vals        results // where its results' aggregates go
	numbers

	early earlyTicks
	cal   *Calendar // calendar windows: tumbling, with these bounds

	// foldTag is FoldTag of the spec if its windows fold (0 otherwise),
	// and merging the scratch pane a Partial is read into (Merge).
	foldTag uint32
	merging *ownPane

	// from and until bound the starts of the windows the engine creates
	// (docs/design.md#generations-in-the-window-operators: Spec.From, CutOver); math.MinInt64 and
	// math.MaxInt64 without bounds. assign applies them once per pane.
	from, until int64
}

// NewEngine builds the engine of a tumbling or sliding window spec. sink
// gets results in emission order. The spec is taken as validated; the
// only error is an aggregate function the engine does not know.
func NewEngine(spec Spec, sink Sink) (*Engine, error) {
	e := &Engine{
		sink:        sink,
		size:        spec.Size,
		slide:       spec.Slide,
		offset:      spec.Offset,
		lateness:    spec.Lateness,
		onClose:     spec.OnClose,
		marks:       newMarks(),
		nextDue:     math.MaxInt64,
		span:        span{from: 1, to: 0}, // empty: the first Add assigns
		aheadUntil:  math.MinInt64,
		restoredMin: math.MaxInt64,
		byStart:     map[int64]*bucket{},
		early:       newEarlyTicks(spec.Early),
		from:        spec.from(),
		until:       math.MaxInt64,
		sweepAt:     sweepAt,
	}
	switch spec.Kind {
	case KindTumbling:
		e.slide = e.size
	case KindSliding:
	case KindCalendar:
		if spec.Zone == nil || spec.Calendar < CalendarDay || spec.Calendar > CalendarMonth {
			return nil, fmt.Errorf("calendar window: unit %d in zone %v", spec.Calendar, spec.Zone)
		}
		// Tumbling windows whose bounds come from the calendar; size is a
		// day, for what needs about a window's length (evictIdle).
		e.cal = &Calendar{Unit: spec.Calendar, Loc: spec.Zone}
		e.size, e.slide, e.offset = 86_400_000, 86_400_000, 0
	default:
		return nil, fmt.Errorf("window kind %d: not tumbling, sliding or calendar", spec.Kind)
	}
	e.paneLen = gcd(e.size, e.slide)
	var err error
	if e.agg, err = newLayout(spec.Aggregates); err != nil {
		return nil, err
	}
	e.tumbling = e.slide == e.size
	e.keys = newKeySlab[struct{}](nil)
	e.pool = panePool{stride: e.agg.nums, free: noPane}
	e.acc = e.agg.newOwnPane()
	e.fifo = e.usesFifo()
	e.vals = newResults(sink, len(e.agg.specs))
	e.res.Aggregates = e.vals.own
	if Foldable(spec) {
		e.foldTag = FoldTag(spec)
	}
	e.numbers = newNumbers()
	return e, nil
}

// marks are the watermark an engine acts on and the partitions' floors.
type marks struct {
	wm int64
	// floors, by partition, is a watermark the partition's records are
	// judged against at least: the one they were judged against before
	// the watermark went down (Rewind) or before the partition moved here
	// (SetFloor). Below wm it changes nothing.
	floors []int64
	// drops, by partition, is a watermark the partition's records are
	// judged late against at least, without firing anything by it: the
	// windows an earlier, lower allowed_lateness had dropped (SetDropped).
	drops []int64
	// dropMax is the highest of drops (math.MinInt64 without): a window
	// whose cleanup time is above it is dropped for no partition, so Add
	// looks at drops only for one at or below it.
	dropMax int64
}

func newMarks() marks { return marks{wm: math.MinInt64, dropMax: math.MinInt64} }

// Watermark returns the watermark given to the last Advance (math.MinInt64
// before the first).
func (m *marks) Watermark() int64 { return m.wm }

// StartAt raises the watermark of an operator that has fired nothing yet
// (made, its entries restored, FinishRestore not called) to wm, firing
// nothing: as if Advance(wm) had come before its first Restore, so that
// a restore can be built apart from the watermark it joins (the merged
// one, known only when it is attached). FinishRestore then fires what
// is due at wm.
func (m *marks) StartAt(wm int64) { m.wm = max(m.wm, wm) }

// Judged returns the watermark a record of partition p is judged against:
// the watermark, or p's floor if higher.
func (m *marks) Judged(p int32) int64 {
	if int(p) < len(m.floors) {
		return max(m.wm, m.floors[p])
	}
	return m.wm
}

// dropFor returns the watermark by which a record of partition p is
// late, wm (Judged) or above (SetDropped): Add asks for it only when a
// window of the record has a cleanup time at or below dropMax.
func (m *marks) dropFor(p int32, wm int64) int64 {
	if int(p) < len(m.drops) {
		return max(wm, m.drops[p])
	}
	return wm
}

// SetDropped makes partition p's records late for every window whose
// cleanup time is at or below wm, without firing any window by wm: the
// windows an earlier, lower allowed_lateness had dropped by the previous
// owner's watermark (docs/changing-config.md#three-kinds-of-key: a raised lateness brings none back).
func (m *marks) SetDropped(p int32, wm int64) {
	for int(p) >= len(m.drops) {
		m.drops = append(m.drops, math.MinInt64)
	}
	m.drops[p] = max(m.drops[p], wm)
	m.dropMax = max(m.dropMax, wm)
}

// SetFloor makes partition p's records judged against wm at least: the
// watermark of p's previous owner, which dropped its windows by it.
func (m *marks) SetFloor(p int32, wm int64) {
	for int(p) >= len(m.floors) {
		m.floors = append(m.floors, math.MinInt64)
	}
	m.floors[p] = max(m.floors[p], wm)
}

// lower moves the watermark down to wm, the partitions in keep judged
// against the current one from now on; it reports whether it went down.
func (m *marks) lower(wm int64, keep []int32) bool {
	if wm >= m.wm {
		return false
	}
	for _, p := range keep {
		m.SetFloor(p, m.wm)
	}
	m.wm = wm
	return true
}

// clearFloor forgets partition p's floor: p is leaving.
func (m *marks) clearFloor(p int32) {
	if int(p) < len(m.floors) {
		m.floors[p] = math.MinInt64
	}
	if int(p) < len(m.drops) {
		m.drops[p] = math.MinInt64
	}
}

// Rewind lowers the watermark to wm: a partition whose watermark is below
// it was assigned (docs/scaling.md#the-merged-watermark-across-a-rebalance: its state and watermark moved with it). The
// partitions in keep (the others) go on being judged against the current
// watermark, so no record of theirs changes fate; their windows that fired
// stay fired (an on-time firing skips them; a record into one fires it
// late); windows not fired yet fire when the watermark comes back.
func (e *Engine) Rewind(wm int64, keep []int32) {
	if !e.lower(wm, keep) {
		return
	}
	if !e.onClose {
		i, _ := slices.BinarySearchFunc(e.buckets, wm, func(b *bucket, wm int64) int {
			return cmp.Compare(e.maxTimestamp(b.start), wm+1) // the first bucket not due at wm
		})
		e.fired = min(e.fired, i)
	}
	e.nextDue = e.dueTime()
}

// OpenWindows returns the number of open (key, window) pairs.
func (e *Engine) OpenWindows() int { return e.open }

// Stats returns what e counts: nothing yet that tumbling and sliding
// windows have.
func (e *Engine) Stats() Stats { return Stats{} }

// RemovePartition drops a revoked partition's state without firing.
func (e *Engine) RemovePartition(p int32) {
	e.clearFloor(p)
	forgetPartition(&e.changes, &e.keys, p)
	kept := e.buckets[:0]
	fired := 0
	for i, b := range e.buckets {
		n := len(b.keys)
		b.keys = slices.DeleteFunc(b.keys, func(ki int32) bool { return e.keys.at(ki).part == p })
		e.open -= n - len(b.keys)
		if len(b.keys) == 0 {
			e.freeBucket(b)
			continue
		}
		if i < e.fired {
			fired++
		}
		kept = append(kept, b)
	}
	clear(e.buckets[len(kept):])
	e.buckets, e.fired = kept, fired
	for ki, k := range e.keys.inPartition(p) {
		for i := k.first; i != noPane; {
			next := e.pool.hdr(i).next
			e.pool.freePane(i)
			i = next
		}
		e.forget(ki)
	}
	if invariants {
		e.check()
	}
}

// window returns the window that starts at start.
func (e *Engine) window(start int64) Window {
	if e.cal != nil {
		return e.cal.Assign(start)
	}
	return Window{Start: start, End: addSat(start, e.size)}
}

func (e *Engine) maxTimestamp(start int64) int64 { return e.window(start).MaxTimestamp() }

// EndOf is the end of the engine's window (or slice's window) that
// starts at start: an upper bound of the event times a slice at start
// holds.
func (e *Engine) EndOf(start int64) int64 { return e.window(start).End }

func (e *Engine) cleanupTime(start int64) int64 { return e.window(start).CleanupTime(e.lateness) }

// numbers makes result values: small integers come from a table, other
// values from a small cache of the last ones made, since many keys'
// windows often share a count or sum; so typical firings do not allocate.
type numbers struct {
	ints []record.Value
	nums []record.Value // 1 << numCacheBits
}

func newNumbers() numbers {
	return numbers{ints: smallIntValues(), nums: make([]record.Value, 1<<numCacheBits)}
}

// smallIntValues are the values of 0 to smallInts-1, made once for every
// operator (read only): with an operator per partition and generation,
// making them per operator was most of making one (a number's text is a
// float formatting).
var smallIntValues = sync.OnceValue(func() []record.Value {
	ints := make([]record.Value, smallInts)
	for i := range ints {
		ints[i] = record.Number(float64(i))
	}
	return ints
})

// number returns f as a result value.
func (n *numbers) number(f float64) record.Value {
	if f >= 0 && f < smallInts && f == math.Trunc(f) {
		return n.ints[int(f)]
	}
	bits := math.Float64bits(f)
	c := &n.nums[(bits*0x9E3779B97F4A7C15)>>(64-numCacheBits)]
	if !c.IsNum || math.Float64bits(c.Num) != bits {
		*c = record.Number(f)
	}
	return *c
}

func (e *Engine) freeBucket(b *bucket) {
	delete(e.byStart, b.start)
	if e.lastBucket == b {
		e.lastBucket = nil
	}
	clear(b.keys)
	b.keys = b.keys[:0]
	e.freeBuckets = append(e.freeBuckets, b)
}

// keyOf returns the slab index and state of rec's key in partition part,
// creating them if needed.
func (e *Engine) keyOf(part int32, rec *record.Record) (int32, *keyState) {
	tag := e.keys.hash(part, rec.Key)
	if ki, k := e.keys.find(part, tag, rec.Key); k != nil {
		return ki, &k.keyState
	}
	return e.newKey(part, tag, rec)
}

func (e *Engine) newKey(part int32, tag uint32, rec *record.Record) (int32, *keyState) {
	e.sortKey = appendSortKey(e.sortKey[:0], rec.KeyFields)
	// One allocation holds both the sort key and a copy of rec.Key (the
	// decoder may reuse the bytes behind rec.Key).
	n := len(e.sortKey)
	e.sortKey = append(e.sortKey, rec.Key...)
	return e.addKey(part, tag, string(e.sortKey), n)
}

// addKey adds key id (sort key, then JSON at split) of partition part,
// hash tag, with its sliding state if the windows slide.
func (e *Engine) addKey(part int32, tag uint32, id string, split int) (int32, *keyState) {
	ki, k := e.keys.add(part, tag, id, split)
	if !e.tumbling && int(ki>>slabBits) == len(e.slides) {
		e.slides = append(e.slides, new([slabChunk]slideKey))
	}
	return ki, &k.keyState
}

// slideOf returns sliding key ki's windows and panes.
func (e *Engine) slideOf(ki int32) *slideKey { return &e.slides[ki>>slabBits][ki&slabMask] }

// forget frees key ki, whose panes are already freed; its sliding state
// keeps its memory for the slot's next key.
func (e *Engine) forget(ki int32) {
	if !e.tumbling {
		e.slideOf(ki).reset()
	}
	e.keys.release(ki)
}

// Reserve makes room for n keys more (Operator.Reserve).
func (e *Engine) Reserve(n int) { e.keys.reserve(n) }

// Due is the lowest watermark at which Advance fires or drops a window or
// ticks an early firing (Operator.Due).
func (e *Engine) Due() int64 { return min(e.nextDue, e.early.nextTick(e.wm)) }
