package windowing

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"

	"aggregator/internal/record"
)

// Counts is the engine of count windows (docs/windows.md#count-windows-every-n-records-of-a-key; Flink's countWindow).
// Per (partition, key), records are counted in the order they come.
// Without a slide, window i holds the key's records N·i … N·i+N−1 and
// fires when its N-th record comes (or, with a timeout, once the
// watermark reaches its first record's time + timeout, with what it has).
// With a slide S, after every S-th record a window of the key's last
// min(N, seen) records fires. State is kept in slices of gcd(N, S)
// records, one pane each: the last N/gcd slices and the one filling.
// Nothing is late. Counts has the methods of Engine that the pipeline
// uses. It is not safe for concurrent use.
type Counts struct {
	sink    Sink
	n, s, g int64 // size, slide (= size for tumbling count windows), slice length
	timeout int64 // 0: none
	agg     layout
	numbers
	marks

	keys keySlab[countKey]
	pool panePool
	open int
	seq  uint64 // arrival number, for first/last

	due   *timeoutHeap // tumbling with a timeout: the open windows by due time
	batch []timeoutAt  // fireTimeouts' scratch: the timeouts due at one time

	track bool
	dirty []int32   // keys changed since the last Changes
	gone  []goneRef // stored slices dropped since

	res  Result
	vals results // where its results' aggregates go
	acc  *ownPane

	cut bool // CutOver was called: c takes no record
}

// countKey is a count window's state of one (partition, key), beside its
// identity in the key slab.
type countKey struct {
	// seen counts the key's records: all of them with a slide; those of
	// the open window without. seq is the open window's index (without a
	// slide); with one, firings so far are seen / S.
	seen, seq int64
	slices    []countSlice // oldest first
	dirty     bool
	gen       uint32 // bumped when the slot is released: older timeouts are stale
}

// reset empties a released key's state, keeping its slices' memory.
func (k *countKey) reset() { *k = countKey{gen: k.gen + 1, slices: k.slices[:0]} }

// countSlice is gcd(N, S) records of a key (fewer while it fills): its
// pane, its index (records idx·g … idx·g+g−1 of the key; without a slide,
// the window's index) and the event-time bounds of its records.
type countSlice struct {
	idx       int64
	pane      int32
	lo, hi    int64 // smallest and largest event time
	first     int64 // event time of its first record (timeouts)
	stored    bool  // Changes handed it out: dropping it needs a tombstone
	freshened bool  // changed since the last Changes
}

// NewCounts builds the engine of a count window spec.
func NewCounts(spec Spec, sink Sink) (*Counts, error) {
	if spec.Kind != KindCount || spec.Size <= 0 || spec.Slide < 0 || spec.Slide > spec.Size {
		return nil, fmt.Errorf("count window: size %d, slide %d", spec.Size, spec.Slide)
	}
	c := &Counts{sink: sink, n: spec.Size, s: spec.Slide, timeout: spec.Timeout,
		marks: newMarks(), keys: newKeySlab((*countKey).reset), numbers: newNumbers()}
	if c.s == 0 {
		c.s = c.n
	}
	c.g = gcd(c.n, c.s)
	var err error
	if c.agg, err = newLayout(spec.Aggregates); err != nil {
		return nil, err
	}
	c.pool = panePool{stride: c.agg.nums, free: noPane}
	c.acc = c.agg.newOwnPane()
	c.due = &timeoutHeap{}
	c.vals = newResults(sink, len(c.agg.specs))
	c.res.Aggregates = c.vals.own
	return c, nil
}

func (c *Counts) tumbling() bool { return c.s == c.n }

