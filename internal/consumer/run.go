package consumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/windowing"
)

// Run consumes until ctx is canceled and returns nil once the poll in
// hand is applied; it returns an error if an output could not be produced
// (nothing past it is committed) or the client failed. A fetcher
// goroutine polls and decodes the next poll while this goroutine applies
// the current one.
func (c *Consumer) Run(ctx context.Context) error {
	f := c.fetch
	f.ready = make(chan *poll, pollsInFlight)
	fctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { f.run(fctx) })
	err := c.consume(ctx, f)
	stop()
	for p := range f.ready {
		p.decoding.Wait()
		f.free <- p // polled but not applied: not committed either, so read again by the partition's next owner
	}
	wg.Wait()
	c.cl.AllowRebalance()
	return err
}

// consume applies the fetcher's polls in order.
func (c *Consumer) consume(ctx context.Context, f *fetcher) error {
	for p := range f.ready {
		p.decoding.Wait()
		if p.closed {
			f.free <- p
			return nil
		}
		err := c.step(ctx, p)
		c.checkUnfetched(ctx)
		f.free <- p // never blocks: the channel has room for every poll
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (c *Consumer) logFetchErrors(fs kgo.Fetches) {
	fs.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		c.log.Warn().Err(err).Str("topic", topic).Int32("partition", partition).Msg("fetch")
	})
}

// step applies one poll's records, ticks the watermark, updates the
// metrics and commits when due.
func (c *Consumer) step(ctx context.Context, p *poll) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applyFetched()
	c.writer.SetFetched(p.fetchedAt)
	c.apply(p)
	now := c.nowMs()
	c.proc.Tick(now)
	c.writer.Send() // the poll's outputs, encoded and produced by the writer goroutine meanwhile
	c.updateMetrics(now)
	if err := c.writer.Err(); err != nil {
		return err
	}
	if ctx.Err() != nil || time.Since(c.lastCommit) < commitInterval {
		return nil
	}
	c.lastCommit = time.Now()
	// A commit under way finishes even if shutdown begins meanwhile.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	return c.commit(cctx, c.allParts())
}

// apply runs the poll's records through the pipeline, partition by
// partition in offset order.
func (c *Consumer) apply(pl *poll) {
	now := c.nowMs()
	for _, pp := range pl.parts {
		p := c.parts[pp.tp]
		if p == nil {
			continue
		}
		for i := pp.lo; i < pp.hi; i++ {
			c.applyOne(p, &pl.recs[i], now)
		}
		p.hwm = pp.hwm
		c.proc.SetCaughtUp(p.id, p.next >= p.hwm, now)
	}
}

// applyOne runs one decoded record through the pipeline.
func (c *Consumer) applyOne(p *partition, d *decoded, now int64) {
	off := d.in.Offset
	if p.rebuilding {
		if off >= p.emitted {
			c.finishRebuild(p)
		} else if w := p.stepAt(off); w > p.phantomW {
			p.phantomW = w
			c.proc.Restore(p.phantom(), holdAt(w), now)
		}
	}
	muted := p.muted(off)
	if !p.rebuilding {
		p.history.observe(c.bounds, off, c.proc.Watermark())
	}
	out := c.proc.ProcessDecoded(&d.in, &d.rec, d.kind, d.err, now)
	if !muted {
		p.counts[out]++
	}
	p.next = off + 1
	if p.rebuilding && p.next >= p.emitted {
		c.finishRebuild(p)
	}
}

func (c *Consumer) nowMs() int64 { return c.clock().UnixMilli() }

// updateMetrics adds the poll's outcome counts and sets the gauges.
func (c *Consumer) updateMetrics(now int64) {
	w := c.proc.Watermark()
	c.m.Watermark.Set(metrics.Seconds(w))
	if w > math.MinInt64 {
		c.m.WatermarkLag.Set(float64(now-w) / 1000)
	}
	c.m.OpenWindows.Set(float64(c.proc.OpenWindows()))
	c.m.IdlePartitions.Set(float64(c.proc.IdleCount()))
	for _, p := range c.parts {
		p.flushCounts()
		pw, _ := c.proc.PartitionWatermark(p.id)
		p.wm.Set(metrics.Seconds(pw))
		if p.hwm >= 0 && p.next >= 0 {
			p.lag.Set(float64(max(p.hwm-p.next, 0)))
		}
	}
}

