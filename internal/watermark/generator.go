package watermark

import "math"

// Generator tracks the watermark of one partition.
type Generator interface {
	// OnEvent observes a record's event time.
	OnEvent(ts int64)
	// OnMarker observes a punctuated watermark marker.
	OnMarker(v int64)
	// Current is the partition watermark; it never goes down.
	Current() int64
}

// State is a partition generator's state, small enough to store with the
// consumed offsets and restore after a rebalance or restart.
type State struct {
	MaxTimestamp int64 // bounded: the largest event time seen
	Watermark    int64 // the partition watermark when the snapshot was taken
}

// Bounded is the bounded-out-of-orderness generator: its watermark trails
// the largest event time seen by the allowed out-of-orderness plus 1 ms, as
// Flink's BoundedOutOfOrdernessWatermarks does. Markers are ignored.
type Bounded struct {
	ooo   int64
	maxTs int64
	floor int64 // a restored watermark the partition must not fall below
}

// NewBounded returns a Bounded generator; negative out-of-orderness counts as 0.
func NewBounded(maxOutOfOrderness int64) *Bounded {
	ooo := min(max(maxOutOfOrderness, 0), math.MaxInt64-1)
	return &Bounded{ooo: ooo, maxTs: math.MinInt64, floor: math.MinInt64}
}

// OnEvent raises the largest event time seen.
func (b *Bounded) OnEvent(ts int64) { b.maxTs = max(b.maxTs, ts) }

// OnMarker does nothing: a bounded watermark follows event times only.
func (b *Bounded) OnMarker(int64) {}

// Current is maxTs - ooo - 1, saturating at math.MinInt64 (and so
// math.MinInt64 before the first record).
func (b *Bounded) Current() int64 { return max(b.floor, subSat(b.maxTs, b.ooo+1)) }

func (b *Bounded) snapshot() State { return State{MaxTimestamp: b.maxTs, Watermark: b.Current()} }

func (b *Bounded) restore(s State) { b.maxTs, b.floor = s.MaxTimestamp, s.Watermark }

// Punctuated is the punctuated generator: marker records set the watermark,
// which never goes down. Event times are ignored.
type Punctuated struct{ wm int64 }

// NewPunctuated returns a Punctuated generator with no watermark yet.
func NewPunctuated() *Punctuated { return &Punctuated{wm: math.MinInt64} }

// OnEvent does nothing: a punctuated watermark moves only on markers.
func (p *Punctuated) OnEvent(int64) {}

// OnMarker raises the watermark to v.
func (p *Punctuated) OnMarker(v int64) { p.wm = max(p.wm, v) }

// Current is the largest marker value seen.
func (p *Punctuated) Current() int64 { return p.wm }

func (p *Punctuated) snapshot() State { return State{MaxTimestamp: math.MinInt64, Watermark: p.wm} }

func (p *Punctuated) restore(s State) { p.wm = s.Watermark }

// subSat returns a - b for b >= 0, saturating at math.MinInt64.
func subSat(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
