package windowing

import (
	"cmp"
	"iter"
	"math"
	"slices"
)

// Early firings (docs/windows.md#early-firings-results-before-a-window-is-due): at each tick, every window that is not due
// (maxTimestamp above the watermark) and took a record since its last
// firing fires Early, with the next revision. A window's flagChanged says
// it took a record since its last firing; the engine lists the windows it
// flagged since the last tick, so a tick costs what changed, not what is
// open. Event-time ticks come with the watermark (each time floor((W+1)/D)
// grows), processing-time ticks with ProcessingTime, which the service
// calls with its clock and replay never does.

// EarlySpec configures early firings; Every == 0 turns them off.
type EarlySpec struct {
	Every int64 // ms
	Event bool  // ticks of the watermark; else of the wall clock
}

// earlyTicks is an engine's early-firing state.
type earlyTicks struct {
	EarlySpec
	proc    int64      // the last processing-time tick index seen; math.MinInt64: none yet
	changed []earlyRef // windows flagged changed since the last tick, oldest first
	due     []earlyDue // scratch: the windows a tick fires
	// Scratch of sliding windows' ticks (Engine.dueSliding): the changed
	// panes, the windows in key order, and per end their count.
	panes, byKey []earlyDue
	counts       []int
}

// earlyRef names a flagged window: a pane (tumbling windows, sessions), or
// a sliding window's start.
type earlyRef struct {
	key, pane int32
	start     int64
}

// earlyDue is a window a tick fires, with what orders it.
type earlyDue struct {
	end    int64
	prefix uint64 // of the key's sort key
	ref    earlyRef
}

func newEarlyTicks(s EarlySpec) earlyTicks { return earlyTicks{EarlySpec: s, proc: math.MinInt64} }

// on reports whether early firings are configured.
func (t *earlyTicks) on() bool { return t.Every > 0 }

// nextTick is the lowest watermark above wm whose eventTick from wm is
// a tick (math.MaxInt64: none). From minus infinity it is the next
// watermark whatever it is: it ticks nothing, but sets where ticks count
// from, so it must not be skipped.
func (t *earlyTicks) nextTick(wm int64) int64 {
	if !t.Event || t.Every == 0 {
		return math.MaxInt64
	}
	if wm == math.MinInt64 {
		return math.MinInt64 + 1
	}
	a, _ := floorDiv(wm+1, t.Every)
	if a >= math.MaxInt64/t.Every-1 {
		return math.MaxInt64
	}
	return (a+1)*t.Every - 1
}

// eventTick returns the first event-time tick that a watermark going from
// prev to wm crosses (floor((W+1)/Every) grows), if any. The first
// watermark (from minus infinity) and the end of time cross none: the
// first only sets where ticks count from, and at the second every window
// is due.
func (t *earlyTicks) eventTick(prev, wm int64) (int64, bool) {
	if !t.Event || t.Every == 0 || prev == math.MinInt64 || wm == math.MaxInt64 {
		return 0, false
	}
	a, _ := floorDiv(prev+1, t.Every)
	b, _ := floorDiv(wm+1, t.Every)
	if b <= a {
		return 0, false
	}
	return (a+1)*t.Every - 1, true
}

// procTick reports whether the wall clock now has crossed a tick since the
// last call; the first call only sets where ticks count from.
func (t *earlyTicks) procTick(now int64) bool {
	if t.Event || t.Every == 0 {
		return false
	}
	i, _ := floorDiv(now, t.Every)
	crossed := t.proc != math.MinInt64 && i > t.proc
	t.proc = max(t.proc, i)
	return crossed
}

// note flags pane pi of key ki in pool p, which a record just went into.
// Every tick fires every changed window that is not due, so after a tick
// no such window is changed: a window is changed at the next one exactly
// if one of its panes took a record since. One flag per pane (a tumbling
// window or a session is its pane) is all a record costs.
func (t *earlyTicks) note(p *panePool, ki, pi int32) {
	if h := p.hdr(pi); h.flags&flagChanged == 0 {
		h.flags |= flagChanged
		t.changed = append(t.changed, earlyRef{key: ki, pane: pi, start: h.start})
	}
}

