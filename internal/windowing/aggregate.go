package windowing

import (
	"fmt"
	"math"
	"slices"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"aggregator/internal/record"
)

// sketchAccuracy is the relative accuracy of quantile sketches: the value
// reported for quantile q is within 1% of the exact value at nearest rank
// ceil(q*count) (DDSketch's guarantee for the bucket that holds that rank,
// independent of the distribution and of how many panes were merged).
const sketchAccuracy = 0.01

// Fn is an aggregate function. The config's names for them (and their
// messages) are internal/config's; pipeline.WindowSpec maps its typed fn
// to these.
type Fn uint8

const (
	FnCount Fn = iota
	FnSum
	FnMin
	FnMax
	FnAvg
	FnFirst
	FnLast
	FnCountDistinct
	FnQuantile
	FnTopK
	// FnCountField is count with a field (SQL COUNT(field)): the records
	// whose field is present and not null.
	FnCountField
)

// exactValues is how many values of a quantile's field a window holds
// exactly (docs/semantics.md#aggregates); the 257th spills them into the sketch.
const exactValues = 256

// aggSpec is one configured aggregate; slot indexes its state in the pane
// part for its kind (nums, picks, sets or sketches).
type aggSpec struct {
	fn   Fn
	slot int
	// n is the nums slot that counts the values (records whose field is
	// not null) of sum, avg and count(field): a sum over no values is null.
	// Counters come after every other nums slot, so that the nums of a
	// changelog written before they existed are a prefix (see checkSlots).
	n int
	q float64
	k int // top_k
	// lo and hi are the nums slots of a quantile's exact min and max: the
	// sketch's answer (past exactValues values) is clamped to them, so
	// q = 1 comes out exact.
	lo, hi int
}

// layout says how many state slots of each kind a pane has.
type layout struct {
	specs                             []aggSpec
	nums, picks, sets, sketches, tops int
	counters                          int                  // the last nums slots: value counters (aggSpec.n)
	mapping                           mapping.IndexMapping // for quantile sketches
	// noSketch is the sketch of every quantile that has not spilled: empty
	// and never written (a pane makes its own at its first spill).
	noSketch *ddsketch.DDSketch
	// sums, mins and maxes list the nums slots by how they merge, so that
	// merging the many panes of a sliding window needs no switch per slot.
	sums, mins, maxes []int
	// firsts and lasts list the picks slots by how they merge.
	firsts, lasts []int
	// numsOnly: every aggregate is count (with a field or not), sum, avg,
	// min or max, so add can skip the switch; addSums etc. pair a nums slot
	// with its input index.
	numsOnly                             bool
	addSums, addMins, addMaxs, addCounts []slotInput
	empty                                []float64 // the nums of an empty pane
	sorted                               []float64 // scratch: a quantile's exact values, sorted
}

// slotInput says which record value (input) feeds which nums slot, and
// which slot (n) counts its values.
type slotInput struct{ slot, n, input int }

