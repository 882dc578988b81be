package consumer

import (
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

// uncommitted holds, with exactly_once, the counts of what the open
// transaction processed: its records' outcomes (each partition's counts,
// and those of partitions dropped since it began), session merges, key
// conflicts and generation skips. They reach their counters when the
// transaction commits and are forgotten when it aborts, because the
// aborted records are processed again (here or on another instance) and
// would be counted twice: aggregator_records_total says what became of
// each record once, as a read_committed reader sees it. With
// at_least_once the counters move at once (re-read records count again,
// as they are written again).
type uncommitted struct {
	deferred                              bool // exactly_once
	dropped                               []*partition
	sessionMerges, keyConflicts, genSkips int64
}

// countStats adds the step's stats to the counters, or holds them for the
// transaction's end.
func (c *Consumer) countStats(st *ready.Stats) {
	u := &c.uncommitted
	if !u.deferred {
		c.m.SessionMerges.Add(float64(st.SessionMerges))
		c.m.KeyConflicts.Add(float64(st.KeyConflicts))
		c.m.GenerationSkips.Add(float64(st.GenerationSkips))
		for _, p := range c.parts.byTP {
			p.flushCounts()
		}
		return
	}
	u.sessionMerges += int64(st.SessionMerges)
	u.keyConflicts += int64(st.KeyConflicts)
	u.genSkips += int64(st.GenerationSkips)
}

// keepCounts holds a dropped partition's counts until the transaction
// ends.
func (c *Consumer) keepCounts(p *partition) {
	if c.uncommitted.deferred {
		c.uncommitted.dropped = append(c.uncommitted.dropped, p)
	}
}

// countCommitted adds what the committed transaction processed to the
// counters.
func (c *Consumer) countCommitted() {
	u := &c.uncommitted
	if !u.deferred {
		return
	}
	c.m.SessionMerges.Add(float64(u.sessionMerges))
	c.m.KeyConflicts.Add(float64(u.keyConflicts))
	c.m.GenerationSkips.Add(float64(u.genSkips))
	for _, p := range c.parts.byTP {
		p.flushCounts()
	}
	for _, p := range u.dropped {
		p.flushCounts()
	}
	c.forgetUncommitted()
}

// forgetUncommitted forgets what an aborted transaction processed.
func (c *Consumer) forgetUncommitted() {
	u := &c.uncommitted
	u.sessionMerges, u.keyConflicts, u.genSkips = 0, 0, 0
	for _, p := range c.parts.byTP {
		p.counts = pipeline.Counts{}
	}
	clear(u.dropped)
	u.dropped = u.dropped[:0]
}
