package windowing

import (
	"slices"

	"aggregator/internal/record"
)

// fifoAgg is one key's "two-stacks" (FIFO) aggregation over its panes, so
// that the on-time firings of a sliding window cost amortized O(1) merges
// each instead of size/gcd(size, slide). The panes of the window last
// queried, [lo, hi), are split at mid: the front part [lo, mid) keeps, for
// each of its panes, the merge of that pane and every later front pane
// (suffix aggregates, computed right to left when the front runs empty);
// the back part [mid, hi) is kept as one running merge. A window is then
// front[first] + back. Moving to a later window pushes its new panes onto
// the back and pops the front.
//
// Only count, sum, min, max, avg, first and last go through it: their
// states are small and fixed. A record that lands in a pane of the back
// part is added to the back merge too; one that lands in a pane of the
// front part (a late record) is added to the suffix aggregates that hold
// that pane, so that the late firing it causes (usually of the window last
// queried) is still O(1) merges. A new pane inside the front part
// invalidates the state, and the next query rebuilds it from the panes:
// rare, and O(panes) once.
type fifoAgg struct {
	valid       bool
	lo, mid, hi int64
	// front suffix aggregates, live from index head: starts[i] is the
	// pane's start, counts/nums/picks its merge with every later front pane.
	head   int
	starts []int64
	counts []int64
	nums   []float64 // layout.nums per entry
	picks  []pick    // layout.picks per entry
	back   *ownPane
}

// usesFifo reports whether windows are merged with a fifoAgg: sliding
// windows of 3 panes or more, without count_distinct, quantile or top_k
// (whose merge is heavy anyway, and whose suffix states would be too big).
func (e *Engine) usesFifo() bool {
	return e.size/e.paneLen >= 3 && e.agg.sets == 0 && e.agg.sketches == 0 && e.agg.tops == 0
}

// fifoWindow leaves in e.acc the merge of sliding key sk's panes in the
// window starting at start, through its fifoAgg. It reports false, leaving
// the fifoAgg alone, for a window older than the last one queried (a late
// re-firing): those take the plain merge.
func (e *Engine) fifoWindow(sk *slideKey, start int64) bool {
	f := sk.fifo
	if f == nil {
		f = &fifoAgg{back: e.agg.newOwnPane()}
		sk.fifo = f
	}
	end := e.window(start).End
	if f.valid && start < f.lo {
		return false
	}
	if !f.valid || start >= f.hi {
		e.fifoReset(f, start)
	}
	e.fifoPush(sk, f, end)
	f.lo = start
	for f.head < len(f.starts) && f.starts[f.head] < start {
		f.head++
	}
	if f.lo >= f.mid {
		e.fifoFlip(sk, f)
	}
	e.agg.clear(e.acc.pane)
	if f.head < len(f.starts) {
		e.mergeFlat(e.acc.pane, f.counts[f.head], e.flatNums(f, f.head), e.flatPicks(f, f.head))
	}
	if f.back.n > 0 {
		e.mergeFlat(e.acc.pane, f.back.n, f.back.nums, panePicks(f.back.pane))
	}
	return true
}

// fifoReset empties f, for a window at start.
func (e *Engine) fifoReset(f *fifoAgg, start int64) {
	f.valid = true
	f.lo, f.mid, f.hi = start, start, start
	f.head = 0
	f.starts, f.counts, f.nums, f.picks = f.starts[:0], f.counts[:0], f.nums[:0], f.picks[:0]
	e.agg.clear(f.back.pane)
}

// fifoPush merges into the back the panes in [f.hi, end).
func (e *Engine) fifoPush(sk *slideKey, f *fifoAgg, end int64) {
	if end <= f.hi {
		return
	}
	for _, i := range e.panesIn(sk, f.hi, end) {
		e.agg.merge(f.back.pane, e.pool.view(i))
	}
	f.hi = end
}

// fifoFlip moves every pane of [lo, hi) to the front, computing the
// suffix aggregates right to left, and empties the back.
func (e *Engine) fifoFlip(sk *slideKey, f *fifoAgg) {
	in := e.panesIn(sk, f.lo, f.hi)
	n := len(in)
	f.head = 0
	f.starts = resize(f.starts, n)
	f.counts = resize(f.counts, n)
	f.nums = resize(f.nums, n*e.agg.nums)
	f.picks = resize(f.picks, n*e.agg.picks)
	for j := n - 1; j >= 0; j-- {
		p := e.pool.view(in[j])
		f.starts[j] = e.pool.hdr(in[j]).start
		f.counts[j] = *p.count
		copy(e.flatNums(f, j), p.nums)
		copy(e.flatPicks(f, j), panePicks(p))
		if j < n-1 {
			e.mergeFlatInto(&f.counts[j], e.flatNums(f, j), e.flatPicks(f, j), f.counts[j+1], e.flatNums(f, j+1), e.flatPicks(f, j+1))
		}
	}
	f.mid = f.hi
	e.agg.clear(f.back.pane)
}

// fifoNote keeps key ki's fifoAgg right after rec was added to the pane
// that starts at paneStart.
func (e *Engine) fifoNote(ki int32, paneStart int64, rec *record.Record, seq uint64) {
	f := e.slideOf(ki).fifo
	if f == nil || !f.valid || paneStart < f.lo || paneStart >= f.hi {
		return
	}
	if paneStart >= f.mid {
		e.agg.add(f.back.pane, rec, seq)
		return
	}
	n, ok := slices.BinarySearch(f.starts[f.head:], paneStart)
	if !ok {
		f.valid = false
		return
	}
	// The suffixes up to the pane's own hold it. e.acc is free here: it
	// holds a merge only within emit.
	one := e.acc.pane
	e.agg.clear(one)
	e.agg.add(one, rec, seq)
	for i := f.head; i <= f.head+n; i++ {
		e.mergeFlatInto(&f.counts[i], e.flatNums(f, i), e.flatPicks(f, i), *one.count, one.nums, panePicks(one))
	}
}

func (e *Engine) flatNums(f *fifoAgg, i int) []float64 {
	return f.nums[i*e.agg.nums : (i+1)*e.agg.nums]
}

func (e *Engine) flatPicks(f *fifoAgg, i int) []pick {
	return f.picks[i*e.agg.picks : (i+1)*e.agg.picks]
}

func panePicks(p pane) []pick {
	if p.ext == nil {
		return nil
	}
	return p.ext.picks
}

// mergeFlat merges a flat state into the pane dst.
func (e *Engine) mergeFlat(dst pane, count int64, nums []float64, picks []pick) {
	e.mergeFlatInto(dst.count, dst.nums, panePicks(dst), count, nums, picks)
}

// mergeFlatInto merges the non-empty state (count, nums, picks) into the
// state at dstCount, dstNums, dstPicks.
func (e *Engine) mergeFlatInto(dstCount *int64, dstNums []float64, dstPicks []pick, count int64, nums []float64, picks []pick) {
	l := &e.agg
	for _, i := range l.sums {
		dstNums[i] += nums[i]
	}
	for _, i := range l.mins {
		dstNums[i] = min(dstNums[i], nums[i])
	}
	for _, i := range l.maxes {
		dstNums[i] = max(dstNums[i], nums[i])
	}
	for _, i := range l.firsts {
		if picks[i].firstOver(dstPicks[i]) {
			dstPicks[i] = picks[i]
		}
	}
	for _, i := range l.lasts {
		if picks[i].lastOver(dstPicks[i]) {
			dstPicks[i] = picks[i]
		}
	}
	*dstCount += count
}

// resize returns s with length n, reusing its memory when it can.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
