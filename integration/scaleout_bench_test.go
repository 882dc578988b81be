package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
)

// The scale-out benchmarks run the broker as its own process (`aggregator
// broker`, kfake), so that the CPU time of the benchmark's process is the
// service's, or the plain consumer's, alone.

// brokerProcess starts `aggregator broker` on a free port with topics,
// partitions each (others are created on first use, with as many), and
// returns its address; it is stopped when b ends.
func brokerProcess(b testing.TB, partitions int, topics ...string) []string {
	b.Helper()
	needBinary(b)
	cmd := exec.Command(binary, "broker", "--port", "0", "--partitions", strconv.Itoa(partitions), "--topics", strings.Join(topics, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("aggregator broker: %v (printed %q)", err, line)
	}
	m := regexp.MustCompile(`at (\S+),`).FindStringSubmatch(line)
	if m == nil {
		b.Fatalf("aggregator broker printed %q, want its address", line)
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(nopWriter{}) }() // the rest, so it never blocks on a full pipe
	return []string{m[1]}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkByKeyVsPlain measures the CPU per input record of the service
// with source.partitioning by_key (exactly_once, tumbling 5s windows,
// 1000 keys, 400,000 records) against a plain franz-go group consumer
// that reads the same topic and touches every value, the broker in its
// own process. Two inputs: the end-to-end benchmark's (one record every
// 2ms of event time: 2.5 records per key per window, so a result for
// every 2.5 input records), and one 40 times denser (100 records per key
// per window). Each iteration runs both readers, one after the other, so
// that the machine's load drifts alike for both; the ratio is of their
// cpu-ns/record (the target: 1.8×).
func BenchmarkByKeyVsPlain(b *testing.B) {
	for _, in := range []struct {
		name      string
		perWindow int // records per key per 5s window
	}{{"2.5-per-window", 0}, {"100-per-window", 100}} {
		b.Run(in.name, func(b *testing.B) {
			brokers := brokerProcess(b, 4, inTopic, resultsTopic, lateTopic, dlqTopic)
			if in.perWindow == 0 {
				produceBenchInput(b, brokers, 1000)
			} else {
				produceDenseInput(b, brokers, 1000, in.perWindow)
			}
			var plain, byKey timing
			b.ReportAllocs()
			for b.Loop() {
				plain.add(plainTime(b, brokers, benchGroup("plain")))
				byKey.add(runPipeline(b, benchConfig(b, tumbling, "exactly_once", "by_key", brokers), false).timing)
			}
			b.ReportMetric(plain.cpuPerRecord(), "plain-cpu-ns/record")
			b.ReportMetric(byKey.cpuPerRecord(), "by_key-cpu-ns/record")
			b.ReportMetric(byKey.cpuPerRecord()/plain.cpuPerRecord(), "cpu-ratio")
			b.ReportMetric(plain.allocsPerRecord(), "plain-allocs/record")
			b.ReportMetric(byKey.allocsPerRecord(), "by_key-allocs/record")
			b.ReportMetric(float64(byKey.records)/byKey.wall.Seconds(), "by_key-records/s")
		})
	}
}

// produceDenseInput is produceBenchInput with perWindow records of each
// key per 5s of event time.
func produceDenseInput(b *testing.B, brokers []string, keys, perWindow int) {
	cl := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	perMs := float64(keys*perWindow) / 5000 // records per ms of event time
	const chunk = 10_000
	for i := 0; i < benchRecords; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, benchRecords); j++ {
			key := j % keys
			v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d,"pad":"%040d"}`, key, base+int64(float64(j)/perMs), j%10, j)
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(key % 4), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// latencyRounds is how many windows BenchmarkLatency times per mode (the
// first latencyWarmup are left out: stage 2 waits for every source's
// first watermark, and the clients warm up).
const (
	latencyRounds = 40
	latencyWarmup = 5
)

// BenchmarkLatency measures the time from a record to its result with
// by_key and with repartition (exactly_once, the default 100ms commit
// interval, tumbling 1s windows, 1s out-of-orderness, 4 partitions, one
// key per partition). Each round produces one record to every partition
// at the next second of event time, which closes the window two seconds
// back on every partition, and times from the brokers' acknowledgement of
// those records until a read_committed reader has that window's result
// of every key; the next round starts a random 0–100ms later, so that the
// rounds fall anywhere in the commit cycle. It reports each mode's median
// and the repartition stage's added median in commit intervals (the
// target: 2).
func BenchmarkLatency(b *testing.B) {
	brokers := brokerProcess(b, 4)
	var medians [2]time.Duration
	var interval time.Duration // state.commit_interval, the default
	b.ReportAllocs()
	for b.Loop() {
		for i, mode := range []string{"by_key", "repartition"} {
			medians[i], interval = latencyMedian(b, brokers, mode)
		}
	}
	b.ReportMetric(float64(medians[0].Microseconds())/1000, "by_key-median-ms")
	b.ReportMetric(float64(medians[1].Microseconds())/1000, "repartition-median-ms")
	b.ReportMetric(float64(medians[1]-medians[0])/float64(interval), "added-commit-intervals")
}

// latencyMedian runs one service in mode over fresh topics and returns the
// median latency of its rounds, and its commit interval.
func latencyMedian(b *testing.B, brokers []string, mode string) (time.Duration, time.Duration) {
	name := benchGroup("latency-" + mode)
	topic, results := name+"-in", name+"-windows"
	adm := kadm.NewClient(client(b, brokers))
	if _, err := adm.CreateTopic(context.Background(), 4, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	cfg := parseConfig(b, callsConfig("{type: tumbling, size: 1s, allowed_lateness: 0s}")+"delivery: exactly_once\n", brokers)
	cfg.Source.Topics, cfg.Source.Group, cfg.Source.Partitioning = []string{topic}, name, mode
	cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic = results, name+"-late", name+"-dlq"
	cfg.State.ChangelogTopic, cfg.State.RepartitionTopic = name+"-changelog", name+"-repartition"
	cfg.Sink.Linger = 5 * time.Millisecond // the default; the tests' 1ms buys latency with tiny batches
	stop := startService(b, cfg, prometheus.NewRegistry())
	defer stop()

	seen := newWindowArrivals()
	reader := client(b, brokers, kgo.ConsumeTopics(results), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	var reading sync.WaitGroup
	reading.Go(func() { seen.read(ctx, reader) })
	defer func() { cancel(); reading.Wait() }()

	producer := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	rng := rand.New(rand.NewPCG(1, 2))
	var lat []time.Duration
	for round := range latencyRounds + 2 {
		t := base + int64(round)*1000
		recs := make([]*kgo.Record, 4)
		for p := range recs {
			recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":1}`, p, t)}
		}
		if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		if round < 2 { // W = t - 1s - 1ms: window [t-2s, t-1s) is due from the third round on
			continue
		}
		start := t - 2000
		var at time.Time
		waitForf(b, waitTimeout, time.Millisecond, func() bool {
			var ok bool
			at, ok = seen.all(start, 4)
			return ok
		},
			func() string { return fmt.Sprintf("%s: the results of window %d of the 4 keys", mode, start) })
		if round-2 >= latencyWarmup {
			lat = append(lat, at.Sub(acked))
		}
		time.Sleep(time.Duration(rng.Int64N(int64(cfg.State.CommitInterval)))) // the load's shape: a random phase in the commit cycle
	}
	slices.Sort(lat)
	return lat[len(lat)/2], cfg.State.CommitInterval
}

