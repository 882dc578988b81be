package pipeline

import (
	"fmt"
	"math"

	"aggregator/internal/windowing"
)

// operators is a Processor's window state in one of two shapes. One
// operator for all the partitions: their windows follow one watermark,
// the merged one (scope global, and replay's one state per group key).
// Or one operator per partition, made at Assign and dropped at Revoke:
// each partition's windows follow that partition's own watermark
// (by_key with watermark.scope partition, and stage 2 of the repartition
// stage, where a repartition partition's watermark is the minimum over
// its own table of sources), so what a partition emits does not depend
// on which other partitions share its instance.
type operators struct {
	spec  windowing.Spec
	sink  windowing.Sink
	track bool // every operator notes its changes (Mode.Checkpointed)
	// perPartition is the second shape: per holds the operators by
	// partition id (nil: not assigned), one is unused.
	perPartition bool
	one          slot
	per          []slot
}

// slot is one operator and the session merges already taken from it.
type slot struct {
	op     windowing.Operator
	merges int64
}

// newOperators returns the state of no partition; with the one shape its
// operator is made at once, so a bad spec fails here.
func newOperators(spec windowing.Spec, sink windowing.Sink, perPartition, track bool) (operators, error) {
	o := operators{spec: spec, sink: sink, perPartition: perPartition, track: track}
	if _, err := windowing.New(spec, sink); err != nil { // checks the spec in both shapes
		return o, err
	}
	if !perPartition {
		o.one.op = o.make()
	}
	return o, nil
}

// make returns a fresh operator of the spec New checked.
func (o *operators) make() windowing.Operator {
	op, err := windowing.New(o.spec, o.sink)
	if err != nil { // the spec was good when newOperators checked it
		panic(fmt.Sprintf("pipeline: %v", err))
	}
	if o.track {
		op.TrackChanges()
	}
	return op
}

// reset drops all state: a fresh operator, or none per partition (Assign
// makes them again).
func (o *operators) reset() {
	if o.perPartition {
		clear(o.per)
		o.per = o.per[:0]
		return
	}
	o.one = slot{op: o.make()}
}

// at returns the operator partition p's records go to, making p's first
// in the per-partition shape if it has none (a record of a partition
// Process was never told of, as the generators take it).
func (o *operators) at(p int32) windowing.Operator {
	if !o.perPartition {
		return o.one.op
	}
	for int(p) >= len(o.per) {
		o.per = append(o.per, slot{})
	}
	if o.per[p].op == nil {
		o.per[p] = slot{op: o.make()}
	}
	return o.per[p].op
}

// of returns partition p's operator, nil if it has none (the
// per-partition shape: revoked, or never assigned).
func (o *operators) of(p int32) windowing.Operator {
	if !o.perPartition {
		return o.one.op
	}
	if int(p) < len(o.per) {
		return o.per[p].op
	}
	return nil
}

// start gives partition p fresh state in the per-partition shape: its
// changelog restores it; the one operator keeps what it has.
func (o *operators) start(p int32) {
	if !o.perPartition {
		return
	}
	for int(p) >= len(o.per) {
		o.per = append(o.per, slot{})
	}
	o.per[p] = slot{op: o.make()}
}

// remove drops a revoked partition's state without firing.
func (o *operators) remove(p int32) {
	if !o.perPartition {
		o.one.op.RemovePartition(p)
		return
	}
	if int(p) < len(o.per) {
		o.per[p] = slot{}
	}
}

// each calls fn with every operator: the one, or each partition's in
// ascending order of partition.
func (o *operators) each(fn func(windowing.Operator)) {
	if !o.perPartition {
		fn(o.one.op)
		return
	}
	for _, s := range o.per {
		if s.op != nil {
			fn(s.op)
		}
	}
}

// watermark is the watermark the windows follow: the one operator's, or
// the lowest of the partitions' (math.MinInt64 with none).
func (o *operators) watermark() int64 {
	if !o.perPartition {
		return o.one.op.Watermark()
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
	take := func(s *slot) int64 {
		n := s.op.Stats().Merges - s.merges
		s.merges += n
		return n
	}
	if !o.perPartition {
		return take(&o.one)
	}
	var n int64
	for i := range o.per {
		if o.per[i].op != nil {
			n += take(&o.per[i])
		}
	}
	return n
}
