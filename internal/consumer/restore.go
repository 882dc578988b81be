package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/state"
)

// restorePending restores every assigned partition not restored yet from
// its changelog partition, read to its end (read_committed) before any of
// its input is applied. c.mu is held.
func (c *Consumer) restorePending(ctx context.Context) error {
	var ps []*partition
	for _, id := range c.proc.Unrestored() {
		ps = append(ps, c.byID[id])
	}
	if len(ps) == 0 {
		return nil
	}
	began := time.Now()
	restorers, err := c.readChangelog(ctx, ps)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	now := c.nowMs()
	for _, p := range ps {
		r := restorers[p.id]
		res, err := c.proc.Restore(p.id, r, now)
		if err != nil {
			return fmt.Errorf("restore %s[%d] from %s[%d]: %w", p.tp.topic, p.tp.partition, c.changelog, p.id, err)
		}
		start := int64(-1)
		if res.HasPosition {
			start = res.Position.Offset
		}
		c.m.RestoredRecords.Add(float64(r.Records()))
		c.log.Info().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).Int64("offset", start).
			Int("changelog_records", r.Records()).Int("entries", res.Entries).Int("repairs", len(res.Repairs)).
			Msg("partition restored")
	}
	c.m.RestoreSeconds.Observe(time.Since(began).Seconds())
	c.updateReady()
	return nil
}

// readChangelog reads the changelog partitions of ps from their start to
// their end into one Restorer each, with a client of its own.
func (c *Consumer) readChangelog(ctx context.Context, ps []*partition) (map[int32]*state.Restorer, error) {
	restorers := make(map[int32]*state.Restorer, len(ps))
	for _, p := range ps {
		restorers[p.id] = state.NewRestorer()
	}
	cl, err := kgo.NewClient(append(c.readOpts[:len(c.readOpts):len(c.readOpts)], kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.State.TransactionTimeout+commitTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, c.changelog)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", c.changelog, err)
	}
	next := map[int32]int64{} // changelog partition → next offset to read, for those not at their end
	end := map[int32]int64{}
	for _, p := range ps {
		o, ok := ends.Lookup(c.changelog, p.id)
		if !ok || o.Err != nil {
			return nil, fmt.Errorf("end offset of %s[%d]: %v", c.changelog, p.id, o.Err)
		}
		if o.Offset > 0 {
			next[p.id], end[p.id] = 0, o.Offset
		}
	}
	if len(next) == 0 {
		return restorers, nil
	}
	from := map[int32]kgo.Offset{}
	for id := range next {
		from[id] = kgo.NewOffset().AtStart()
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.changelog: from})
	for len(next) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", c.changelog, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
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
				if h.Key == state.TagHeader {
					tag = h.Value
				}
			}
			if err := restorers[r.Partition].Add(r.Key, r.Value, tag); err != nil {
				aerr = fmt.Errorf("%s[%d] offset %d: %w", c.changelog, r.Partition, r.Offset, err)
			}
		})
		if aerr != nil {
			return nil, aerr
		}
		for id, n := range next {
			if n >= end[id] {
				delete(next, id)
			}
		}
	}
	return restorers, nil
}