func newLayout(aggs []Aggregate) (layout, error) {
	var l layout
	for i, a := range aggs {
		fn := a.Fn
		if fn > FnCountField {
			return layout{}, fmt.Errorf("aggregate %d: unknown function %d", i, fn)
		}
		s := aggSpec{fn: fn, q: a.Q, k: a.K}
		switch fn {
		case FnSum, FnMin, FnMax, FnAvg:
			s.slot, l.nums = l.nums, l.nums+1
		case FnFirst, FnLast:
			s.slot, l.picks = l.picks, l.picks+1
		case FnCountDistinct:
			s.slot, l.sets = l.sets, l.sets+1
		case FnQuantile:
			s.slot, l.sketches = l.sketches, l.sketches+1
			s.lo, s.hi, l.nums = l.nums, l.nums+1, l.nums+2
			l.mins, l.maxes = append(l.mins, s.lo), append(l.maxes, s.hi)
		case FnTopK:
			s.slot, l.tops = l.tops, l.tops+1
		}
		l.specs = append(l.specs, s)
		switch fn {
		case FnSum, FnAvg:
			l.sums = append(l.sums, s.slot)
		case FnMin:
			l.mins = append(l.mins, s.slot)
		case FnMax:
			l.maxes = append(l.maxes, s.slot)
		case FnFirst:
			l.firsts = append(l.firsts, s.slot)
		case FnLast:
			l.lasts = append(l.lasts, s.slot)
		}
	}
	for i := range l.specs {
		s := &l.specs[i]
		s.n = -1
		if s.fn == FnSum || s.fn == FnAvg || s.fn == FnCountField {
			s.n, l.nums, l.counters = l.nums, l.nums+1, l.counters+1
			l.sums = append(l.sums, s.n)
		}
	}
	l.numsOnly = l.picks+l.sets+l.sketches+l.tops == 0
	l.empty = make([]float64, l.nums)
	for _, s := range l.specs {
		switch s.fn {
		case FnMin:
			l.empty[s.slot] = math.Inf(1)
		case FnMax:
			l.empty[s.slot] = math.Inf(-1)
		case FnQuantile:
			l.empty[s.lo], l.empty[s.hi] = math.Inf(1), math.Inf(-1)
		}
	}
	for i, s := range l.specs {
		switch s.fn {
		case FnSum, FnAvg:
			l.addSums = append(l.addSums, slotInput{s.slot, s.n, i})
		case FnMin:
			l.addMins = append(l.addMins, slotInput{s.slot, -1, i})
		case FnMax:
			l.addMaxs = append(l.addMaxs, slotInput{s.slot, -1, i})
		case FnCountField:
			l.addCounts = append(l.addCounts, slotInput{s.n, s.n, i})
		}
	}
	if l.sketches > 0 {
		m, err := mapping.NewDefaultMapping(sketchAccuracy)
		if err != nil {
			return layout{}, fmt.Errorf("quantile sketch: %w", err)
		}
		l.mapping = m
		l.noSketch = ddsketch.NewDDSketchFromStoreProvider(m, store.DefaultProvider)
		l.sorted = make([]float64, 0, exactValues)
	}
	return l, nil
}

// pane is a pane's state as the aggregate functions see it: a pane of
// the pool (see panePool) or a merge of panes (ownPane).
type pane struct {
	count *int64
	nums  []float64 // sum, min, max, avg (as a sum)
	ext   *paneExt  // nil unless first, last, count_distinct or quantile is configured
}

// ownPane is pane state outside the pool: a merge accumulator.
type ownPane struct {
	n int64
	pane
}

func (l *layout) newOwnPane() *ownPane {
	p := &ownPane{}
	p.count, p.nums, p.ext = &p.n, make([]float64, l.nums), l.newExt()
	l.reset(p.nums, p.ext)
	return p
}

// clear empties p, keeping its memory.
func (l *layout) clear(p pane) {
	*p.count = 0
	l.reset(p.nums, p.ext)
}

func (l *layout) hasExt() bool { return l.picks+l.sets+l.sketches+l.tops > 0 }

// paneExt holds the aggregates whose state is not a single float.
type paneExt struct {
	picks    []pick
	sets     []map[string]struct{}
	sketches []*ddsketch.DDSketch
	// exact holds a quantile's values while there are at most exactValues
	// of them; the next one moves them all into its sketch (spill), and
	// spilled says so. One of a quantile's exact and sketch is always empty.
	exact   [][]float64
	spilled []bool
	tops    []map[string]int64 // top_k: count per value, keyed by topKey
}

// pick is a first/last candidate: its value, event time and arrival
// number; has is false while no record had the field (not null).
type pick struct {
	v   record.Value
	t   int64
	seq uint64
	has bool
}

// earlier reports whether a is first's better candidate than b: smaller
// event time, ties to the earlier arrival.
func (a pick) earlier(b pick) bool { return a.t < b.t || a.t == b.t && a.seq < b.seq }

// firstOver reports whether a replaces b as first: a has a value, and b
// has none or a is earlier.
func (a pick) firstOver(b pick) bool { return a.has && (!b.has || a.earlier(b)) }

