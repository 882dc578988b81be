package producer

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/ready"
)

// Client is what a Writer needs from Kafka. *kgo.Client has it; tests use
// a fake that keeps the records.
type Client interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Writer turns pipeline outputs into Kafka records. Result, Late,
// DeadLetter, SetFetched, Send, Sync and Close are called from one
// goroutine at a time (the engine's); results are copied there and
// encoded and produced by the Writer's own goroutine, in emission order,
// so that the engine goroutine does not wait for encoding or Produce.
// Outputs are produced once Send or Sync hands them over (or a batch
// fills). It remembers the first produce failure (Err): the consumer must
// not commit past it. The promises run on the client's goroutines.
type Writer struct {
	cl   Client
	sink config.Sink
	now  func() time.Time
	log  zerolog.Logger
	ref  refusals // the first failure and the outputs refused per record

	res                resultsTopic
	late, dead         topicMetrics
	lateDone, deadDone func(*kgo.Record, error)

	q batcher // the outputs on their way to the writer goroutine

	changelog changelogTopic
	repart    repartitionTopic
	published watermarkTopic
}

// topicMetrics are one output topic's counters.
type topicMetrics struct{ produced, failed prometheus.Counter }

// NewWriter returns a Writer producing with cl, and starts its goroutine;
// Close stops it. m may be nil (no metrics); now is the wall clock, for
// the end-to-end latency; limits are the output topics' sizes; log gets
// the warn lines of outputs that cannot be written whole.
func NewWriter(cl Client, cfg config.Config, m *metrics.Metrics, now func() time.Time, limits Limits, log zerolog.Logger) *Writer {
	w := &Writer{cl: cl, sink: cfg.Sink, now: now,
		log: log.With().Str("component", "producer").Logger()}
	w.res.name, w.res.enc, w.res.current = cfg.Sink.ResultsTopic, EncoderFor(cfg), cfg.State.ConfigVersion
	w.res.values = w.res.enc
	if cfg.ExactlyOnce() {
		w.res.uncommitted = new([6]int64)
	}
	if m == nil {
		m = metrics.New(prometheus.NewRegistry())
	}
	for _, f := range ready.Firings {
		w.res.firings[f] = m.Firings.WithLabelValues(f.String())
	}
	topic := func(name string) topicMetrics {
		m.Unwritable.WithLabelValues(name) // at 0 from the start, for dashboards and absent() alerts
		return topicMetrics{m.Produced.WithLabelValues(name), m.ProduceErrors.WithLabelValues(name)}
	}
	w.res.metrics, w.late, w.dead = topic(cfg.Sink.ResultsTopic), topic(cfg.Sink.LateTopic), topic(cfg.Sink.DeadLetterTopic)
	w.res.latency = m.Latency
	w.ref = refusals{results: cfg.Sink.ResultsTopic, limits: limits, seed: maphash.MakeSeed(), now: now, log: w.log,
		unwritableCount: func(topic string) prometheus.Counter { return m.Unwritable.WithLabelValues(topic) }}
	w.res.pool.New = func() any { return new(resultRecord) }
	// Promises are made once, not per record: a closure per record is an
	// allocation per record.
	w.lateDone = func(rec *kgo.Record, err error) { w.acked(&w.late, rec, err) }
	w.deadDone = func(rec *kgo.Record, err error) { w.acked(&w.dead, rec, err) }
	w.res.copiedDone = func(rec *kgo.Record, err error) { w.acked(&w.res.metrics, rec, err) }
	w.changelog = changelogTopic{name: cfg.State.ChangelogTopic, records: m.ChangelogRecords}
	if !cfg.Source.ByKey() {
		w.repart = repartitionTopic{name: cfg.State.RepartitionTopic,
			keys:    kgo.StickyKeyPartitioner(nil).ForTopic(cfg.State.RepartitionTopic),
			metrics: topic(cfg.State.RepartitionTopic), bytes: m.RepartitionBytes}
		w.repart.done = func(rec *kgo.Record, err error) {
			if w.acked(&w.repart.metrics, rec, err) {
				return
			}
			w.ref.fail(fmt.Errorf("produce to repartition topic %s[%d]: %w", rec.Topic, rec.Partition, err))
		}
	}
	if cfg.PublishesWatermarks() {
		name := cfg.State.WatermarkTopic
		w.published.metrics = topicMetrics{m.Produced.WithLabelValues(name), m.ProduceErrors.WithLabelValues(name)}
	}
	w.published.done = func(r *kgo.Record, err error) {
		if err == nil {
			w.published.metrics.produced.Inc()
			return
		}
		w.published.metrics.failed.Inc()
		w.ref.fail(fmt.Errorf("produce to watermark topic %s: %w", r.Topic, err))
	}
	w.changelog.done = func(r *kgo.Record, err error) {
		if err != nil {
			w.ref.fail(fmt.Errorf("produce to changelog %s[%d]: %w", r.Topic, r.Partition, err))
		}
	}
	w.setResultDone()
	w.q.start(w.res.done, w.write)
	return w
}

