package producer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/pipeline"
	"aggregator/internal/windowing"
)

// Client is what a Writer needs from Kafka. *kgo.Client has it; tests use
// a fake that keeps the records.
type Client interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Writer turns pipeline outputs into Kafka records. It remembers the first
// produce failure (Err): the consumer must not commit past it.
type Writer struct {
	cl      Client
	sink    config.Sink
	names   []string
	now     func() time.Time
	fetched time.Time // when the record being processed was fetched

	firings  [3]prometheus.Counter // by windowing.Firing
	produced map[string]prometheus.Counter
	failed   map[string]prometheus.Counter
	latency  prometheus.Observer

	mu  sync.Mutex
	err error
}

// NewWriter returns a Writer producing with cl. m may be nil (no metrics);
// now is the wall clock, for the end-to-end latency.
func NewWriter(cl Client, cfg config.Config, m *metrics.Metrics, now func() time.Time) *Writer {
	w := &Writer{cl: cl, sink: cfg.Sink, now: now, produced: map[string]prometheus.Counter{}, failed: map[string]prometheus.Counter{}}
	for _, a := range cfg.Aggregates {
		w.names = append(w.names, a.Name)
	}
	if m == nil {
		m = metrics.New(prometheus.NewRegistry())
	}
	for _, f := range []windowing.Firing{windowing.OnTime, windowing.Late, windowing.Final} {
		w.firings[f] = m.Firings.WithLabelValues(f.String())
	}
	for _, topic := range []string{cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic} {
		w.produced[topic] = m.Produced.WithLabelValues(topic)
		w.failed[topic] = m.ProduceErrors.WithLabelValues(topic)
	}
	w.latency = m.Latency
	return w
}

// SetFetched records when the records about to be processed were fetched;
// results they cause observe the latency from then to their acknowledgement.
func (w *Writer) SetFetched(t time.Time) { w.fetched = t }

// Result produces one window firing to the results topic.
func (w *Writer) Result(r *windowing.Result) {
	w.firings[r.Firing].Inc()
	rec := &kgo.Record{
		Topic: w.sink.ResultsTopic,
		Key:   ResultKey(nil, r),
		Value: AppendResult(make([]byte, 0, 256), r, w.names),
	}
	fetched := w.fetched
	w.cl.Produce(context.Background(), rec, func(rec *kgo.Record, err error) {
		if w.acked(rec, err) && !fetched.IsZero() {
			w.latency.Observe(w.now().Sub(fetched).Seconds())
		}
	})
}

// Late produces the original record to the late topic with its provenance.
func (w *Writer) Late(in *pipeline.Input, eventTime, watermark int64, missed windowing.Window) {
	w.produceOriginal(w.sink.LateTopic, in, LateHeaders(in, eventTime, watermark, missed))
}

// DeadLetter produces the original record to the dead-letter topic with
// the error as its reason.
func (w *Writer) DeadLetter(in *pipeline.Input, err error) {
	if w.sink.DeadLetterTopic == "" {
		return // dead letters are optional: the records_total outcome still counts it
	}
	w.produceOriginal(w.sink.DeadLetterTopic, in, DeadLetterHeaders(in, err))
}

func (w *Writer) produceOriginal(topic string, in *pipeline.Input, headers []kgo.RecordHeader) {
	rec := &kgo.Record{
		Topic:     topic,
		Key:       in.Key,
		Value:     in.Value,
		Timestamp: time.UnixMilli(in.Timestamp),
		Headers:   headers,
	}
	w.cl.Produce(context.Background(), rec, func(rec *kgo.Record, err error) { w.acked(rec, err) })
}

// acked counts an acknowledgement and keeps the first failure; it reports
// whether the record was written.
func (w *Writer) acked(rec *kgo.Record, err error) bool {
	if err == nil {
		w.produced[rec.Topic].Inc()
		return true
	}
	w.failed[rec.Topic].Inc()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("produce to %s: %w", rec.Topic, err)
	}
	return false
}

// Err returns the first produce failure, or nil.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