// lastOver reports whether a replaces b as last: a has a value, and b has
// none or a is not earlier.
func (a pick) lastOver(b pick) bool { return a.has && (!b.has || !a.earlier(b)) }

func (l *layout) newExt() *paneExt {
	if !l.hasExt() {
		return nil
	}
	x := &paneExt{picks: make([]pick, l.picks), sets: make([]map[string]struct{}, l.sets), sketches: make([]*ddsketch.DDSketch, l.sketches),
		exact: make([][]float64, l.sketches), spilled: make([]bool, l.sketches), tops: make([]map[string]int64, l.tops)}
	for i := range x.sets {
		x.sets[i] = map[string]struct{}{}
	}
	for i := range x.tops {
		x.tops[i] = map[string]int64{}
	}
	for i := range x.sketches {
		x.sketches[i] = l.noSketch
		x.exact[i] = make([]float64, 0, 4) // grows to exactValues, kept when the pane is reused
	}
	return x
}

// reset empties p's state, keeping its memory.
func (l *layout) reset(nums []float64, x *paneExt) {
	copy(nums, l.empty)
	if x == nil {
		return
	}
	clear(x.picks)
	for _, m := range x.sets {
		clear(m)
	}
	for i, sk := range x.sketches {
		if x.spilled[i] { // its own sketch, kept for the next spill
			sk.Clear()
		}
		x.exact[i], x.spilled[i] = x.exact[i][:0], false
	}
	for _, m := range x.tops {
		clear(m)
	}
}

// add folds one record into p; seq is its engine-wide arrival number.
func (l *layout) add(p pane, rec *record.Record, seq uint64) {
	if l.numsOnly {
		l.addNums(p.count, p.nums, rec.Values)
		return
	}
	*p.count++
	for i, s := range l.specs {
		v := &rec.Values[i]
		if v.Null { // SQL's NULL: this aggregate skips the record (docs/semantics.md#decoding)
			continue
		}
		switch s.fn {
		case FnSum, FnAvg:
			p.nums[s.slot] += v.Num
			p.nums[s.n]++
		case FnCountField:
			p.nums[s.n]++
		case FnMin:
			p.nums[s.slot] = min(p.nums[s.slot], v.Num)
		case FnMax:
			p.nums[s.slot] = max(p.nums[s.slot], v.Num)
		case FnFirst:
			if c := (pick{v: *v, t: rec.Time, seq: seq, has: true}); c.firstOver(p.ext.picks[s.slot]) {
				p.ext.picks[s.slot] = c
			}
		case FnLast:
			if c := (pick{v: *v, t: rec.Time, seq: seq, has: true}); c.lastOver(p.ext.picks[s.slot]) {
				p.ext.picks[s.slot] = c
			}
		case FnCountDistinct:
			p.ext.sets[s.slot][v.Raw] = struct{}{}
		case FnQuantile:
			l.addQuantile(p.ext, s.slot, v.Num)
			p.nums[s.lo] = min(p.nums[s.lo], v.Num)
			p.nums[s.hi] = max(p.nums[s.hi], v.Num)
		case FnTopK:
			addTop(p.ext.tops[s.slot], v)
		}
	}
}

// addNums is add for layouts of numeric aggregates only. A null value is
// skipped: its Num is 0, and only its counter and min/max need the test.
func (l *layout) addNums(count *int64, nums []float64, vs []record.Value) {
	*count++
	for _, s := range l.addSums {
		if v := &vs[s.input]; !v.Null {
			nums[s.slot] += v.Num
			nums[s.n]++
		}
	}
	for _, s := range l.addCounts {
		if !vs[s.input].Null {
			nums[s.n]++
		}
	}
	for _, s := range l.addMins {
		if v := &vs[s.input]; !v.Null {
			nums[s.slot] = min(nums[s.slot], v.Num)
		}
	}
	for _, s := range l.addMaxs {
		if v := &vs[s.input]; !v.Null {
			nums[s.slot] = max(nums[s.slot], v.Num)
		}
	}
}

