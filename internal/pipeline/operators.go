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
//     included): one shared operator, of the config's generation, for
//     the partitions that hold that generation alone and never cut over
//     to it, as in the release before generations; and a list of its own
//     for a partition that holds another generation or several (from the
//     restore that finds or starts them until the partition is revoked
//     or restored again), or the config's alone since a cut-over, so that
//     it cuts over at its own T and makes no window before it. Every one
//     follows the merged watermark.
type operators struct {
	spec  windowing.Spec
	sink  windowing.Sink
	track bool // every operator notes its changes (Mode.Checkpointed)
	// perPartition: per holds every partition's list (nil: not
	// assigned), shared is unused (ownWatermark). mixed: the shared
	// list holds the partitions whose per list is nil, per those with a
	// list of their own, owned of them (mergedWatermark); every list
	// follows the merged watermark wm, the last one handed to them (or
	// lowered to by a restore behind it), and a list made is advanced to
	// it at once.
	perPartition, mixed bool
	wm                  int64
	shared              list
	per                 []list
	owned               int
	// cur is the shared list's current operator (its first), which
	// every record of the shared list goes to: read without the list.
	cur windowing.Operator
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
	o := operators{spec: spec, sink: sink, perPartition: shape == ownWatermark, mixed: shape == mergedWatermark, wm: math.MinInt64, track: track}
	op, err := windowing.New(spec, sink) // checks the spec in every shape
	if err != nil {
		return o, err
	}
	if !o.perPartition {
		o.setShared(o.list(op))
	}
	return o, nil
}

// make returns a fresh list of the spec New checked: one operator.
func (o *operators) make() list {
	op, err := windowing.New(o.spec, o.sink)
	if err != nil { // the spec was good when newOperators checked it
		panic(fmt.Sprintf("pipeline: %v", err))
	}
	return o.list(op)
}

// list returns a list of op, noting its changes if the state is
// checkpointed.
func (o *operators) list(op windowing.Operator) list {
	if o.track {
		op.TrackChanges()
	}
	o.follow(op)
	return list{{op: op}}
}

// follow brings a new operator to the merged watermark the lists follow
// (mergedWatermark): a partition's own list, made at its restore,
// judges its records by the watermark the others' are judged by.
func (o *operators) follow(op windowing.Operator) {
	if o.mixed {
		op.Advance(o.wm)
	}
}

// advanceMerged hands the merged watermark wm to every list
// (mergedWatermark): the shared one, then the partitions' own in
// ascending order of partition, each the oldest generation first. It
// costs one compare unless wm went up.
func (o *operators) advanceMerged(wm int64) {
	if wm > o.wm {
		o.raise(wm)
	}
}

func (o *operators) raise(wm int64) {
	o.wm = wm
	o.cur.Advance(wm)
	if o.owned == 0 {
		return
	}
	for _, l := range o.per {
		for i := len(l) - 1; i >= 0; i-- {
			l[i].op.Advance(wm)
		}
	}
}

// lower takes the merged watermark the lists follow back to wm, for a
// partition restored behind it (mergedWatermark), once each operator
// was rewound to it (the other partitions' records judged as before, by
// their floors).
func (o *operators) lower(wm int64) { o.wm = min(o.wm, wm) }

// reset drops all state: a fresh shared list, or none per partition
// (Assign makes them again).
func (o *operators) reset() {
	clear(o.per)
	o.per, o.owned, o.wm = o.per[:0], 0, math.MinInt64
	if !o.perPartition {
		o.setShared(o.make())
	}
}

// setShared makes l the shared list.
func (o *operators) setShared(l list) { o.shared, o.cur = l, l[0].op }

// at returns the current operator of the shared list (oneList, and
// mergedWatermark, whose partitions with a list of their own take
// processGenerations and of), or partition p's (ownWatermark), making
// p's list first if it has none (a record of a partition Process was
// never told of, as the generators take it).
func (o *operators) at(p int32) windowing.Operator {
	if !o.perPartition {
		return o.cur
	}
	for int(p) >= len(o.per) {
		o.per = append(o.per, nil)
	}
	if o.per[p] == nil {
		o.per[p] = o.make()
	}
	return o.per[p][0].op
}

// of returns partition p's list: its own, or the shared one; nil if it
// has none (ownWatermark: revoked, or never assigned).
func (o *operators) of(p int32) list {
	if int(p) < len(o.per) && o.per[p] != nil {
		return o.per[p]
	}
	if !o.perPartition {
		return o.shared
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

// owns reports whether partition p has a list of its own beside the
// shared one (mergedWatermark).
func (o *operators) owns(p int32) bool {
	return o.mixed && int(p) < len(o.per) && o.per[p] != nil
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

// start gives partition p fresh state: a list of its own
// (ownWatermark), or the shared list's (the others), whose changelog
// restores it.
func (o *operators) start(p int32) {
	if !o.perPartition {
		o.drop(p)
		return
	}
	o.grow(p)
	o.per[p] = o.make()
}

// grow makes room for partition p in per.
func (o *operators) grow(p int32) {
	for int(p) >= len(o.per) {
		o.per = append(o.per, nil)
	}
}

// drop forgets partition p's list of its own (mergedWatermark).
func (o *operators) drop(p int32) {
	if int(p) < len(o.per) && o.per[p] != nil {
		o.per[p] = nil
		o.owned--
	}
}

// set makes l partition p's list: its generations' operators, the
// newest first (ownWatermark), or its own beside the shared one
// (mergedWatermark); the shared list keeps what it has (oneList).
func (o *operators) set(p int32, l list) {
	if !o.perPartition && !o.mixed {
		return
	}
	o.grow(p)
	if o.per[p] == nil && o.mixed {
		o.owned++
	}
	o.per[p] = l
}

// remove drops a revoked partition's state without firing.
func (o *operators) remove(p int32) {
	if !o.perPartition {
		for _, s := range o.shared {
			s.op.RemovePartition(p)
		}
		o.drop(p)
		return
	}
	if int(p) < len(o.per) {
		o.per[p] = nil
	}
}

// each calls fn with every operator: the shared list's, then each
// partition's own in ascending order of partition.
func (o *operators) each(fn func(windowing.Operator)) {
	for _, s := range o.shared {
		fn(s.op)
	}
	for _, l := range o.per {
		for i := len(l) - 1; i >= 0; i-- { // the oldest generation first, as advance
			fn(l[i].op)
		}
	}
}

// watermark is the watermark the windows follow: the shared list's
// current operator's (the merged one), or the lowest of the partitions'
// own (math.MinInt64 with none).
func (o *operators) watermark() int64 {
	if !o.perPartition {
		return o.cur.Watermark()
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
func (o *operators) flush() { o.each(func(op windowing.Operator) { op.Advance(math.MaxInt64) }) }

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
