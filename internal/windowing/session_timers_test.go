package windowing

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTimersOrder: the radix heap hands out entries in order of time, then
// key, against a sorted slice, with pushes below the last time taken out
// (as after a Rewind), negative times, ties, and deletions.
func TestTimersOrder(t *testing.T) {
	keys := newKeySlab((*sessKey).reset)
	for i := range 10 {
		key := `{"k":"` + string(rune('a'+i)) + `"}`
		keys.add(0, keys.hash(0, key), string([]byte{2, byte('a' + i), 0, 0})+key, 4)
	}
	type entry struct {
		at  int64
		key int32
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 2))
		tm := timers{keys: &keys}
		var ref []entry
		floor := int64(-40)
		for step := range 3000 {
			switch r := rng.IntN(100); {
			case r < 50:
				e := entry{floor + rng.Int64N(30), int32(rng.IntN(10))}
				if rng.IntN(50) == 0 {
					e.at = floor - 1 - rng.Int64N(20) // below the floor
				}
				if rng.IntN(100) == 0 {
					e.at = math.MaxInt64 - 1 - rng.Int64N(3)
				}
				tm.push(timer{at: e.at, key: e.key, prefix: sortPrefix(keys.at(e.key).sortKey())})
				ref = append(ref, e)
			case r < 52:
				k := int32(rng.IntN(10))
				tm.deleteFunc(func(x timer) bool { return x.key == k })
				ref = slices.DeleteFunc(ref, func(e entry) bool { return e.key == k })
			case len(ref) > 0:
				slices.SortFunc(ref, func(a, b entry) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.key, b.key)) })
				if got := tm.top(); got != ref[0].at {
					t.Fatalf("seed %d step %d: top() = %d, want %d", seed, step, got, ref[0].at)
				}
				h := tm.head()
				if (entry{h.at, h.key}) != ref[0] {
					t.Fatalf("seed %d step %d: head() = %+v, want %+v", seed, step, h, ref[0])
				}
				var n int32 = 1
				tm.next(noTimer, &n)
				ref = ref[1:]
				floor = h.at
			}
			if tm.n != len(ref) {
				t.Fatalf("seed %d step %d: %d entries, want %d", seed, step, tm.n, len(ref))
			}
		}
	}
}
