package windowing

import (
	"cmp"
	"math"
	"slices"

	"aggregator/internal/record"
)

// Add applies steps 1–2 of docs/semantics.md#what-happens-to-each-record to one decoded record against the current
// watermark W: it assigns the record's windows, skips those with
// cleanupTime <= W, adds it to the others (one pane update), and in emit
// mode on_watermark late-fires every window it was added to whose
// maxTimestamp <= W, latest window start first.
func (e *Engine) Add(rec *record.Record) AddResult {
	c := &e.span
	if t := rec.Time; t < c.from || t >= c.to {
		e.assign(t)
	}
	wm := e.Judged(rec.Partition)
	drop := wm // late by: above wm for a window a lower lateness dropped (SetDropped)
	if c.firstCleanup <= e.dropMax {
		drop = e.dropFor(rec.Partition, wm)
	}
	if c.lastCleanup <= drop {
		if c.outside {
			return AddResult{Kind: OtherGeneration}
		}
		return AddResult{Kind: LateEvent, Missed: e.window(c.last)}
	}
	first, kind, firstMaxTs := c.first, Aggregated, c.firstMaxTs
	if c.firstCleanup <= drop {
		kind = PartiallyLate
		for first += e.slide; e.cleanupTime(first) <= drop; first += e.slide {
		}
		firstMaxTs = e.maxTimestamp(first)
	}
	last, paneStart := c.last, c.from
	ki, k := e.keyOf(rec.Partition, rec)
	pi := e.paneOf(ki, k, paneStart, first, last)
	e.seq++
	if e.agg.numsOnly {
		e.agg.addNums(&e.pool.hdr(pi).count, e.pool.numsOf(pi), rec.Values)
	} else {
		e.agg.add(e.pool.view(pi), rec, e.seq)
	}
	if e.track {
		e.markPane(pi, ki)
	}
	if e.fifo {
		e.fifoNote(ki, paneStart, rec, e.seq)
	}
	if e.early.on() {
		e.noteChanged(ki, pi)
	}
	switch {
	case e.onClose:
	case wm < e.aheadUntil:
		e.fireAhead(ki, k, first, last, wm)
	case firstMaxTs <= wm:
		e.fireLate(ki, k, first, last, wm)
	}
	return AddResult{Kind: kind}
}

// span is what Add needs to know of a record's time t, the same for every
// t of one pane [from, to) (no window starts or ends inside a pane), so it
// is computed once per pane rather than once per record.
type span struct {
	from, to     int64 // the pane
	last, first  int64 // the starts of the latest and earliest windows that hold t
	lastCleanup  int64
	firstCleanup int64
	firstMaxTs   int64
	// outside: no window of the engine's generation holds the pane
	// (lastCleanup is then math.MinInt64, so Add looks at it only on
	// its late path).
	outside bool
}

// assign sets e.span to the pane of time t.
func (e *Engine) assign(t int64) {
	last := e.lastStart(t)
	first, pane := last, last
	if !e.tumbling {
		n := (last-t+e.size-1)/e.slide + 1 // t's windows start at last - i*slide, i < n
		first = last - (n-1)*e.slide
		pane = t - floorMod(t-e.offset, e.paneLen)
	}
	to := addSat(pane, e.paneLen)
	if e.cal != nil {
		to = e.window(pane).End
	}
	if first < e.from || last >= e.until {
		if first, last = e.bounded(first, last); first > last {
			e.span = span{from: pane, to: to, last: last, first: first, lastCleanup: math.MinInt64, outside: true}
			return
		}
	}
	e.span = span{
		from: pane, to: to,
		last: last, first: first,
		lastCleanup: e.cleanupTime(last), firstCleanup: e.cleanupTime(first),
		firstMaxTs: e.maxTimestamp(first),
	}
}