// SetFetched records when the records about to be processed were fetched;
// results they cause observe the latency from then to their acknowledgement.
func (w *Writer) SetFetched(t time.Time) {
	if !t.Equal(w.res.fetched) {
		w.res.fetched = t
		w.setResultDone()
		if len(w.q.cur.outs) > 0 {
			w.Send()
		}
		w.q.cur.resultDone = w.res.done
	}
}

// setResultDone makes the results' promise for the current fetch time.
// Once a result is acknowledged its record is reused.
func (w *Writer) setResultDone() {
	fetched := w.res.fetched
	w.res.done = func(rec *kgo.Record, err error) {
		if w.acked(&w.res.metrics, rec, err) && !fetched.IsZero() {
			w.res.latency.Observe(w.now().Sub(fetched).Seconds())
		}
		w.res.release((*resultRecord)(unsafe.Pointer(rec))) // rec is the first field of a resultRecord
	}
}

// Write queues a Ready's outputs, in order.
func (w *Writer) Write(outs []ready.Output) {
	for i := range outs {
		o := &outs[i]
		switch o.Kind {
		case ready.Result:
			w.Result(&o.Result)
		case ready.Late:
			w.Late(&o.Event.In, o.Event.EventTime, o.Event.Watermark, o.Event.Missed)
		case ready.DeadLetter:
			w.DeadLetter(&o.Event.In, o.Event.Err)
		case ready.Repartition:
			w.repartitionData(o.Repart)
		case ready.Marker:
			w.repartitionMarker(o.Repart)
		}
	}
}

// Result queues one window firing for the results topic.
func (w *Writer) Result(r *ready.WindowResult) {
	if w.res.uncommitted != nil {
		w.res.uncommitted[r.Firing]++
	} else {
		w.res.firings[r.Firing].Inc()
	}
	b := w.q.cur
	lo := len(b.vals)
	b.vals = append(b.vals, r.Aggregates...)
	b.outs = append(b.outs, output{res: len(b.results), lo: lo, hi: len(b.vals)})
	b.results = append(b.results, *r)
	b.results[len(b.results)-1].Aggregates = nil
	w.sendIfFull()
}

// Send hands the outputs so far to the writer goroutine.
func (w *Writer) Send() { w.q.send(w.res.done) }

// Sync hands the outputs so far to the writer goroutine and returns once
// each has been given to the client: a client Flush after Sync waits for
// every output so far to be acknowledged.
func (w *Writer) Sync() { w.q.sync(w.res.done) }

// Close stops the writer goroutine; outputs not yet handed to the client
// are dropped (a crash, as far as they are concerned: nothing past them was
// committed). Produce calls blocked on a full buffer are canceled.
func (w *Writer) Close() { w.q.close() }

// add queues an output that is a record.
func (w *Writer) add(o output) {
	w.q.cur.outs = append(w.q.cur.outs, o)
	w.sendIfFull()
}

func (w *Writer) sendIfFull() {
	if len(w.q.cur.outs) >= batchOutputs {
		w.Send()
	}
}

// write produces a batch's outputs in order. Its results share one
// timestamp, so the client does not read the clock for each.
func (w *Writer) write(ctx context.Context, b *batch) {
	now := w.now()
	for i := range b.outs {
		o := &b.outs[i]
		if o.rec != nil {
			w.produce(ctx, o.rec, o.done, o.alone)
			continue
		}
		r := &b.results[o.res]
		r.Aggregates = b.vals[o.lo:o.hi]
		w.produceResult(ctx, r, now, b.resultDone)
	}
}

// produceResult encodes a result into a reused record and produces it.
func (w *Writer) produceResult(ctx context.Context, r *ready.WindowResult, now time.Time, done func(*kgo.Record, error)) {
	out := w.res.record(r, now)
	if r.Firing == ready.Retract { // a tombstone: produced as it is
		w.cl.Produce(ctx, &out.rec, done)
		return
	}
	rec, alone := w.ref.replacement(&out.rec)
	if rec == nil {
		w.res.release(out)
		return
	}
	w.produce(ctx, rec, done, alone)
}

// EncodeResults makes w write result values with enc (sink.format avro)
// instead of JSON; keys stay JSON. Call it before the first output.
func (w *Writer) EncodeResults(enc ResultEncoder) { w.res.values = enc }