// takeChanged yields, newest first, the panes of keys that noted a change
// since the last tick and are still flagged changed, with their key, and
// clears each one's flag; then it forgets the notes. A pane freed since
// its note has no flag, and one reused has a newer note that cleared it,
// so only its newest note counts. A note of a released key is skipped, as
// is one that same (if not nil) says is not about the pane as it is now.
func takeChanged[E any](t *earlyTicks, p *panePool, keys *keySlab[E], same func(r earlyRef, h *paneHdr) bool) iter.Seq2[earlyRef, *slabEntry[E]] {
	// No defer, so that it inlines with the loop body (with one, the
	// tumbling cases of BenchmarkEarly were 4% slower); a loop that stops
	// early leaves the notes.
	return func(yield func(earlyRef, *slabEntry[E]) bool) {
		for i := len(t.changed) - 1; i >= 0; i-- {
			r := t.changed[i]
			k := keys.entry(r.key)
			h := p.hdr(r.pane)
			if k.id == "" || h.flags&flagChanged == 0 || same != nil && !same(r, h) {
				continue
			}
			h.flags &^= flagChanged
			if !yield(r, k) {
				return
			}
		}
		clear(t.changed)
		t.changed = t.changed[:0]
	}
}

// sortDue puts due in firing order: window end, then key (by sort key;
// cmpKeys breaks prefix ties), then partition.
func (t *earlyTicks) sortDue(cmpKeys func(a, b int32) int) { sortEarly(t.due, cmpKeys) }

// sortEarly sorts due by window end, then key.
func sortEarly(due []earlyDue, cmpKeys func(a, b int32) int) {
	slices.SortFunc(due, func(a, b earlyDue) int {
		if c := cmp.Compare(a.end, b.end); c != 0 {
			return c
		}
		if a.prefix != b.prefix {
			return cmp.Compare(a.prefix, b.prefix)
		}
		return cmpKeys(a.ref.key, b.ref.key)
	})
}

func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// --- Engine (tumbling and sliding windows)

// noteChanged flags pane pi of key ki, which a record just went into.
func (e *Engine) noteChanged(ki, pi int32) { e.early.note(&e.pool, ki, pi) }

// ProcessingTime is the wall clock's tick for processing-time early
// firings: at each multiple of Every crossed since the last call, the
// changed windows that are not due fire early.
func (e *Engine) ProcessingTime(now int64) {
	if e.early.procTick(now) {
		e.fireEarly()
	}
}

// fireEarly fires the flagged windows whose maxTimestamp is above the
// watermark, in order of end, then key, and clears every flag.
func (e *Engine) fireEarly() {
	t := &e.early
	t.due = t.due[:0]
	for r, k := range takeChanged(t, &e.pool, &e.keys, samePaneStart) {
		e.markPane(r.pane, r.key) // the changelog keeps the flag
		// A tumbling pane is its window; a sliding one is in several.
		if e.tumbling {
			if end := e.window(r.start).End; end-1 > e.wm {
				t.due = append(t.due, earlyDue{end: end, prefix: sortPrefix(k.sortKey()), ref: earlyRef{key: r.key, pane: noPane, start: r.start}})
			}
			continue
		}
		t.panes = append(t.panes, earlyDue{prefix: sortPrefix(k.sortKey()), ref: earlyRef{key: r.key, pane: noPane, start: r.start}})
	}
	if e.tumbling {
		t.sortDue(e.keys.compare)
	} else {
		e.dueSliding(e.keys.compare)
	}
	for _, d := range t.due {
		e.emit(d.ref.key, e.keys.at(d.ref.key), d.ref.start, Early)
	}
}

// samePaneStart reports whether an engine's note r is about pane h as it
// is now, at the start it had.
func samePaneStart(r earlyRef, h *paneHdr) bool { return h.start == r.start }