// bounded returns the starts of the first and last windows of
// [first, last] (starts a slide apart) that start in [e.from, e.until);
// first > last when none does.
func (e *Engine) bounded(first, last int64) (int64, int64) {
	if e.cal != nil { // one window: first == last
		if first < e.from || last >= e.until {
			return 1, 0
		}
		return first, last
	}
	if last >= e.until {
		last -= ((last-e.until)/e.slide + 1) * e.slide
	}
	if first < e.from {
		first += ((e.from - first + e.slide - 1) / e.slide) * e.slide
	}
	return first, last
}

// CutOver ends e's generation at t (see Operator): e creates no window
// that starts at or after t.
func (e *Engine) CutOver(t int64) {
	if t < e.until {
		e.until = t
		e.span = span{from: 1, to: 0} // assign again
	}
}

// paneOf returns k's pane at start, creating it (and the windows it
// opens, which start in [first, last]) if needed.
func (e *Engine) paneOf(ki int32, k *keyState, start, first, last int64) int32 {
	if k.first != noPane && e.pool.hdr(k.last).start == start {
		return k.last // most records
	}
	var sk *slideKey
	var prev, next int32
	j := 0 // sliding: where the pane is or goes in sk.panes
	if e.tumbling {
		prev, next = e.seek(k, start)
		if prev != noPane && e.pool.hdr(prev).start == start {
			return prev
		}
	} else {
		sk = e.slideOf(ki)
		var found bool
		j, found = e.findPaneIn(sk, start)
		ps := sk.panes.live()
		if found {
			return ps[j]
		}
		prev, next = noPane, noPane
		if j > 0 {
			prev = ps[j-1]
		}
		if j < len(ps) {
			next = ps[j]
		}
	}
	i := e.allocPane(start)
	h := e.pool.hdr(i)
	h.prev, h.next = prev, next
	if prev == noPane {
		k.first = i
	} else {
		e.pool.hdr(prev).next = i
	}
	if next == noPane {
		k.last = i
	} else {
		e.pool.hdr(next).prev = i
	}
	if e.tumbling {
		e.addWindow(ki, start)
	} else {
		sk.panes.insert(j, i)
		e.addWindows(ki, prev, next, first, last)
	}
	return i
}

// findPaneIn returns the index in sk.panes of the sliding key's pane at
// start, or where it would go. Panes are usually consecutive, so the
// first guess, counted back from the newest pane, is O(1) however far
// back start is; a key with gaps takes a binary search.
func (e *Engine) findPaneIn(sk *slideKey, start int64) (int, bool) {
	ps := sk.panes.live()
	n := len(ps)
	if n == 0 {
		return 0, false
	}
	newest := e.pool.hdr(ps[n-1]).start
	switch {
	case start > newest:
		return n, false
	case start == newest: // no division
		return n - 1, true
	}
	if d := newest - start; d >= 0 { // < 0: overflowed
		if j := n - 1 - int(d/e.paneLen); j >= 0 && e.pool.hdr(ps[j]).start == start {
			return j, true
		}
	}
	return slices.BinarySearchFunc(ps, start, func(i int32, s int64) int { return cmp.Compare(e.pool.hdr(i).start, s) })
}

// seek returns k's last pane that starts at or before start (prev) and
// the pane after it (next); noPane where there is none. It walks from
// whichever end of k's panes is nearer to start: a tumbling key's panes
// are its windows, (allowed lateness + disorder) / size + 1 of them, and
// records mostly go to the newest and firings to the oldest.
func (e *Engine) seek(k *keyState, start int64) (prev, next int32) {
	if k.first == noPane {
		return noPane, noPane
	}
	lh := e.pool.hdr(k.last)
	if lh.start <= start {
		return k.last, noPane
	}
	fh := e.pool.hdr(k.first)
	if start < fh.start {
		return noPane, k.first
	}
	if start-fh.start < lh.start-start {
		prev = k.first
		for n := fh.next; e.pool.hdr(n).start <= start; n = e.pool.hdr(n).next {
			prev = n
		}
		return prev, e.pool.hdr(prev).next
	}
	next = k.last
	for p := lh.prev; e.pool.hdr(p).start > start; p = e.pool.hdr(p).prev {
		next = p
	}
	return e.pool.hdr(next).prev, next
}

