package windowing

import (
	"fmt"
	"math"
	"slices"

	"aggregator/internal/record"
)

// Sessions is the engine of session windows (docs/semantics.md#sessions; Flink's
// EventTimeSessionWindows and DynamicEventTimeSessionWindows with
// MergingWindowSet). Every (partition, key) has a list of sessions that do
// not intersect, sorted by start, each one pane of accumulators. A record's
// window [t, t+gap) merges with every session it intersects (touching
// counts); the merged session is a new window: revision 0, not fired, and
// the absorbed sessions that had fired are retracted. Two timer queues
// (session_timers.go), ordered by time then key, hold one live entry per
// key each: the earliest maxTimestamp of its unfired sessions and the
// earliest cleanup time; an entry that its session outgrew moves on when
// it comes up.
//
// Sessions has the methods of Engine that the pipeline uses, with the same
// meaning. It is not safe for concurrent use.
type Sessions struct {
	sink     Sink
	gap      int64
	global   bool // global windows: one per key, only early firings
	lateness int64
	onClose  bool
	agg      layout
	numbers

	marks
	nextDue int64 // no timer is due at a watermark below it
	seq     uint64

	keys keySlab[sessKey]
	pool panePool
	open int

	fire, clean timers
	bare        []int32 // keys a built copy's Updates left without sessions (build.go)

	track   bool
	changes changes // panes and gone only
	early   earlyTicks

	merges int64

	res     Result
	vals    results // where its results' aggregates go
	sortKey []byte

	// from and until bound the times of the records s takes
	// (docs/design.md#generations-in-the-window-operators: Spec.From, CutOver); math.MinInt64 and math.MaxInt64
	// without bounds.
	from, until int64
}

// sessKey is a session window's state of one (partition, key), beside
// its identity in the key slab.
type sessKey struct {
	sess []session // sorted by start, pairwise not intersecting
	// fireAt and cleanAt are the times of the key's live entries in the
	// fire and clean queues (noTimer: none); entries at other times are
	// stale. timers counts its entries, live or stale: the slot is
	// released once it has neither sessions nor entries.
	fireAt, cleanAt int64
	timers          int32
}

// reset empties a released key's state, keeping its sessions' memory.
func (k *sessKey) reset() { *k = sessKey{sess: k.sess[:0], fireAt: noTimer, cleanAt: noTimer} }

// session is one session window; its pane holds its accumulators, its
// revision (firings so far) and its changelog flags.
type session struct {
	start, end int64
	pane       int32
}

func (x *session) window() Window { return Window{Start: x.start, End: x.end} }

const noTimer = math.MaxInt64

// NewSessions builds the engine of a session window spec. sink gets
// results and retractions in emission order.
func NewSessions(spec Spec, sink Sink) (*Sessions, error) {
	if spec.Kind != KindSession && spec.Kind != KindGlobal {
		return nil, fmt.Errorf("window kind %d: not session or global", spec.Kind)
	}
	s := &Sessions{sink: sink, gap: spec.Gap, lateness: spec.Lateness, onClose: spec.OnClose,
		marks: newMarks(), nextDue: noTimer, numbers: newNumbers(), early: newEarlyTicks(spec.Early),
		from: spec.from(), until: math.MaxInt64}
	var err error
	if s.agg, err = newLayout(spec.Aggregates); err != nil {
		return nil, err
	}
	s.pool = panePool{stride: s.agg.nums, free: noPane}
	s.vals = newResults(sink, len(s.agg.specs))
	s.res.Aggregates = s.vals.own
	s.keys = newKeySlab((*sessKey).reset)
	s.fire.keys, s.clean.keys = &s.keys, &s.keys
	if spec.Kind == KindGlobal {
		if spec.Early.Every <= 0 {
			return nil, fmt.Errorf("global window without early firings: it would never fire")
		}
		s.global, s.lateness, s.onClose = true, 0, false
	}
	return s, nil
}

// Rewind is Engine.Rewind: sessions that fired stay fired (a record into
// one fires it late), the others fire when the watermark comes back.
func (s *Sessions) Rewind(wm int64, keep []int32) {
	if s.lower(wm, keep) {
		s.nextDue = min(s.fire.top(), s.clean.top())
	}
}

// OpenWindows returns the number of open sessions.
func (s *Sessions) OpenWindows() int { return s.open }

