package windowing

import (
	"slices"

	"aggregator/internal/record"
)

// Add applies SPEC §3 steps 1–2 to one decoded record against the current
// watermark W: it assigns the record's windows, skips those with
// cleanupTime <= W, adds it to the others (one pane update), and in emit
// mode on_watermark late-fires every window it was added to whose
// maxTimestamp <= W, latest window start first.
func (e *Engine) Add(rec *record.Record) Outcome {
	t := rec.Time
	last := t - floorMod(t-e.offset, e.slide)
	if e.cleanupTime(last) <= e.wm {
		return Outcome{Kind: LateEvent, Missed: e.window(last)}
	}
	n := (last-t+e.size-1)/e.slide + 1 // t's windows start at last - i*slide, i < n
	first := last - (n-1)*e.slide
	kind := Aggregated
	if e.cleanupTime(first) <= e.wm {
		kind = PartiallyLate
		for first += e.slide; e.cleanupTime(first) <= e.wm; first += e.slide {
		}
	}
	ps := e.partition(rec.Partition)
	k := e.keyOf(ps, rec)
	paneStart := last
	if e.paneLen != e.slide {
		paneStart = t - floorMod(t-e.offset, e.paneLen)
	}
	i, found := k.findPane(paneStart)
	if !found {
		k.panes.insert(i, e.newPane(paneStart))
		e.addWindows(k, i, first, last)
	}
	e.seq++
	e.agg.add(&k.panes.live()[i], rec, e.seq)
	if k.fifo != nil {
		e.fifoNote(k, paneStart, rec, e.seq)
	}
	ps.hold(last, rec.Offset)
	if !e.onClose && e.maxTimestamp(first) <= e.wm {
		e.fireLate(k, first, last)
	}
	return Outcome{Kind: kind}
}

// addWindows makes sure k has every window starting in [first, last], the
// open windows of its new pane i. The windows a neighbouring pane is in
// exist already, so only those between the neighbours' are added: usually
// one per new pane, however many windows a pane is in.
func (e *Engine) addWindows(k *keyState, i int, first, last int64) {
	ps := k.panes.live()
	if i > 0 {
		first = max(first, e.lastStart(ps[i-1].start)+e.slide)
	}
	if i+1 < len(ps) {
		last = min(last, e.firstStart(ps[i+1].start)-e.slide)
	}
	if first > last {
		return
	}
	j, _ := slices.BinarySearchFunc(k.wins.live(), first, func(w win, s int64) int { return cmpInt(w.start, s) })
	for s := first; ; s += e.slide {
		if ws := k.wins.live(); j >= len(ws) || ws[j].start != s {
			k.wins.insert(j, win{start: s})
			e.bucketAt(s).keys = append(e.bucketAt(s).keys, k)
			e.open++
		}
		j++
		if s == last {
			return
		}
	}
}

// lastStart is the start of the latest window that holds time t.
func (e *Engine) lastStart(t int64) int64 { return t - floorMod(t-e.offset, e.slide) }

// firstStart is the start of the earliest window that holds time t.
func (e *Engine) firstStart(t int64) int64 {
	last := e.lastStart(t)
	return last - (last-t+e.size-1)/e.slide*e.slide
}

// fireLate fires, latest start first, the windows starting in [first,
// last] that are already due.
func (e *Engine) fireLate(k *keyState, first, last int64) {
	due := int64(0)
	for n := (last-first)/e.slide + 1; due < n && e.maxTimestamp(first+due*e.slide) <= e.wm; due++ {
	}
	for i := due - 1; i >= 0; i-- {
		j, _ := k.findWin(first + i*e.slide)
		e.emit(k, &k.wins.live()[j], Late)
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
		i, _ := slices.BinarySearchFunc(e.buckets, start, func(b *bucket, s int64) int { return cmpInt(b.start, s) })
		e.buckets = slices.Insert(e.buckets, i, b)
		if !e.onClose && e.maxTimestamp(start) <= e.wm {
			e.fired++ // it is among the due buckets: they all fired already
		}
	}
	e.lastBucket = b
	return b
}