// checkUnfetched tells the pipeline which partitions that have not
// returned a record since their assignment are at their log end: an empty
// partition must be able to go idle too.
func (c *Consumer) checkUnfetched(ctx context.Context) {
	if c.cfg.Watermark.IdleTimeout <= 0 || time.Since(c.unfetched) < 10*tickInterval {
		return
	}
	c.unfetched = time.Now()
	c.mu.Lock()
	var ps []*partition
	topics := map[string]bool{}
	for _, p := range c.parts {
		if p.next < 0 {
			ps = append(ps, p)
			topics[p.tp.topic] = true
		}
	}
	c.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.cl)
	starts, err := adm.ListStartOffsets(lctx, names...)
	if err != nil {
		return // tried again at the next check
	}
	ends, err := adm.ListEndOffsets(lctx, names...)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	for _, p := range ps {
		end, ok1 := ends.Lookup(p.tp.topic, p.tp.partition)
		start, ok2 := starts.Lookup(p.tp.topic, p.tp.partition)
		if !ok1 || !ok2 || end.Err != nil || start.Err != nil || c.parts[p.tp] != p || p.next >= 0 {
			continue
		}
		pos := p.start
		if pos < 0 && c.cfg.Source.StartOffset == "latest" {
			pos = end.Offset
		} else if pos < 0 {
			pos = start.Offset
		}
		c.proc.SetCaughtUp(p.id, pos >= end.Offset, now)
	}
}

// commit waits until every output produced so far is acknowledged, then
// commits, for each partition in ps, the offset of its oldest record still
// in an open window (or its position), with its checkpoint as metadata.
// c.mu is held.
func (c *Consumer) commit(ctx context.Context, ps []*partition) error {
	c.writer.Sync() // every output so far is given to the producer, so Flush waits for them all
	if err := c.writer.Err(); err != nil {
		return err // never commit past an output that was lost
	}
	if err := c.pr.Flush(ctx); err != nil {
		return fmt.Errorf("flush outputs: %w", err)
	}
	if err := c.writer.Err(); err != nil {
		return err
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	meta := map[topicPartition]string{}
	for _, p := range ps {
		off, md, ok := c.checkpoint(p)
		if !ok {
			continue
		}
		if offsets[p.tp.topic] == nil {
			offsets[p.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.tp.topic][p.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: off}
		meta[p.tp] = md
	}
	if len(offsets) == 0 {
		return nil
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			for j := range t.Partitions {
				if md, ok := meta[topicPartition{t.Topic, t.Partitions[j].Partition}]; ok {
					t.Partitions[j].Metadata = &md
				}
			}
		}
		return nil
	})
	var cerr error
	c.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		cerr = errors.Join(err, commitErrors(resp))
	})
	if cerr != nil {
		return fmt.Errorf("commit: %w", cerr)
	}
	return nil
}

// checkpoint returns the offset to commit for p and its metadata; ok is
// false when p has nothing new (no record since assignment, or rebuilding).
func (c *Consumer) checkpoint(p *partition) (offset int64, metadata string, ok bool) {
	if p.rebuilding || p.next < 0 {
		return 0, "", false
	}
	offset = p.next
	if low, open := c.proc.MinOpenOffset(p.id); open && low < offset {
		offset = low
	}
	cp := Checkpoint{Emitted: p.next, W: c.proc.Watermark(), State: c.proc.Snapshot(p.id)}
	if offset < p.next {
		cp.Steps = p.history.since(offset)
	} else {
		p.history = history{}
	}
	md, dropped := cp.Fit(maxMetadata)
	if dropped {
		c.log.Warn().Str("topic", p.tp.topic).Int32("partition", p.tp.partition).
			Msg("checkpoint too long for the commit metadata: dropped old watermark steps")
	}
	return offset, md, true
}

func commitErrors(resp *kmsg.OffsetCommitResponse) error {
	if resp == nil {
		return nil
	}
	var errs []error
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				errs = append(errs, fmt.Errorf("%s[%d]: error code %d", t.Topic, p.Partition, p.ErrorCode))
			}
		}
	}
	return errors.Join(errs...)
}

// gate is the pipeline's Output: it mutes what a rebuild re-emits and
// hands the rest to the Writer with the real input partition.
type gate struct{ c *Consumer }

func (g gate) Result(r *windowing.Result) {
	if p := g.c.byID[r.Partition]; p != nil && p.rebuilding {
		return
	}
	g.c.writer.Result(r)
}

func (g gate) Late(in *pipeline.Input, eventTime, watermark int64, missed windowing.Window) {
	if real, ok := g.input(in); ok {
		g.c.writer.Late(real, eventTime, watermark, missed)
	}
}

func (g gate) DeadLetter(in *pipeline.Input, err error) {
	if real, ok := g.input(in); ok {
		g.c.writer.DeadLetter(real, err)
	}
}

// input reports whether in's outputs are to be written, and returns it
// with its Kafka partition in place of the engine's id.
func (g gate) input(in *pipeline.Input) (*pipeline.Input, bool) {
	p := g.c.byID[in.Partition]
	if p == nil {
		return in, true
	}
	if p.muted(in.Offset) {
		return nil, false
	}
	if p.tp.partition != in.Partition {
		real := *in
		real.Partition = p.tp.partition
		return &real, true
	}
	return in, true
}