// Stats returns what s counted: its merges.
func (s *Sessions) Stats() Stats { return Stats{Merges: s.merges} }

// Add applies steps 1–2 of docs/semantics.md#what-happens-to-each-record to one record: its window [t, t+gap)
// merged with the key's sessions it intersects is late if its cleanup time
// is at or below the watermark (nothing is merged); else the record joins
// it, absorbed sessions that fired are retracted in order of start, and in
// emit mode on_watermark the session fires late if it is due or had fired.
func (s *Sessions) Add(rec *record.Record) AddResult {
	if rec.Time < s.from || rec.Time >= s.until {
		return s.outside(rec.Time)
	}
	w := s.window(rec.Time, rec.Gap)
	wm := s.Judged(rec.Partition)
	tag := s.keys.hash(rec.Partition, rec.Key)
	ki, ent := s.keys.find(rec.Partition, tag, rec.Key)
	i, j, merged := 0, 0, w
	if ent != nil {
		i, j, merged = intersecting(ent.ext.sess, w)
	}
	if c := merged.CleanupTime(s.lateness); c <= wm || c <= s.dropMax && c <= s.dropFor(rec.Partition, wm) {
		return AddResult{Kind: LateEvent, Missed: merged}
	}
	if ent == nil {
		ki, ent = s.newKey(rec.Partition, tag, rec)
	}
	k := &ent.ext
	switch {
	case j-i == 1 && k.sess[i].start == merged.Start && s.pool.hdr(k.sess[i].pane).rev == 0:
		// The usual record: inside its key's session, or extending it to
		// the right. Unfired and at the same start, it is the same
		// changelog identity and there is nothing to retract.
		k.sess[i].end = merged.End
	case j-i == 1 && k.sess[i].window() == merged: // inside a session that fired: no merge
	case i == j:
		k.sess = slices.Insert(k.sess, i, session{start: merged.Start, end: merged.End, pane: s.pool.alloc(&s.agg, merged.Start)})
		s.open++
	default:
		s.merge(ki, i, j, merged)
	}
	x := &k.sess[i]
	s.seq++
	if s.agg.numsOnly {
		s.agg.addNums(&s.pool.hdr(x.pane).count, s.pool.numsOf(x.pane), rec.Values)
	} else {
		s.agg.add(s.pool.view(x.pane), rec, s.seq)
	}
	s.markPane(x.pane, ki)
	if s.early.on() {
		s.noteChanged(ki, x.pane)
	}
	if !s.onClose {
		if x.end-1 <= wm || s.pool.hdr(x.pane).flags&flagFired != 0 {
			s.emit(ki, x, Late)
		} else if !s.global {
			s.schedule(&s.fire, ki, &k.fireAt, x.end-1)
		}
	}
	s.schedule(&s.clean, ki, &k.cleanAt, merged.CleanupTime(s.lateness))
	if invariants {
		s.check()
	}
	return AddResult{Kind: Aggregated}
}

// outside is the outcome of a record at t outside s's generation: a
// global window cut over at s.until takes no record (from is then
// math.MaxInt64), and those before s.until are late (its window fired
// Final and is gone); else another generation's windows take it.
func (s *Sessions) outside(t int64) AddResult {
	if s.global && t < s.until && s.until != math.MaxInt64 {
		return AddResult{Kind: LateEvent, Missed: globalWindow}
	}
	return AddResult{Kind: OtherGeneration}
}

// CutOver ends s's generation at t (see Operator): s takes no record at
// or after t, which closes every session at the seam; a global window
// fires Final once, with its running aggregate, by key, and is dropped.
func (s *Sessions) CutOver(t int64) {
	if t >= s.until {
		return
	}
	s.until = t
	if !s.global {
		return
	}
	s.from = math.MaxInt64 // its window is gone: it takes no record
	var keys []int32
	for ki, k := range s.keys.live() {
		if len(s.keys.ext(ki).sess) > 0 && k.id != "" {
			keys = append(keys, ki)
		}
	}
	slices.SortFunc(keys, s.keys.compare)
	for _, ki := range keys {
		k := s.keys.ext(ki)
		for m := range k.sess {
			x := k.sess[m]
			s.emit(ki, &x, Final)
			s.dropped(s.keys.at(ki), &x)
			s.pool.freePane(x.pane)
			s.open--
		}
		k.sess = k.sess[:0]
		s.releaseIfDone(ki)
	}
	if invariants {
		s.check()
	}
}

