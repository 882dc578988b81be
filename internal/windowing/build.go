package windowing

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
)

// A Builder is an operator whose restored state can be built ahead of
// its restore and kept up to date from the changelog (a standby
// replica's built copy, docs/design.md "Standby state"): Update applies
// each change of a committed entry as the changelog commits it, and
// Prune, at the takeover, leaves out what the previous owner had dropped.
// Update after Update, then Prune(dropped), leaves the operator as
// Restore(en, dropped) of the entries committed last would: the same
// windows, revisions and flags, the same firings after FinishRestore
// (TestBuildMatchesRestore). A built operator holds one partition's state.
type Builder interface {
	Operator
	// Update puts en, an entry of the partition's changelog, in place of
	// the one of its identity (Kind, Partition, ID, Start) the operator
	// holds, if any; en.Deleted removes it. A sliding window's revision
	// comes after the slices of the same batch, as for Restore. Nothing
	// is dropped by lateness until Prune. en is lent for the call.
	Update(en *Entry) error
	// Prune drops, firing nothing, the windows whose cleanup time is at
	// or below dropped (the previous owner's watermark, as Restore takes
	// it), and the entries that no open window needs any more: their
	// tombstones go in the next Changes, as Restore's would. Call
	// FinishRestore after it.
	Prune(dropped int64)
	// Held fills en, whose identity is set, with the entry the operator
	// holds of it (the value a repair of its key writes again), and
	// reports whether it holds one.
	Held(en *Entry) bool
}

var _ Builder = (*Engine)(nil)

// sweepAt is how many windows Updates take away before a sweep at least
// (more with more open windows: a sweep costs a pass over each timer it
// touches).
const sweepAt = 4096

// unwin is a window of a key that an Update took away: its timer entry
// is removed by sweep, in one pass over the timer.
type unwin struct {
	start int64
	key   int32
}

// Update is Builder.Update.
func (e *Engine) Update(en *Entry) error {
	if en.Split < 0 || en.Split > len(en.ID) || !looksLikeKey(en.ID[en.Split:]) {
		return fmt.Errorf("restore: malformed key %q", en.ID)
	}
	switch en.Kind {
	case SliceEntry:
		if en.Deleted {
			e.deleteSlice(en)
			return nil
		}
		ki, k := e.keyByID(en.Partition, en.ID, en.Split)
		err := e.restoreSlice(ki, k, en, math.MinInt64, true)
		if err != nil && k.first == noPane {
			e.unkeyed = append(e.unkeyed, ki)
		}
		e.early.compactNotes(&e.pool, e.open, samePaneStart)
		return err
	case WindowEntry:
		ki, k := e.heldKey(en)
		switch {
		case en.Deleted && k != nil && !e.tumbling:
			sk := e.slideOf(ki)
			if j, ok := sk.findWin(en.Start, e.slide); ok {
				w := &sk.wins.live()[j]
				w.rev, w.flags = 0, 0 // as a window no revision was restored for
			}
			return nil
		case en.Deleted:
			return nil
		case k == nil:
			return fmt.Errorf("restore: window at %d of %s has no slice", en.Start, en.ID[en.Split:])
		}
		return e.restoreWindow(ki, k, en)
	}
	return e.Restore(en, math.MinInt64) // a session: Restore says what is wrong with it
}

// heldKey returns en's key if e holds it, without creating it.
func (e *Engine) heldKey(en *Entry) (int32, *keyState) {
	key := en.ID[en.Split:]
	ki, k := e.keys.find(en.Partition, e.keys.hash(en.Partition, key), key)
	if k == nil {
		return -1, nil
	}
	return ki, &k.keyState
}

