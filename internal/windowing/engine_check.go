package windowing

import "fmt"

// check panics if e's structure is broken: a live key the key table does
// not find at its index, a key's panes out of order or badly linked, a
// window timer of a free key or of a window the key does not have, the
// timers out of order, or the open count wrong. Called whenever windows
// fire or drop when invariants is on (-race).
func (e *Engine) check() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("windowing: invariant: "+format, args...))
	}
	if err := e.keys.check(); err != nil {
		fail("%v", err)
	}
	for _, k := range e.keys.live() {
		prev := int32(noPane)
		for p := k.first; p != noPane; p = e.pool.hdr(p).next {
			h := e.pool.hdr(p)
			switch {
			case h.prev != prev:
				fail("key %s: pane at %d links back to %d, not %d", k.key(), h.start, h.prev, prev)
			case prev != noPane && e.pool.hdr(prev).start >= h.start:
				fail("key %s: pane at %d after one at %d", k.key(), h.start, e.pool.hdr(prev).start)
			}
			prev = p
		}
		if k.first != noPane && k.last != prev {
			fail("key %s: last pane %d, the list ends at %d", k.key(), k.last, prev)
		}
	}
	open := 0
	for i, b := range e.buckets {
		if i > 0 && e.buckets[i-1].start >= b.start {
			fail("window timers at %d then %d", e.buckets[i-1].start, b.start)
		}
		if e.byStart[b.start] != b {
			fail("the window timer at %d is not the one byStart names", b.start)
		}
		for _, ki := range b.keys {
			k := e.keys.at(ki)
			if k.id == "" {
				fail("a window at %d of the free key slot %d", b.start, ki)
			}
			if !e.tumbling {
				if _, ok := e.slideOf(ki).findWin(b.start, e.slide); !ok {
					fail("key %s: a timer of its window at %d, which it does not have", k.key(), b.start)
				}
			}
		}
		open += len(b.keys)
	}
	if open != e.open {
		fail("%d open windows, the timers hold %d", e.open, open)
	}
}