// Add counts rec into its key's open slice and fires what it completes.
func (c *Counts) Add(rec *record.Record) AddResult {
	if c.cut {
		return AddResult{Kind: OtherGeneration}
	}
	ki, k := c.keyOf(rec)
	idx := k.seen / c.g
	if c.tumbling() {
		idx = k.seq
	}
	if n := len(k.slices); n == 0 || k.slices[n-1].idx != idx {
		k.slices = append(k.slices, countSlice{idx: idx, pane: c.pool.alloc(&c.agg, idx), lo: rec.Time, hi: rec.Time, first: rec.Time})
		c.open++
		if c.tumbling() && c.timeout > 0 {
			heap.Push(c.due, timeoutAt{at: addSat(rec.Time, c.timeout), key: ki, gen: k.gen, seq: k.seq, id: *c.keys.at(ki)})
		}
	}
	x := &k.slices[len(k.slices)-1]
	x.lo, x.hi, x.freshened = min(x.lo, rec.Time), max(x.hi, rec.Time), true
	c.seq++
	c.agg.add(c.pool.view(x.pane), rec, c.seq)
	k.seen++
	c.note(ki)
	switch {
	case c.tumbling() && k.seen == c.n:
		c.fireTumbling(ki, OnTime)
	case c.tumbling() && c.timeout > 0 && k.seen == 1 && addSat(x.first, c.timeout) <= c.wm:
		c.fireTumbling(ki, Timeout) // due already: fires at once
	case !c.tumbling() && k.seen%c.s == 0:
		c.fireSliding(ki)
	default:
		return AddResult{Kind: Aggregated}
	}
	if invariants { // at every firing: what the records changed since, and what it changed
		c.check()
	}
	return AddResult{Kind: Aggregated}
}

// fireTumbling fires key ki's open window and starts the next.
func (c *Counts) fireTumbling(ki int32, f Firing) {
	k := c.keys.ext(ki)
	x := k.slices[0]
	c.emit(ki, x.pane, Window{Start: x.lo, End: addSat(x.hi, 1)}, k.seq, f)
	c.drop(ki, 0)
	k.seq++
	k.seen = 0
	c.note(ki)
}

// fireSliding fires the window of key ki's last min(N, seen) records and
// drops the slices no later window needs.
func (c *Counts) fireSliding(ki int32) {
	k := c.keys.ext(ki)
	c.fireSlidingAs(ki, OnTime)
	keep := (k.seen + c.s - c.n) / c.g // the next firing's first slice
	for len(k.slices) > 0 && k.slices[0].idx < keep {
		c.drop(ki, 0)
	}
}

// fireSlidingAs emits, as f, the window that fires when the key's seen
// reaches the next multiple of S, with the records it holds so far: the
// last min(N, seen) when seen is one (a firing), fewer before (the
// partial window CutOver fires).
func (c *Counts) fireSlidingAs(ki int32, f Firing) {
	k := c.keys.ext(ki)
	next := (k.seen + c.s - 1) / c.s * c.s
	seq := next/c.s - 1
	from := max(0, (next-c.n)/c.g)
	c.agg.clear(c.acc.pane)
	w := Window{Start: math.MaxInt64, End: math.MinInt64}
	for _, x := range k.slices {
		if x.idx >= from {
			c.agg.merge(c.acc.pane, c.pool.view(x.pane))
			w.Start, w.End = min(w.Start, x.lo), max(w.End, addSat(x.hi, 1))
		}
	}
	c.emitPane(ki, c.acc.pane, w, seq, f)
}

// CutOver ends c's generation (see Operator): count windows are cut by
// arrival, so t does not matter. Every key's partial window fires Final,
// by key, with what it holds (with a slide, the window of the key's last
// min(N, seen) records, if a record came since its last firing), and its
// slices are dropped; c takes no record from then on.
func (c *Counts) CutOver(int64) {
	if c.cut {
		return
	}
	c.cut = true
	var keys []int32
	for ki, k := range c.keys.live() {
		if k.id == "" {
			continue
		}
		if len(c.keys.ext(ki).slices) > 0 {
			keys = append(keys, ki)
		} else if c.tumbling() {
			c.note(ki) // its entry (the window index) goes: the generation takes no record
		}
	}
	slices.SortFunc(keys, c.keys.compare)
	for _, ki := range keys {
		k := c.keys.ext(ki)
		switch {
		case c.tumbling():
			c.fireTumbling(ki, Final)
		case k.seen%c.s != 0:
			c.fireSlidingAs(ki, Final)
		}
		for len(k.slices) > 0 {
			c.drop(ki, 0)
		}
		c.note(ki)
	}
	if invariants {
		c.check()
	}
}

