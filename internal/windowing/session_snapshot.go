package windowing

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// TrackChanges is Engine.TrackChanges.
func (s *Sessions) TrackChanges() { s.track = true }

// markPane notes that session pane i (of key ki) changed.
func (s *Sessions) markPane(i, ki int32) {
	if s.track {
		s.changes.markPane(&s.pool, i, ki)
	}
}

// dropped notes that k's session x is gone from the changelog identity
// it had (dropped, absorbed by a merge, or moved to a new start).
func (s *Sessions) dropped(k *keyState, x *session) {
	if s.pool.hdr(x.pane).flags&flagStored != 0 {
		s.changes.gone = append(s.changes.gone, goneRef{SessionEntry, k.part, k.id, k.split, x.start})
	}
}

// Changes is Engine.Changes: tombstones of sessions that were stored and
// are gone (dropped, merged away, or moved to a new start), then the
// sessions that changed, each a SessionEntry.
func (s *Sessions) Changes(fn func(*Entry)) {
	c := &s.changes
	en := &c.en
	// A tombstone whose identity a new session took is left out: the new
	// session's entry replaces the old one.
	c.handOutGone(fn, s.liveGone())
	for r := range c.takeDirty(&s.pool) {
		k, id := s.keys.ext(r.key), s.keys.at(r.key)
		m := slices.IndexFunc(k.sess, func(x session) bool { return x.pane == r.pane })
		if m < 0 { // not reached: a live dirty pane is one of its key's sessions
			panic(fmt.Sprintf("windowing: dirty session pane %d is not a session of %s", r.pane, id.key()))
		}
		s.pool.entry(en, SessionEntry, id, r.pane)
		en.End = k.sess[m].end
		fn(en)
	}
}

// sessionID identifies a session's changelog entry.
type sessionID struct {
	part  int32
	id    string
	start int64
}

// liveGone returns the identities of the tombstones to hand out that a
// changed session has again (a key's session dropped, and a new one at the
// same start; only dynamic gaps make that), or nil if there are none.
func (s *Sessions) liveGone() map[sessionID]bool {
	c := &s.changes
	if len(c.gone) == 0 || len(c.panes) == 0 {
		return nil
	}
	gone := make(map[sessionID]bool, len(c.gone))
	for _, g := range c.gone {
		gone[sessionID{g.part, g.id, g.start}] = true
	}
	live := map[sessionID]bool{}
	seen := map[int32]bool{} // only a pane's newest note names its key
	for i := len(c.panes) - 1; i >= 0; i-- {
		r := c.panes[i]
		h := s.pool.hdr(r.pane)
		if seen[r.pane] || h.flags&flagDirty == 0 {
			continue
		}
		seen[r.pane] = true
		k := s.keys.at(r.key)
		if id := (sessionID{k.part, k.id, h.start}); gone[id] {
			live[id] = true
		}
	}
	return live
}

// Restore is Engine.Restore for SessionEntries: the partition must have
// no state in s. A session whose cleanup time is at or below dropped was
// dropped by the previous owner and is not made again.
func (s *Sessions) Restore(en *Entry, dropped int64) error {
	if ok, err := restorable(en); !ok {
		return err
	}
	key := en.ID[en.Split:]
	if en.Kind != SessionEntry {
		return fmt.Errorf("restore: entry kind %d at %d of %s does not fit a session window (was the window changed?)", en.Kind, en.Start, key)
	}
	if en.End <= en.Start || en.Revision < 0 || en.Revision > math.MaxInt32 || en.Count <= 0 {
		return fmt.Errorf("restore: session [%d, %d) of %s with %d records, revision %d, is not a session", en.Start, en.End, key, en.Count, en.Revision)
	}
	if err := s.agg.checkSlots(en, "session"); err != nil {
		return err
	}
	w := Window{Start: en.Start, End: en.End}
	if w.CleanupTime(s.lateness) <= dropped {
		// Dropped already: by the previous owner, or under a lateness
		// lowered since (docs/changing-config.md#three-kinds-of-key), whose tombstone goes in the next commit.
		if s.track {
			s.changes.gone = append(s.changes.gone, goneRef{SessionEntry, en.Partition, strings.Clone(en.ID), uint32(en.Split), en.Start})
		}
		return nil
	}
	tag := s.keys.hash(en.Partition, key)
	ki, ent := s.keys.find(en.Partition, tag, key)
	if ent == nil {
		ki, ent = s.addKey(en.Partition, tag, strings.Clone(en.ID), en.Split) // en.ID is lent
	}
	k := &ent.ext
	if i, j, _ := intersecting(k.sess, w); i != j {
		return fmt.Errorf("restore: session [%d, %d) of %s intersects session [%d, %d)", en.Start, en.End, key, k.sess[i].start, k.sess[i].end)
	}
	pi := s.pool.alloc(&s.agg, en.Start)
	seq, err := s.pool.load(&s.agg, pi, en)
	if err != nil {
		s.pool.freePane(pi)
		s.releaseIfDone(ki)
		return err
	}
	s.seq = max(s.seq, seq)
	h := s.pool.hdr(pi)
	h.rev, h.flags = int32(en.Revision), flagStored|firedFlag(en)
	if s.early.on() && en.Changed {
		s.noteChanged(ki, pi)
	}
	i, _, _ := intersecting(k.sess, w)
	k.sess = slices.Insert(k.sess, i, session{start: en.Start, end: en.End, pane: pi})
	s.open++
	if s.global && w != globalWindow {
		return fmt.Errorf("restore: window [%d, %d) of %s is not a global window (was the window changed?)", w.Start, w.End, key)
	}
	if !s.onClose && firedFlag(en) == 0 && !s.global {
		s.schedule(&s.fire, ki, &k.fireAt, w.MaxTimestamp())
	}
	s.schedule(&s.clean, ki, &k.cleanAt, w.CleanupTime(s.lateness))
	return nil
}

// FinishRestore is Engine.FinishRestore: restored sessions already due at
// the current watermark fire on time unless they fired before, and those
// past their cleanup time are dropped (emit on_close: after their Final
// firing).
func (s *Sessions) FinishRestore() {
	if s.wm >= s.nextDue {
		s.fireDue() // checks the invariants
	} else if invariants {
		s.check()
	}
}
