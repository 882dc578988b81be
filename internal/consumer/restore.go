package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/pipeline"
)

// restorePending restores every assigned partition not restored yet from
// its changelog partition, read to its end (read_committed) before any of
// its input is applied. c.mu is held.
func (c *Consumer) restorePending(ctx context.Context) error {
	var ps []*partition
	for _, id := range c.proc.Unrestored() {
		ps = append(ps, c.parts.byID[id])
	}
	if len(ps) == 0 {
		return nil
	}
	began := time.Now()
	if err := c.readChangelog(ctx, ps); err != nil {
		return fmt.Errorf("restore: %w", err) // the next attempt reads from the start again (BeginRestore)
	}
	now := c.nowMs()
	for _, p := range ps {
		res, records, err := c.proc.FinishRestore(p.id, now)
		if err != nil {
			return fmt.Errorf("restore %s[%d] from %s[%d]: %w", p.tp.topic, p.tp.partition, c.cfg.State.ChangelogTopic, p.id, err)
		}
		start := int64(-1)
		if res.HasPosition {
			start = res.Position.Offset
		}
		c.m.RestoredRecords.Add(float64(records))
		if res.Stale > 0 {
			c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Str("changelog_topic", c.cfg.State.ChangelogTopic).
				Int("stale_records", res.Stale).
				Msg("the changelog holds records an instance wrote after it lost the partition (a zombie: paused past its session); they are left out, the last owner's state is restored and repaired")
		}
		c.log.Debug().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", start).
			Int("changelog_records", records).Int("entries", res.Entries).Int("repairs", len(res.Repairs)).
			Msg("partition restored")
	}
	c.m.RestoreSeconds.Observe(time.Since(began).Seconds())
	c.updateReady()
	return nil
}

// readChangelog reads the changelog partitions of ps from their start to
// their end into the pipeline, with a client of its own.
func (c *Consumer) readChangelog(ctx context.Context, ps []*partition) error {
	for _, p := range ps {
		c.proc.BeginRestore(p.id)
	}
	cl, err := kgo.NewClient(append(c.kafka.readOpts[:len(c.kafka.readOpts):len(c.kafka.readOpts)], kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.State.TransactionTimeout+commitTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, c.cfg.State.ChangelogTopic)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", c.cfg.State.ChangelogTopic, err)
	}
	next := map[int32]int64{} // changelog partition → next offset to read, for those not at their end
	end := map[int32]int64{}
	for _, p := range ps {
		o, ok := ends.Lookup(c.cfg.State.ChangelogTopic, p.id)
		if !ok || o.Err != nil {
			return fmt.Errorf("end offset of %s[%d]: %v", c.cfg.State.ChangelogTopic, p.id, o.Err)
		}
		if o.Offset > 0 {
			next[p.id], end[p.id] = 0, o.Offset
		}
	}
	if len(next) == 0 {
		return nil
	}
	from := map[int32]kgo.Offset{}
	for id := range next {
		from[id] = kgo.NewOffset().AtStart()
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.State.ChangelogTopic: from})
	for len(next) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", c.cfg.State.ChangelogTopic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := next[r.Partition]; !ok || aerr != nil {
				return
			}
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			var tag []byte
			for _, h := range r.Headers {
				if h.Key == pipeline.TagHeader {
					tag = h.Value
				}
			}
			if err := c.proc.RestoreRecord(r.Partition, r.Key, r.Value, tag); err != nil {
				aerr = fmt.Errorf("%s[%d] offset %d: %w", c.cfg.State.ChangelogTopic, r.Partition, r.Offset, err)
			}
		})
		if aerr != nil {
			return aerr
		}
		for id, n := range next {
			if n >= end[id] {
				delete(next, id)
			}
		}
	}
	return nil
}