// drop frees key ki's slice i.
func (c *Counts) drop(ki int32, i int) {
	k := c.keys.ext(ki)
	x := k.slices[i]
	if x.stored {
		id := c.keys.at(ki)
		c.gone = append(c.gone, goneRef{kind: CountEntry, part: id.part, id: id.id, split: id.split, start: c.entryStart(x.idx)})
	}
	c.pool.freePane(x.pane)
	k.slices = slices.Delete(k.slices, i, i+1)
	c.open--
}

func (c *Counts) emit(ki int32, pane int32, w Window, seq int64, f Firing) {
	c.emitPane(ki, c.pool.view(pane), w, seq, f)
}

func (c *Counts) emitPane(ki int32, p pane, w Window, seq int64, f Firing) {
	k := c.keys.at(ki)
	r := &c.res
	r.Partition, r.Key, r.Window, r.Count = k.part, k.key(), w, *p.count
	r.Firing, r.Revision, r.Watermark, r.Seq = f, 0, c.wm, seq
	c.vals.lend(r)
	c.agg.values(p, r.Aggregates, &c.numbers)
	c.sink.Emit(r)
}

// Advance fires, in order of due time then key, the tumbling count
// windows whose first record's time + timeout the watermark reached.
func (c *Counts) Advance(wm int64) {
	if wm <= c.wm {
		return
	}
	c.wm = wm
	c.fireTimeouts()
	if invariants {
		c.check()
	}
}

// fireTimeouts fires the timeouts due at c.wm: by due time, then window
// end, then key (docs/windows.md#count-windows-every-n-records-of-a-key). A window's end grows with its records, so the
// heap orders by due time only up to ties, which are sorted when due.
func (c *Counts) fireTimeouts() {
	for len(c.due.items) > 0 && c.due.items[0].at <= c.wm {
		at, batch := c.due.items[0].at, c.batch[:0]
		for len(c.due.items) > 0 && c.due.items[0].at == at {
			t := heap.Pop(c.due).(timeoutAt)
			k := c.keys.ext(t.key)
			if c.keys.at(t.key).id == "" || k.gen != t.gen || k.seq != t.seq || len(k.slices) == 0 {
				continue // fired already when full, or the key is gone
			}
			batch = append(batch, t)
		}
		slices.SortFunc(batch, func(a, b timeoutAt) int {
			return cmp.Or(cmp.Compare(c.keys.ext(a.key).slices[0].hi, c.keys.ext(b.key).slices[0].hi), compareKeys(&a.id, &b.id))
		})
		for _, t := range batch {
			c.fireTumbling(t.key, Timeout)
		}
		c.batch = batch[:0]
	}
}

// keyOf returns the index and state of rec's key, adding it if needed.
func (c *Counts) keyOf(rec *record.Record) (int32, *countKey) {
	tag := c.keys.hash(rec.Partition, rec.Key)
	if ki, k := c.keys.find(rec.Partition, tag, rec.Key); k != nil {
		return ki, &k.ext
	}
	sort := appendSortKey(nil, rec.KeyFields)
	ki, k := c.keys.add(rec.Partition, tag, string(append(sort, rec.Key...)), len(sort))
	return ki, &k.ext
}

// note marks key ki changed, for Changes.
func (c *Counts) note(ki int32) {
	if !c.track {
		return
	}
	if k := c.keys.ext(ki); !k.dirty {
		k.dirty = true
		c.dirty = append(c.dirty, ki)
	}
}