// addQuantile adds v to quantile slot i of x: to its exact values while
// they number fewer than exactValues, else to its sketch (moving the exact
// values there first). NaN is left out, as the sketch leaves it out.
func (l *layout) addQuantile(x *paneExt, i int, v float64) {
	if math.IsNaN(v) {
		return
	}
	switch {
	case x.spilled[i]:
	case len(x.exact[i]) < exactValues:
		x.exact[i] = append(x.exact[i], v)
		return
	default:
		l.spill(x, i)
	}
	addToSketch(x.sketches[i], v)
}

// spill moves quantile slot i's exact values into its sketch, which it
// makes if the pane never had one (a pane's first spill allocates, once
// per pooled pane).
func (l *layout) spill(x *paneExt, i int) {
	if x.spilled[i] {
		return
	}
	if x.sketches[i] == l.noSketch {
		x.sketches[i] = ddsketch.NewDDSketchFromStoreProvider(l.mapping, store.DefaultProvider)
	}
	spill(x.sketches[i], x.exact[i])
	x.exact[i], x.spilled[i] = x.exact[i][:0], true
}

// spill adds the exact values vs to sketch sk.
func spill(sk *ddsketch.DDSketch, vs []float64) {
	for _, v := range vs {
		addToSketch(sk, v)
	}
}

// mergeQuantile merges quantile slot i of src into dst's: exact while
// both are and their values together are at most exactValues, else
// into dst's sketch.
func (l *layout) mergeQuantile(dst, src *paneExt, i int) {
	if !dst.spilled[i] && !src.spilled[i] && len(dst.exact[i])+len(src.exact[i]) <= exactValues {
		dst.exact[i] = append(dst.exact[i], src.exact[i]...)
		return
	}
	l.spill(dst, i)
	_ = dst.sketches[i].MergeWith(src.sketches[i]) // same mapping: cannot fail
	spill(dst.sketches[i], src.exact[i])
}

// addToSketch adds v, clamping values beyond what the sketch can index
// (|v| > ~1e307) to its limits; NaN is left out.
func addToSketch(sk *ddsketch.DDSketch, v float64) {
	switch {
	case v > sk.MaxIndexableValue():
		v = sk.MaxIndexableValue()
	case v < -sk.MaxIndexableValue():
		v = -sk.MaxIndexableValue()
	}
	_ = sk.Add(v) // only NaN fails now
}

// merge folds pane src into dst (dst.count > 0 or dst freshly reset).
func (l *layout) merge(dst, src pane) {
	for _, i := range l.sums {
		dst.nums[i] += src.nums[i]
	}
	for _, i := range l.mins {
		dst.nums[i] = min(dst.nums[i], src.nums[i])
	}
	for _, i := range l.maxes {
		dst.nums[i] = max(dst.nums[i], src.nums[i])
	}
	if src.ext != nil {
		l.mergeExt(dst, src)
	}
	*dst.count += *src.count
}

// mergeExt merges the aggregates that are not a single float.
func (l *layout) mergeExt(dst, src pane) {
	for _, s := range l.specs {
		switch s.fn {
		case FnFirst:
			if src.ext.picks[s.slot].firstOver(dst.ext.picks[s.slot]) {
				dst.ext.picks[s.slot] = src.ext.picks[s.slot]
			}
		case FnLast:
			if src.ext.picks[s.slot].lastOver(dst.ext.picks[s.slot]) {
				dst.ext.picks[s.slot] = src.ext.picks[s.slot]
			}
		case FnCountDistinct:
			set := dst.ext.sets[s.slot]
			for k := range src.ext.sets[s.slot] {
				set[k] = struct{}{}
			}
		case FnQuantile:
			l.mergeQuantile(dst.ext, src.ext, s.slot)
		case FnTopK:
			m := dst.ext.tops[s.slot]
			for v, n := range src.ext.tops[s.slot] {
				m[v] += n
			}
		}
	}
}

// values writes the aggregates of p into out, one per spec.
func (e *Engine) values(p pane, out []record.Value) { e.agg.values(p, out, &e.numbers) }

