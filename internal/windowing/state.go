package windowing

import (
	"cmp"
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

// reserve makes room for n more items in one allocation at most (a new
// key's first slice makes all its windows at once).
func (d *deque[T]) reserve(n int) {
	if cap(d.s)-len(d.s) >= n {
		return
	}
	if d.head > 0 {
		k := copy(d.s, d.s[d.head:])
		d.s, d.head = d.s[:k], 0
		if cap(d.s)-len(d.s) >= n {
			return
		}
	}
	d.s = slices.Grow(d.s, max(n, cap(d.s)))
}

// popFront drops the first live item.
func (d *deque[T]) popFront() {
	d.head++
	if d.head == len(d.s) {
		d.s, d.head = d.s[:0], 0
	}
}

// reset empties d, keeping its memory.
func (d *deque[T]) reset() { d.s, d.head = d.s[:0], 0 }

// keyState is the state of one (partition, key). Keys live in a slab and
// are referred to by index, so that timers and the key table hold 4 bytes
// per key instead of a pointer, and a key costs no allocation of its own
// besides its text.
type keyState struct {
	id    string // the sort key (KeyFields encoded so that bytewise order is record.Compare order), then the key; "" for a free slot
	split uint32 // len(sort key)
	part  int32
	// first and last are the key's panes in the pool, linked in order of
	// start through paneHdr.next and back through paneHdr.prev; first is
	// noPane if it has none. A key has windows exactly when it has panes.
	// A key without panes keeps in last the mark of its entry in
	// Engine.idle.
	first, last int32
}

// noPane is the null pane index.
const noPane = -1

// key is the group key's JSON object, as in record.Record.Key.
func (k *keyState) key() string { return k.id[k.split:] }

// is reports whether k is key key of partition part.
func (k *keyState) is(part int32, key string) bool { return k.part == part && k.key() == key }

func (k *keyState) sortKey() string { return k.id[:k.split] }

// win is the bookkeeping of one (key, window) of a sliding window: the
// state itself lives in the key's panes. Tumbling windows are their one
// pane and keep their revision there.
type win struct {
	start int64
	rev   int32 // firings so far
	flags uint8 // changelog flags (see flagDirty)
}

// slideKey is the part of a key's state that only sliding windows need.
type slideKey struct {
	wins deque[win] // sorted by start
	// panes are the key's panes in order of start, as they are linked, so
	// that paneOf finds one from its start in O(1) (findPaneIn).
	panes deque[int32]
	fifo  *fifoAgg // windows of 3 panes or more only
}

// findWin returns the index of k's window at start, or where it would go.
// Windows are usually consecutive, which the first guess exploits.
func (s *slideKey) findWin(start, slide int64) (int, bool) {
	ws := s.wins.live()
	if len(ws) == 0 {
		return 0, false
	}
	if d := start - ws[0].start; d >= 0 && d%slide == 0 {
		// One read for a window at either end (firings and drops take the
		// oldest, new windows go after the newest).
		j := d / slide
		if j < int64(len(ws)) && ws[j].start == start {
			return int(j), true
		}
		if j >= int64(len(ws)) && ws[len(ws)-1].start < start {
			return len(ws), false
		}
	}
	return slices.BinarySearchFunc(ws, start, func(w win, s int64) int { return cmp.Compare(w.start, s) })
}

// reset empties a released key's sliding state, keeping its memory.
func (s *slideKey) reset() {
	s.wins.reset()
	s.panes.reset()
	if s.fifo != nil {
		s.fifo.valid = false
	}
}

// compareKeys orders keys as firings are ordered: key fields, then
// partition, then the key text (distinct keys that compare equal).
func compareKeys(a, b *keyState) int {
	if c := cmp.Compare(a.sortKey(), b.sortKey()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.part, b.part); c != 0 {
		return c
	}
	return cmp.Compare(a.key(), b.key())
}

// sortPrefix is the first 8 bytes of a sort key as a number (zero padded),
// so that most comparisons while sorting a timer's keys are one integer
// compare.
func sortPrefix(sortKey string) uint64 {
	var b [8]byte
	copy(b[:], sortKey)
	return binary.BigEndian.Uint64(b[:])
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
	keys  []int32 // slab indices
}

// idleKey is a key that was left without windows when the bucket at since
// dropped. mark tells the key's latest entry from older ones.
type idleKey struct {
	since int64
	key   int32
	mark  int32
}