// startService runs a service of cfg, its metrics on reg and opts given
// to its clients, until the returned func stops it.
func startService(b *testing.B, cfg config.Config, reg prometheus.Registerer, opts ...kgo.Opt) (stop func()) {
	c, err := consumer.New(cfg, zerolog.Nop(), reg, opts...) // the service's own fetch settings: idle, they decide its cost
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run = %v", err)
		}
		c.Close()
	}
}

// windowArrivals notes when a reader first saw each key's result of each
// window.
type windowArrivals struct {
	mu   sync.Mutex
	seen map[int64]map[string]time.Time // window start → key → when
}

func newWindowArrivals() *windowArrivals {
	return &windowArrivals{seen: map[int64]map[string]time.Time{}}
}

func (w *windowArrivals) read(ctx context.Context, cl *kgo.Client) {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		w.mu.Lock()
		fetches.EachRecord(func(r *kgo.Record) {
			var res struct {
				Key         map[string]string `json:"key"`
				WindowStart int64             `json:"window_start"`
			}
			if json.Unmarshal(r.Value, &res) != nil {
				return
			}
			if w.seen[res.WindowStart] == nil {
				w.seen[res.WindowStart] = map[string]time.Time{}
			}
			if _, ok := w.seen[res.WindowStart][res.Key["sid"]]; !ok {
				w.seen[res.WindowStart][res.Key["sid"]] = now
			}
		})
		w.mu.Unlock()
	}
}

// all returns when the last of n keys' results of the window at start
// was seen, and whether all n were.
func (w *windowArrivals) all(start int64, n int) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.seen[start]
	if len(keys) < n {
		return time.Time{}, false
	}
	var last time.Time
	for _, at := range keys {
		if at.After(last) {
			last = at
		}
	}
	return last, true
}

// markerCount counts, as a kgo hook on the service's clients, the records
// acknowledged: all of them, and the repartition topic's markers.
type markerCount struct {
	topic            string
	records, markers atomic.Int64
}

