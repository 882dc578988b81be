package producer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/ready"
)

// changelogTopic is where the window state's changes go: the changelog
// partition of each input partition (state.changelog_topic).
type changelogTopic struct {
	name    string
	done    func(*kgo.Record, error) // its records' promise: a failure is the Writer's
	records prometheus.Counter
}

// Changelog produces changelog records, each to the changelog partition it
// names (the client's partitioner must send it there); a failure is the
// Writer's (Err), like a failed output. Called from the engine goroutine,
// like the outputs.
func (w *Writer) Changelog(ctx context.Context, recs []ready.Changelog) {
	krs := make([]kgo.Record, len(recs)) // one allocation, not one per record
	for i := range recs {
		r := &recs[i]
		kr := &krs[i]
		*kr = kgo.Record{Topic: w.changelog.name, Partition: r.Partition, Key: r.Key, Value: r.Value}
		if r.Value == nil {
			kr.Headers = []kgo.RecordHeader{{Key: ready.TagHeader, Value: ready.AppendTag(nil, r.Tag)}}
		}
		w.cl.Produce(ctx, kr, w.changelog.done)
	}
	w.changelog.records.Add(float64(len(recs)))
}
