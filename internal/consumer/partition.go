package consumer

import "github.com/prometheus/client_golang/prometheus"

// A topicPartition names an input partition.
type topicPartition struct {
	topic     string
	partition int32
}

// partition is the consumer's bookkeeping for one assigned input partition.
type partition struct {
	tp       topicPartition
	id       int32 // the dense id: engine partition and changelog partition
	restored bool  // its changelog was read; until then none of its records is applied
	start    int64 // the offset the restored state reflects (-1: none): records below it are skipped
	next     int64 // offset after the last applied record; -1 before the first
	hwm      int64 // high watermark of the last fetch with records; -1 unknown

	records [6]prometheus.Counter // by pipeline.Outcome
	counts  [6]uint64             // outcomes not yet added to records
	lag     prometheus.Gauge
	wm      prometheus.Gauge
}

// position is the offset to commit for p, or -1 when it has none.
func (p *partition) position() int64 {
	if p.next >= 0 {
		return p.next
	}
	return p.start
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
