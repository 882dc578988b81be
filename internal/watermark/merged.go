package watermark

import (
	"cmp"
	"math"
	"slices"

	"aggregator/internal/config"
)

// Merged holds one generator per assigned partition and the merged
// watermark W (docs/semantics.md#watermarks): the minimum over partitions that are not idle,
// never going down.
type Merged struct {
	punctuated  bool
	ooo         int64 // max out-of-orderness, ms
	idleTimeout int64 // ms; 0 = partitions never go idle
	idleAdvance bool
	parts       []*partition // sorted by id; few enough that a scan beats a map
	peers       *peers       // the group's other partitions (SharePeers); nil: W is over parts alone
	w           int64
}

// partition is what Merged knows about one assigned partition.
type partition struct {
	id       int32
	gen      stateful
	caughtUp bool  // the consumer's position is at the log end
	active   int64 // wall clock of the last record, assignment or catch-up
	idle     bool
}

// stateful is implemented by the generators this package builds.
type stateful interface {
	Generator
	snapshot() State
	restore(State)
}

// NewMerged returns a Merged with no partitions and W = math.MinInt64.
func NewMerged(cfg config.Watermark) *Merged {
	return &Merged{
		punctuated:  cfg.Punctuated(),
		ooo:         max(cfg.MaxOutOfOrderness.Milliseconds(), 0),
		idleTimeout: max(cfg.IdleTimeout.Milliseconds(), 0),
		idleAdvance: cfg.IdleAdvance,
		w:           math.MinInt64,
	}
}

func (m *Merged) newGenerator() stateful {
	if m.punctuated {
		return NewPunctuated()
	}
	return NewBounded(m.ooo)
}

// Assign adds partition p with a fresh generator (watermark minus
// infinity), not caught up and not idle. Assigning a partition that is
// already assigned keeps its state.
func (m *Merged) Assign(p int32, now int64) {
	m.partition(p, now)
}

// partition returns p's state, assigning p first if it is unknown.
func (m *Merged) partition(p int32, now int64) *partition {
	i, ok := m.find(p)
	if !ok {
		m.parts = slices.Insert(m.parts, i, &partition{id: p, gen: m.newGenerator(), active: now})
		m.peersChanged()
	}
	return m.parts[i]
}

// find returns where p is or would be in m.parts, and whether it is there.
func (m *Merged) find(p int32) (int, bool) {
	return slices.BinarySearchFunc(m.parts, p, func(part *partition, p int32) int { return cmp.Compare(part.id, p) })
}

// Revoke forgets partition p. W may rise, since p no longer holds it back.
func (m *Merged) Revoke(p int32) {
	if i, ok := m.find(p); ok {
		m.parts = slices.Delete(m.parts, i, i+1)
		m.peersChanged()
		m.recompute()
	}
}

// peersChanged notes that the partitions that count as peers changed.
func (m *Merged) peersChanged() {
	if m.peers != nil {
		m.peers.stale = true
	}
}

// OnEvent feeds a record's event time to p's generator and makes p active.
func (m *Merged) OnEvent(p int32, ts, now int64) {
	part := m.partition(p, now)
	before := part.gen.Current()
	part.gen.OnEvent(ts)
	m.touch(part, before, now)
}

// OnMarker feeds a marker's value to p's generator and makes p active.
func (m *Merged) OnMarker(p int32, v, now int64) {
	part := m.partition(p, now)
	before := part.gen.Current()
	part.gen.OnMarker(v)
	m.touch(part, before, now)
}

// touch records activity on part at now and recomputes W when it can
// have changed: part was idle, or its watermark rose from before while it
// may have been the minimum (before <= W; otherwise another partition is).
func (m *Merged) touch(part *partition, before, now int64) {
	part.active = max(part.active, now)
	wasIdle := part.idle
	part.idle = false
	if wasIdle || part.gen.Current() != before && before <= m.w {
		m.recompute()
	}
}