// intersecting returns the sessions ss[i:j] that w intersects (a.start <= b.end
// and b.start <= a.end) and the window they make with w.
func intersecting(ss []session, w Window) (i, j int, merged Window) {
	j = len(ss)
	for j > 0 && ss[j-1].start > w.End {
		j--
	}
	i = j
	for i > 0 && ss[i-1].end >= w.Start {
		i--
	}
	if i == j {
		return i, j, w
	}
	return i, j, Window{Start: min(w.Start, ss[i].start), End: max(w.End, ss[j-1].end)}
}

// merge makes k's sessions [i, j) one session with the bounds of merged
// at index i, a new window: retractions first for those that fired, then
// their accumulators merge into the first one's pane, which starts over
// at revision 0.
func (s *Sessions) merge(ki int32, i, j int, merged Window) {
	k, id := s.keys.ext(ki), s.keys.at(ki)
	if j-i > 1 {
		s.merges++
	}
	for m := i; m < j; m++ {
		if x := &k.sess[m]; s.pool.hdr(x.pane).rev > 0 { // on_close: only early firings make it > 0
			s.retract(id, x)
		}
	}
	first := &k.sess[i]
	dst := s.pool.view(first.pane)
	for m := i + 1; m < j; m++ {
		x := &k.sess[m]
		s.agg.merge(dst, s.pool.view(x.pane))
		s.dropped(id, x)
		s.pool.freePane(x.pane)
		s.open--
	}
	h := s.pool.hdr(first.pane)
	if first.start != merged.Start { // a new changelog identity
		s.dropped(id, first)
		h.flags &^= flagStored
	}
	h.start, h.rev = merged.Start, 0
	h.flags &^= flagFired
	first.start, first.end = merged.Start, merged.End
	k.sess = slices.Delete(k.sess, i+1, j)
}

// retract emits the retraction of k's session x.
func (s *Sessions) retract(k *keyState, x *session) {
	r := &s.res
	r.Partition, r.Key, r.Window = k.part, k.key(), x.window()
	r.Count, r.Revision, r.Firing, r.Watermark = 0, 0, Retract, s.wm
	s.vals.lend(r)
	clear(r.Aggregates)
	s.sink.Emit(r)
}

// emit hands the result of key ki's session x to the sink.
func (s *Sessions) emit(ki int32, x *session, f Firing) {
	k := s.keys.at(ki)
	h := s.pool.hdr(x.pane)
	r := &s.res
	r.Partition, r.Key, r.Window = k.part, k.key(), x.window()
	r.Count, r.Revision, r.Firing, r.Watermark = h.count, int64(h.rev), f, s.wm
	s.vals.lend(r)
	s.agg.values(s.pool.view(x.pane), r.Aggregates, &s.numbers)
	h.rev++
	h.flags = h.flags&^flagChanged | firedBy(f)
	s.markPane(x.pane, ki)
	s.sink.Emit(r)
}

// schedule makes sure key ki has an entry in queue t at or before at;
// *live is the time of its live entry there.
func (s *Sessions) schedule(t *timers, ki int32, live *int64, at int64) {
	if at >= *live {
		return
	}
	*live = at
	s.keys.ext(ki).timers++
	t.push(timer{at: at, key: ki, prefix: sortPrefix(s.keys.at(ki).sortKey())})
	s.nextDue = min(s.nextDue, at)
}

// Advance applies step 3 of docs/semantics.md#what-happens-to-each-record for a new watermark wm (ignored unless
// higher): unfired sessions with maxTimestamp <= wm fire on time in order
// of end, then key (emit on_watermark); then sessions with cleanupTime <=
// wm are dropped, in emit mode on_close after their Final firing.
func (s *Sessions) Advance(wm int64) {
	if wm <= s.wm {
		return
	}
	prev := s.wm
	s.wm = wm
	if s.global && wm == math.MaxInt64 {
		s.fireEarly() // the end of input is a tick, the only firing of what changed since the last
	}
	if tick, ok := s.early.eventTick(prev, wm); ok {
		// Firings come in order of due time: on time up to the tick,
		// then the early ones, then on time after it.
		if tick >= s.nextDue {
			s.fireDueUntil(tick)
		}
		s.fireEarly()
	}
	if wm < s.nextDue {
		return
	}
	s.fireDue()
}