// Advance applies SPEC §3 step 3 for a new merged watermark wm (ignored
// unless higher than the current one): windows with maxTimestamp <= wm that
// have not fired fire on time (emit on_watermark) in order of end, key,
// partition; then windows with cleanupTime <= wm are dropped, firing Final
// first in emit mode on_close. Advance(math.MaxInt64) flushes everything.
// When nothing is due it costs O(1).
func (e *Engine) Advance(wm int64) {
	if wm <= e.wm {
		return
	}
	e.wm = wm
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
	for _, ps := range e.parts {
		ps.release(lastStart)
	}
	e.evictIdle(lastStart)
}

// fireBucket fires every key's window of b, in key order.
func (e *Engine) fireBucket(b *bucket, f Firing) {
	slices.SortFunc(b.keys, compareKeys)
	for _, k := range b.keys {
		j, _ := k.findWin(b.start)
		e.emit(k, &k.wins.live()[j], f)
	}
}

// emit merges the panes of k's window w and hands the result to the sink.
func (e *Engine) emit(k *keyState, w *win, f Firing) {
	e.mergeWindow(k, w.start)
	r := &e.res
	r.Partition = k.part
	r.Key = k.key()
	r.Window = e.window(w.start)
	r.Count = e.acc.count
	r.Firing = f
	r.Revision = w.rev
	r.Watermark = e.wm
	e.agg.values(&e.acc, r.Aggregates, e.number)
	w.rev++
	e.sink.Emit(r)
}

// mergeWindow leaves in e.acc the merge of k's panes in the window that
// starts at start.
func (e *Engine) mergeWindow(k *keyState, start int64) {
	if e.fifo && e.fifoWindow(k, start) {
		return
	}
	e.acc.count = 0
	e.agg.reset(e.acc.nums, e.acc.ext)
	end := e.window(start).End
	ps := k.panes.live()
	i, _ := slices.BinarySearchFunc(ps, start, func(p pane, s int64) int { return cmpInt(p.start, s) })
	for ; i < len(ps) && ps[i].start < end; i++ {
		e.agg.merge(&e.acc, &ps[i])
	}
}

// dropBucket removes b's window from every key in it, with the panes no
// open window of the key needs any more.
func (e *Engine) dropBucket(b *bucket) {
	for _, k := range b.keys {
		if j, _ := k.findWin(b.start); j == 0 {
			k.wins.popFront()
		} else { // not reached: buckets drop in start order
			k.wins.s = slices.Delete(k.wins.s, k.wins.head+j, k.wins.head+j+1)
		}
		e.open--
		for k.panes.len() > 0 {
			p := &k.panes.live()[0]
			if p.start-floorMod(p.start-e.offset, e.slide) > b.start { // its latest window is still open
				break
			}
			e.freePane(p)
			k.panes.popFront()
		}
		if k.wins.len() == 0 {
			k.emptySince = b.start
			if !k.queued {
				k.queued = true
				e.idle = append(e.idle, k)
			}
		}
	}
}

// evictIdle forgets keys that have had no window for about a window's
// length of event time (since a bucket before lastStart-size dropped).
func (e *Engine) evictIdle(lastStart int64) {
	i := 0
	for ; i < len(e.idle); i++ {
		k := e.idle[i]
		switch {
		case k.removed:
		case k.wins.len() > 0:
			k.queued = false
		case addSat(k.emptySince, e.size) > lastStart:
			n := copy(e.idle, e.idle[i:])
			clear(e.idle[n:])
			e.idle = e.idle[:n]
			return
		default:
			delete(e.parts[k.part].keys, k.key())
			*k = keyState{panes: deque[pane]{s: k.panes.s[:0]}, wins: deque[win]{s: k.wins.s[:0]}, fifo: k.fifo}
			if k.fifo != nil {
				k.fifo.valid = false
			}
			e.freeKeys = append(e.freeKeys, k)
		}
	}
	clear(e.idle)
	e.idle = e.idle[:0]
}
