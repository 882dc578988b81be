package consumer

import "github.com/prometheus/client_golang/prometheus"

// A topicPartition names an input partition.
type topicPartition struct {
	topic     string
	partition int32
}

// partitions are the assigned input partitions, by name and by dense id,
// and the dense id of each input topic's partition 0 (base: set once, by
// connect, before the fetcher reads it).
type partitions struct {
	base  map[string]int32
	group int32                         // the input topics' partitions in all (set by connect, with base)
	byTP  map[topicPartition]*partition // of both stages
	byID  map[int32]*partition          // the pipeline's (with repartition: the repartition partitions)
	// input is stage 1 of source.partitioning repartition, which owns the
	// input partitions then; nil for by_key.
	input *stage1
}

// partition is an assigned input partition: its names and metrics (its
// progress is the pipeline's).
type partition struct {
	tp topicPartition
	id int32 // the dense id: engine partition and changelog partition (stage 1's partition id)
	// input: an input partition of stage 1 (source.partitioning
	// repartition); its progress is stage 1's.
	input bool

	records [6]prometheus.Counter // by windowing.OutcomeKind (pipeline.Outcome)
	counts  [6]uint64             // outcomes not yet added to records
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