func (m *markerCount) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil {
		return
	}
	m.records.Add(1)
	if r.Topic != m.topic {
		return
	}
	for _, h := range r.Headers {
		var in ready.Input
		if _, marker, err := repartition.Parse(h.Value, r.Value, r.Partition, r.Offset, nil, &in); h.Key == repartition.Header && err == nil && marker {
			m.markers.Add(1)
		}
	}
}

// markerInputs and markerIdle shape BenchmarkMarkers: input partitions
// (and so repartition partitions), and how long each idle phase lasts
// (two heartbeats).
const (
	markerInputs = 64
	markerBusy   = 5 * time.Second
	markerIdle   = 20 * time.Second
)

// BenchmarkMarkers measures stage 1's watermark markers with 64 input ×
// 64 repartition partitions at the default commit interval (100ms),
// exactly_once, one instance holding every partition, the broker in its
// own process. Busy: every 20ms one record to every input partition, its
// event time the wall clock's, so that every source's watermark moves at
// every commit; markers/s is counted over markerBusy after a second of
// warm-up. Idle: no input for markerIdle (two heartbeat periods), the
// records/s the service produces and the cores it uses, against the
// same by_key service idle on the same topic meanwhile measured alone.
func BenchmarkMarkers(b *testing.B) {
	brokers := brokerProcess(b, markerInputs)
	var busy, idleRecords, idleCores, byKeyCores float64
	b.ReportAllocs()
	for b.Loop() {
		name := benchGroup("markers")
		topic := name + "-in"
		adm := kadm.NewClient(client(b, brokers))
		if _, err := adm.CreateTopic(context.Background(), markerInputs, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
		cfg := parseConfig(b, callsConfig(tumbling)+"delivery: exactly_once\n", brokers)
		cfg.Source.Topics, cfg.Source.Group, cfg.Source.Partitioning = []string{topic}, name, "repartition"
		cfg.Sink.ResultsTopic, cfg.Sink.LateTopic, cfg.Sink.DeadLetterTopic = name+"-windows", name+"-late", name+"-dlq"
		cfg.State.ChangelogTopic, cfg.State.RepartitionTopic = name+"-changelog", name+"-repartition"
		cfg.Sink.Linger = 5 * time.Millisecond
		count := &markerCount{topic: cfg.State.RepartitionTopic}
		stop := startService(b, cfg, prometheus.NewRegistry(), kgo.WithHooks(count))

		producer := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		tick := time.NewTicker(20 * time.Millisecond)
		var from time.Time
		var fromMarkers int64
		produced := 0
		for start := time.Now(); time.Since(start) < time.Second+markerBusy; <-tick.C {
			now := time.Now()
			if from.IsZero() && now.Sub(start) >= time.Second {
				from, fromMarkers = now, count.markers.Load()
			}
			recs := make([]*kgo.Record, markerInputs)
			for p := range recs {
				recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":1}`, p, now.UnixMilli())}
			}
			if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			produced += len(recs)
		}
		tick.Stop()
		busy += float64(count.markers.Load()-fromMarkers) / time.Since(from).Seconds()

		// Idle, once what is in flight has landed (a commit or two).
		for before := int64(-1); before != count.markers.Load(); {
			before = count.markers.Load()
			time.Sleep(500 * time.Millisecond) // the quiet spell being looked for
		}
		records, cpu, at := count.records.Load(), cpuTime(), time.Now()
		time.Sleep(markerIdle) // what is measured: the wall time idle
		idleRecords += float64(count.records.Load()-records) / time.Since(at).Seconds()
		idleCores += (cpuTime() - cpu).Seconds() / time.Since(at).Seconds()
		stop()

		byKey := cfg
		byKey.Source.Group, byKey.Source.Partitioning = name+"-by_key", "by_key"
		byKey.State.ChangelogTopic = byKey.Source.Group + "-changelog"
		reg := &counterRegistry{Registry: prometheus.NewRegistry()}
		stop = startService(b, byKey, reg)
		waitFor(b, waitTimeout, "by_key: every input record with an outcome and its outputs acknowledged", func() bool { return reg.done(float64(produced)) })
		cpu, at = cpuTime(), time.Now()
		time.Sleep(markerIdle)
		byKeyCores += (cpuTime() - cpu).Seconds() / time.Since(at).Seconds()
		stop()
	}
	n := float64(b.N)
	b.ReportMetric(busy/n, "markers/s")
	b.ReportMetric(idleRecords/n, "idle-records/s")
	b.ReportMetric(idleCores/n, "idle-cores")
	b.ReportMetric(byKeyCores/n, "by_key-idle-cores")
}
