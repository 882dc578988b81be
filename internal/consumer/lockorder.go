package consumer

// The consumer's lock order. A goroutine that holds one of these locks
// takes only locks ranked after it; under the race detector (or the
// invariants tag) every Lock checks it and panics on the first lock taken
// out of order (package invariants), so every -race test run checks the
// order; otherwise they are plain mutexes.
//
//  1. fetcher.polling: held by the fetcher goroutine while it polls, and
//     by an exactly_once commit (lockedCommit), since a transaction must
//     not end during a poll; and to set a partition's fetch position back
//     (resume). A poll waits for the rebalance callbacks, which take
//     Consumer.mu: so polling is never taken while Consumer.mu is held.
//  2. Consumer.mu: the core (pipeline.Processor, stage 1), the partitions,
//     the commit cycle and the blocked restores. The engine goroutine
//     holds it to apply a poll and to commit, the rebalance callbacks
//     (at_least_once) and Close to change what it guards. It is held
//     across no changelog read (a restore takes it per fetch, to hand the
//     core the records) and across no kgo call that waits for a
//     rebalance callback (PollRecords, LeaveGroup, Close).
//  3. standbyCopy.build, one per standby copy: its built state (the
//     copy's pipeline.Warm and its Restorer). The copies' reader holds it
//     to add a fetch's records and build them, a restore to take the
//     copy over (after Consumer.mu); standbys.mu is taken under it.
//  4. Leaves, under which no other lock is taken: revocations.mu (the
//     rebalance callbacks' queue: with exactly_once kgo runs them while it
//     holds the lock that ending a transaction takes, and the engine
//     goroutine ends transactions holding Consumer.mu, so they take this
//     lock only), peerReader.mu (the watermark topic's values),
//     fetcher.cancelMu (the poll under way) and standbys.mu (the standby
//     copies: the engine goroutine, their reader and kgo's join take it).
//
// Other packages' locks (the producer.Writer's, cluster's watches', the
// registry client's) are their own: the consumer calls them holding any
// of these, and they never call back into it. kgo does, through the
// rebalance callbacks: hence the rules above. Lock-free, read by any
// goroutine:
// health.ready and health.joined (/readyz, aggregator_ready), the
// fetcher's epoch, rewinds, rebalanceWaits and commitWaits, and stage
// 1's purging.
const (
	rankPolling = iota + 1
	rankMu
	rankCopy
	rankLeaf
)

// initLocks places the consumer's locks in their order (c.locks).
func (c *Consumer) initLocks() {
	c.fetch.polling.Init(&c.locks, rankPolling, "fetcher.polling")
	c.mu.Init(&c.locks, rankMu, "Consumer.mu")
	c.revocations.mu.Init(&c.locks, rankLeaf, "revocations.mu")
	c.fetch.cancelMu.Init(&c.locks, rankLeaf, "fetcher.cancelMu")
	c.standby.mu.Init(&c.locks, rankLeaf, "standbys.mu")
	if c.peers != nil {
		c.peers.mu.Init(&c.locks, rankLeaf, "peerReader.mu")
	}
}
