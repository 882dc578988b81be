package producer_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// fakeClient keeps copies of the records (the Writer reuses a result's
// record once acknowledged) and acknowledges them at once with err.
type fakeClient struct {
	recs []*kgo.Record
	err  error
}

func (f *fakeClient) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	c := *r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	f.recs = append(f.recs, &c)
	promise(r, f.err)
}

// newWriter returns a Writer that is closed when the test ends.
func newWriter(t testing.TB, cl producer.Client, cfg config.Config, m *metrics.Metrics, now func() time.Time) *producer.Writer {
	w := producer.NewWriter(cl, cfg, m, now, nil, zerolog.Nop())
	t.Cleanup(w.Close)
	return w
}

func sinkConfig() config.Config {
	return config.Config{
		Sink:       config.Sink{ResultsTopic: "res", LateTopic: "late", DeadLetterTopic: "dlq"},
		Aggregates: []config.Aggregate{{Name: "calls", Fn: "count"}},
	}
}

func TestWriterRoutesOutputs(t *testing.T) {
	cl := &fakeClient{}
	m := metrics.New(prometheus.NewRegistry())
	produced := time.UnixMilli(1922350209000)
	w := newWriter(t, cl, sinkConfig(), m, func() time.Time { return produced })
	in := &ready.Input{Topic: "calls", KafkaPartition: 2, Offset: 7, Key: []byte("k"), Value: []byte("v"), Timestamp: 1234}
	r := &windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: 0, End: 5000}, Count: 1,
		Aggregates: []record.Value{record.Number(1)}, Firing: windowing.Late, Revision: 1}
	w.Result(r)
	w.Late(in, 1000, 6999, windowing.Window{Start: 0, End: 5000})
	w.DeadLetter(in, &record.DecodeError{Reason: "bad_json"})
	if len(cl.recs) != 0 {
		t.Fatalf("produced %d records before Sync, want 0: outputs wait to be handed over", len(cl.recs))
	}
	w.Sync()
	if len(cl.recs) != 3 {
		t.Fatalf("produced %d records, want 3", len(cl.recs))
	}
	res, late, dlq := cl.recs[0], cl.recs[1], cl.recs[2]
	if res.Topic != "res" || string(res.Key) != string(producer.NewEncoder(nil).AppendKey(nil, r)) || !strings.Contains(string(res.Value), `"revision":1`) {
		t.Errorf("result record = %s %s %s", res.Topic, res.Key, res.Value)
	}
	if !res.Timestamp.Equal(produced) {
		t.Errorf("result timestamp = %v, want the wall clock when produced, %v", res.Timestamp, produced)
	}
	for _, rec := range []*kgo.Record{late, dlq} {
		if string(rec.Key) != "k" || string(rec.Value) != "v" || rec.Timestamp.UnixMilli() != 1234 {
			t.Errorf("%s record = key %q value %q ts %v, want the original", rec.Topic, rec.Key, rec.Value, rec.Timestamp)
		}
	}
	if late.Topic != "late" || dlq.Topic != "dlq" {
		t.Errorf("topics = %s, %s; want late, dlq", late.Topic, dlq.Topic)
	}
	if got := value(m.Produced.WithLabelValues("res")); got != 1 {
		t.Errorf("produced{res} = %v, want 1", got)
	}
	if got := value(m.Firings.WithLabelValues("late")); got != 1 {
		t.Errorf("firings{late} = %v, want 1", got)
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err() = %v, want nil", err)
	}
}

func TestWriterKeepsFirstError(t *testing.T) {
	boom := errors.New("boom")
	cl := &fakeClient{err: boom}
	m := metrics.New(prometheus.NewRegistry())
	w := newWriter(t, cl, sinkConfig(), m, time.Now)
	in := &ready.Input{Topic: "calls"}
	w.Late(in, 0, 0, windowing.Window{})
	w.Sync()
	if err := w.Err(); !errors.Is(err, boom) {
		t.Errorf("Err() = %v, want %v", err, boom)
	}
	if got := value(m.ProduceErrors.WithLabelValues("late")); got != 1 {
		t.Errorf("produce_errors{late} = %v, want 1", got)
	}
}