// OpenWindows returns the number of open slices.
func (c *Counts) OpenWindows() int { return c.open }

// Stats returns what c counts: nothing yet that count windows have.
func (c *Counts) Stats() Stats { return Stats{} }

// ProcessingTime does nothing: count windows have no early firings.
func (c *Counts) ProcessingTime(int64) {}

// Rewind lowers the watermark (see Engine.Rewind); nothing is late in a
// count window, so only the timeouts wait longer.
func (c *Counts) Rewind(wm int64, keep []int32) { c.lower(wm, keep) }

// RemovePartition drops a revoked partition's keys without firing.
func (c *Counts) RemovePartition(p int32) {
	c.clearFloor(p)
	for ki := range c.keys.inPartition(p) {
		for _, x := range c.keys.ext(ki).slices {
			c.pool.freePane(x.pane)
			c.open--
		}
		c.keys.release(ki)
	}
	c.gone = slices.DeleteFunc(c.gone, func(g goneRef) bool { return g.part == p })
	c.dirty = slices.DeleteFunc(c.dirty, func(ki int32) bool { return c.keys.at(ki).id == "" })
	if invariants {
		c.check()
	}
}

// TrackChanges makes c note what changes, for Changes.
func (c *Counts) TrackChanges() { c.track = true }

// entryStart is the changelog identity of slice idx: without a slide a
// key has one entry (its window's index is in Revision).
func (c *Counts) entryStart(idx int64) int64 {
	if c.tumbling() {
		return 0
	}
	return idx
}

// Changes hands out tombstones of dropped slices, then every changed
// key's state: without a slide one entry (Revision: the open window's
// index; Count 0 when none is open), with one an entry per changed slice.
func (c *Counts) Changes(fn func(*Entry)) {
	var en Entry
	for _, g := range c.gone {
		if c.tumbling() {
			continue // the key's one entry is rewritten below
		}
		en = Entry{Kind: CountEntry, Partition: g.part, ID: g.id, Split: int(g.split), Start: g.start, Deleted: true}
		fn(&en)
	}
	clear(c.gone)
	c.gone = c.gone[:0]
	for _, ki := range c.dirty {
		k, id := c.keys.ext(ki), c.keys.at(ki)
		k.dirty = false
		if c.tumbling() {
			en = Entry{Kind: CountEntry, Partition: id.part, ID: id.id, Split: int(id.split), Revision: k.seq}
			if len(k.slices) > 0 {
				c.sliceEntry(&en, &k.slices[0])
			}
			// Cut over (CutOver), a key needs no window index any more: its
			// entry is deleted, so the generation leaves nothing in the
			// changelog once it retires.
			en.Deleted = c.cut && len(k.slices) == 0
			fn(&en)
			continue
		}
		for i := range k.slices {
			if x := &k.slices[i]; x.freshened {
				en = Entry{Kind: CountEntry, Partition: id.part, ID: id.id, Split: int(id.split), Start: x.idx}
				c.sliceEntry(&en, x)
				fn(&en)
			}
		}
	}
	c.dirty = c.dirty[:0]
}

// sliceEntry fills en's state from slice x and marks x stored.
func (c *Counts) sliceEntry(en *Entry, x *countSlice) {
	var tmp Entry
	c.pool.entry(&tmp, CountEntry, &keyState{}, x.pane)
	en.Count, en.Nums, en.Picks, en.Sets, en.Sketches, en.Exact, en.Tops = tmp.Count, tmp.Nums, tmp.Picks, tmp.Sets, tmp.Sketches, tmp.Exact, tmp.Tops
	en.Lo, en.Hi, en.First = x.lo, x.hi, x.first
	x.stored, x.freshened = true, false
}

