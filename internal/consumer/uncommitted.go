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
	deferred bool // exactly_once
	dropped  []*partition
	stats    stepCounts
}

// stepCounts are the counts of a Ready's stats that feed counters.
type stepCounts struct{ sessionMerges, keyConflicts, genSkips, unfolded int64 }

// add adds n's counts to the counters.
func (n stepCounts) add(c *Consumer) {
	c.m.SessionMerges.Add(float64(n.sessionMerges))
	c.m.KeyConflicts.Add(float64(n.keyConflicts))
	c.m.GenerationSkips.Add(float64(n.genSkips))
	c.m.RepartitionUnfolded.Add(float64(n.unfolded))
}

// countStats adds the step's stats to the counters, or holds them for the
// transaction's end.
func (c *Consumer) countStats(st *ready.Stats) {
	n := stepCounts{int64(st.SessionMerges), int64(st.KeyConflicts), int64(st.GenerationSkips), st.Unfolded}
	u := &c.uncommitted
	if !u.deferred {
		n.add(c)
		for _, p := range c.parts.byTP {
			p.flushCounts()
		}
		return
	}
	u.stats.sessionMerges += n.sessionMerges
	u.stats.keyConflicts += n.keyConflicts
	u.stats.genSkips += n.genSkips
	u.stats.unfolded += n.unfolded
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
	u.stats.add(c)
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
	u.stats = stepCounts{}
	for _, p := range c.parts.byTP {
		p.counts = pipeline.Counts{}
	}
	clear(u.dropped)
	u.dropped = u.dropped[:0]
}