func (s *Sessions) fireDue() { s.fireDueUntil(s.wm) }

// fireDueUntil fires and drops what is due at watermark wm (at most s.wm).
func (s *Sessions) fireDueUntil(wm int64) {
	for !s.onClose && s.fire.due(wm) {
		t := s.fire.head()
		k := s.keys.ext(t.key)
		next := int64(noTimer)
		if k.fireAt == t.at {
			for m := range k.sess {
				x := &k.sess[m]
				switch {
				case s.pool.hdr(x.pane).flags&flagFired != 0:
				case x.end-1 <= t.at:
					s.emit(t.key, x, OnTime)
				default:
					next = min(next, x.end-1)
				}
			}
			k.fireAt = next
		}
		s.fire.next(next, &k.timers)
		s.releaseIfDone(t.key)
	}
	for s.clean.due(wm) {
		t := s.clean.head()
		k := s.keys.ext(t.key)
		next := int64(noTimer)
		if k.cleanAt == t.at {
			next = s.dropDue(t.key, t.at)
			k.cleanAt = next
		}
		s.clean.next(next, &k.timers)
		s.releaseIfDone(t.key)
	}
	s.nextDue = min(s.fire.top(), s.clean.top())
	if invariants {
		s.check()
	}
}

// dropDue drops key ki's sessions whose cleanup time is at or below at,
// after their Final firing in emit mode on_close, and returns the
// earliest cleanup time of the others (noTimer: none).
func (s *Sessions) dropDue(ki int32, at int64) int64 {
	k := s.keys.ext(ki)
	next := int64(noTimer)
	kept := k.sess[:0]
	for m := range k.sess {
		x := k.sess[m]
		if c := x.window().CleanupTime(s.lateness); c > at {
			next = min(next, c)
			kept = append(kept, x)
			continue
		}
		if s.onClose {
			s.emit(ki, &x, Final)
		}
		s.dropped(s.keys.at(ki), &x)
		s.pool.freePane(x.pane)
		s.open--
	}
	k.sess = kept
	return next
}

// releaseIfDone frees key ki once it has no session and no timer entry.
func (s *Sessions) releaseIfDone(ki int32) {
	k := s.keys.ext(ki)
	if len(k.sess) > 0 || k.timers > 0 || s.keys.at(ki).id == "" {
		return
	}
	s.keys.release(ki)
}

// newKey adds rec's key of partition part, hash tag.
func (s *Sessions) newKey(part int32, tag uint32, rec *record.Record) (int32, *slabEntry[sessKey]) {
	s.sortKey = appendSortKey(s.sortKey[:0], rec.KeyFields)
	n := len(s.sortKey)
	s.sortKey = append(s.sortKey, rec.Key...)
	return s.addKey(part, tag, string(s.sortKey), n)
}

// addKey adds key id (sort key, then the key's JSON at split) of partition
// part, hash tag.
func (s *Sessions) addKey(part int32, tag uint32, id string, split int) (int32, *slabEntry[sessKey]) {
	ki, k := s.keys.add(part, tag, id, split)
	k.ext.fireAt, k.ext.cleanAt = noTimer, noTimer // a slot never used is zero
	return ki, k
}

// RemovePartition drops a revoked partition's sessions without firing.
func (s *Sessions) RemovePartition(p int32) {
	s.clearFloor(p)
	forgetPartition(&s.changes, &s.keys, p)
	gone := func(t timer) bool { k := s.keys.at(t.key); return k.part == p && k.id != "" }
	s.fire.deleteFunc(gone)
	s.clean.deleteFunc(gone)
	for ki := range s.keys.inPartition(p) {
		k := s.keys.ext(ki)
		for _, x := range k.sess {
			s.pool.freePane(x.pane)
			s.open--
		}
		k.sess, k.timers = k.sess[:0], 0
		s.releaseIfDone(ki)
	}
	s.nextDue = min(s.fire.top(), s.clean.top())
	if invariants {
		s.check()
	}
}

// Reserve makes room for n keys more (Operator.Reserve).
func (s *Sessions) Reserve(n int) { s.keys.reserve(n) }

// Due is the lowest watermark at which Advance fires or drops a session
// or ticks an early firing (Operator.Due).
func (s *Sessions) Due() int64 { return min(s.nextDue, s.early.nextTick(s.wm)) }
