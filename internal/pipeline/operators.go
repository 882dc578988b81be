package pipeline

import (
	"fmt"
	"math"

	"aggregator/internal/windowing"
)

// operators is a Processor's window state: for each state partition, the
// list of window operators that hold its windows, one per config
// generation (docs/changing-config.md), the current one first. It comes in one of the
// three shapes of lists:
//
//   - oneList: one list for all the partitions, following the merged
//     watermark: replay's one state per group key.
//   - ownWatermark: a list per partition, made at Assign and dropped at
//     Revoke, each following that partition's own watermark (by_key with
//     watermark.scope partition, and stage 2 of the repartition stage,
//     where a repartition partition's watermark is the minimum over its
//     own table of sources), so what a partition emits does not depend
//     on which other partitions share its instance.
//   - mergedWatermark (by_key with watermark.scope global, peers
//     included): a list per partition, as ownWatermark, each following
//     the merged watermark. A partition's list is its own so that its
//     restore can be built apart, on any goroutine, while the others'
//     records are applied (docs/design.md#restore), and a partition that
//     cut over does so at its own T.
type operators struct {
	spec  windowing.Spec
	sink  windowing.Sink
	track bool // every operator notes its changes (Mode.Checkpointed)
	// ownWm: each list follows its partition's own watermark
	// (ownWatermark); merged: each follows the merged watermark wm, the
	// last one handed to them (or lowered to by a restore behind it), and
	// a list made is advanced to it at once (mergedWatermark). Neither:
	// shared is the one list (oneList), and cur its current operator
	// (its first), which every record goes to: read without the list.
	ownWm, merged bool
	wm            int64
	per           []list // a list per partition (nil: not assigned); unused with oneList
	shared        list
	cur           windowing.Operator
	// mergedWatermark hands a rise of wm only to the lists it makes due
	// (raise): given is the watermark each partition's list was last
	// given, and due is at or below the lowest Due of every list, so a
	// rise below it goes to none; a list takes wm when it is next used
	// (catchUp), by StartAt, which is Advance below its Due. With many
	// partitions the merged watermark rises at nearly every record.
	given []int64
	due   int64
}

// lists is the shape of a Processor's operator lists, given once.
type lists uint8

const (
	oneList lists = iota
	ownWatermark
	mergedWatermark
)

// list is the operators of one state partition (or, shared, of every
// one), the current one first.
type list []slot

// slot is one operator and the session merges already taken from it.
type slot struct {
	op     windowing.Operator
	merges int64
}

// newOperators returns the state of no partition; the shared list is
// made at once, so a bad spec fails here.
func newOperators(spec windowing.Spec, sink windowing.Sink, shape lists, track bool) (operators, error) {
	o := operators{spec: spec, sink: sink, ownWm: shape == ownWatermark, merged: shape == mergedWatermark, wm: math.MinInt64, track: track, due: math.MaxInt64}
	if _, err := windowing.New(spec, sink); err != nil { // checks the spec in every shape
		return o, err
	}
	if o.one() {
		o.setShared(o.make())
	}
	return o, nil
}

// one reports whether the state is one list for every partition
// (oneList).
func (o *operators) one() bool { return !o.ownWm && !o.merged }

// fresh returns a new operator of the spec New checked, noting its
// changes if the state is checkpointed. It touches nothing of o but what
// newOperators set (safe on any goroutine: a restore's build).
func (o *operators) fresh() windowing.Operator {
	op, err := windowing.New(o.spec, o.sink)
	if err != nil { // the spec was good when newOperators checked it
		panic(fmt.Sprintf("pipeline: %v", err))
	}
	if o.track {
		op.TrackChanges()
	}
	return op
}

// make returns a fresh list of the spec New checked: one operator.
func (o *operators) make() list {
	op := o.fresh()
	o.follow(op)
	return list{{op: op}}
}

// follow brings a new operator to the merged watermark the lists follow
// (mergedWatermark): a partition's list, made at its assignment or its
// restore, judges its records by the watermark the others' are judged
// by. It fires nothing: the operator has fired nothing yet (StartAt).
func (o *operators) follow(op windowing.Operator) {
	if o.merged {
		op.StartAt(o.wm)
	}
}

// advanceMerged hands the merged watermark wm to every list
// (mergedWatermark): if it makes any due, to every list in ascending
// order of partition, each the oldest generation first; else to each
// when next used. It costs one compare unless wm went up, and two
// unless it makes a list due.
func (o *operators) advanceMerged(wm int64) {
	if wm > o.wm {
		o.wm = wm
		if wm >= o.due {
			o.raise()
		}
	}
}

// raise advances every list to wm, and notes their Due anew.
func (o *operators) raise() {
	o.due = math.MaxInt64
	for p, l := range o.per {
		for i := len(l) - 1; i >= 0; i-- {
			l[i].op.Advance(o.wm)
			o.due = min(o.due, l[i].op.Due())
		}
		o.given[p] = o.wm
	}
}

// catchUp gives partition p's list the merged watermark (mergedWatermark)
// before it is used: below every list's Due, StartAt is what Advance
// would have done.
func (o *operators) catchUp(p int32) {
	if o.given[p] < o.wm {
		for _, s := range o.per[p] {
			s.op.StartAt(o.wm)
		}
		o.given[p] = o.wm
	}
}

// sync catches every list up (mergedWatermark).
func (o *operators) sync() {
	if o.merged {
		for p, l := range o.per {
			if l != nil {
				o.catchUp(int32(p))
			}
		}
	}
}

