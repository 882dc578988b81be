package integration

import (
	"context"
	"fmt"
	"runtime/metrics"
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

// benchWindow is a window the pipeline benchmarks run.
type benchWindow struct{ name, window string }

func benchWindows() []benchWindow {
	return []benchWindow{
		{"tumbling", tumbling},
		{"sliding(60)", "{type: sliding, size: 60s, slide: 1s, allowed_lateness: 2s}"},
	}
}

// deliveries are the delivery modes the pipeline benchmarks run:
// at_least_once first, so exactly_once reads next to what it is compared with.
func deliveries() []string { return []string{"at_least_once", "exactly_once"} }

// BenchmarkEndToEnd measures the pipeline's records/s (consume, decode,
// window, produce and acknowledge the outputs, and commit every
// state.commit_interval: the changelog, and with exactly_once the
// transactions) against a plain franz-go group consumer that reads the
// same 4-partition topic and touches every value, for tumbling and
// sliding(60) windows, each with both delivery modes. Besides records/s
// it reports the process's CPU per record (cpu-ns/record, kfake included)
// and the commits made per run, and for a pipeline the CPU it adds per
// record over the plain consumer of the same run (added-cpu-ns/record:
// its cpu-ns/record minus the plain consumer's). Compare the
// sub-benchmarks of one run, as the machine's speed varies between runs.
//
// Both rates are timed from the first fetched batch: joining the group,
// and the pipeline's topic checks and producer start-up, are one-off costs
// that say nothing about throughput (the restore of the empty changelog,
// done at the first poll, is timed but takes a few ms). The pipeline's
// clock stops once every record has an outcome and every output caused so
// far is acknowledged; the changelog records and the offsets or
// transaction of the last commit interval are not waited for.
func BenchmarkEndToEnd(b *testing.B) {
	kc := newCluster(b, 4)
	brokers := kc.ListenAddrs()
	produceBenchInput(b, brokers, benchKeys)
	var plain timing
	b.Run("plain", func(b *testing.B) {
		plain = timing{}
		b.ReportAllocs()
		for b.Loop() {
			plain.add(plainTime(b, brokers, benchGroup("plain")))
		}
		plain.report(b)
	})
	for _, w := range benchWindows() {
		for _, delivery := range deliveries() {
			b.Run(w.name+"/"+delivery, func(b *testing.B) {
				var total timing
				b.ReportAllocs()
				for b.Loop() {
					run := runPipeline(b, benchConfig(b, w.window, delivery, w.name, brokers), false)
					total.add(run.timing)
				}
				total.report(b)
				if plain.records > 0 {
					b.ReportMetric(total.cpuPerRecord()-plain.cpuPerRecord(), "added-cpu-ns/record")
				}
			})
		}
	}
}

// benchConfig is the calls config over the benchmark topic with window and
// delivery, in a new group with its own changelog: a changelog that held
// an earlier run's positions would be restored, and its records skipped.
func benchConfig(b *testing.B, window, delivery, name string, brokers []string) config.Config {
	cfg := parseConfig(b, callsConfig(window)+"delivery: "+delivery+"\n", brokers)
	cfg.Source.Group = benchGroup(name + "-" + delivery)
	cfg.State.ChangelogTopic = cfg.Source.Group + "-changelog"
	cfg.Sink.Linger = 5 * time.Millisecond // the default; the tests' 1ms buys latency with tiny batches
	return cfg
}

// timing adds up the timed parts of the iterations: wall and process CPU
// time, the input records and the commits made meanwhile.
type timing struct {
	wall, cpu time.Duration
	records   int
	commits   float64
	allocs    uint64 // heap allocations of the process meanwhile (kfake's too, when it runs in the process)
}

func (t *timing) add(u timing) {
	t.wall, t.cpu, t.records, t.commits = t.wall+u.wall, t.cpu+u.cpu, t.records+u.records, t.commits+u.commits
	t.allocs += u.allocs
}

// allocsPerRecord is the process's heap allocations per record.
func (t *timing) allocsPerRecord() float64 { return float64(t.allocs) / float64(t.records) }

// heapAllocs is the number of heap allocations of the process so far
// (runtime/metrics: no stop of the world, unlike ReadMemStats).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// report reports records/s, the CPU time of the process (kfake included)
// per record, and the cores busy meanwhile: on 2 cores, 2 means the rate
// is bound by CPU. A pipeline also reports its commits per iteration.
// (allocs/op and B/op are of the whole iteration, setup and kfake
// included: divide by 400k for a rough figure per record.)
func (t *timing) report(b *testing.B) {
	b.ReportMetric(float64(t.records)/t.wall.Seconds(), "records/s")
	b.ReportMetric(t.cpuPerRecord(), "cpu-ns/record")
	b.ReportMetric(t.cpu.Seconds()/t.wall.Seconds(), "cores")
	if t.commits > 0 {
		b.ReportMetric(t.commits/float64(b.N), "commits/op")
	}
}

// cpuPerRecord is the process's CPU time per record, in ns.
func (t *timing) cpuPerRecord() float64 {
	return float64(t.cpu.Nanoseconds()) / float64(t.records)
}

func benchGroup(name string) string { return fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano()) }

