package integration

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A tuple is t (dimension, value) pairs, dimensions ascending, the rest
// -1: a map key.
type tuple [6]int8

// coveringArray returns rows of value indexes (row[d] < sizes[d]) in which
// every combination of values of any strength dimensions that ok accepts
// and that some whole row ok accepts is in at least one row. ok judges a
// partial row (unset values are -1); no row it refuses is returned. The
// greedy construction is AETG's: each new row is the best of a few
// candidates, each started from a combination not covered yet and filled
// one dimension at a time with the value that covers most. The same seed
// gives the same rows.
func coveringArray(sizes []int, strength int, ok func(row []int) bool, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, 37))
	uncovered := map[tuple]bool{}
	row := make([]int, len(sizes))
	var walk func(from, left int) // every combination of left more dimensions after from
	walk = func(from, left int) {
		if left == 0 {
			if completable(sizes, row, ok) {
				uncovered[tupleOf(row)] = true
			}
			return
		}
		for d := from; d < len(sizes); d++ {
			for v := range sizes[d] {
				row[d] = v
				walk(d+1, left-1)
			}
			row[d] = -1
		}
	}
	fill(row, -1)
	walk(0, strength)
	var rows [][]int
	for len(uncovered) > 0 {
		todo := slices.SortedFunc(func(yield func(tuple) bool) {
			for k := range uncovered {
				if !yield(k) {
					return
				}
			}
		}, func(a, b tuple) int { return slices.Compare(a[:], b[:]) })
		var best []int
		bestN := -1
		for range 12 { // candidates
			cand := make([]int, len(sizes))
			fill(cand, -1)
			for i, seedTuple := 0, todo[rng.IntN(len(todo))]; i+1 < len(seedTuple) && seedTuple[i] >= 0; i += 2 {
				cand[seedTuple[i]] = int(seedTuple[i+1])
			}
			n := 0
			for _, d := range rng.Perm(len(sizes)) {
				if cand[d] >= 0 {
					continue
				}
				bestV, gain := -1, -1
				for _, v := range rng.Perm(sizes[d]) {
					cand[d] = v
					if g := newlyCovered(cand, d, strength, uncovered); g > gain && completable(sizes, cand, ok) {
						bestV, gain = v, g
					}
				}
				cand[d] = bestV
				n += gain
			}
			if n > bestN {
				best, bestN = cand, n
			}
		}
		forEachTuple(best, -1, strength, func(k tuple) { delete(uncovered, k) })
		rows = append(rows, best)
	}
	return rows
}

// completable reports whether ok accepts row with its unset values set
// some way.
func completable(sizes, row []int, ok func([]int) bool) bool {
	if !ok(row) {
		return false
	}
	d := slices.Index(row, -1)
	if d < 0 {
		return true
	}
	defer func() { row[d] = -1 }()
	for v := range sizes[d] {
		if row[d] = v; completable(sizes, row, ok) {
			return true
		}
	}
	return false
}

// newlyCovered counts the uncovered combinations that row, set at every
// dimension it has a value for, covers with dimension d.
func newlyCovered(row []int, d, strength int, uncovered map[tuple]bool) int {
	n := 0
	forEachTuple(row, d, strength, func(k tuple) {
		if uncovered[k] {
			n++
		}
	})
	return n
}

// forEachTuple calls f with every combination of strength set values of
// row (with must's among them, if must >= 0).
func forEachTuple(row []int, must, strength int, f func(tuple)) {
	pick := make([]int, len(row))
	fill(pick, -1)
	var walk func(from, left int)
	walk = func(from, left int) {
		if left == 0 {
			if must < 0 || pick[must] >= 0 {
				f(tupleOf(pick))
			}
			return
		}
		for d := from; d < len(row); d++ {
			if row[d] >= 0 {
				pick[d] = row[d]
				walk(d+1, left-1)
				pick[d] = -1
			}
		}
	}
	walk(0, strength)
}

// tupleOf is the tuple of row's set values.
func tupleOf(row []int) tuple {
	k := tuple{-1, -1, -1, -1, -1, -1}
	i := 0
	for d, v := range row {
		if v >= 0 {
			k[i], k[i+1] = int8(d), int8(v)
			i += 2
		}
	}
	return k
}

// fill sets every element of s to v.
func fill(s []int, v int) {
	for i := range s {
		s[i] = v
	}
}

// TestCoveringArray: for strengths 2 and 3, with constraints, every
// combination of values that some valid row holds is in a row, every row
// is whole and valid, the array is not much bigger than the largest
// product of sizes it must hold, and a seed gives the same array again.
func TestCoveringArray(t *testing.T) {
	sizes := []int{3, 2, 4, 2, 3, 2}
	forbidden := [][4]int{{0, 1, 2, 3}, {1, 0, 3, 1}, {4, 2, 0, 0}, {2, 0, 5, 1}}
	ok := func(row []int) bool {
		for _, f := range forbidden {
			if row[f[0]] == f[1] && row[f[2]] == f[3] {
				return false
			}
		}
		return true
	}
	// Every whole valid row, by brute force: the combinations they hold
	// are what an array must cover.
	var valid [][]int
	var walk func(row []int)
	walk = func(row []int) {
		if len(row) == len(sizes) {
			if ok(row) {
				valid = append(valid, slices.Clone(row))
			}
			return
		}
		for v := range sizes[len(row)] {
			walk(append(row, v))
		}
	}
	walk(nil)
	for _, strength := range []int{2, 3} {
		want := map[tuple]bool{}
		for _, row := range valid {
			forEachTuple(row, -1, strength, func(k tuple) { want[k] = true })
		}
		rows := coveringArray(sizes, strength, ok, 7)
		got := map[tuple]bool{}
		for _, row := range rows {
			if slices.Contains(row, -1) || !ok(row) {
				t.Errorf("strength %d: row %v is not whole and valid", strength, row)
			}
			forEachTuple(row, -1, strength, func(k tuple) { got[k] = true })
		}
		for k := range want {
			if !got[k] {
				t.Errorf("strength %d: combination %v in no row", strength, k)
			}
		}
		if bound := map[int]int{2: 12, 3: 48}[strength]; len(rows) > 2*bound {
			t.Errorf("strength %d: %d rows, want at most twice the %d a combination of the largest sizes needs", strength, len(rows), bound)
		}
		if again := coveringArray(sizes, strength, ok, 7); !slices.EqualFunc(rows, again, slices.Equal) {
			t.Errorf("strength %d: seed 7 gives another array the second time", strength)
		}
		t.Logf("strength %d: %d rows cover %d combinations", strength, len(rows), len(want))
	}
}
