package consumer

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
)

// purgeInterval is how often, at most, the repartition records that stage
// 2 committed are deleted.
const purgeInterval = 5 * time.Second

// stage1 is the first stage of source.partitioning repartition in the
// shell: its core and the input partitions it owns (by dense id; the
// Consumer's partitions.byID are stage 2's, the repartition partitions),
// and the purge of the repartition topic behind stage 2's commits.
type stage1 struct {
	core       *repartition.Stage
	byID       map[int32]*partition
	topic      string // the repartition topic
	partitions int32  // its partition count, known at connect
	lastPurge  time.Time
	purging    atomic.Bool // a purge is under way (off the engine goroutine)
	// counts are the input topics' partition counts the markers report
	// (their sum), in source.topics order; recount is set when a partition
	// beyond them is assigned, lastCount is the last look (checkSources).
	counts    []int32
	recount   bool
	lastCount time.Time
}

// sourcesInterval is how often, at most, stage 1 looks whether the input
// topics gained partitions (at once when it is assigned one it does not
// count): every instance's markers must count them, or stage 2 would not
// wait for their watermarks.
const sourcesInterval = 10 * time.Second

// outcome maps a stage-1 outcome to the records_total outcome it counts
// as, and reports whether it counts at all there: a forwarded record is
// counted by stage 2, under the repartition topic, where its fate is known.
func (s *stage1) outcome(o repartition.Outcome) (pipeline.Outcome, bool) {
	switch o {
	case repartition.Filtered:
		return pipeline.Filtered, true
	case repartition.Marker:
		return pipeline.Marker, true
	case repartition.DeadLetter:
		return pipeline.DeadLetter, true
	}
	return 0, false
}

// apply runs one polled input partition's records through stage 1.
func (s *stage1) apply(p *partition, recs []decoded, hwm, now int64) {
	for i := range recs {
		d := &recs[i]
		if d.control {
			s.core.Skip(d.in.Partition, d.in.Offset)
			continue
		}
		if out, ok := s.core.ProcessDecoded(&d.in, &d.rec, d.kind, d.err, now); ok {
			if o, counted := s.outcome(out); counted {
				p.counts[o]++
			}
		}
	}
	s.core.Fetched(p.id, hwm, now)
}

// added notes an input partition assigned that was added to its topic
// since the service started (checkSources looks at once), and reports
// whether it must not be assigned: it belongs to a topic before the last
// of topics, and its id is another partition's (checkSources ends the
// service). s may be nil (by_key) and tp a repartition partition.
func (s *stage1) added(tp topicPartition, topics []string) bool {
	if s == nil || tp.topic == s.topic {
		return false
	}
	i := slices.Index(topics, tp.topic)
	if i < 0 || i >= len(s.counts) || tp.partition < s.counts[i] {
		return false
	}
	s.recount = true
	return i < len(topics)-1
}

