package consumer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/pipeline"
)

// A topicPartition names a partition the group consumes.
type topicPartition struct {
	topic     string
	partition int32
}

// partitions are the assigned partitions, by name and by the core's id.
type partitions struct {
	byTP map[topicPartition]*partition
	byID map[int32]*partition
}

// partition is an assigned partition: its names and metrics (its
// progress is the core's).
type partition struct {
	tp topicPartition
	id int32 // the core's id (pipeline.Layout); a partition with window state: its changelog partition

	records [6]prometheus.Counter // by windowing.Outcome (pipeline.Outcome)
	counts  pipeline.Counts       // outcomes not yet added to records
	lag     prometheus.Gauge
	wm      prometheus.Gauge
	// rewound is the fetcher's rewinds count when the partition's fetch
	// position was set back (a restore that waited on an open
	// transaction): polls taken before hold records of it from before.
	rewound uint64
	// firstDropped is the first offset of the records polled while the
	// partition's restore waited (-1: none): without a restored
	// position, its input resumes there.
	firstDropped int64
	// dropped is set when a rebalance callback drops the partition (c.mu
	// held): a restore's changelog readers, which do not take c.mu, stop
	// reading it.
	dropped atomic.Bool
}

// flushCounts adds the outcomes counted since the last flush to the
// records counters: once per poll rather than once per record.
func (p *partition) flushCounts() {
	for o, n := range p.counts {
		if n > 0 {
			p.records[o].Add(float64(n))
			p.counts[o] = 0
		}
	}
}