// deleteSlice removes en's pane, if e holds it, and the windows of its
// key that no other pane of the key is in.
func (e *Engine) deleteSlice(en *Entry) {
	ki, k := e.heldKey(en)
	if k == nil {
		return
	}
	var pi int32 = noPane
	var sk *slideKey
	j := 0
	if e.tumbling {
		if prev, _ := e.seek(k, en.Start); prev != noPane && e.pool.hdr(prev).start == en.Start {
			pi = prev
		}
	} else {
		sk = e.slideOf(ki)
		var ok bool
		if j, ok = e.findPaneIn(sk, en.Start); ok {
			pi = sk.panes.live()[j]
		}
	}
	if pi == noPane {
		return
	}
	h := e.pool.hdr(pi)
	prev, next := h.prev, h.next
	if e.tumbling {
		e.unwins = append(e.unwins, unwin{en.Start, ki})
	} else {
		// The windows only this pane is in: addWindows' range, the other
		// way round.
		first, last := e.firstStart(en.Start), e.lastStart(en.Start)
		if prev != noPane {
			first = max(first, e.lastStart(e.pool.hdr(prev).start)+e.slide)
		}
		if next != noPane {
			last = min(last, e.firstStart(e.pool.hdr(next).start)-e.slide)
		}
		for s := first; s <= last; s += e.slide {
			if w, ok := sk.findWin(s, e.slide); ok {
				sk.wins.s = slices.Delete(sk.wins.s, sk.wins.head+w, sk.wins.head+w+1)
				e.unwins = append(e.unwins, unwin{s, ki})
			}
		}
		sk.panes.s = slices.Delete(sk.panes.s, sk.panes.head+j, sk.panes.head+j+1)
		if sk.fifo != nil {
			sk.fifo.valid = false
		}
	}
	if prev == noPane {
		k.first = next
	} else {
		e.pool.hdr(prev).next = next
	}
	if next == noPane {
		k.last = prev
	} else {
		e.pool.hdr(next).prev = prev
	}
	e.pool.freePane(pi)
	if k.first == noPane {
		e.unkeyed = append(e.unkeyed, ki) // freed by sweep: its slot stays its own until its timers are
	}
	if len(e.unwins) >= max(e.sweepAt, e.open/4) {
		e.sweep()
	}
}

// sweep takes the windows Updates took away out of their timers, one
// pass per timer, and frees the keys left without panes. A window made
// again since it was taken away keeps one timer entry.
func (e *Engine) sweep() {
	if len(e.unwins) > 0 {
		slices.SortFunc(e.unwins, func(a, b unwin) int {
			if a.start != b.start {
				return compareInt(a.start, b.start)
			}
			return compareInt(int64(a.key), int64(b.key))
		})
		// taken: 1 for a key whose window was taken away, 2 once its first
		// timer entry was seen (kept if the window is back).
		taken := map[int32]uint8{}
		for lo := 0; lo < len(e.unwins); {
			start := e.unwins[lo].start
			hi := lo
			clear(taken)
			for ; hi < len(e.unwins) && e.unwins[hi].start == start; hi++ {
				taken[e.unwins[hi].key] = 1
			}
			lo = hi
			b, ok := e.byStart[start]
			if !ok {
				continue
			}
			kept := b.keys[:0]
			for _, ki := range b.keys {
				switch taken[ki] {
				case 0:
					kept = append(kept, ki)
					continue
				case 1:
					taken[ki] = 2
					if e.hasWindow(ki, start) {
						kept = append(kept, ki)
						continue
					}
				}
				e.open--
			}
			clear(b.keys[len(kept):])
			b.keys = kept
			if len(b.keys) == 0 {
				i, _ := slices.BinarySearchFunc(e.buckets, start, func(b *bucket, s int64) int { return compareInt(b.start, s) })
				e.buckets = slices.Delete(e.buckets, i, i+1)
				if i < e.fired {
					e.fired--
				}
				e.freeBucket(b)
			}
		}
		e.unwins = e.unwins[:0]
	}
	for _, ki := range e.unkeyed {
		if k := e.keys.at(ki); k.id != "" && k.first == noPane {
			e.forget(ki)
		}
	}
	e.unkeyed = e.unkeyed[:0]
}

