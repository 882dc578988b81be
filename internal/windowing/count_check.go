package windowing

import "fmt"

// check panics if c's structure is broken: its key slab; a key's slices
// out of order, at another index than their pane's, empty or over full,
// or with their earliest time after their latest; a tumbling key with more
// than its open window, or whose record count is not its window's; a
// sliding key whose newest slice does not end at its last record; an open
// tumbling window without its timeout; the open count wrong; the changed
// keys' list and their flags apart.
func (c *Counts) check() {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("windowing: invariant: "+format, args...))
	}
	if err := c.keys.check(); err != nil {
		fail("%v", err)
	}
	type window struct {
		key int32
		gen uint32
		seq int64
	}
	timeouts := map[window]bool{}
	for _, t := range c.due.items {
		timeouts[window{t.key, t.gen, t.seq}] = true
	}
	limit := c.g
	if c.tumbling() {
		limit = c.n - 1
	}
	open, dirty := 0, 0
	for ki, id := range c.keys.live() {
		k := c.keys.ext(ki)
		for i := range k.slices {
			x := &k.slices[i]
			h := c.pool.hdr(x.pane)
			switch {
			case i > 0 && k.slices[i-1].idx >= x.idx:
				fail("key %s (partition %d): slice %d after slice %d", id.key(), id.part, x.idx, k.slices[i-1].idx)
			case h.start != x.idx:
				fail("key %s: slice %d has the pane of slice %d", id.key(), x.idx, h.start)
			case h.count <= 0 || h.count > limit:
				fail("key %s: slice %d holds %d records", id.key(), x.idx, h.count)
			case x.lo > x.hi:
				fail("key %s: slice %d spans [%d, %d]", id.key(), x.idx, x.lo, x.hi)
			}
		}
		open += len(k.slices)
		n := len(k.slices)
		switch {
		case c.tumbling() && n > 1:
			fail("key %s: %d open count windows", id.key(), n)
		case c.tumbling() && n == 1 && (k.slices[0].idx != k.seq || *c.pool.view(k.slices[0].pane).count != k.seen):
			fail("key %s: window %d of %d records open, the key counts window %d of %d", id.key(), k.slices[0].idx, *c.pool.view(k.slices[0].pane).count, k.seq, k.seen)
		case c.tumbling() && n == 0 && k.seen != 0:
			fail("key %s: %d records and no open window", id.key(), k.seen)
		case c.tumbling() && n == 1 && c.timeout > 0 && !timeouts[window{ki, k.gen, k.seq}]:
			fail("key %s: window %d has no timeout", id.key(), k.seq)
		case !c.tumbling() && n > 0 && k.slices[n-1].idx*c.g+*c.pool.view(k.slices[n-1].pane).count != k.seen:
			fail("key %s: %d records, the newest slice %d holds %d", id.key(), k.seen, k.slices[n-1].idx, *c.pool.view(k.slices[n-1].pane).count)
		}
		if k.dirty {
			dirty++
		}
	}
	if open != c.open {
		fail("%d open slices, the keys hold %d", c.open, open)
	}
	listed := make(map[int32]bool, len(c.dirty))
	for _, ki := range c.dirty {
		if listed[ki] || c.keys.at(ki).id == "" || !c.keys.ext(ki).dirty {
			fail("key slot %d listed changed twice, free, or not flagged", ki)
		}
		listed[ki] = true
	}
	if dirty != len(c.dirty) {
		fail("%d keys flagged changed, %d listed", dirty, len(c.dirty))
	}
}
