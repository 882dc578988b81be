package windowing

import "fmt"

// check panics if s's structure is broken: its key slab, a key's sessions
// out of order, intersecting or with a pane of another start, the open
// count wrong, a session without a timer entry at or before its due time,
// or the keys' counts of timer entries not the queues'.
func (s *Sessions) check() {
	if err := s.keys.check(); err != nil {
		panic(fmt.Sprintf("windowing: invariant: %v", err))
	}
	open, entries := 0, 0
	for ki, id := range s.keys.live() {
		k := s.keys.ext(ki)
		for m, x := range k.sess {
			fail := func(what string) {
				panic(fmt.Sprintf("windowing: %s: session %d [%d, %d) of %s (partition %d): %s", "invariant", m, x.start, x.end, id.key(), id.part, what))
			}
			h := s.pool.hdr(x.pane)
			switch {
			case x.start >= x.end:
				fail("empty")
			case m > 0 && k.sess[m-1].end >= x.start:
				fail("intersects the one before, or is out of order")
			case h.start != x.start:
				fail(fmt.Sprintf("its pane starts at %d", h.start))
			case h.count <= 0:
				fail("no records")
			case !s.onClose && !s.global && h.flags&flagFired == 0 && k.fireAt > x.end-1:
				fail(fmt.Sprintf("unfired, but the key's fire entry is at %d", k.fireAt))
			case k.cleanAt > x.window().CleanupTime(s.lateness):
				fail(fmt.Sprintf("the key's cleanup entry is at %d", k.cleanAt))
			}
			open++
		}
		entries += int(k.timers)
	}
	if entries != s.fire.n+s.clean.n {
		panic(fmt.Sprintf("windowing: invariant: the keys count %d timer entries, the queues hold %d", entries, s.fire.n+s.clean.n))
	}
	if open != s.open {
		panic(fmt.Sprintf("windowing: invariant: %d open sessions, counted %d", s.open, open))
	}
}
