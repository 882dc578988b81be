package windowing

import (
	"fmt"
	"slices"
)

// CheckInvariants is Operator.check, for the property harness: it panics
// if op's structures are broken.
func CheckInvariants(op Operator) { op.check() }

// EngineState describes e's whole state, sorted, for tests that compare
// two engines' state: each key's panes (start, count, accumulators,
// revision, flags but the dirty one), sliding windows, timers, and the
// open and fired counts.
func EngineState(e *Engine) []string {
	var out []string
	var en Entry
	for ki, k := range e.keys.live() {
		for i := k.first; i != noPane; i = e.pool.hdr(i).next {
			h := e.pool.hdr(i)
			e.pool.entry(&en, SliceEntry, k, i)
			sk := make([]string, len(en.Sketches))
			for j, s := range en.Sketches {
				if s != nil {
					sk[j] = fmt.Sprint(s.GetCount(), s.GetZeroCount())
				}
			}
			out = append(out, fmt.Sprintf("pane p%d %s at %d: n=%d rev=%d flags=%b nums=%v picks=%v sets=%v sketches=%v exact=%v tops=%v",
				k.part, k.key(), h.start, h.count, h.rev, h.flags&^flagDirty, en.Nums, en.Picks, en.Sets, sk, en.Exact, en.Tops))
		}
		if !e.tumbling {
			s := e.slideOf(ki)
			for _, w := range s.wins.live() {
				out = append(out, fmt.Sprintf("window p%d %s at %d: rev=%d flags=%b", k.part, k.key(), w.start, w.rev, w.flags&^flagDirty))
			}
			var starts []int64
			for _, pi := range s.panes.live() {
				starts = append(starts, e.pool.hdr(pi).start)
			}
			out = append(out, fmt.Sprintf("panes p%d %s: %v", k.part, k.key(), starts))
		}
	}
	for _, b := range e.buckets {
		var keys []string
		for _, ki := range b.keys {
			k := e.keys.at(ki)
			keys = append(keys, fmt.Sprintf("p%d %s", k.part, k.key()))
		}
		slices.Sort(keys)
		out = append(out, fmt.Sprintf("timer %d: %v", b.start, keys))
	}
	slices.Sort(out)
	return append(out, fmt.Sprintf("open %d, fired %d, timers %d", e.open, e.fired, len(e.buckets)))
}

// SweepEvery makes e sweep the windows Updates take away every n of them.
func SweepEvery(e *Engine, n int) { e.sweepAt = n }

// EarlyNotes returns how many early-firing notes op keeps.
func EarlyNotes(op Operator) int {
	switch o := op.(type) {
	case *Engine:
		return len(o.early.changed)
	case *Sessions:
		return len(o.early.changed)
	}
	return 0
}

// Timers returns how many timer entries op keeps: sessions' two queues,
// count windows' timeouts.
func Timers(op Operator) int {
	switch o := op.(type) {
	case *Sessions:
		return o.fire.n + o.clean.n
	case *Counts:
		return len(o.due.items)
	}
	return 0
}