// checkSources looks, at most every sourcesInterval, whether the input
// topics gained partitions. When the last of source.topics did, the
// markers count the new partitions from the next commit on (stage 2's wait
// starts again until they report). When another one did, the partitions
// of the topics after it get other source ids, which a running stage 1
// cannot change: it returns an error (the service ends, and its restart
// numbers them anew). A failed look is tried again at the next check.
func (c *Consumer) checkSources(ctx context.Context) error {
	s := c.parts.input
	if s == nil {
		return nil
	}
	c.mu.Lock()
	due := s.recount || time.Since(s.lastCount) >= sourcesInterval
	c.mu.Unlock()
	if !due {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	counts, err := cluster.InputPartitions(lctx, kadm.NewClient(c.kafka.cl), c.cfg.Source.Topics)
	c.mu.Lock()
	defer c.mu.Unlock()
	s.lastCount = time.Now()
	if err != nil || len(counts) != len(s.counts) {
		return nil
	}
	s.recount = false
	total := int32(0)
	for i, n := range counts {
		if n != s.counts[i] && i < len(counts)-1 {
			return fmt.Errorf("input topic %s has %d partitions, %d when the service started: the repartition stage numbers source partitions topic after topic, and those of the topics after it in source.topics are numbered anew at a restart",
				c.cfg.Source.Topics[i], n, s.counts[i])
		}
		total += n
	}
	if total <= s.core.Sources() {
		return nil
	}
	last := len(counts) - 1
	c.log.Info().Str("topic", c.cfg.Source.Topics[last]).Int32("partitions", counts[last]).Int32("was", s.counts[last]).Int32("source_partitions", total).
		Msg("an input topic gained partitions: the markers count them, and windows wait until every source partition has reported")
	s.counts[last] = counts[last]
	s.core.SetSources(total)
	// The group hands the new partitions out once its leader's client
	// sees them (kgo refreshes its metadata every 5 minutes): until then
	// no one reports them, and windows wait.
	c.kafka.cl.ForceMetadataRefresh()
	return nil
}

// offsets adds stage 1's offsets to commit to offsets.
func (s *stage1) offsets(offsets map[string]map[int32]kgo.EpochOffset, offs []ready.Offset) {
	for _, o := range offs {
		p := s.byID[o.Partition]
		if p == nil {
			continue
		}
		if offsets[p.tp.topic] == nil {
			offsets[p.tp.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.tp.topic][p.tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: o.Offset}
	}
}

// purge deletes, off the engine goroutine and at most every purgeInterval,
// the repartition records below stage 2's committed offsets (committed:
// the repartition partitions' offsets of the commit that just succeeded).
// A failure is logged at debug and the next commit tries again; a purge
// never holds a commit back.
func (c *Consumer) purge(committed map[int32]int64) {
	s := c.parts.input
	if s == nil || len(committed) == 0 || time.Since(s.lastPurge) < purgeInterval || !s.purging.CompareAndSwap(false, true) {
		return
	}
	s.lastPurge = time.Now()
	offsets := kadm.Offsets{}
	for r, o := range committed {
		offsets.Add(kadm.Offset{Topic: s.topic, Partition: r, At: o, LeaderEpoch: -1})
	}
	adm, log, gauge := kadm.NewClient(c.kafka.cl), c.log, c.m.RepartitionPurge
	go func() {
		defer s.purging.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.DeleteRecords(ctx, offsets)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			log.Debug().Err(err).Str("topic", s.topic).Msg("delete committed repartition records; trying again after the next commit")
			return
		}
		lag := int64(0)
		for r, o := range committed {
			if d, ok := resp.Lookup(s.topic, r); ok && d.Err == nil {
				lag += max(o-d.LowWatermark, 0)
			}
		}
		gauge.Set(float64(lag))
	}()
}

// sourceMetrics sets what stage 2 knows of the source partitions: each
// one's watermark (the lowest over the owned repartition partitions'
// tables), which one holds W, and how many have not reported.
func (c *Consumer) sourceMetrics() {
	if c.parts.input == nil {
		return
	}
	var low []int64
	var reported, active []bool
	unreported, known := 0, false
	for id := range c.parts.byID {
		t := c.proc.SourceTable(id)
		if t.Count == 0 {
			continue
		}
		known = true
		for int(t.Count) > len(low) {
			low, reported, active = append(low, 1<<63-1), append(reported, true), append(active, false)
		}
		for i, src := range t.Sources[:t.Count] {
			if !src.Reported {
				reported[i] = false
				continue
			}
			low[i] = min(low[i], src.Watermark)
			active[i] = active[i] || !src.Idle
		}
	}
	holder, holderWm := -1, int64(1<<63-1)
	for i, wm := range low {
		if !reported[i] {
			unreported++
			continue
		}
		c.m.SourceWatermark.WithLabelValues(strconv.Itoa(i)).Set(metrics.Seconds(wm))
		if active[i] && wm < holderWm {
			holder, holderWm = i, wm
		}
	}
	if !known {
		unreported = int(c.parts.input.core.Sources())
	}
	c.m.SourcesUnreported.Set(float64(unreported))
	c.m.WatermarkSource.Set(float64(holder))
}
