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