// dueSliding puts the windows of the changed sliding panes (t.panes) that
// are not due into t.due, in firing order. A pane is in size/slide
// windows, so rather than sorting them all it sorts the panes by key,
// lists their windows in that order, and then places them by end, stably:
// every end is on the slide's grid, so an end's place is (end - the
// least end) / slide. A key's panes share windows, listed once.
func (e *Engine) dueSliding(cmpKeys func(a, b int32) int) {
	t := &e.early
	sortEarly(t.panes, cmpKeys)
	t.byKey = t.byKey[:0]
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, p := range t.panes {
		for s := e.lastIn(p.ref.start); s >= max(e.firstStart(p.ref.start), e.from); s -= e.slide { // the generation's windows
			end := e.window(s).End
			if end-1 <= e.wm {
				break
			}
			t.byKey = append(t.byKey, earlyDue{end: end, prefix: p.prefix, ref: earlyRef{key: p.ref.key, pane: noPane, start: s}})
			lo, hi = min(lo, end), max(hi, end)
		}
	}
	t.panes = t.panes[:0]
	t.due = t.due[:0]
	if len(t.byKey) == 0 {
		return
	}
	if n := (hi-lo)/e.slide + 1; n > int64(4*len(t.byKey)) { // ends far apart (a watermark held back): sort
		t.due = append(t.due, t.byKey...)
		sortEarly(t.due, cmpKeys)
	} else {
		t.counts = slices.Grow(t.counts[:0], int(n)+1)[:n+1]
		clear(t.counts)
		for _, d := range t.byKey {
			t.counts[(d.end-lo)/e.slide+1]++
		}
		for i := 1; i < len(t.counts); i++ {
			t.counts[i] += t.counts[i-1]
		}
		t.due = slices.Grow(t.due, len(t.byKey))[:len(t.byKey)]
		for _, d := range t.byKey {
			i := (d.end - lo) / e.slide
			t.due[t.counts[i]] = d
			t.counts[i]++
		}
	}
	t.due = slices.CompactFunc(t.due, func(a, b earlyDue) bool { return a.ref == b.ref })
}

// restoredChanged flags restored pane pi of key ki if its entry says it
// took records since the last tick.
func (e *Engine) restoredChanged(ki, pi int32, en *Entry) {
	if e.early.on() && en.Changed {
		e.noteChanged(ki, pi)
	}
}

// --- Sessions (session and global windows; calendar windows run on Engine)

// noteChanged flags session pane pi of key ki (its session took a record).
func (s *Sessions) noteChanged(ki, pi int32) { s.early.note(&s.pool, ki, pi) }

// ProcessingTime is Engine.ProcessingTime.
func (s *Sessions) ProcessingTime(now int64) {
	if s.early.procTick(now) {
		s.fireEarly()
	}
}

// fireEarly is Engine.fireEarly for sessions.
func (s *Sessions) fireEarly() {
	t := &s.early
	t.due = t.due[:0]
	// A session's pane moves to the merged start when sessions merge,
	// and keeps its note: any start will do.
	for r, k := range takeChanged(t, &s.pool, &s.keys, nil) {
		s.markPane(r.pane, r.key) // the changelog keeps the flag
		x := k.ext.find(r.pane)
		if x == nil {
			continue
		}
		if x.end-1 > s.wm || s.global { // a global window is due only at the end of input, a tick
			t.due = append(t.due, earlyDue{end: x.end, prefix: sortPrefix(k.sortKey()), ref: r})
		}
	}
	t.sortDue(s.keys.compare)
	for _, d := range t.due {
		s.emit(d.ref.key, s.keys.ext(d.ref.key).find(d.ref.pane), Early)
	}
}

// find returns k's session whose pane is pi, or nil.
func (k *sessKey) find(pi int32) *session {
	for m := range k.sess {
		if k.sess[m].pane == pi {
			return &k.sess[m]
		}
	}
	return nil
}