func TestWriterWithoutDeadLetterTopic(t *testing.T) {
	cl := &fakeClient{}
	cfg := sinkConfig()
	cfg.Sink.DeadLetterTopic = ""
	w := newWriter(t, cl, cfg, nil, time.Now)
	w.DeadLetter(&ready.Input{}, &record.DecodeError{Reason: "bad_json"})
	w.Sync()
	if len(cl.recs) != 0 {
		t.Errorf("produced %d records without a dead-letter topic, want 0", len(cl.recs))
	}
}

// discard acknowledges every record at once and keeps none.
type discard struct{}

func (discard) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, nil)
}

func sampleResult() *windowing.Result {
	return &windowing.Result{Key: `{"sid":"sid_42"}`, Window: windowing.Window{Start: 1_900_000_000_000, End: 1_900_000_005_000},
		Count: 25, Aggregates: []record.Value{record.Number(123), record.Number(25)}, Firing: windowing.OnTime, Watermark: 1_900_000_004_999}
}

func resultConfig() config.Config {
	cfg := sinkConfig()
	cfg.Aggregates = []config.Aggregate{{Name: "total", Fn: "sum", Field: "d"}, {Name: "calls", Fn: "count"}}
	return cfg
}

// Results allocate nothing once the Writer is warm: batches are reused,
// and so is a result's record once acknowledged. A Sync costs a channel.
func TestWriterResultsReuseMemory(t *testing.T) {
	w := newWriter(t, discard{}, resultConfig(), nil, time.Now)
	w.SetFetched(time.Now())
	r := sampleResult()
	const perSync = 100
	limit := 2.0
	if raceEnabled {
		limit = perSync / 2 // the pool drops about a quarter under -race
	}
	if got := testing.AllocsPerRun(100, func() {
		for range perSync {
			w.Result(r)
		}
		w.Sync()
	}); got > limit {
		t.Errorf("%d results and a Sync allocate %v times, want at most %v", perSync, got, limit)
	}
}

// Outputs reach the client in emission order, across batches and topics.
func TestWriterKeepsEmissionOrder(t *testing.T) {
	cl := &fakeClient{}
	w := newWriter(t, cl, resultConfig(), nil, time.Now)
	in := &ready.Input{Topic: "calls", Key: []byte("k"), Value: []byte("v")}
	enc := producer.NewEncoder([]string{"total", "calls"})
	var want []string
	for i := range 3000 {
		if i%700 == 0 {
			w.Late(in, 0, 0, windowing.Window{})
			want = append(want, "late")
		}
		r := sampleResult()
		r.Revision = int64(i)
		w.Result(r)
		want = append(want, string(enc.AppendResult(nil, r)))
		if i%1000 == 999 {
			w.Send()
		}
	}
	w.Sync()
	if len(cl.recs) != len(want) {
		t.Fatalf("produced %d records, want %d", len(cl.recs), len(want))
	}
	for i, rec := range cl.recs {
		got := string(rec.Value)
		if rec.Topic == "late" {
			got = "late"
		}
		if got != want[i] {
			t.Fatalf("record %d = %s, want %s", i, got, want[i])
		}
	}
}

// blocked is a client whose Produce waits until its context is canceled,
// as kgo's does while its buffer is full.
type blocked struct{ entered chan struct{} }

func (b blocked) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	close(b.entered)
	<-ctx.Done()
	promise(r, ctx.Err())
}

// Close returns while a Produce is blocked, and drops what was queued.
func TestWriterCloseCancelsBlockedProduce(t *testing.T) {
	cl := blocked{entered: make(chan struct{})}
	w := producer.NewWriter(cl, resultConfig(), nil, time.Now, nil, zerolog.Nop())
	w.Result(sampleResult())
	w.Send()
	<-cl.entered
	w.Result(sampleResult()) // queued behind the blocked one: dropped
	w.Send()
	w.Close()
	if err := w.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v, want context.Canceled", err)
	}
}

// SetFetched's promise observes the latency of each acknowledged result.
func TestWriterObservesLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	fetched := time.Unix(1000, 0)
	w := newWriter(t, discard{}, resultConfig(), m, func() time.Time { return fetched.Add(3 * time.Millisecond) })
	w.Result(sampleResult()) // no fetch time yet: no latency
	w.SetFetched(fetched)
	w.Result(sampleResult())
	w.Result(sampleResult())
	w.Sync()
	var pb dto.Metric
	if err := m.Latency.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if n, sum := pb.GetHistogram().GetSampleCount(), pb.GetHistogram().GetSampleSum(); n != 2 || sum < 0.0059 || sum > 0.0061 {
		t.Errorf("latency = %d samples summing %vs, want 2 summing 0.006s", n, sum)
	}
}