// hasWindow reports whether key ki has its window at start.
func (e *Engine) hasWindow(ki int32, start int64) bool {
	k := e.keys.at(ki)
	if k.id == "" {
		return false
	}
	if e.tumbling {
		prev, _ := e.seek(k, start)
		return prev != noPane && e.pool.hdr(prev).start == start
	}
	_, ok := e.slideOf(ki).findWin(start, e.slide)
	return ok
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Prune is Builder.Prune: the drop of fireDueUntil, without its firings,
// and the keys it leaves without windows forgotten at once (a restore
// never made them).
func (e *Engine) Prune(dropped int64) {
	e.sweep()
	gone, idle := len(e.changes.gone), len(e.idle)
	n := 0
	for ; n < len(e.buckets) && e.cleanupTime(e.buckets[n].start) <= dropped; n++ {
		e.dropBucket(e.buckets[n])
	}
	for _, b := range e.buckets[:n] {
		e.freeBucket(b)
	}
	m := copy(e.buckets, e.buckets[n:])
	clear(e.buckets[m:])
	e.buckets = e.buckets[:m]
	e.fired = max(e.fired-n, 0)
	for _, ik := range e.idle[idle:] {
		if k := e.keys.at(ik.key); k.id != "" && k.first == noPane && k.last == ik.mark {
			e.forget(ik.key)
		}
	}
	e.idle = e.idle[:idle]
	if !e.track {
		e.changes.gone = e.changes.gone[:gone] // Restore notes them only when tracking
	}
	if invariants {
		e.check()
	}
}

// Held fills en, whose identity (Kind, Partition, ID, Split, Start) is
// set, with the entry e holds of it, as Changes would hand it out, and
// reports whether e holds one (a sliding window whose revision is 0 has
// none). Its slices are lent until e changes.
func (e *Engine) Held(en *Entry) bool {
	ki, k := e.heldKey(en)
	if k == nil {
		return false
	}
	switch en.Kind {
	case SliceEntry:
		var pi int32 = noPane
		if e.tumbling {
			if prev, _ := e.seek(k, en.Start); prev != noPane && e.pool.hdr(prev).start == en.Start {
				pi = prev
			}
		} else if j, ok := e.findPaneIn(e.slideOf(ki), en.Start); ok {
			pi = e.slideOf(ki).panes.live()[j]
		}
		if pi == noPane {
			return false
		}
		e.sliceEntry(en, k, pi)
		return true
	case WindowEntry:
		if e.tumbling {
			return false
		}
		sk := e.slideOf(ki)
		j, ok := sk.findWin(en.Start, e.slide)
		if !ok || sk.wins.live()[j].rev == 0 {
			return false
		}
		w := sk.wins.live()[j]
		*en = Entry{Kind: WindowEntry, Partition: k.part, ID: k.id, Split: int(k.split), Start: w.start, Revision: int64(w.rev),
			EarlyOnly: w.flags&flagFired == 0}
		return true
	}
	return false
}

var _ Builder = (*Sessions)(nil)

// Update is Builder.Update for sessions: a put takes away the key's
// session at its start and the sessions its window intersects (a merge:
// the changelog deletes the absorbed ones in the same commit, which may
// come later in the batch), then restores it; a deletion takes the
// session away. The key's timer entries stay: an entry whose session is
// gone moves on when it comes up, as one a merge left does.
func (s *Sessions) Update(en *Entry) error {
	if en.Split < 0 || en.Split > len(en.ID) || !looksLikeKey(en.ID[en.Split:]) {
		return fmt.Errorf("restore: malformed key %q", en.ID)
	}
	if en.Kind != SessionEntry {
		if en.Deleted {
			return nil
		}
		return s.Restore(en, math.MinInt64) // says what is wrong with it
	}
	key := en.ID[en.Split:]
	if ki, ent := s.keys.find(en.Partition, s.keys.hash(en.Partition, key), key); ent != nil {
		k := &ent.ext
		i, j := slices.IndexFunc(k.sess, func(x session) bool { return x.start == en.Start }), -1
		if i >= 0 {
			j = i + 1
		}
		if !en.Deleted && en.End > en.Start {
			if a, b, _ := intersecting(k.sess, Window{Start: en.Start, End: en.End}); a != b {
				if i < 0 {
					i, j = a, b
				}
				i, j = min(i, a), max(j, b)
			}
		}
		if i >= 0 {
			for _, x := range k.sess[i:j] {
				s.pool.freePane(x.pane)
				s.open--
			}
			k.sess = slices.Delete(k.sess, i, j)
			if len(k.sess) == 0 && k.timers > 0 {
				s.bare = append(s.bare, ki)
			}
			s.releaseIfDone(ki)
		}
	}
	if len(s.bare) > s.open/4+1024 {
		s.sweepBare()
	}
	if en.Deleted {
		return nil
	}
	err := s.Restore(en, math.MinInt64)
	s.early.compactNotes(&s.pool, s.open, nil)
	return err
}

// compactNotes drops, once they are many beside open, the early-firing
// notes a tick would skip (their pane's flag cleared, or a note not about
// the pane as it is now), and of a pane's notes all but the newest: a
// built copy ticks only once attached, and its updates note a pane
// again each time the owner's tick cleared and a record set its flag.
func (t *earlyTicks) compactNotes(p *panePool, open int, same func(earlyRef, *paneHdr) bool) {
	if len(t.changed) <= 2*open+1024 {
		return
	}
	seen := map[int32]bool{}
	kept := make([]earlyRef, 0, open)
	for i := len(t.changed) - 1; i >= 0; i-- {
		r := t.changed[i]
		h := p.hdr(r.pane)
		if h.flags&flagChanged == 0 || same != nil && !same(r, h) || seen[r.pane] {
			continue
		}
		seen[r.pane] = true
		kept = append(kept, r)
	}
	slices.Reverse(kept)
	t.changed = kept
}

// sweepBare takes the timer entries of the keys Updates left without
// sessions out of the queues, and frees the keys: a built copy's queues
// never come due, and its keys come and go as the owner's do.
func (s *Sessions) sweepBare() {
	bare := map[int32]bool{}
	for _, ki := range s.bare {
		if k := s.keys.ext(ki); s.keys.at(ki).id != "" && len(k.sess) == 0 {
			bare[ki] = true
		}
	}
	s.bare = s.bare[:0]
	if len(bare) == 0 {
		return
	}
	gone := func(t timer) bool { return bare[t.key] }
	s.fire.deleteFunc(gone)
	s.clean.deleteFunc(gone)
	for ki := range bare {
		k := s.keys.ext(ki)
		k.timers, k.fireAt, k.cleanAt = 0, noTimer, noTimer
		s.releaseIfDone(ki)
	}
	s.nextDue = min(s.fire.top(), s.clean.top())
}

// Prune is Builder.Prune for sessions: the drop of fireDueUntil at
// dropped, without its Final firings, and the keys it leaves without
// sessions or timer entries freed.
func (s *Sessions) Prune(dropped int64) {
	s.sweepBare()
	gone := len(s.changes.gone)
	for s.clean.due(dropped) {
		t := s.clean.head()
		k := s.keys.ext(t.key)
		next := int64(noTimer)
		if k.cleanAt == t.at {
			kept := k.sess[:0]
			for _, x := range k.sess {
				if c := x.window().CleanupTime(s.lateness); c > dropped {
					next = min(next, c)
					kept = append(kept, x)
					continue
				}
				s.dropped(s.keys.at(t.key), &x)
				s.pool.freePane(x.pane)
				s.open--
			}
			k.sess = kept
			k.cleanAt = next
		}
		s.clean.next(next, &k.timers)
		s.releaseIfDone(t.key)
	}
	s.nextDue = min(s.fire.top(), s.clean.top())
	if !s.track {
		s.changes.gone = s.changes.gone[:gone] // Restore notes them only when tracking
	}
	if invariants {
		s.check()
	}
}

// Held is Builder.Held for sessions.
func (s *Sessions) Held(en *Entry) bool {
	if en.Kind != SessionEntry {
		return false
	}
	key := en.ID[en.Split:]
	_, ent := s.keys.find(en.Partition, s.keys.hash(en.Partition, key), key)
	if ent == nil {
		return false
	}
	m := slices.IndexFunc(ent.ext.sess, func(x session) bool { return x.start == en.Start })
	if m < 0 {
		return false
	}
	x := ent.ext.sess[m]
	s.pool.entry(en, SessionEntry, &ent.keyState, x.pane)
	en.End = x.end
	return true
}

var _ Builder = (*Counts)(nil)

// Update is Builder.Update for count windows. Without a slide a key has
// one entry: a put frees the key (its timeout goes stale with its slot)
// and restores it, a deletion frees it. With one, a put replaces the
// slice of its index, a deletion takes it away; the key's count of
// records is its newest slice's, as a restore makes it.
func (c *Counts) Update(en *Entry) error {
	if en.Split < 0 || en.Split > len(en.ID) || !looksLikeKey(en.ID[en.Split:]) {
		return fmt.Errorf("restore: malformed key %q", en.ID)
	}
	if en.Kind != CountEntry {
		if en.Deleted {
			return nil
		}
		return c.Restore(en, math.MinInt64) // says what is wrong with it
	}
	key := en.ID[en.Split:]
	if ki, ent := c.keys.find(en.Partition, c.keys.hash(en.Partition, key), key); ent != nil {
		k := &ent.ext
		switch {
		case c.tumbling():
			for _, x := range k.slices {
				c.pool.freePane(x.pane)
				c.open--
			}
			k.slices = k.slices[:0]
			c.keys.release(ki)
		default:
			if i := slices.IndexFunc(k.slices, func(x countSlice) bool { return x.idx == en.Start }); i >= 0 {
				c.pool.freePane(k.slices[i].pane)
				k.slices = slices.Delete(k.slices, i, i+1)
				c.open--
			}
			if n := len(k.slices); n > 0 {
				newest := k.slices[n-1]
				k.seen = newest.idx*c.g + *c.pool.view(newest.pane).count
			} else if en.Deleted {
				c.keys.release(ki) // a restore makes no key without slices
			}
		}
	}
	if len(c.due.items) > 2*c.open+1024 {
		c.dropStaleTimeouts()
	}
	if en.Deleted {
		return nil
	}
	return c.Restore(en, math.MinInt64)
}

// dropStaleTimeouts takes the timeouts that would fire nothing (their
// window fired, or their key is gone) out of the heap: a built copy's
// heap never comes due, and each window of a key pushes one.
func (c *Counts) dropStaleTimeouts() {
	c.due.items = slices.DeleteFunc(c.due.items, func(t timeoutAt) bool {
		k := c.keys.ext(t.key)
		return c.keys.at(t.key).id == "" || k.gen != t.gen || k.seq != t.seq || len(k.slices) == 0
	})
	heap.Init(c.due)
}

// Prune is Builder.Prune: count windows are not dropped by lateness.
func (c *Counts) Prune(int64) {}

// Held is Builder.Held for count windows: the entry Changes would hand
// out for en's identity.
func (c *Counts) Held(en *Entry) bool {
	if en.Kind != CountEntry {
		return false
	}
	key := en.ID[en.Split:]
	_, ent := c.keys.find(en.Partition, c.keys.hash(en.Partition, key), key)
	if ent == nil {
		return false
	}
	k, id := &ent.ext, &ent.keyState
	start := en.Start
	*en = Entry{Kind: CountEntry, Partition: id.part, ID: id.id, Split: int(id.split), Start: start}
	if c.tumbling() {
		en.Revision = k.seq
		if len(k.slices) > 0 {
			x := k.slices[0]
			c.sliceEntry(en, &x) // a copy: Held changes nothing
		}
		return true
	}
	i := slices.IndexFunc(k.slices, func(x countSlice) bool { return x.idx == start })
	if i < 0 {
		return false
	}
	x := k.slices[i]
	c.sliceEntry(en, &x) // a copy: Held changes nothing
	return true
}