// Restore adds one CountEntry of a partition with no state in c.
func (c *Counts) Restore(en *Entry, _ int64) error {
	if ok, err := restorable(en); !ok {
		return err
	}
	key := en.ID[en.Split:]
	if en.Kind != CountEntry {
		return fmt.Errorf("restore: entry kind %d at %d of %s does not fit a count window (was the window changed?)", en.Kind, en.Start, key)
	}
	limit := c.g
	if c.tumbling() {
		limit = c.n - 1
	}
	if en.Count < 0 || en.Count > limit || en.Count == 0 && !c.tumbling() || en.Start < 0 || en.Revision < 0 || en.Lo > en.Hi || c.tumbling() && en.Start != 0 {
		return fmt.Errorf("restore: count slice %d of %s with %d records (window %d) does not fit count windows of %d every %d (was the window changed?)", en.Start, key, en.Count, en.Revision, c.n, c.s)
	}
	tag := c.keys.hash(en.Partition, key)
	ki, ent := c.keys.find(en.Partition, tag, key)
	if ent == nil {
		ki, ent = c.keys.add(en.Partition, tag, strings.Clone(en.ID), en.Split) // en.ID is lent
	}
	id, k := &ent.keyState, &ent.ext
	if c.tumbling() {
		k.seq = en.Revision
		if en.Count == 0 {
			return nil // a key between windows
		}
	}
	if err := c.agg.checkSlots(en, "count slice"); err != nil {
		return err
	}
	idx := en.Start
	if c.tumbling() {
		idx = k.seq
	}
	if slices.ContainsFunc(k.slices, func(x countSlice) bool { return x.idx == idx }) {
		return fmt.Errorf("restore: count slice %d of %s twice", idx, key)
	}
	pi := c.pool.alloc(&c.agg, idx)
	seq, err := c.pool.load(&c.agg, pi, en)
	if err != nil {
		c.pool.freePane(pi)
		return err
	}
	c.seq = max(c.seq, seq)
	x := countSlice{idx: idx, pane: pi, lo: en.Lo, hi: en.Hi, first: en.First, stored: true}
	i, _ := slices.BinarySearchFunc(k.slices, idx, func(x countSlice, idx int64) int { return cmp.Compare(x.idx, idx) })
	k.slices = slices.Insert(k.slices, i, x)
	c.open++
	if c.tumbling() {
		k.seen = en.Count
		if c.timeout > 0 {
			heap.Push(c.due, timeoutAt{at: addSat(en.First, c.timeout), key: ki, gen: k.gen, seq: k.seq, id: *id})
		}
	} else {
		newest := k.slices[len(k.slices)-1]
		k.seen = newest.idx*c.g + *c.pool.view(newest.pane).count
	}
	return nil
}

// FinishRestore fires the timeouts already due at the watermark.
func (c *Counts) FinishRestore() {
	c.fireTimeouts()
	if invariants {
		c.check()
	}
}

// timeoutAt is an open tumbling count window's timeout: due at at, for
// key's window seq (stale once that window fired).
type timeoutAt struct {
	at  int64
	id  keyState // the key's identity, for the order
	key int32
	gen uint32
	seq int64
}

// timeoutHeap orders timeouts by due time, then key (compareKeys);
// fireTimeouts sorts the ties by window end.
type timeoutHeap struct{ items []timeoutAt }

func (h *timeoutHeap) Len() int { return len(h.items) }
func (h *timeoutHeap) Less(i, j int) bool {
	a, b := &h.items[i], &h.items[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return compareKeys(&a.id, &b.id) < 0
}
func (h *timeoutHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *timeoutHeap) Push(x any)    { h.items = append(h.items, x.(timeoutAt)) }
func (h *timeoutHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// Reserve makes room for n keys more (Operator.Reserve).
func (c *Counts) Reserve(n int) { c.keys.reserve(n) }

// Due is the lowest watermark at which Advance fires a timeout
// (Operator.Due).
func (c *Counts) Due() int64 {
	if c.due == nil || len(c.due.items) == 0 {
		return math.MaxInt64
	}
	return c.due.items[0].at
}