// addWindow puts key ki in the timer of its new window at start.
func (e *Engine) addWindow(ki int32, start int64) {
	b := e.bucketAt(start)
	b.keys = append(b.keys, ki)
	e.open++
}

// addWindows makes sure sliding key ki has every window starting in
// [first, last], the open windows of its new pane between the panes prev
// and next. The windows a neighbouring pane is in exist already, so only
// those between the neighbours' are added: usually one per new pane,
// however many windows a pane is in.
func (e *Engine) addWindows(ki, prev, next int32, first, last int64) {
	if prev != noPane {
		first = max(first, e.lastStart(e.pool.hdr(prev).start)+e.slide)
	}
	if next != noPane {
		last = min(last, e.firstStart(e.pool.hdr(next).start)-e.slide)
	}
	if first > last {
		return
	}
	sk := e.slideOf(ki)
	sk.wins.reserve(int((last-first)/e.slide) + 1)
	j, _ := sk.findWin(first, e.slide)
	for s := first; ; s += e.slide {
		if ws := sk.wins.live(); j >= len(ws) || ws[j].start != s {
			sk.wins.insert(j, win{start: s})
			e.addWindow(ki, s)
		}
		j++
		if s == last {
			return
		}
	}
}

// lastStart is the start of the latest window that holds time t.
func (e *Engine) lastStart(t int64) int64 {
	if e.cal != nil {
		return e.cal.Assign(t).Start
	}
	return Sliding{Size: e.size, Slide: e.slide, Offset: e.offset}.Last(t).Start // tumbling: slide = size
}

// lastIn is lastStart(t) for a sliding window whose generation ends at
// e.until (CutOver): the start of the latest window of the generation
// that holds t.
func (e *Engine) lastIn(t int64) int64 {
	last := e.lastStart(t)
	if last >= e.until {
		last -= ((last-e.until)/e.slide + 1) * e.slide
	}
	return last
}

// firstStart is the start of the earliest window that holds time t.
func (e *Engine) firstStart(t int64) int64 {
	last := e.lastStart(t)
	if e.tumbling {
		return last
	}
	return last - (last-t+e.size-1)/e.slide*e.slide
}

// fireLate fires, latest start first, the windows starting in [first,
// last] that are already due at wm.
func (e *Engine) fireLate(ki int32, k *keyState, first, last, wm int64) {
	due := int64(0)
	for n := (last-first)/e.slide + 1; due < n && e.maxTimestamp(first+due*e.slide) <= wm; due++ {
	}
	for i := due - 1; i >= 0; i-- {
		e.emit(ki, k, first+i*e.slide, Late)
	}
}

// bucketAt returns the timer of the windows starting at start, creating it.
func (e *Engine) bucketAt(start int64) *bucket {
	if b := e.lastBucket; b != nil && b.start == start {
		return b
	}
	b, ok := e.byStart[start]
	if !ok {
		if n := len(e.freeBuckets); n > 0 {
			b, e.freeBuckets = e.freeBuckets[n-1], e.freeBuckets[:n-1]
		} else {
			b = &bucket{}
		}
		b.start = start
		e.byStart[start] = b
		i, _ := slices.BinarySearchFunc(e.buckets, start, func(b *bucket, s int64) int { return cmp.Compare(b.start, s) })
		e.buckets = slices.Insert(e.buckets, i, b)
		if !e.onClose && e.maxTimestamp(start) <= e.wm {
			e.fired++ // it is among the due buckets: they all fired already
		}
		e.nextDue = min(e.nextDue, e.maxTimestamp(start))
	}
	e.lastBucket = b
	return b
}

