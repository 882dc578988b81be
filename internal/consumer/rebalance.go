package consumer

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// assigned starts each new partition with fresh state; its committed
// checkpoint, if any, arrives in offsetsFetched before its first record.
func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	for topic, ps := range added {
		for _, n := range ps {
			tp := topicPartition{topic, n}
			if _, ok := c.parts[tp]; ok {
				continue
			}
			if n >= 1<<partitionBits {
				c.log.Error().Str("topic", topic).Int32("partition", n).Msg("partition number too large; its windows share state with another partition")
			}
			p := c.newPartition(tp)
			c.parts[tp], c.byID[p.id] = p, p
			c.proc.Assign(p.id, now)
			c.log.Info().Str("topic", topic).Int32("partition", n).Msg("partition assigned")
		}
	}
	if !c.closing {
		c.setReady(true)
	}
}

// offsetsFetched keeps the committed offsets and their metadata for the
// engine goroutine. It runs concurrently with polling, before the new
// partitions' first fetch.
func (c *Consumer) offsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	c.fetched.Lock()
	defer c.fetched.Unlock()
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				fo := fetchedOffset{offset: p.Offset}
				if p.Metadata != nil {
					fo.metadata = *p.Metadata
				}
				c.pending[topicPartition{t.Topic, p.Partition}] = fo
			}
		}
	}
	for _, t := range resp.Topics { // v0–v7 brokers
		for _, p := range t.Partitions {
			fo := fetchedOffset{offset: p.Offset}
			if p.Metadata != nil {
				fo.metadata = *p.Metadata
			}
			c.pending[topicPartition{t.Topic, p.Partition}] = fo
		}
	}
	return nil
}

// applyFetched starts the rebuild of every newly assigned partition that
// has a checkpoint. Called by the engine goroutine with c.mu held.
func (c *Consumer) applyFetched() {
	c.fetched.Lock()
	pending := c.pending
	c.pending = map[topicPartition]fetchedOffset{}
	c.fetched.Unlock()
	for tp, fo := range pending {
		if p := c.parts[tp]; p != nil && p.next < 0 && !p.rebuilding {
			c.restore(p, fo)
		}
	}
}

// restore sets up p's rebuild from its committed checkpoint: the phantom
// partition holds the merged watermark at the first recorded step, and p's
// generator gets its state at the emitted offset.
func (c *Consumer) restore(p *partition, fo fetchedOffset) {
	p.start = fo.offset
	if fo.offset < 0 {
		return
	}
	cp, err := ParseCheckpoint(fo.metadata)
	if err != nil {
		if !errors.Is(err, errNoCheckpoint) {
			c.log.Warn().Err(err).Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Msg("ignoring unreadable checkpoint")
		}
		return
	}
	now := c.nowMs()
	if fo.offset < cp.Emitted {
		p.rebuilding, p.emitted, p.finalW, p.steps = true, cp.Emitted, cp.W, cp.Steps
		p.history = history{steps: append([]Step(nil), cp.Steps...)}
		if n := len(cp.Steps); n > 0 {
			p.history.last = c.bounds.bucket(cp.Steps[n-1].W)
		}
		p.phantomW = p.stepAt(fo.offset)
		c.proc.Assign(p.phantom(), now)
		c.proc.Restore(p.phantom(), holdAt(p.phantomW), now)
	}
	c.proc.Restore(p.id, cp.State, now)
	c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", fo.offset).
		Int64("emitted", cp.Emitted).Int("steps", len(cp.Steps)).Msg("partition restored")
}

// finishRebuild ends p's rebuild once it reached the emitted offset: the
// watermark is brought to where it was at the commit (still muted), then
// the phantom lets go.
func (c *Consumer) finishRebuild(p *partition) {
	now := c.nowMs()
	c.proc.Restore(p.phantom(), holdAt(max(p.finalW, p.phantomW)), now)
	p.rebuilding, p.steps = false, nil
	c.proc.Revoke(p.phantom()) // lets the merged watermark go, firing what is due
}

// revoked commits the revoked partitions' outputs and offsets, then drops
// their windows and generators.
func (c *Consumer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.lookup(revoked)
	if !c.closing {
		if err := c.commit(ctx, ps); err != nil {
			c.log.Error().Err(err).Msg("commit on revoke failed; the next owner repeats some outputs")
		}
	}
	c.drop(ps)
}

// lost drops partitions that another member may own already: committing
// them could rewind its progress.
func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(c.lookup(lost))
}

func (c *Consumer) lookup(m map[string][]int32) []*partition {
	var ps []*partition
	for topic, ns := range m {
		for _, n := range ns {
			if p := c.parts[topicPartition{topic, n}]; p != nil {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

func (c *Consumer) drop(ps []*partition) {
	for _, p := range ps {
		if p.rebuilding {
			c.proc.Revoke(p.phantom())
		}
		c.proc.Revoke(p.id)
		delete(c.parts, p.tp)
		delete(c.byID, p.id)
		c.forgetMetrics(p)
		c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Msg("partition revoked")
	}
}
