package windowing

import (
	"encoding/binary"
	"math"
	"slices"

	"aggregator/internal/record"
)

// deque is a sorted slice with cheap removal at the front: the live items
// are s[head:]. The dead prefix is reclaimed when an append would grow s.
type deque[T any] struct {
	s    []T
	head int
}

func (d *deque[T]) live() []T { return d.s[d.head:] }

func (d *deque[T]) len() int { return len(d.s) - d.head }

// insert puts v at live index i.
func (d *deque[T]) insert(i int, v T) {
	if len(d.s) == cap(d.s) && d.head > 0 {
		n := copy(d.s, d.s[d.head:])
		d.s, d.head = d.s[:n], 0
	}
	d.s = slices.Insert(d.s, d.head+i, v)
}

// popFront drops the first live item.
func (d *deque[T]) popFront() {
	d.head++
	if d.head == len(d.s) {
		d.s, d.head = d.s[:0], 0
	}
}

// win is the bookkeeping of one (key, window): the state itself lives in
// the key's panes.
type win struct {
	start int64
	rev   int64 // firings so far
}

// keyState is the state of one (partition, key).
type keyState struct {
	id    string // the sort key (KeyFields encoded so that bytewise order is record.Compare order), then the key
	split uint32 // len(sort key)
	part  int32
	panes deque[pane] // sorted by start
	wins  deque[win]  // sorted by start
	// idle bookkeeping: a key whose windows are all dropped stays in its
	// partition's map for about one window, so that a key that comes back
	// every window does not allocate again.
	emptySince int64    // the start of the bucket whose drop left the key without windows
	queued     bool     // in Engine.idle
	removed    bool     // its partition was removed
	fifo       *fifoAgg // sliding windows of many panes only
}

// key is the group key's JSON object, as in record.Record.Key.
func (k *keyState) key() string { return k.id[k.split:] }

func (k *keyState) sortKey() string { return k.id[:k.split] }

// paneIndex returns the index of the first live pane starting at or after
// start.
func (k *keyState) paneIndex(start int64) int {
	ps := k.panes.live()
	if n := len(ps); n == 0 || ps[n-1].start < start {
		return n
	} else if ps[n-1].start == start && (n == 1 || ps[n-2].start < start) {
		return n - 1
	}
	i, _ := slices.BinarySearchFunc(k.panes.live(), start, func(p pane, s int64) int { return cmpInt(p.start, s) })
	return i
}

func (k *keyState) findPane(start int64) (int, bool) {
	ps := k.panes.live()
	if n := len(ps); n > 0 && ps[n-1].start == start {
		return n - 1, true
	}
	return slices.BinarySearchFunc(ps, start, func(p pane, s int64) int { return cmpInt(p.start, s) })
}

func (k *keyState) findWin(start int64) (int, bool) {
	ws := k.wins.live()
	if len(ws) > 0 && ws[0].start == start {
		return 0, true
	}
	return slices.BinarySearchFunc(ws, start, func(w win, s int64) int { return cmpInt(w.start, s) })
}

// compareKeys orders keys as firings are ordered: key fields, then
// partition, then the key text (distinct keys that compare equal).
func compareKeys(a, b *keyState) int {
	if c := cmpString(a.sortKey(), b.sortKey()); c != 0 {
		return c
	}
	if c := cmpInt(int64(a.part), int64(b.part)); c != 0 {
		return c
	}
	return cmpString(a.key(), b.key())
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendSortKey encodes key fields so that comparing encodings bytewise
// orders them as record.Compare does field by field: a number is 0x01 and
// its order-preserving 8 bytes, a string is 0x02, its bytes with 0x00
// escaped as 0x00 0xFF, and the terminator 0x00 0x00.
func appendSortKey(dst []byte, fields []record.Value) []byte {
	for _, v := range fields {
		if v.IsNum {
			bits := math.Float64bits(v.Num + 0) // +0 turns -0 into 0
			if bits>>63 == 1 {
				bits = ^bits
			} else {
				bits |= 1 << 63
			}
			dst = binary.BigEndian.AppendUint64(append(dst, 1), bits)
			continue
		}
		dst = append(dst, 2)
		for i := 0; i < len(v.Str); i++ {
			if v.Str[i] == 0 {
				dst = append(dst, 0, 0xFF)
				continue
			}
			dst = append(dst, v.Str[i])
		}
		dst = append(dst, 0, 0)
	}
	return dst
}

// bucket holds every (key, window) whose window starts at start: one timer
// for all keys, so Advance does nothing per key until a window is due.
type bucket struct {
	start int64
	keys  []*keyState
}

// partState is one input partition's keys and held offsets.
type partState struct {
	id   int32
	keys map[string]*keyState
	// held lists, by the start of the latest window of its records, the
	// smallest offset a window still holds; sorted by start.
	held deque[heldOffset]
}

type heldOffset struct{ start, offset int64 }

// hold notes that the record at offset, whose latest window starts at
// start, is now held in state.
func (p *partState) hold(start, offset int64) {
	hs := p.held.live()
	if n := len(hs); n > 0 && hs[n-1].start == start {
		hs[n-1].offset = min(hs[n-1].offset, offset)
		return
	}
	i, found := slices.BinarySearchFunc(hs, start, func(h heldOffset, s int64) int { return cmpInt(h.start, s) })
	if found {
		hs[i].offset = min(hs[i].offset, offset)
		return
	}
	p.held.insert(i, heldOffset{start: start, offset: offset})
}

// release forgets the records whose latest window starts at or before start.
func (p *partState) release(start int64) {
	for p.held.len() > 0 && p.held.live()[0].start <= start {
		p.held.popFront()
	}
}
