package windowing

import (
	"fmt"
	"iter"
	"slices"
)

// slabChunk is how many keys a slab chunk holds; chunks never move, so a
// *keyState or *E stays valid while keys are added.
const (
	slabBits  = 10
	slabChunk = 1 << slabBits
	slabMask  = slabChunk - 1
)

// keySlab holds a window operator's keys, indexed by int32: each key's
// identity (keyState) and beside it the operator's own state of the key,
// E, in chunks that never move, with the key table that finds a key's
// index and the free list of released slots. Engine, Sessions and Counts
// each keep one. A generic rather than one slab taking funcs: find inlines
// the table's probe with the keyState compare in its loop (docs/design.md:
// a probe through a func cost the tumbling benchmark 5-10%).
type keySlab[E any] struct {
	table  keyTable
	chunks []*[slabChunk]slabEntry[E]
	free   []int32
	n      int32 // slots ever used
	// reset, if not nil, empties a released key's E, keeping what memory
	// it can for the next key of the slot.
	reset func(*E)
}

// slabEntry is one slot of a keySlab: a key and the operator's state of it,
// together, so that a record's lookup and update touch one place. ext
// comes first: a zero-size field last would be padded (Engine's
// struct{} would make a key 40 bytes instead of 32).
type slabEntry[E any] struct {
	ext E
	keyState
}

func newKeySlab[E any](reset func(*E)) keySlab[E] {
	return keySlab[E]{table: newKeyTable(), reset: reset}
}

// at returns slot i's key; its id is "" if the slot is free.
func (s *keySlab[E]) at(i int32) *keyState { return &s.chunks[i>>slabBits][i&slabMask].keyState }

// ext returns the operator's state of slot i's key.
func (s *keySlab[E]) ext(i int32) *E { return &s.chunks[i>>slabBits][i&slabMask].ext }

// compare orders slots a and b's keys as firings are (compareKeys).
func (s *keySlab[E]) compare(a, b int32) int { return compareKeys(s.at(a), s.at(b)) }

// hash is the key table's hash tag of (part, key), for find and add.
func (s *keySlab[E]) hash(part int32, key string) uint32 { return s.table.hash(part, key) }

// find returns the index and slot of key key of partition part, whose
// hash tag is tag, or a nil slot if there is none.
func (s *keySlab[E]) find(part int32, tag uint32, key string) (int32, *slabEntry[E]) {
	for ki := range s.table.probe(tag) {
		if k := s.entry(ki); k.is(part, key) {
			return ki, k
		}
	}
	return 0, nil
}

func (s *keySlab[E]) entry(i int32) *slabEntry[E] { return &s.chunks[i>>slabBits][i&slabMask] }

// add makes a slot for key id (its sort key, then its JSON at split) of
// partition part, hash tag, which must not be there; its E is empty.
func (s *keySlab[E]) add(part int32, tag uint32, id string, split int) (int32, *slabEntry[E]) {
	var i int32
	if n := len(s.free); n > 0 {
		i, s.free = s.free[n-1], s.free[:n-1]
	} else {
		if s.n&slabMask == 0 {
			s.chunks = append(s.chunks, new([slabChunk]slabEntry[E]))
		}
		i = s.n
		s.n++
	}
	k := s.entry(i)
	k.keyState = keyState{id: id, split: uint32(split), part: part, first: noPane, last: noPane}
	s.table.insert(tag, i)
	return i, k
}

// reserve makes room for n keys more: the table at once, and the list of
// chunks (the chunks come as keys fill them).
func (s *keySlab[E]) reserve(n int) {
	live := int(s.n) - len(s.free)
	s.table.reserve(live + n)
	if more := (int(s.n)+n+slabMask)>>slabBits - len(s.chunks); more > 0 {
		s.chunks = slices.Grow(s.chunks, more)
	}
}

// release frees slot i, whose key the operator is done with.
func (s *keySlab[E]) release(i int32) {
	k := s.at(i)
	s.table.remove(s.table.hash(k.part, k.key()), i)
	*k = keyState{}
	if s.reset != nil {
		s.reset(s.ext(i))
	}
	s.free = append(s.free, i)
}

// inPartition yields the index and state of every key of partition p;
// the loop may release the key it is given.
func (s *keySlab[E]) inPartition(p int32) iter.Seq2[int32, *keyState] {
	return func(yield func(int32, *keyState) bool) {
		for i := range s.n {
			if k := s.at(i); k.id != "" && k.part == p && !yield(i, k) {
				return
			}
		}
	}
}

// live yields the index and state of every key.
func (s *keySlab[E]) live() iter.Seq2[int32, *keyState] {
	return func(yield func(int32, *keyState) bool) {
		for i := range s.n {
			if k := s.at(i); k.id != "" && !yield(i, k) {
				return
			}
		}
	}
}

// check returns what is broken in s, if anything: a live key the table
// does not find at its index, a table that holds another number of keys,
// a free-list slot that is live, listed twice or never used, or a slot
// neither live nor free.
func (s *keySlab[E]) check() error {
	live := 0
	for i, k := range s.live() {
		if got, found := s.find(k.part, s.hash(k.part, k.key()), k.key()); found == nil {
			return fmt.Errorf("key %s (partition %d) at %d, the table finds none", k.key(), k.part, i)
		} else if got != i {
			return fmt.Errorf("key %s (partition %d) at %d, the table finds %d", k.key(), k.part, i, got)
		}
		live++
	}
	if s.table.n != live {
		return fmt.Errorf("%d live keys, the table holds %d", live, s.table.n)
	}
	free := make(map[int32]bool, len(s.free))
	for _, i := range s.free {
		switch {
		case i < 0 || i >= s.n:
			return fmt.Errorf("free slot %d, of %d ever used", i, s.n)
		case s.at(i).id != "":
			return fmt.Errorf("free slot %d holds key %s", i, s.at(i).key())
		case free[i]:
			return fmt.Errorf("slot %d is free twice", i)
		}
		free[i] = true
	}
	if live+len(free) != int(s.n) {
		return fmt.Errorf("%d live and %d free slots of %d", live, len(free), s.n)
	}
	return nil
}
