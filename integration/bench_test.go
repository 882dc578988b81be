package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// The benchmark's input: benchRecords ~100-byte JSON records of benchKeys
// keys, one every benchStepMs of event time, in order, spread over the 4
// partitions by key. That is 25 records per key per 5s tumbling window and
// 5 per key per 1s slide: a result for every 25 (tumbling) or 5
// (sliding(60)) input records.
const (
	benchRecords = 400_000
	benchKeys    = 100
	benchStepMs  = 2
)

// BenchmarkEndToEnd measures the pipeline's records/s (consume, decode,
// window, produce and acknowledge the outputs) against a plain franz-go
// group consumer that reads the same 4-partition topic and touches every
// value, for tumbling and sliding(60) windows.
//
// Both rates are timed from the first fetched batch: joining the group,
// and the pipeline's topic checks and producer start-up, are one-off costs
// that say nothing about throughput. The pipeline's clock stops once every
// record has an outcome and every output caused so far is acknowledged.
func BenchmarkEndToEnd(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceBenchInput(b, brokers)
	b.Run("plain", func(b *testing.B) {
		var total timing
		for b.Loop() {
			total.add(plainTime(b, brokers, benchGroup("plain")))
		}
		total.report(b)
	})
	for _, tc := range []struct{ name, window string }{
		{"tumbling", tumbling},
		{"sliding(60)", "{type: sliding, size: 60s, slide: 1s, allowed_lateness: 2s}"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total timing
			for b.Loop() {
				cfg := parseConfig(b, callsConfig(tc.window), brokers)
				cfg.Source.Group = benchGroup(tc.name)
				cfg.Sink.Linger = 5 * time.Millisecond // the default; the tests' 1ms buys latency with tiny batches
				total.add(pipelineTime(b, cfg))
			}
			total.report(b)
		})
	}
}

// timing adds up the timed parts of the iterations.
type timing struct{ wall, cpu time.Duration }

func (t *timing) add(wall, cpu time.Duration) { t.wall, t.cpu = t.wall+wall, t.cpu+cpu }

// report reports records/s, and the cores busy meanwhile (of the whole
// process, kfake included): on 2 cores, 2 means the rate is bound by CPU.
func (t *timing) report(b *testing.B) {
	b.ReportMetric(float64(b.N)*benchRecords/t.wall.Seconds(), "records/s")
	b.ReportMetric(t.cpu.Seconds()/t.wall.Seconds(), "cores")
}

func benchGroup(name string) string { return fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano()) }

// produceBenchInput writes the benchmark's input; key k goes to partition
// k%4, so every partition is in event-time order.
func produceBenchInput(b *testing.B, brokers []string) {
	cl := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	const chunk = 10_000
	for i := 0; i < benchRecords; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, benchRecords); j++ {
			key := j % benchKeys
			v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d,"pad":"%040d"}`, key, base+int64(j)*benchStepMs, j%10, j)
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(key % 4), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// firstFetch notes when a client read its first batch, and the process's
// CPU time then.
type firstFetch struct {
	at  atomic.Int64
	cpu atomic.Int64
}

func (f *firstFetch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	if f.at.CompareAndSwap(0, time.Now().UnixNano()) {
		f.cpu.Store(int64(cpuTime()))
	}
}

// since returns the wall and CPU time since the first batch.
func (f *firstFetch) since() (wall, cpu time.Duration) {
	return time.Since(time.Unix(0, f.at.Load())), cpuTime() - time.Duration(f.cpu.Load())
}

// cpuTime is the CPU time of the process so far (kfake included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// plainTime reads the whole topic with a plain consumer in a new group and
// sums the value lengths, so each record is touched as the pipeline does.
func plainTime(b *testing.B, brokers []string, group string) (wall, cpu time.Duration) {
	var first firstFetch
	cl := client(b, brokers, kgo.ConsumeTopics(inTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumerGroup(group), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.WithHooks(&first))
	n, bytes := 0, 0
	for n < benchRecords {
		cl.PollRecords(context.Background(), 10_000).EachRecord(func(r *kgo.Record) {
			n++
			bytes += len(r.Value)
		})
	}
	wall, cpu = first.since()
	if bytes < n {
		b.Fatalf("read %d bytes in %d records", bytes, n)
	}
	return wall, cpu
}

// pipelineTime runs the service over the whole topic and times it until
// every record has an outcome and every output is acknowledged.
func pipelineTime(b *testing.B, cfg config.Config) (wall, cpu time.Duration) {
	reg := &counterRegistry{Registry: prometheus.NewRegistry()}
	var first firstFetch
	c, err := consumer.New(cfg, zerolog.Nop(), reg, kgo.FetchMaxWait(50*time.Millisecond), kgo.WithHooks(&first))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(waitTimeout)
	for !reg.done(benchRecords) {
		if time.Now().After(deadline) {
			b.Fatalf("not done after %v", waitTimeout)
		}
		time.Sleep(time.Millisecond) // polling for the end; reading the counters is cheap
	}
	wall, cpu = first.since()
	cancel()
	if err := <-done; err != nil {
		b.Errorf("Run = %v", err)
	}
	c.Close()
	return wall, cpu
}

// counterRegistry is a registry that keeps the service's own counter
// vectors, so the benchmark reads them without gathering every metric.
type counterRegistry struct {
	*prometheus.Registry
	records, firings, produced *prometheus.CounterVec
}

func (r *counterRegistry) Register(c prometheus.Collector) error {
	if v, ok := c.(*prometheus.CounterVec); ok {
		ch := make(chan *prometheus.Desc, 1)
		v.Describe(ch)
		switch d := (<-ch).String(); {
		case strings.Contains(d, `"aggregator_records_total"`):
			r.records = v
		case strings.Contains(d, `"aggregator_firings_total"`):
			r.firings = v
		case strings.Contains(d, `"aggregator_produced_records_total"`):
			r.produced = v
		}
	}
	return r.Registry.Register(c)
}

func (r *counterRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// done reports whether n records have an outcome and every output they
// caused (results, late events, dead letters) is acknowledged.
func (r *counterRegistry) done(n float64) bool {
	records := sum(r.records, nil)
	outputs := sum(r.firings, nil) + sum(r.records, func(outcome string) bool { return outcome == "late" || outcome == "dead_letter" })
	return records >= n && sum(r.produced, nil) >= outputs
}

// sum adds the counters of v whose outcome label passes keep (all if nil).
func sum(v *prometheus.CounterVec, keep func(outcome string) bool) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { v.Collect(ch); close(ch) }()
	var total float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		if keep != nil && !keep(outcome(&pb)) {
			continue
		}
		total += pb.GetCounter().GetValue()
	}
	return total
}

func outcome(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "outcome" {
			return l.GetValue()
		}
	}
	return ""
}
