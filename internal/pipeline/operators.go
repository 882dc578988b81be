package pipeline

import (
	"fmt"
	"math"

	"aggregator/internal/windowing"
)

// operators is a Processor's window state: for each state partition, the
// list of window operators that hold its windows, one per config
// generation (SPEC §11), the current one first. The lists come in one of
// the three shapes of lists. One list for all the partitions (oneList):
// replay's one state per group key. Or a list per partition, made at
// Assign and dropped at Revoke, so that each partition has its own
// generations and its own cut-over, following either that partition's
// own watermark (ownWatermark: by_key with watermark.scope partition,
// and stage 2 of the repartition stage, where a repartition partition's
// watermark is the minimum over its own table of sources), so what a
// partition emits does not depend on which other partitions share its
// instance; or the merged watermark, every list the same one
// (mergedWatermark: by_key with watermark.scope global, peers included).
type operators struct {
	spec  windowing.Spec
	sink  windowing.Sink
	track bool // every operator notes its changes (Mode.Checkpointed)
	// perPartition: per holds the lists by partition id (nil: not
	// assigned), shared is unused. followMerged: they follow the merged
	// watermark, wm, the last one handed to them (or lowered to by a
	// restore behind it); a list made is advanced to it at once.
	perPartition, followMerged bool
	wm                         int64
	shared                     list
	per                        []list
	// cur is the shared list's current operator (its first), which
	// every record of the shared shape goes to: read without the list.
	cur windowing.Operator
}

// lists is the shape of a Processor's operator lists, given once.
type lists uint8

const (
	oneList         lists = iota // one list for every partition, following the merged watermark
	ownWatermark                 // a list per partition, following the partition's own watermark
	mergedWatermark              // a list per partition, every one following the merged watermark
)

// list is the operators of one state partition (or, shared, of every
// one), the current one first.
type list []slot

// slot is one operator and the session merges already taken from it.
type slot struct {
	op     windowing.Operator
	merges int64
}

// newOperators returns the state of no partition; with the shared shape
// its list is made at once, so a bad spec fails here.
func newOperators(spec windowing.Spec, sink windowing.Sink, shape lists, track bool) (operators, error) {
	o := operators{spec: spec, sink: sink, perPartition: shape != oneList, followMerged: shape == mergedWatermark, wm: math.MinInt64, track: track}
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

// follow brings a new operator of a list to the merged watermark the
// lists follow (mergedWatermark): a partition assigned or restored, or a
// new generation, judges its records by the watermark the others' are,
// as one operator for every partition did.
func (o *operators) follow(op windowing.Operator) {
	if o.followMerged {
		op.Advance(o.wm)
	}
}

// advanceMerged hands the merged watermark wm to every list
// (mergedWatermark), in ascending order of partition, each the oldest
// generation first; it costs one compare unless wm went up.
func (o *operators) advanceMerged(wm int64) {
	if wm > o.wm {
		o.raise(wm)
	}
}

func (o *operators) raise(wm int64) {
	o.wm = wm
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
	if o.perPartition {
		clear(o.per)
		o.per = o.per[:0]
		o.wm = math.MinInt64
		return
	}
	o.setShared(o.make())
}

// setShared makes l the shared list.
func (o *operators) setShared(l list) { o.shared, o.cur = l, l[0].op }

// at returns the current operator of partition p, which its records go
// to, making p's list first in the per-partition shape if it has none (a
// record of a partition Process was never told of, as the generators take
// it).
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

// of returns partition p's list, nil if it has none (the per-partition
// shape: revoked, or never assigned).
func (o *operators) of(p int32) list {
	if !o.perPartition {
		return o.shared
	}
	if int(p) < len(o.per) {
		return o.per[p]
	}
	return nil
}

// advance hands wm to every operator of partition p's list (with the
// shared shape: every partition's), the oldest generation first: its
// windows, which start before the next one's cut-over, fire before
// theirs at the same watermark.
func (o *operators) advance(p int32, wm int64) {
	l := o.of(p)
	for i := len(l) - 1; i >= 0; i-- {
		l[i].op.Advance(wm)
	}
}

// start gives partition p fresh state in the per-partition shape: its
// changelog restores it; the shared list keeps what it has.
func (o *operators) start(p int32) {
	if !o.perPartition {
		return
	}
	for int(p) >= len(o.per) {
		o.per = append(o.per, nil)
	}
	o.per[p] = o.make()
}

// set makes l partition p's list (the per-partition shape): its
// generations' operators, the newest first.
func (o *operators) set(p int32, l list) {
	if !o.perPartition {
		return
	}
	for int(p) >= len(o.per) {
		o.per = append(o.per, nil)
	}
	o.per[p] = l
}

// remove drops a revoked partition's state without firing.
func (o *operators) remove(p int32) {
	if !o.perPartition {
		for _, s := range o.shared {
			s.op.RemovePartition(p)
		}
		return
	}
	if int(p) < len(o.per) {
		o.per[p] = nil
	}
}

// each calls fn with every operator: the shared list's, or each
// partition's in ascending order of partition.
func (o *operators) each(fn func(windowing.Operator)) {
	if !o.perPartition {
		for _, s := range o.shared {
			fn(s.op)
		}
		return
	}
	for _, l := range o.per {
		for i := len(l) - 1; i >= 0; i-- { // the oldest generation first, as advance
			fn(l[i].op)
		}
	}
}

// watermark is the watermark the windows follow: the shared list's
// current operator's, the merged one the lists follow, or the lowest of
// the partitions' own (math.MinInt64 with none).
func (o *operators) watermark() int64 {
	switch {
	case !o.perPartition:
		return o.cur.Watermark()
	case o.followMerged:
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
	if !o.perPartition {
		return take(o.shared)
	}
	var n int64
	for _, l := range o.per {
		n += take(l)
	}
	return n
}
