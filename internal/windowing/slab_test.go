package windowing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// TestKeySlab adds and releases keys of three partitions at random, over
// more than one chunk, and checks that every live key is found at its slot
// with its state, no released one is, a released slot is reused and its
// state reset, inPartition yields exactly a partition's live keys, and
// check finds nothing wrong.
func TestKeySlab(t *testing.T) {
	type state struct{ n, resets int }
	s := newKeySlab(func(x *state) { *x = state{resets: x.resets + 1} })
	rng := rand.New(rand.NewPCG(1, 2))
	const keys = 3 * slabChunk
	slot := map[int]int32{} // key number -> slot, for live keys
	key := func(i int) (int32, string) { return int32(i % 3), fmt.Sprintf(`{"k":%d}`, i) }
	for step := range 8 * keys {
		i := rng.IntN(keys)
		part, text := key(i)
		tag := s.hash(part, text)
		ki, k := s.find(part, tag, text)
		want, live := slot[i]
		switch {
		case live != (k != nil) || live && ki != want:
			t.Fatalf("step %d: find(%d, %s) = %d, %v; want %d, live %v", step, part, text, ki, k != nil, want, live)
		case live && rng.IntN(2) == 0:
			s.release(ki)
			delete(slot, i)
		case live:
			s.ext(ki).n++
		default:
			free := slices.Clone(s.free)
			ki, k = s.add(part, tag, "\x02"+text, 1)
			if len(free) > 0 && ki != free[len(free)-1] {
				t.Fatalf("step %d: add took slot %d, not the last released %d", step, ki, free[len(free)-1])
			}
			if k.key() != text || k.part != part || k.first != noPane || s.ext(ki).n != 0 {
				t.Fatalf("step %d: added key %+v, state %+v", step, *k, *s.ext(ki))
			}
			slot[i] = ki
		}
		if err := s.check(); err != nil {
			t.Fatalf("step %d: check: %v", step, err)
		}
	}
	if s.n <= slabChunk || len(s.free) == 0 {
		t.Fatalf("%d slots used, %d free: the test misses chunks or reuse", s.n, len(s.free))
	}
	reused := 0
	for i := range s.n {
		reused += s.ext(i).resets
	}
	if reused == 0 {
		t.Fatalf("no slot's state was reset")
	}
	for p := range int32(3) {
		var got []int32
		for ki, k := range s.inPartition(p) {
			if k.part != p || k.id == "" {
				t.Fatalf("inPartition(%d) yields %+v", p, *k)
			}
			got = append(got, ki)
		}
		var want []int32
		for i, ki := range slot {
			if part, _ := key(i); part == p {
				want = append(want, ki)
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("inPartition(%d) = %v, want %v", p, got, want)
		}
	}
}

// TestKeySlabCheck: check reports a live slot on the free list, a slot
// freed twice, a slot neither live nor free, and a key the table does not
// find.
func TestKeySlabCheck(t *testing.T) {
	for _, c := range []struct {
		name   string
		breakS func(s *keySlab[int])
		want   string
	}{
		{"live slot on the free list", func(s *keySlab[int]) { s.free = append(s.free, 0) }, "holds key"},
		{"slot freed twice", func(s *keySlab[int]) { s.free = append(s.free, s.free[0]) }, "free twice"},
		{"slot lost", func(s *keySlab[int]) { s.free = s.free[:0] }, "live and 0 free"},
		{"key not in the table", func(s *keySlab[int]) { s.at(0).part = 7 }, "the table finds none"},
		{"free slot never used", func(s *keySlab[int]) { s.free = append(s.free, s.n) }, "ever used"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newKeySlab[int](nil)
			for i := range 4 {
				text := fmt.Sprintf(`{"k":%d}`, i)
				s.add(0, s.hash(0, text), "\x02"+text, 1)
			}
			s.release(3)
			if err := s.check(); err != nil {
				t.Fatalf("check before: %v", err)
			}
			c.breakS(&s)
			if err := s.check(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check = %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestKeySlabEntrySize: a slot costs an Engine key its keyState only, and
// the others their state besides (a zero-size state must not be padded).
func TestKeySlabEntrySize(t *testing.T) {
	if got, want := unsafe.Sizeof(slabEntry[struct{}]{}), unsafe.Sizeof(keyState{}); got != want {
		t.Errorf("Engine's slot is %d bytes, its keyState %d", got, want)
	}
	if got, want := unsafe.Sizeof(slabEntry[sessKey]{}), unsafe.Sizeof(keyState{})+unsafe.Sizeof(sessKey{}); got != want {
		t.Errorf("a session key's slot is %d bytes, want %d", got, want)
	}
}