// Advance applies step 3 of docs/semantics.md#what-happens-to-each-record for a new merged watermark wm (ignored
// unless higher than the current one): windows with maxTimestamp <= wm that
// have not fired fire on time (emit on_watermark) in order of end, key,
// partition; then windows with cleanupTime <= wm are dropped, firing Final
// first in emit mode on_close. Advance(math.MaxInt64) flushes everything.
// When nothing is due it costs one compare.
func (e *Engine) Advance(wm int64) {
	if wm <= e.wm {
		return
	}
	prev := e.wm
	e.wm = wm
	if tick, ok := e.early.eventTick(prev, wm); ok {
		// Firings come in order of due time: on time up to the tick,
		// then the early ones, then on time after it.
		if tick >= e.nextDue {
			e.fireDueUntil(tick)
			e.nextDue = e.dueTime()
		}
		e.fireEarly()
	}
	if wm < e.nextDue {
		return
	}
	e.fireDue()
	e.nextDue = e.dueTime()
	if invariants { // at every firing or drop: what the records changed since, and what it changed
		e.check()
	}
}

// dueTime is the watermark at which the next bucket fires or drops.
func (e *Engine) dueTime() int64 {
	due := int64(1<<63 - 1)
	if !e.onClose && e.fired < len(e.buckets) {
		due = e.maxTimestamp(e.buckets[e.fired].start)
	}
	if len(e.buckets) > 0 {
		due = min(due, e.cleanupTime(e.buckets[0].start))
	}
	return due
}

// fireDue fires and drops the buckets due at the current watermark.
func (e *Engine) fireDue() { e.fireDueUntil(e.wm) }

// fireDueUntil fires and drops the buckets due at watermark wm (at most e.wm).
func (e *Engine) fireDueUntil(wm int64) {
	if !e.onClose {
		for ; e.fired < len(e.buckets) && e.maxTimestamp(e.buckets[e.fired].start) <= wm; e.fired++ {
			e.fireBucket(e.buckets[e.fired], OnTime)
		}
	}
	dropped := 0
	for ; dropped < len(e.buckets) && e.cleanupTime(e.buckets[dropped].start) <= wm; dropped++ {
		if e.onClose {
			e.fireBucket(e.buckets[dropped], Final)
		}
		e.dropBucket(e.buckets[dropped])
	}
	if dropped == 0 {
		return
	}
	lastStart := e.buckets[dropped-1].start
	for _, b := range e.buckets[:dropped] {
		e.freeBucket(b)
	}
	n := copy(e.buckets, e.buckets[dropped:])
	clear(e.buckets[n:])
	e.buckets = e.buckets[:n]
	e.fired = max(e.fired-dropped, 0)
	e.evictIdle(lastStart)
}

// sortEntry is a key of a timer being sorted, with its sort key prefix.
type sortEntry struct {
	prefix uint64
	key    int32
}

// fireBucket fires every key's window of b, in key order.
func (e *Engine) fireBucket(b *bucket, f Firing) {
	e.sortBucket(b)
	for _, ki := range b.keys {
		e.emit(ki, e.keys.at(ki), b.start, f)
	}
}

// sortBucket puts b's keys in firing order.
func (e *Engine) sortBucket(b *bucket) {
	if len(b.keys) < 2 {
		return
	}
	s := e.sorted[:0]
	for _, ki := range b.keys {
		s = append(s, sortEntry{sortPrefix(e.keys.at(ki).sortKey()), ki})
	}
	byKey := func(a, b sortEntry) int {
		if a.prefix != b.prefix {
			if a.prefix < b.prefix {
				return -1
			}
			return 1
		}
		return compareKeys(e.keys.at(a.key), e.keys.at(b.key))
	}
	if !slices.IsSortedFunc(s, byKey) {
		slices.SortFunc(s, byKey)
		for i := range s {
			b.keys[i] = s[i].key
		}
	}
	e.sorted = s
}