// values writes the aggregates of p into out, one per spec, made by n.
// An aggregate over no values (docs/semantics.md#aggregates) is 0 for count and count_distinct,
// [] for top_k, and null (record.NullValue) for the others.
func (l *layout) values(p pane, out []record.Value, e *numbers) {
	for i, s := range l.specs {
		switch s.fn {
		case FnCount:
			out[i] = e.number(float64(*p.count))
		case FnCountField:
			out[i] = e.number(p.nums[s.n])
		case FnSum:
			out[i] = e.numberOrNull(p.nums[s.slot], p.nums[s.n] > 0)
		case FnMin: // +Inf and -Inf: no values (the decoder reads finite numbers only)
			out[i] = e.numberOrNull(p.nums[s.slot], !math.IsInf(p.nums[s.slot], 1))
		case FnMax:
			out[i] = e.numberOrNull(p.nums[s.slot], !math.IsInf(p.nums[s.slot], -1))
		case FnAvg:
			out[i] = e.numberOrNull(p.nums[s.slot]/p.nums[s.n], p.nums[s.n] > 0)
		case FnFirst, FnLast:
			if pk := &p.ext.picks[s.slot]; pk.has {
				out[i] = pk.v
			} else {
				out[i] = record.NullValue
			}
		case FnCountDistinct:
			out[i] = e.number(float64(len(p.ext.sets[s.slot])))
		case FnQuantile:
			q, ok := l.quantile(p.ext, s.slot, s.q)
			if ok && p.ext.spilled[s.slot] { // the sketch's answer, clamped to the exact range
				q = min(max(q, p.nums[s.lo]), p.nums[s.hi])
			}
			out[i] = e.numberOrNull(q, ok)
		case FnTopK:
			out[i] = topK(p.ext.tops[s.slot], s.k)
		}
	}
}

// numberOrNull is the number f if ok, else the null Value.
func (n *numbers) numberOrNull(f float64, ok bool) record.Value {
	if !ok {
		return record.NullValue
	}
	return n.number(f)
}

// quantile returns quantile q of slot i of x: the exact value at nearest
// rank while x holds its values, else the sketch's; false over no values.
func (l *layout) quantile(x *paneExt, i int, q float64) (float64, bool) {
	vs := x.exact[i]
	if x.spilled[i] || len(vs) == 0 {
		return nearestRank(x.sketches[i], q)
	}
	l.sorted = append(l.sorted[:0], vs...)
	slices.Sort(l.sorted)
	return l.sorted[int(rank(q, float64(len(vs))))-1], true
}

// rank is the nearest rank of quantile q among n > 0 values: ceil(q*n),
// 1-based, within [1, n] (docs/semantics.md#aggregates). q*n is rounded to 9 digits first, so
// that 0.07*100 (7.000000000000001 in floating point) is rank 7, not 8.
func rank(q, n float64) float64 {
	r := math.Ceil(math.Round(q*n*1e9) / 1e9)
	return min(max(r, 1), n)
}

// nearestRank returns the sketch's value at rank ceil(q*n) of its n sorted
// values, 1-based (docs/semantics.md#aggregates), q in (0, 1]; false if the sketch is empty.
// DDSketch's own GetValueAtQuantile interpolates rank q*(n-1) instead,
// which puts p99 of {100, 477} at 100.
func nearestRank(sk *ddsketch.DDSketch, q float64) (float64, bool) {
	n := sk.GetCount()
	if n == 0 {
		return 0, false
	}
	r := rank(q, n)
	neg := sk.GetNegativeValueStore()
	nc := neg.TotalCount()
	switch {
	case r <= nc: // the negative store orders by |v|: rank r from below is nc-r+1 there
		return -sk.Value(neg.KeyAtRank(nc - r + 0.5)), true
	case r <= nc+sk.GetZeroCount():
		return 0, true
	}
	// KeyAtRank(x) is the first bucket whose cumulative count exceeds x.
	return sk.Value(sk.GetPositiveValueStore().KeyAtRank(r - nc - sk.GetZeroCount() - 0.5)), true
}
