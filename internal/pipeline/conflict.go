package pipeline

import "aggregator/internal/ready"

// With source.partitioning by_key the producer promises that every record
// of a group key is in one input partition. A key that shows up on two
// partitions of this instance breaks the promise: each partition keeps its
// own window state for it, and each writes its own partial results under
// the same Kafka key. The core cannot merge them (another instance may
// hold other partitions of the key); it counts and reports them.

// conflictLogEvery is how often, in ms of the caller's clock, a conflict is
// handed out to be logged: a spread key usually conflicts on every record.
const conflictLogEvery = 60_000

// conflictKeys bounds one generation of the key index: when it is full it
// becomes the old one and a fresh one starts, so the index holds at most
// twice this many keys however many the input has, and a key is checked
// against where it was seen in the last one or two generations.
const conflictKeys = 1 << 16

// conflicts is the key index of the by_key check.
type conflicts struct {
	cur, old map[string]int32 // group key -> the partition it was first seen on
	n        int64            // records on another partition than their key's, since the last take
	pending  ready.Conflict   // the first conflict not handed out to be logged
	has      bool             // pending is set
	loggedAt int64            // now of the last conflict handed out; 0 none
	logged   bool
}

// see notes a record of key on partition, counting it if the key was seen
// first on another one.
func (c *conflicts) see(key string, partition int32) {
	first, ok := c.cur[key]
	if !ok {
		if first, ok = c.old[key]; !ok {
			if len(c.cur) >= conflictKeys {
				c.old, c.cur = c.cur, make(map[string]int32, conflictKeys)
			}
			c.cur[key] = partition
			return
		}
		c.cur[key] = first
	}
	if first == partition {
		return
	}
	c.n++
	if !c.has {
		c.pending, c.has = ready.Conflict{Key: key, First: first, Second: partition}, true
	}
}

// forget drops the keys first seen on a revoked partition: its next owner
// may be another instance.
func (c *conflicts) forget(partition int32) {
	for _, m := range []map[string]int32{c.cur, c.old} {
		for k, p := range m {
			if p == partition {
				delete(m, k)
			}
		}
	}
}

// takeConflicts returns how many records came, since the last call, on
// another partition of this instance than the first one their group key
// was seen on (source.partitioning by_key), and a conflict to log when one
// happened and none was handed out in the minute before now (the caller's
// wall clock, ms).
func (p *Processor) takeConflicts(now int64) (n int64, log ready.Conflict, ok bool) {
	c := &p.conflicts
	n, c.n = c.n, 0
	if c.has && (!c.logged || now-c.loggedAt >= conflictLogEvery) {
		log, ok = c.pending, true
		c.has, c.logged, c.loggedAt = false, true, now
	}
	return n, log, ok
}