// Generation makes w encode the results of the generation of windows of
// state.config_version version with enc (docs/changing-config.md: a generation whose
// aggregates are not the config's; EncoderFor of its config, or an Avro
// encoder of its schema). Call it before the first result of that
// generation is handed to w; it is safe while the writer goroutine
// writes.
func (w *Writer) Generation(version int64, enc ResultEncoder) {
	next := map[int64]ResultEncoder{}
	if m := w.res.gens.Load(); m != nil {
		maps.Copy(next, *m)
	}
	next[version] = enc
	w.res.gens.Store(&next)
}

// Late produces the original record to the late topic with its provenance.
func (w *Writer) Late(in *ready.Input, eventTime, watermark int64, missed ready.Window) {
	w.produceOriginal(w.sink.LateTopic, in, LateHeaders(in, eventTime, watermark, missed), w.lateDone)
}

// DeadLetter produces the original record to the dead-letter topic with
// the error as its reason.
func (w *Writer) DeadLetter(in *ready.Input, err error) {
	if w.sink.DeadLetterTopic == "" {
		return // dead letters are optional: the records_total outcome still counts it
	}
	w.produceOriginal(w.sink.DeadLetterTopic, in, DeadLetterHeaders(in, err), w.deadDone)
}

// produceOriginal queues the original record; its headers are made now,
// as in is valid only during the call.
func (w *Writer) produceOriginal(topic string, in *ready.Input, headers []kgo.RecordHeader, done func(*kgo.Record, error)) {
	rec, alone := w.ref.replacement(&kgo.Record{
		Topic:     topic,
		Key:       in.Key,
		Value:     in.Value,
		Timestamp: time.UnixMilli(in.Timestamp),
		Headers:   headers,
	})
	if rec == nil {
		return
	}
	w.add(output{rec: rec, done: done, alone: alone})
}

// acked counts an acknowledgement and keeps the first failure; it reports
// whether the record was written.
func (w *Writer) acked(m *topicMetrics, rec *kgo.Record, err error) bool {
	if err == nil {
		m.produced.Inc()
		return true
	}
	m.failed.Inc()
	w.ref.failed(rec, err)
	return false
}

// Err returns the first produce failure, or nil.
func (w *Writer) Err() error { return w.ref.firstErr() }

// OnlyRefused reports whether there is a failure and every failure since
// the last Discard or RewriteRefused was an output refused for itself (too
// large, invalid): writing stubs in their place fixes it.
func (w *Writer) OnlyRefused() bool { return w.ref.onlyRefused() }

// Committed forgets the outputs refused per record: the commit that just
// succeeded put them (written alone or as stubs) behind every offset the
// service can go back to. Until then every output is looked up among
// them, and they would pile up over a long run.
// With exactly_once the transaction's firings reach their counter.
func (w *Writer) Committed() {
	w.ref.committed()
	if u := w.res.uncommitted; u != nil {
		for f, n := range u {
			if n > 0 {
				w.res.firings[f].Add(float64(n))
			}
		}
		*u = [6]int64{}
	}
}

// Discard forgets a recorded failure: the transaction it belonged to was
// aborted, and everything since the last commit is processed again.
// Outputs refused per record stay remembered: their reprocessing writes
// stubs. With exactly_once the transaction's firings are forgotten.
func (w *Writer) Discard() {
	w.ref.discard()
	if u := w.res.uncommitted; u != nil {
		*u = [6]int64{}
	}
}

// RewriteRefused produces again, each alone, the outputs refused with a
// per-record error since the last call, or in their place the stubs of
// those refused alone already (results: nothing); if no other failure
// happened, it forgets the failure and reports true. With at_least_once,
// a flush that failed for those alone is followed by this and another
// flush. No produce may be under way.
func (w *Writer) RewriteRefused(ctx context.Context) bool {
	recs := w.ref.takeRefused()
	if recs == nil {
		return false
	}
	for _, r := range recs {
		done := w.deadDone
		switch r.Topic {
		case w.sink.ResultsTopic:
			done = w.res.copiedDone
		case w.sink.LateTopic:
			done = w.lateDone
		}
		if rec, alone := w.ref.replacement(r); rec != nil {
			w.produce(ctx, rec, done, alone)
		}
	}
	return true
}

// produce produces r, alone in its batch if alone: the client's buffer is
// flushed before and after.
func (w *Writer) produce(ctx context.Context, r *kgo.Record, done func(*kgo.Record, error), alone bool) {
	f, ok := w.cl.(interface{ Flush(context.Context) error })
	if !alone || !ok {
		w.cl.Produce(ctx, r, done)
		return
	}
	_ = f.Flush(ctx) // a failure is the promise's to report
	w.cl.Produce(ctx, r, done)
	_ = f.Flush(ctx)
}
