package consumer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/invariants"
)

// assigned starts each new partition with fresh state; the engine
// goroutine restores it from the changelog before applying its records.
func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropRevoked() // a partition revoked and assigned again starts afresh
	c.cycle.gone = false
	c.health.joined.Store(true)
	now := c.nowMs()
	for topic, ps := range added {
		for _, n := range ps {
			tp := topicPartition{topic, n}
			if _, ok := c.parts.byTP[tp]; ok {
				continue
			}
			id, ok := c.core.Assign(topic, n, now)
			if !ok {
				continue // an input topic's new partition stage 1 cannot number: checkSources ends the service
			}
			p := c.newPartition(tp, id)
			c.parts.byTP[tp], c.parts.byID[id] = p, p
			c.log.Debug().Str("topic", topic).Int32("partition", n).Msg("partition assigned")
		}
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
		c.core.Revoke(p.id)
		c.forgetBlocked(p)
		c.forgetMetrics(p)
		c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Msg("partition revoked")
	}
	c.updateReady()
}

// updateReady sets /readyz: joined, every partition restored, not closing.
func (c *Consumer) updateReady() {
	restoring := len(c.core.Unrestored())
	c.m.RestoringParts.Set(float64(restoring))
	c.setReady(!c.cycle.closing && restoring == 0)
}