func BenchmarkWriterResult(b *testing.B) {
	w := newWriter(b, discard{}, resultConfig(), nil, time.Now)
	w.SetFetched(time.Now())
	r := sampleResult()
	b.ReportAllocs()
	for b.Loop() {
		w.Result(r)
	}
	w.Sync()
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestWriterRetraction: a retracted session is a tombstone (null value)
// under the Kafka key its results had, and counts as firing "retract".
func TestWriterRetraction(t *testing.T) {
	cl := &fakeClient{}
	m := metrics.New(prometheus.NewRegistry())
	w := newWriter(t, cl, sinkConfig(), m, time.Now)
	r := &windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: 1000, End: 4000}, Count: 2,
		Aggregates: []record.Value{record.Number(2)}, Firing: windowing.OnTime}
	w.Result(r)
	retract := &windowing.Result{Key: r.Key, Window: r.Window, Aggregates: []record.Value{{}}, Firing: windowing.Retract}
	w.Result(retract)
	w.Sync()
	if len(cl.recs) != 2 {
		t.Fatalf("produced %d records, want 2", len(cl.recs))
	}
	res, tomb := cl.recs[0], cl.recs[1]
	if tomb.Topic != "res" || string(tomb.Key) != string(res.Key) || tomb.Value != nil {
		t.Errorf("retraction = %s key %s value %q, want a tombstone on res under the result's key %s", tomb.Topic, tomb.Key, tomb.Value, res.Key)
	}
	if got := value(m.Firings.WithLabelValues("retract")); got != 1 {
		t.Errorf("firings{retract} = %v, want 1", got)
	}
}

// TestWriterResultConfigVersion: a result carries the header
// aggregator.config_version, its generation's state.config_version
// (docs/results.md#the-results-topic); results of two generations interleaved each carry their own.
func TestWriterResultConfigVersion(t *testing.T) {
	cl := &fakeClient{}
	w := newWriter(t, cl, sinkConfig(), nil, time.Now)
	for _, gen := range []int64{3, 4, 3, 0} {
		r := &windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: 0, End: 5000}, Count: 1,
			Aggregates: []record.Value{record.Number(1)}, Generation: gen}
		w.Result(r)
	}
	w.Sync()
	var got []string
	for _, rec := range cl.recs {
		for _, h := range rec.Headers {
			if h.Key == producer.HeaderConfigVersion {
				got = append(got, string(h.Value))
			}
		}
	}
	if want := []string{"3", "4", "3", "0"}; !slices.Equal(got, want) {
		t.Errorf("the results' %s headers are %q, want %q", producer.HeaderConfigVersion, got, want)
	}
}

// TestWriterGenerationEncoders: the results of a generation whose
// aggregates are not the config's are encoded under its own (their names
// in JSON), the config's generation's under the config's.
func TestWriterGenerationEncoders(t *testing.T) {
	cl := &fakeClient{}
	cfg := sinkConfig()
	cfg.State.ConfigVersion = 4
	w := newWriter(t, cl, cfg, nil, time.Now)
	old := cfg
	old.Aggregates = []config.Aggregate{{Name: "total", Fn: "sum", Field: "d"}, {Name: "longest", Fn: "max", Field: "d"}}
	w.Generation(3, producer.EncoderFor(old))
	w.Result(&windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: 0, End: 5000}, Count: 2,
		Aggregates: []record.Value{record.Number(7), record.Number(5)}, Generation: 3})
	w.Result(&windowing.Result{Key: `{"sid":"a"}`, Window: windowing.Window{Start: 5000, End: 10000}, Count: 1,
		Aggregates: []record.Value{record.Number(1)}, Generation: 4})
	w.Sync()
	if len(cl.recs) != 2 {
		t.Fatalf("produced %d records, want 2", len(cl.recs))
	}
	if v := string(cl.recs[0].Value); !strings.Contains(v, `"total":7`) || !strings.Contains(v, `"longest":5`) {
		t.Errorf("generation 3's result = %s, want its aggregates total and longest", v)
	}
	if v := string(cl.recs[1].Value); !strings.Contains(v, `"calls":1`) {
		t.Errorf("generation 4's result = %s, want the config's aggregate calls", v)
	}
}