// SetCaughtUp records whether p's consumed position is at the log end. Only
// a change to caught up restarts p's idle timer, so the consumer may report
// it after every fetch. A partition that is not caught up is never idle.
func (m *Merged) SetCaughtUp(p int32, caughtUp bool, now int64) {
	part := m.partition(p, now)
	if caughtUp && !part.caughtUp {
		part.active = max(part.active, now)
	}
	part.caughtUp = caughtUp
	if !caughtUp && part.idle {
		part.idle = false
		m.recompute()
	}
}

// Tick marks as idle every caught-up partition without activity for
// idle_timeout, recomputes W, and when every partition is idle (or none is
// assigned; with SharePeers, every partition of the group, the published
// ones by their last value) applies idle_advance: W = max(W, now - max_out_of_orderness -
// idle_timeout).
func (m *Merged) Tick(now int64) {
	for _, part := range m.parts {
		part.idle = m.isIdle(part, now)
	}
	if m.recompute() || !m.idleAdvance || m.idleTimeout == 0 {
		return
	}
	m.w = max(m.w, idleWatermark(now, m.ooo, m.idleTimeout))
}

// IdleWatermark is where idle_advance takes the watermark at wall clock
// now (docs/semantics.md#watermarks): now - max_out_of_orderness - idle_timeout, saturating.
func IdleWatermark(cfg config.Watermark, now int64) int64 {
	return idleWatermark(now, max(cfg.MaxOutOfOrderness.Milliseconds(), 0), max(cfg.IdleTimeout.Milliseconds(), 0))
}

// idleWatermark is IdleWatermark with the durations in ms.
func idleWatermark(now, ooo, idleTimeout int64) int64 { return subSat(subSat(now, ooo), idleTimeout) }

// isIdle reports whether part counts as idle at now.
func (m *Merged) isIdle(part *partition, now int64) bool {
	return m.idleTimeout > 0 && part.caughtUp && now-part.active >= m.idleTimeout
}

// recompute raises W to the minimum over active partitions (the group's,
// with SharePeers) and reports whether there was any.
func (m *Merged) recompute() bool {
	low, any := int64(math.MaxInt64), false
	for _, part := range m.parts {
		if !part.idle {
			low, any = min(low, part.gen.Current()), true
		}
	}
	if m.peers != nil {
		if pl, active := m.peerLow(); active {
			low, any = min(low, pl), true
		}
	}
	if any {
		m.w = max(m.w, low)
	}
	return any
}

// Lower lowers W to wm if it is above: a partition restored with that
// watermark joined (docs/scaling.md#the-merged-watermark-across-a-rebalance: its watermark moves with it). W rises again
// as the partitions' watermarks do.
func (m *Merged) Lower(wm int64) { m.w = min(m.w, wm) }

// Current returns the merged watermark W.
func (m *Merged) Current() int64 { return m.w }

// Partition returns p's watermark and whether p is idle; an unassigned
// partition reports (math.MinInt64, false).
func (m *Merged) Partition(p int32) (wm int64, idle bool) {
	i, ok := m.find(p)
	if !ok {
		return math.MinInt64, false
	}
	return m.parts[i].gen.Current(), m.parts[i].idle
}

// Partitions returns the assigned partitions in ascending order.
func (m *Merged) Partitions() []int32 {
	ps := make([]int32, len(m.parts))
	for i, part := range m.parts {
		ps[i] = part.id
	}
	return ps
}

// IdleCount returns how many assigned partitions are idle.
func (m *Merged) IdleCount() int {
	n := 0
	for _, part := range m.parts {
		if part.idle {
			n++
		}
	}
	return n
}

// Snapshot returns p's generator state, for the consumer's commit metadata.
// An unassigned partition has the state of a fresh generator.
func (m *Merged) Snapshot(p int32) State {
	i, ok := m.find(p)
	if !ok {
		return m.newGenerator().snapshot()
	}
	return m.parts[i].gen.snapshot()
}

// Restore replaces p's generator state with s (assigning p if needed) and
// makes p active at now. The restored partition watermark is at least
// s.Watermark, even if max_out_of_orderness has grown since the snapshot.
func (m *Merged) Restore(p int32, s State, now int64) {
	part := m.partition(p, now)
	gen := m.newGenerator()
	gen.restore(s)
	part.gen = gen
	part.active = max(part.active, now)
	part.idle = false
	m.recompute()
}
