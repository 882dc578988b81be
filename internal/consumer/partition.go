package consumer

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"aggregator/internal/watermark"
)

// maxPartition bounds partition numbers, so that (topic, partition) maps to
// one engine partition id: topic index << partitionBits | partition.
const partitionBits = 20

// A topicPartition names an input partition.
type topicPartition struct {
	topic     string
	partition int32
}

// partition is the consumer's bookkeeping for one assigned input partition.
type partition struct {
	tp      topicPartition
	id      int32 // the engine's partition id
	next    int64 // offset after the last processed record; -1 before the first
	hwm     int64 // high watermark of the last fetch with records; -1 unknown
	start   int64 // committed offset at assignment; -1 none or unknown
	history history

	// A rebuild re-reads from the committed offset up to emitted with every
	// output muted, the merged watermark held to the recorded steps by a
	// phantom partition in the engine.
	rebuilding bool
	emitted    int64
	finalW     int64
	steps      []Step
	step       int   // index of the step in effect
	phantomW   int64 // the phantom's watermark

	records [6]prometheus.Counter // by pipeline.Outcome
	counts  [6]uint64             // outcomes not yet added to records
	lag     prometheus.Gauge
	wm      prometheus.Gauge
}

// phantom is the engine id of the partition that holds the merged
// watermark during p's rebuild.
func (p *partition) phantom() int32 { return -1 - p.id }

// muted reports whether outputs of the record at offset are suppressed:
// they were acknowledged before the last commit.
func (p *partition) muted(offset int64) bool { return p.rebuilding && offset < p.emitted }

// stepAt returns the recorded watermark for the record at offset.
func (p *partition) stepAt(offset int64) int64 {
	for p.step+1 < len(p.steps) && p.steps[p.step+1].Offset <= offset {
		p.step++
	}
	if len(p.steps) == 0 || p.steps[p.step].Offset > offset {
		return math.MinInt64
	}
	return p.steps[p.step].W
}

// holdAt returns the state that pins the phantom to w.
func holdAt(w int64) watermark.State {
	return watermark.State{MaxTimestamp: math.MinInt64, Watermark: w}
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