// emit hands the result of k's window at start to the sink. An on-time
// firing skips a window that has fired already: only a window restored
// from an owner whose watermark was ahead has (see fireAhead).
func (e *Engine) emit(ki int32, k *keyState, start int64, f Firing) {
	r := &e.res
	if e.tumbling {
		i := e.findPane(k, start)
		h := e.pool.hdr(i)
		if f == OnTime && h.flags&flagFired != 0 {
			return
		}
		r.Count, r.Revision = h.count, int64(h.rev)
		e.values(e.pool.view(i), r.Aggregates)
		h.rev++
		h.flags = h.flags&^flagChanged | firedBy(f)
		e.markPane(i, ki)
	} else {
		sk := e.slideOf(ki)
		j, _ := sk.findWin(start, e.slide)
		w := &sk.wins.live()[j]
		if f == OnTime && w.flags&flagFired != 0 {
			return
		}
		r.Revision = int64(w.rev)
		w.rev++
		w.flags = w.flags&^flagChanged | firedBy(f)
		e.markWin(ki, w)
		e.mergeWindow(sk, start)
		r.Count = e.acc.n
		e.values(e.acc.pane, r.Aggregates)
	}
	r.Partition = k.part
	r.Key = k.key()
	r.Window = e.window(start)
	r.Firing = f
	r.Watermark = e.wm
	e.sink.Emit(r)
}

// findPane returns k's pane at start, which must exist.
func (e *Engine) findPane(k *keyState, start int64) int32 {
	i, _ := e.seek(k, start)
	return i
}

// mergeWindow leaves in e.acc the merge of sliding key sk's panes in the
// window that starts at start.
func (e *Engine) mergeWindow(sk *slideKey, start int64) {
	if e.fifo && e.fifoWindow(sk, start) {
		return
	}
	e.agg.clear(e.acc.pane)
	for _, i := range e.panesIn(sk, start, e.window(start).End) {
		e.agg.merge(e.acc.pane, e.pool.view(i))
	}
}

// panesIn returns the sliding key's panes that start in [from, to).
func (e *Engine) panesIn(sk *slideKey, from, to int64) []int32 {
	lo, _ := e.findPaneIn(sk, from)
	hi, _ := e.findPaneIn(sk, to)
	return sk.panes.live()[lo:hi]
}

// dropBucket removes b's window from every key in it, with the panes no
// open window of the key needs any more.
func (e *Engine) dropBucket(b *bucket) {
	for _, ki := range b.keys {
		k := e.keys.at(ki)
		var sk *slideKey
		if !e.tumbling {
			sk = e.slideOf(ki)
			j, _ := sk.findWin(b.start, e.slide)
			e.dropped(WindowEntry, k, b.start, sk.wins.live()[j].flags)
			if j == 0 {
				sk.wins.popFront()
			} else { // not reached: buckets drop in start order
				sk.wins.s = slices.Delete(sk.wins.s, sk.wins.head+j, sk.wins.head+j+1)
			}
		}
		e.open--
		for k.first != noPane {
			h := e.pool.hdr(k.first)
			if !e.tumbling && e.lastIn(h.start) > b.start || e.tumbling && h.start > b.start { // its latest window is still open
				break
			}
			i := k.first
			e.dropped(SliceEntry, k, h.start, h.flags)
			k.first = h.next
			if k.first != noPane {
				e.pool.hdr(k.first).prev = noPane
			}
			if sk != nil {
				sk.panes.popFront()
			}
			e.pool.freePane(i)
		}
		if k.first == noPane {
			e.idleMark++
			k.last = e.idleMark
			e.idle = append(e.idle, idleKey{since: b.start, key: ki, mark: e.idleMark})
		}
	}
}

// evictIdle forgets keys that have had no window for about a window's
// length of event time (since a bucket before lastStart-size dropped), so
// that a key that comes back every window keeps its slot. An entry whose
// key has windows again, was freed, or has a later entry, is skipped.
func (e *Engine) evictIdle(lastStart int64) {
	i := 0
	for ; i < len(e.idle); i++ {
		ik := e.idle[i]
		k := e.keys.at(ik.key)
		if k.id == "" || k.first != noPane || k.last != ik.mark {
			continue
		}
		if addSat(ik.since, e.size) > lastStart {
			break
		}
		e.forget(ik.key)
	}
	n := copy(e.idle, e.idle[i:])
	e.idle = e.idle[:n]
}
