package producer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// watermarkTopic is where by_key with watermark.scope global publishes
// the watermarks of the partitions this instance owns (state.watermark_topic).
type watermarkTopic struct {
	metrics topicMetrics
	done    func(*kgo.Record, error) // its records' promise: a failure is the Writer's
}

// Publish produces records of the watermark topic, each to the partition
// it names; a failure is the Writer's (Err), as Changelog's are. Called
// from the engine goroutine; the client holds recs until it acknowledges
// them.
func (w *Writer) Publish(ctx context.Context, recs []kgo.Record) {
	for i := range recs {
		w.cl.Produce(ctx, &recs[i], w.published.done)
	}
}
