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
// produce failure (Err): the consumer must not commit past it. Result,
// Late, DeadLetter and SetFetched are called from one goroutine; the
// promises run on the client's.
type Writer struct {
	cl    Client
	sink  config.Sink
	names []string
	now   func() time.Time

	firings             [3]prometheus.Counter // by windowing.Firing
	results, late, dead topicMetrics
	latency             prometheus.Observer
	fetched             time.Time                // when the records being processed were fetched
	resultDone          func(*kgo.Record, error) // the promise of results caused by those records
	lateDone, deadDone  func(*kgo.Record, error)

	mu  sync.Mutex
	err error
}

// topicMetrics are one output topic's counters.
type topicMetrics struct{ produced, failed prometheus.Counter }

// resultSize is the room for a result's key and value that comes with its
// record: the record and the bytes are one allocation (512 bytes, a size
// class). A longer result grows out of it.
const resultSize = 352

// resultRecord is a result's Kafka record and the bytes of its key and value.
type resultRecord struct {
	rec kgo.Record
	buf [resultSize]byte
}

// NewWriter returns a Writer producing with cl. m may be nil (no metrics);
// now is the wall clock, for the end-to-end latency.
func NewWriter(cl Client, cfg config.Config, m *metrics.Metrics, now func() time.Time) *Writer {
	w := &Writer{cl: cl, sink: cfg.Sink, now: now}
	for _, a := range cfg.Aggregates {
		w.names = append(w.names, a.Name)
	}
	if m == nil {
		m = metrics.New(prometheus.NewRegistry())
	}
	for _, f := range []windowing.Firing{windowing.OnTime, windowing.Late, windowing.Final} {
		w.firings[f] = m.Firings.WithLabelValues(f.String())
	}
	topic := func(name string) topicMetrics {
		return topicMetrics{m.Produced.WithLabelValues(name), m.ProduceErrors.WithLabelValues(name)}
	}
	w.results, w.late, w.dead = topic(cfg.Sink.ResultsTopic), topic(cfg.Sink.LateTopic), topic(cfg.Sink.DeadLetterTopic)
	w.latency = m.Latency
	// Promises are made once, not per record: a closure per record is an
	// allocation per record.
	w.lateDone = func(rec *kgo.Record, err error) { w.acked(&w.late, rec, err) }
	w.deadDone = func(rec *kgo.Record, err error) { w.acked(&w.dead, rec, err) }
	w.setResultDone()
	return w
}

// SetFetched records when the records about to be processed were fetched;
// results they cause observe the latency from then to their acknowledgement.
func (w *Writer) SetFetched(t time.Time) {
	if !t.Equal(w.fetched) {
		w.fetched = t
		w.setResultDone()
	}
}

// setResultDone makes the results' promise for the current fetch time.
func (w *Writer) setResultDone() {
	fetched := w.fetched
	w.resultDone = func(rec *kgo.Record, err error) {
		if w.acked(&w.results, rec, err) && !fetched.IsZero() {
			w.latency.Observe(w.now().Sub(fetched).Seconds())
		}
	}
}

// Result produces one window firing to the results topic.
func (w *Writer) Result(r *windowing.Result) {
	w.firings[r.Firing].Inc()
	out := new(resultRecord)
	b := ResultKey(out.buf[:0], r)
	k := len(b)
	b = AppendResult(b, r, w.names)
	out.rec = kgo.Record{Topic: w.sink.ResultsTopic, Key: b[:k:k], Value: b[k:]}
	w.cl.Produce(context.Background(), &out.rec, w.resultDone)
}

// Late produces the original record to the late topic with its provenance.
func (w *Writer) Late(in *pipeline.Input, eventTime, watermark int64, missed windowing.Window) {
	w.produceOriginal(w.sink.LateTopic, in, LateHeaders(in, eventTime, watermark, missed), w.lateDone)
}

// DeadLetter produces the original record to the dead-letter topic with
// the error as its reason.
func (w *Writer) DeadLetter(in *pipeline.Input, err error) {
	if w.sink.DeadLetterTopic == "" {
		return // dead letters are optional: the records_total outcome still counts it
	}
	w.produceOriginal(w.sink.DeadLetterTopic, in, DeadLetterHeaders(in, err), w.deadDone)
}

func (w *Writer) produceOriginal(topic string, in *pipeline.Input, headers []kgo.RecordHeader, done func(*kgo.Record, error)) {
	rec := &kgo.Record{
		Topic:     topic,
		Key:       in.Key,
		Value:     in.Value,
		Timestamp: time.UnixMilli(in.Timestamp),
		Headers:   headers,
	}
	w.cl.Produce(context.Background(), rec, done)
}

// acked counts an acknowledgement and keeps the first failure; it reports
// whether the record was written.
func (w *Writer) acked(m *topicMetrics, rec *kgo.Record, err error) bool {
	if err == nil {
		m.produced.Inc()
		return true
	}
	m.failed.Inc()
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
