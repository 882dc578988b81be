package windowing

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyTable inserts and removes many keys at random (which exercises
// growth and the backward shift of removal) and checks that every key
// present is found and no removed one is.
func TestKeyTable(t *testing.T) {
	for _, n := range []int{10, 1000, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			tab := newKeyTable()
			keys := make([]string, n)
			parts := make([]int32, n)
			states := make([]keyState, n)
			present := make([]bool, n)
			for i := range keys {
				keys[i], parts[i] = fmt.Sprintf(`{"k":"sid_%d"}`, i/2), int32(i%2)
				states[i] = keyState{id: keys[i], part: parts[i]}
			}
			find := func(part int32, key string) int32 {
				for ki := range tab.probe(tab.hash(part, key)) {
					if states[ki].is(part, key) {
						return ki
					}
				}
				return -1
			}
			for range 4 * n {
				i := rng.IntN(n)
				if tag := tab.hash(parts[i], keys[i]); present[i] {
					tab.remove(tag, int32(i))
				} else {
					tab.insert(tag, int32(i))
				}
				present[i] = !present[i]
			}
			count := 0
			for i := range keys {
				ki := find(parts[i], keys[i])
				ok := ki >= 0
				if ok != present[i] || ok && ki != int32(i) {
					t.Fatalf("find(%d, %s) = %d, %v; want present %v", parts[i], keys[i], ki, ok, present[i])
				}
				if ok {
					count++
				}
			}
			if count != tab.n {
				t.Errorf("table holds %d keys, want %d", tab.n, count)
			}
		})
	}
}

// TestKeyTableReserve: a table reserved for n keys takes them without
// growing, at the load insert keeps, and finds each.
func TestKeyTableReserve(t *testing.T) {
	for _, n := range []int{1, 13, 1000, 100_000} {
		tab := newKeyTable()
		tab.reserve(n)
		size := len(tab.slots)
		if n*5 > size*4 || size > 16 && n*5*2 <= size*4 {
			t.Errorf("reserve(%d): %d slots, want the fewest that hold %d at load 0.8", n, size, n)
		}
		tags := make([]uint32, n)
		for i := range n {
			tags[i] = tab.hash(0, fmt.Sprintf(`{"k":%d}`, i))
			tab.insert(tags[i], int32(i))
		}
		if len(tab.slots) != size {
			t.Errorf("reserve(%d): the table grew from %d to %d slots while %d keys went in", n, size, len(tab.slots), n)
		}
		for i, tag := range tags {
			found := false
			for ki := range tab.probe(tag) {
				found = found || ki == int32(i)
			}
			if !found {
				t.Fatalf("reserve(%d): key %d not found", n, i)
			}
		}
	}
}
