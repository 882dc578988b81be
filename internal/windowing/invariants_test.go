package windowing

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/record"
)

type dropSink struct{}

func (dropSink) Emit(*Result) {}

// feed adds records of 4 keys on 2 partitions at times 0, 3, 6, ... and
// advances the watermark behind them, so that some windows fire and some
// stay open.
func feed(t *testing.T, op Operator, n int) {
	t.Helper()
	for i := range n {
		v := record.Number(float64(i % 4))
		rec := &record.Record{Partition: int32(i % 2), Time: int64(3 * i), Key: `{"k":` + v.Raw + `}`, KeyFields: []record.Value{v},
			Values: []record.Value{record.Number(1), {}}}
		if o := op.Add(rec); o.Kind != Aggregated {
			t.Fatalf("Add(%+v) = %+v", rec, o)
		}
		if i%5 == 4 {
			op.Advance(int64(3*i - 20))
		}
	}
}

// TestCheckFindsBrokenState: every operator's check passes on the state a
// stream leaves, and panics with an invariant message once one part of
// that state is broken: the key slab, the open count, and each operator's
// own per-key state and timers.
func TestCheckFindsBrokenState(t *testing.T) {
	aggs := []Aggregate{{Fn: FnSum}, {Fn: FnCount}}
	specs := map[string]Spec{
		"tumbling":         {Kind: KindTumbling, Size: 10, Lateness: 5, Aggregates: aggs},
		"sliding":          {Kind: KindSliding, Size: 20, Slide: 5, Lateness: 5, Aggregates: aggs},
		"session":          {Kind: KindSession, Gap: 7, Lateness: 5, Aggregates: aggs},
		"count":            {Kind: KindCount, Size: 3, Timeout: 50, Aggregates: aggs},
		"count with slide": {Kind: KindCount, Size: 4, Slide: 2, Aggregates: aggs},
	}
	type breaker struct {
		name  string
		kinds []string // the specs it applies to; nil for all
		brk   func(op Operator)
	}
	live := func(op Operator) int32 { // a live key's slot
		var ki int32 = -1
		each := func(i int32, _ *keyState) bool { ki = i; return false }
		switch o := op.(type) {
		case *Engine:
			o.keys.live()(each)
		case *Sessions:
			o.keys.live()(each)
		case *Counts:
			o.keys.live()(each)
		}
		return ki
	}
	breakers := []breaker{
		{"a live slot on the free list", nil, func(op Operator) {
			ki := live(op)
			switch o := op.(type) {
			case *Engine:
				o.keys.free = append(o.keys.free, ki)
			case *Sessions:
				o.keys.free = append(o.keys.free, ki)
			case *Counts:
				o.keys.free = append(o.keys.free, ki)
			}
		}},
		{"open count", nil, func(op Operator) {
			switch o := op.(type) {
			case *Engine:
				o.open++
			case *Sessions:
				o.open++
			case *Counts:
				o.open++
			}
		}},
		{"a session's timer entry lost", []string{"session"}, func(op Operator) {
			op.(*Sessions).keys.ext(live(op)).timers++
		}},
		{"a count window's records miscounted", []string{"count", "count with slide"}, func(op Operator) {
			c := op.(*Counts)
			for ki := range c.keys.live() {
				if k := c.keys.ext(ki); len(k.slices) > 0 {
					k.seen++
					return
				}
			}
		}},
		{"a count window's timeout lost", []string{"count"}, func(op Operator) { op.(*Counts).due.items = nil }},
		{"a count key flagged changed but not listed", []string{"count", "count with slide"}, func(op Operator) {
			c := op.(*Counts)
			c.Changes(func(*Entry) {}) // every key handed out: none flagged
			for ki := range c.keys.live() {
				if k := c.keys.ext(ki); !k.dirty {
					k.dirty = true
					return
				}
			}
		}},
	}
	for name, spec := range specs {
		for _, b := range breakers {
			if b.kinds != nil && !slices.Contains(b.kinds, name) {
				continue
			}
			t.Run(name+"/"+b.name, func(t *testing.T) {
				op, err := New(spec, dropSink{})
				if err != nil {
					t.Fatal(err)
				}
				op.TrackChanges()
				feed(t, op, 40)
				op.check() // sound
				if live(op) < 0 {
					t.Fatal("no live key to break")
				}
				b.brk(op)
				defer func() {
					if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "invariant") {
						t.Fatalf("check after breaking %s: panic %v, want an invariant's", b.name, r)
					}
				}()
				op.check()
			})
		}
	}
}
