package consumer

import (
	"context"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/invariants"
)

// assigned starts each new partition with fresh state; the engine
// goroutine restores it from the changelog before applying its records.
func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	c.balancer.Assigned()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropRevoked() // a partition revoked and assigned again starts afresh
	c.cycle.gone = false
	c.health.joined.Store(true)
	now := c.nowMs()
	var taken map[string][]int32 // owned partitions a zombie's commit dropped
	for _, tp := range c.revocations.own(added) {
		if _, ok := c.parts.byTP[tp]; ok {
			continue
		}
		id, ok := c.core.Assign(tp.topic, tp.partition, now)
		if !ok {
			continue // an input topic's new partition stage 1 cannot number: checkSources ends the service
		}
		p := c.newPartition(tp, id)
		c.parts.byTP[tp], c.parts.byID[id] = p, p
		c.log.Debug().Str("topic", tp.topic).Int32("partition", tp.partition).Msg("partition assigned")
		if !slices.Contains(added[tp.topic], tp.partition) {
			if taken == nil {
				taken = map[string][]int32{}
			}
			taken[tp.topic] = append(taken[tp.topic], tp.partition)
		}
	}
	if len(taken) > 0 {
		c.log.Info().Interface("partitions", taken).
			Msg("partitions kept through a rejoin after a refused commit are taken back: restored from the changelog")
	}
	c.logRebalance(added)
	c.updateReady()
}

// revoked drops the revoked partitions. With at_least_once their state,
// outputs and offsets are committed first. With exactly_once the session
// aborts the open transaction instead (a commit would race the new owner);
// the engine goroutine commits before it lets a rebalance in, so that
// transaction is usually empty. The session calls this holding the lock
// that ending a transaction takes, and the engine goroutine ends
// transactions holding c.mu: so with exactly_once this only queues the
// partitions, and the engine goroutine drops them (dropRevoked).
func (c *Consumer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.revocations.note(revoked)
	c.revocations.disown(revoked)
	if c.kafka.sess != nil {
		c.revocations.add(revoked)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cycle.closing {
		if err := c.commit(ctx); err != nil {
			c.log.Error().Err(err).Msg("commit on revoke failed; the next owner repeats some outputs")
		}
	}
	c.drop(c.lookup(revoked))
}

// lost drops partitions that another member may own already: committing
// them could rewind its progress.
func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.revocations.note(lost)
	c.revocations.disown(lost)
	if c.kafka.sess != nil {
		c.revocations.add(lost)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cycle.gone = false
	c.drop(c.lookup(lost))
}

// revocations are partitions revoked or lost (exactly_once) that the
// engine goroutine has not dropped yet. Safe for concurrent use.
type revocations struct {
	mu     invariants.Mutex
	queue  []topicPartition
	logged map[string][]int32 // revoked or lost since the last rebalance line
	// owned are the partitions the client owns: assigned, not yet revoked
	// or lost. A zombie's commit drops partitions the client may keep (a
	// refused commit is not always a lost session: after ILLEGAL_GENERATION
	// the member rejoins owning them, and a cooperative rebalance that
	// leaves them to it names them in no callback): assigned takes back
	// the owned partitions the consumer does not hold.
	owned map[topicPartition]struct{}
}

// add notes partitions to drop. No poll returns their records any more
// (polls and callbacks exclude each other).
func (r *revocations) add(m map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, ns := range m {
		for _, n := range ns {
			r.queue = append(r.queue, topicPartition{topic, n})
		}
	}
}

// take returns the partitions noted and forgets them.
func (r *revocations) take() []topicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue
	r.queue = nil
	return q
}

// dropRevoked drops the partitions revoked or lost meanwhile, in the
// order they came. c.mu is held.
func (c *Consumer) dropRevoked() {
	q := c.revocations.take()
	var ps []*partition
	for _, tp := range q {
		if p := c.parts.byTP[tp]; p != nil {
			ps = append(ps, p)
		}
	}
	c.drop(ps)
}

func (c *Consumer) lookup(m map[string][]int32) []*partition {
	var ps []*partition
	for topic, ns := range m {
		for _, n := range ns {
			if p := c.parts.byTP[topicPartition{topic, n}]; p != nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

func (c *Consumer) drop(ps []*partition) {
	for _, p := range ps {
		delete(c.parts.byTP, p.tp)
		delete(c.parts.byID, p.id)
		p.dropped.Store(true)
		c.core.Revoke(p.id)
		c.forgetBlocked(p)
		c.forgetMetrics(p)
		c.keepCounts(p)
		c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Msg("partition revoked")
	}
	c.updateReady()
}

// updateReady sets /readyz: joined, every partition restored, not closing.
func (c *Consumer) updateReady() {
	restoring := len(c.core.Unrestored())
	c.m.RestoringParts.Set(float64(restoring))
	c.setReady(!c.cycle.closing && restoring == 0 && c.health.joined.Load())
}

// own notes that the client owns added's partitions too, and returns
// every partition it owns, in order.
func (r *revocations) own(added map[string][]int32) []topicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owned == nil {
		r.owned = map[topicPartition]struct{}{}
	}
	for topic, ns := range added {
		for _, n := range ns {
			r.owned[topicPartition{topic, n}] = struct{}{}
		}
	}
	out := make([]topicPartition, 0, len(r.owned))
	for tp := range r.owned {
		out = append(out, tp)
	}
	slices.SortFunc(out, func(a, b topicPartition) int {
		if a.topic != b.topic {
			return strings.Compare(a.topic, b.topic)
		}
		return int(a.partition - b.partition)
	})
	return out
}

// disownAll notes that the client owns no partition (a new client).
func (r *revocations) disownAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.owned)
}

// disown notes that the client no longer owns m's partitions.
func (r *revocations) disown(m map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for topic, ns := range m {
		for _, n := range ns {
			delete(r.owned, topicPartition{topic, n})
		}
	}
}
