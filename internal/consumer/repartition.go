package consumer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"aggregator/internal/cluster"
	"aggregator/internal/ready"
)

// purgeInterval is how often, at most, the repartition records that stage
// 2 committed are deleted.
const purgeInterval = 5 * time.Second

// repartitionTopic is the shell's part of source.partitioning
// repartition: the purge of the repartition topic behind stage 2's
// commits, and the look at the input topics' partition counts, which
// stage 1's markers report (the core holds both stages).
type repartitionTopic struct {
	topic     string
	lastPurge time.Time
	purging   atomic.Bool // a purge is under way (off the engine goroutine)
	lastCount time.Time   // the last look at the input topics' partitions (checkSources)
}

// sourcesInterval is how often, at most, stage 1 looks whether the input
// topics gained partitions (at once when it is assigned one it does not
// count): every instance's markers must count them, or stage 2 would not
// wait for their watermarks.
const sourcesInterval = 10 * time.Second

// checkSources looks, at most every sourcesInterval, whether the input
// topics gained partitions. When the last of source.topics did, the
// markers count the new partitions from the next commit on (stage 2's wait
// starts again until they report). When another one did, the partitions
// of the topics after it get other source ids, which a running stage 1
// cannot change: it returns an error (the service ends, and its restart
// numbers them anew). A failed look is tried again at the next check.
func (c *Consumer) checkSources(ctx context.Context) error {
	s := c.repart
	if s == nil {
		return nil
	}
	c.mu.Lock()
	due := c.core.SourcesDue() || time.Since(s.lastCount) >= sourcesInterval
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
	if err != nil {
		return nil
	}
	grew, was, err := c.core.Sources(counts)
	if err != nil || !grew {
		return err
	}
	total := int32(0)
	for _, n := range counts {
		total += n
	}
	last := len(counts) - 1
	c.log.Info().Str("topic", c.cfg.Source.Topics[last]).Int32("partitions", counts[last]).Int32("was", was).Int32("source_partitions", total).
		Msg("an input topic gained partitions: the markers count them, and windows wait until every source partition has reported")
	// The group hands the new partitions out once its leader's client
	// sees them (kgo refreshes its metadata every 5 minutes): until then
	// no one reports them, and windows wait.
	c.kafka.cl.ForceMetadataRefresh()
	return nil
}

// purge deletes, off the engine goroutine and at most every purgeInterval,
// the repartition records below stage 2's committed offsets (the
// repartition topic's offsets of the commit that just succeeded). A
// failure is logged at debug and the next commit tries again; a purge
// never holds a commit back.
func (c *Consumer) purge(committed []ready.Offset) {
	s := c.repart
	if s == nil || time.Since(s.lastPurge) < purgeInterval {
		return
	}
	offsets := kadm.Offsets{}
	for _, o := range committed {
		if o.Topic == s.topic {
			offsets.Add(kadm.Offset{Topic: s.topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
		}
	}
	if len(offsets) == 0 || !s.purging.CompareAndSwap(false, true) {
		return
	}
	s.lastPurge = time.Now()
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
		offsets.Each(func(o kadm.Offset) {
			if d, ok := resp.Lookup(s.topic, o.Partition); ok && d.Err == nil {
				lag += max(o.At-d.LowWatermark, 0)
			}
		})
		gauge.Set(float64(lag))
	}()
}