// added notes what partition p's list may have made due since the merged
// watermark was last handed to it: a record, a restore, a cut-over
// (mergedWatermark).
func (o *operators) added(p int32) {
	if o.merged {
		for _, s := range o.per[p] {
			o.due = min(o.due, s.op.Due())
		}
	}
}

// lower takes the merged watermark the lists follow back to wm, for a
// partition restored behind it (mergedWatermark), once each operator
// was rewound to it (the other partitions' records judged as before, by
// their floors): each list's Due may be lower now.
func (o *operators) lower(wm int64) {
	o.wm = min(o.wm, wm)
	for p, l := range o.per {
		if l != nil {
			o.given[p] = o.wm
		}
	}
	o.redue()
}

// redue notes every list's Due anew (mergedWatermark), after what may
// have moved them: a rewind, processing-time firings.
func (o *operators) redue() {
	if !o.merged {
		return
	}
	o.due = math.MaxInt64
	for p, l := range o.per {
		if l != nil {
			o.added(int32(p))
		}
	}
}

// reset drops all state: a fresh shared list, or none per partition
// (Assign makes them again).
func (o *operators) reset() {
	clear(o.per)
	o.per, o.given, o.wm, o.due = o.per[:0], o.given[:0], math.MinInt64, math.MaxInt64
	if o.one() {
		o.setShared(o.make())
	}
}

// setShared makes l the shared list.
func (o *operators) setShared(l list) { o.shared, o.cur = l, l[0].op }

// at returns the current operator of the shared list (oneList), or
// partition p's, making p's list first if it has none (a record of a
// partition Process was never told of, as the generators take it).
func (o *operators) at(p int32) windowing.Operator {
	if o.one() {
		return o.cur
	}
	o.grow(p)
	if o.per[p] == nil {
		o.set(p, o.make())
	}
	if o.merged {
		o.catchUp(p)
	}
	return o.per[p][0].op
}

// of returns partition p's list, or the shared one (oneList); nil if it
// has none (revoked, or never assigned).
func (o *operators) of(p int32) list {
	if o.one() {
		return o.shared
	}
	if int(p) < len(o.per) && o.per[p] != nil {
		if o.merged {
			o.catchUp(p)
		}
		return o.per[p]
	}
	return nil
}

// current is the current operator of partition p's list (making it
// first if it has none, as at).
func (o *operators) current(p int32) windowing.Operator {
	if l := o.of(p); len(l) > 0 {
		return l[0].op
	}
	return o.at(p)
}

// advance hands wm to every operator of partition p's list (with the
// shared list: every partition's in it), the oldest generation first:
// its windows, which start before the next one's cut-over, fire before
// theirs at the same watermark.
func (o *operators) advance(p int32, wm int64) {
	l := o.of(p)
	for i := len(l) - 1; i >= 0; i-- {
		l[i].op.Advance(wm)
	}
}

// start gives partition p fresh state: a list of its own, or the shared
// list's (oneList), whose changelog restores it.
func (o *operators) start(p int32) {
	if o.one() {
		return
	}
	o.grow(p)
	o.set(p, o.make())
}

// grow makes room for partition p in per.
func (o *operators) grow(p int32) {
	for int(p) >= len(o.per) {
		o.per = append(o.per, nil)
		o.given = append(o.given, math.MinInt64)
	}
}

// set makes l partition p's list: its generations' operators, the
// newest first, at the merged watermark with mergedWatermark (made, or
// caught up, since it last rose); the shared list keeps what it has
// (oneList).
func (o *operators) set(p int32, l list) {
	if o.one() {
		return
	}
	o.grow(p)
	o.per[p], o.given[p] = l, o.wm
	o.added(p)
}

// remove drops a revoked partition's state without firing.
func (o *operators) remove(p int32) {
	if o.one() {
		for _, s := range o.shared {
			s.op.RemovePartition(p)
		}
		return
	}
	if int(p) < len(o.per) {
		o.per[p] = nil
	}
}

// each calls fn with every operator: the shared list's, then each
// partition's own in ascending order of partition (each caught up).
func (o *operators) each(fn func(windowing.Operator)) {
	o.sync()
	for _, s := range o.shared {
		fn(s.op)
	}
	for _, l := range o.per {
		for i := len(l) - 1; i >= 0; i-- { // the oldest generation first, as advance
			fn(l[i].op)
		}
	}
}

// watermark is the watermark the windows follow: the merged one (the
// shared list's current operator's, or the one the lists follow), or the
// lowest of the partitions' own (math.MinInt64 with none).
func (o *operators) watermark() int64 {
	switch {
	case o.one():
		return o.cur.Watermark()
	case o.merged:
		return o.wm
	}
	low, any := int64(math.MaxInt64), false
	o.each(func(op windowing.Operator) { low, any = min(low, op.Watermark()), true })
	if !any {
		return math.MinInt64
	}
	return low
}

// openWindows counts open (key, window) pairs over every operator.
func (o *operators) openWindows() int {
	n := 0
	o.each(func(op windowing.Operator) { n += op.OpenWindows() })
	return n
}

// flush advances every operator to the end of time.
func (o *operators) flush() {
	o.each(func(op windowing.Operator) { op.Advance(math.MaxInt64) })
	if o.merged {
		o.wm = math.MaxInt64
		for p := range o.given {
			o.given[p] = o.wm
		}
	}
}

// takeMerges returns how many records bridged sessions since the last
// call, over every operator (0 for other windows).
func (o *operators) takeMerges() int64 {
	take := func(l list) (n int64) {
		for i := range l {
			d := l[i].op.Stats().Merges - l[i].merges
			l[i].merges += d
			n += d
		}
		return n
	}
	n := take(o.shared)
	for _, l := range o.per {
		n += take(l)
	}
	return n
}