// produceBenchInput writes the benchmark's input, benchRecords records of
// keys sid_0..sid_{keys-1} in turn, with a client that has opts too; key k
// goes to partition k%4, so every partition is in event-time order.
func produceBenchInput(b *testing.B, brokers []string, keys int, opts ...kgo.Opt) {
	cl := client(b, brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5 * time.Millisecond)}, opts...)...)
	const chunk = 10_000
	for i := 0; i < benchRecords; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, benchRecords); j++ {
			key := j % keys
			v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d,"pad":"%040d"}`, key, base+int64(j)*benchStepMs, j%10, j)
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(key % 4), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// firstFetch notes when a client read its first batch of the input, and
// the process's CPU time then (the hook is on every client: the watermark
// topic's reader reads its first batch before the input's).
type firstFetch struct {
	at  atomic.Int64
	cpu atomic.Int64
}

func (f *firstFetch) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, _ kgo.FetchBatchMetrics) {
	if topic == inTopic && f.at.CompareAndSwap(0, time.Now().UnixNano()) {
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
func plainTime(b *testing.B, brokers []string, group string) timing {
	var first firstFetch
	cl := client(b, brokers, kgo.ConsumeTopics(inTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ConsumerGroup(group), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.WithHooks(&first))
	n, bytes := 0, 0
	allocs := heapAllocs()
	for n < benchRecords {
		cl.PollRecords(context.Background(), 10_000).EachRecord(func(r *kgo.Record) {
			n++
			bytes += len(r.Value)
		})
	}
	wall, cpu := first.since()
	if bytes < n {
		b.Fatalf("read %d bytes in %d records", bytes, n)
	}
	return timing{wall: wall, cpu: cpu, records: n, allocs: heapAllocs() - allocs}
}

// pipelineRun is what runPipeline measured.
type pipelineRun struct {
	timing             // commits: those made until the clock stopped
	allCommits float64 // commits until the end, the drain's included
	changelog  float64 // changelog records written until the end (aggregator_changelog_records_total)
	// changelogBatchBytes is what the Kafka clients' metrics count for the
	// changelog topic: the uncompressed record batches produced to it
	// (kprom's aggregator_kafka_*_produce_bytes_total{topic=<changelog>},
	// which kprom drops when the client closes).
	changelogBatchBytes int64
	repartitionBytes    float64 // aggregator_repartition_bytes_total until the end
}

// runPipeline runs the service over the whole topic and times it until
// every record has an outcome and every output is acknowledged. With
// drain, it then drains (the last commit: the rest of the changelog, and
// the transaction or offsets) rather than closing without a commit, so
// that the changelog holds what the whole input caused. extra is given to
// the service's clients after the benchmark's own options.
func runPipeline(b *testing.B, cfg config.Config, drain bool, extra ...kgo.Opt) pipelineRun {
	reg := &counterRegistry{Registry: prometheus.NewRegistry()}
	var first firstFetch
	changelogBytes := &batchBytes{topic: cfg.State.ChangelogTopic}
	opts := append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.WithHooks(&first, changelogBytes)}, extra...)
	c, err := consumer.New(cfg, zerolog.Nop(), reg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	allocs := heapAllocs()
	go func() { done <- c.Run(ctx) }()
	finished := false
	defer func() { // the wait below failed
		if !finished {
			cancel()
			<-done
			c.Close()
		}
	}()
	// Looked at every millisecond, for the timing: reading the counters is cheap.
	waitForf(b, waitTimeout, time.Millisecond, func() bool { return reg.done(benchRecords) },
		func() string { return "every record with an outcome and every output acknowledged" })
	finished = true
	wall, cpu := first.since()
	run := pipelineRun{timing: timing{wall: wall, cpu: cpu, records: benchRecords, allocs: heapAllocs() - allocs,
		commits: sum(reg.commits, func(result string) bool { return result == "committed" })}}
	cancel()
	if err := <-done; err != nil {
		b.Errorf("Run = %v", err)
	}
	if drain {
		dctx, dcancel := context.WithTimeout(context.Background(), waitTimeout)
		defer dcancel()
		if err := c.Drain(dctx); err != nil {
			b.Errorf("Drain = %v", err)
		}
		if n := sum(reg.commits, func(result string) bool { return result == "aborted" }); n > 0 {
			b.Errorf("%v transactions aborted, want none", n)
		}
	} else {
		c.Close()
	}
	run.allCommits = sum(reg.commits, func(result string) bool { return result == "committed" })
	run.changelog = value(reg.changelog)
	run.repartitionBytes = value(reg.repartitionBytes)
	run.changelogBatchBytes = changelogBytes.n.Load()
	return run
}

// batchBytes counts the uncompressed bytes of the record batches a client
// produced to one topic, as kprom's produce_bytes_total does.
type batchBytes struct {
	topic string
	n     atomic.Int64
}

func (h *batchBytes) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.ProduceBatchMetrics) {
	if topic == h.topic {
		h.n.Add(int64(m.UncompressedBytes))
	}
}

// counterRegistry is a registry that keeps the service's own counter
// vectors, so the benchmark reads them without gathering every metric.
type counterRegistry struct {
	*prometheus.Registry
	records, firings, produced, commits *prometheus.CounterVec
	changelog, repartitionBytes         prometheus.Metric
}

func (r *counterRegistry) Register(c prometheus.Collector) error {
	switch v := c.(type) {
	case *prometheus.CounterVec:
		switch d := describe(v); {
		case strings.Contains(d, `"aggregator_records_total"`):
			r.records = v
		case strings.Contains(d, `"aggregator_firings_total"`):
			r.firings = v
		case strings.Contains(d, `"aggregator_produced_records_total"`):
			r.produced = v
		case strings.Contains(d, `"aggregator_commits_total"`):
			r.commits = v
		}
	case prometheus.Counter:
		switch d := describe(v); {
		case strings.Contains(d, `"aggregator_changelog_records_total"`):
			r.changelog = v
		case strings.Contains(d, `"aggregator_repartition_bytes_total"`):
			r.repartitionBytes = v
		}
	}
	return r.Registry.Register(c)
}

// describe returns the description of a collector of one metric.
func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
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

// value is the value of counter m (0 if nil).
func value(m prometheus.Metric) float64 {
	var pb dto.Metric
	if m == nil || m.Write(&pb) != nil {
		return 0
	}
	return pb.GetCounter().GetValue()
}

// sum adds the counters of v whose outcome (or result) label passes keep
// (all if nil).
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
		if l.GetName() == "outcome" || l.GetName() == "result" {
			return l.GetValue()
		}
	}
	return ""
}
