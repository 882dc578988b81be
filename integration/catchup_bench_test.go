package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// The catch-up benchmark: a deployment that starts on a topic that is
// already full (after downtime, a backfill, a new deployment with
// start_offset earliest), where the CPU per input record matters most.
// The binary (`aggregator run`, its own process) reads the whole topic of
// `aggregator broker` (another process) with the default partitioning
// (auto, here the repartition stage) and with by_key, and a plain
// franz-go consumer (a third process: this test binary run again) reads
// and decodes it, as the floor; each one's CPU is its process's alone.

var (
	catchupRecords = flag.Int("catchup.records", 1_000_000, "BenchmarkCatchup: input records of each shape")
	catchupProfile = flag.String("catchup.cpuprofile", "", "BenchmarkCatchup: a directory; after the timed runs of each case, "+
		"run by_key and the default once more with http.pprof on and write their CPU profiles there")
)

// catchupShape is an input of BenchmarkCatchup: records of keys group
// keys (uniformly at random), perSecond records a second of event time,
// each up to 500ms behind its place (max_out_of_orderness is 1s: none is
// late), in 10s tumbling windows: keys·perSecond/10 records per key per
// window.
type catchupShape struct {
	name      string
	keys      int
	perSecond int
}

const catchupWindowMs = 10_000

var catchupShapes = []catchupShape{
	{"2.5-per-window", 1000, 250},
	{"50-per-window", 1000, 5000},
	{"1000-per-window", 100, 10_000},
}

// catchupReaders are the readers of the topic each iteration runs, in
// turn: the plain consumer, the binary with by_key, and with the default
// partitioning (auto: the repartition stage, the key being a field).
var catchupReaders = []string{"plain", "by_key", "default"}

// BenchmarkCatchup measures the CPU per input record of each reader of a
// full topic, at 2.5, 50 and 1000 records per key per window, in both
// delivery modes, and the repartition topic's records and bytes per input
// record. Each iteration runs the three readers one after another (the
// first one a different one each time), so that the machine's load
// drifts alike for all; the figures are medians over the iterations. A
// reader's CPU is its process's threads' time on a CPU from its first
// fetch of the input (the binary: the first sample of its /metrics that
// counts fetched bytes of the input topic; the plain consumer: its first
// fetched batch) to its last output (the binary: the moment a
// read_committed reader in this process has every result the input fires;
// the plain consumer: every record read and decoded). It prints the
// whole table at the end (docs/benchmarks.md#catching-up-the-default-path-against-by_key),
// and with -catchup.cpuprofile the shares of the profiles too:
//
//	go test ./integration -run '^$' -bench 'Catchup$' -benchtime 3x -timeout 60m -catchup.cpuprofile /tmp/catchup
func BenchmarkCatchup(b *testing.B) {
	var rows []catchupRow
	for _, shape := range catchupShapes {
		b.Run(shape.name, func(b *testing.B) {
			brokers := brokerProcess(b, 4, inTopic)
			in := produceCatchupInput(b, brokers, shape, *catchupRecords)
			for _, delivery := range deliveries() {
				b.Run(delivery, func(b *testing.B) {
					rows = append(rows, catchupCase(b, brokers, in, shape, delivery))
				})
			}
		})
	}
	printCatchupTable(os.Stdout, rows)
	if *catchupProfile != "" {
		printProfileShares(b, os.Stdout, rows)
	}
}

// TestCatchupSmoke runs BenchmarkCatchup's readers once each over a small
// input, and the default once more with its CPU profile, so that the
// harness keeps working: it checks every reader's output and that the
// profile reads, not their speed.
func TestCatchupSmoke(t *testing.T) {
	t.Parallel()
	brokers := brokerProcess(t, 4, inTopic)
	in := produceCatchupInput(t, brokers, catchupShapes[0], 10_000)
	for _, reader := range catchupReaders {
		if r := catchupRead(t, brokers, in, "at_least_once", reader, "", 0); r.cpu <= 0 {
			t.Errorf("%s: CPU %v from first fetch to last output, want more than 0", reader, r.cpu)
		}
	}
	profile := filepath.Join(t.TempDir(), "default.pprof")
	catchupRead(t, brokers, in, "at_least_once", "default", profile, 1)
	if _, _, err := profileShares(profile); err != nil {
		t.Error(err)
	}
}

// catchupCase runs the iterations of one shape and delivery mode.
func catchupCase(b *testing.B, brokers []string, in catchupInput, shape catchupShape, delivery string) catchupRow {
	row := catchupRow{shape: shape, delivery: delivery, records: in.records, runs: map[string][]catchupRun{}}
	first := 0
	for b.Loop() {
		for i := range catchupReaders {
			reader := catchupReaders[(first+i)%len(catchupReaders)]
			row.runs[reader] = append(row.runs[reader], catchupRead(b, brokers, in, delivery, reader, "", 0))
		}
		first++
	}
	for _, reader := range catchupReaders {
		b.ReportMetric(row.cpuPerRecord(reader), reader+"-cpu-ns/record")
	}
	b.ReportMetric(row.cpuPerRecord("default")/row.cpuPerRecord("by_key"), "default/by_key")
	b.ReportMetric(row.cpuPerRecord("by_key")/row.cpuPerRecord("plain"), "by_key/plain")
	b.ReportMetric(row.repartition(func(r catchupRun) float64 { return r.repRecords }), "repartition-records/record")
	b.ReportMetric(row.repartition(func(r catchupRun) float64 { return r.repBytes }), "repartition-bytes/record")
	if *catchupProfile != "" {
		for _, reader := range []string{"by_key", "default"} {
			// The profile runs for whole seconds from the first fetch: the
			// timed runs' median and a second more (an idle service adds
			// next to nothing to it).
			secs := int(math.Ceil(median(row.runs[reader], func(r catchupRun) float64 { return r.wall.Seconds() }))) + 1
			file := catchupProfileFile(shape, delivery, reader)
			catchupRead(b, brokers, in, delivery, reader, file, secs)
			b.Logf("CPU profile of %s: %s", reader, file)
		}
	}
	return row
}

// catchupInput is what the harness knows of the input it wrote.
type catchupInput struct {
	records int   // the records timed (the flush records are not counted)
	total   int   // the records on the topic: records and one flush record a partition
	results int   // (key, window) pairs of the records: the results they fire
	dSum    int64 // the sum of field d over the records
}

// produceCatchupInput writes n records of shape to the input topic, each
// with its group key as its Kafka key (so the producer's partitioner puts
// a key's records in one partition, as by_key needs), and then one record
// to every partition an hour of event time past the last, so that every
// window of the n records fires; their own windows never do.
func produceCatchupInput(t testing.TB, brokers []string, shape catchupShape, n int) catchupInput {
	t.Helper()
	cl := client(t, brokers, kgo.ProducerLinger(5*time.Millisecond))
	rng := rand.New(rand.NewPCG(uint64(shape.keys), uint64(shape.perSecond)))
	type window struct{ key, start int64 }
	windows := make(map[window]struct{})
	keyIn := map[int32]int{} // a key of each partition
	in := catchupInput{records: n, total: n}
	var last int64
	const chunk = 10_000
	for i := 0; i < n; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			key, d := rng.IntN(shape.keys), rng.IntN(100)
			ts := base + int64(j)*1000/int64(shape.perSecond) - rng.Int64N(501)
			windows[window{int64(key), ts - ts%catchupWindowMs}] = struct{}{}
			in.dSum += int64(d)
			last = max(last, ts)
			recs = append(recs, catchupRecord(key, ts, d, j))
		}
		res := cl.ProduceSync(context.Background(), recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			keyIn[r.Record.Partition], _ = strconv.Atoi(strings.TrimPrefix(string(r.Record.Key), "sid_"))
		}
	}
	in.results = len(windows)
	var flush []*kgo.Record
	for p := range int32(4) {
		key, ok := keyIn[p]
		if !ok {
			t.Fatalf("no key of the %d went to partition %d", shape.keys, p)
		}
		flush = append(flush, catchupRecord(key, last+time.Hour.Milliseconds(), 0, n+int(p)))
	}
	res := cl.ProduceSync(context.Background(), flush...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if key, _ := strconv.Atoi(strings.TrimPrefix(string(r.Record.Key), "sid_")); key != keyIn[r.Record.Partition] {
			t.Fatalf("the flush record of key %d went to partition %d, not to its key's", key, r.Record.Partition)
		}
	}
	in.total += len(flush)
	return in
}

// catchupRecord is an input record of ~100 bytes.
func catchupRecord(key int, ts int64, d, seq int) *kgo.Record {
	return &kgo.Record{Topic: inTopic, Key: fmt.Appendf(nil, "sid_%d", key),
		Value: fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":%d,"pad":"%050d"}`, key, ts, d, seq)}
}

// catchupConfig is the service's config: 10s tumbling windows, sum and
// count, partitioning ("" for the default), everything else defaulted.
func catchupConfig(brokers []string, group, delivery, partitioning string) string {
	yaml := fmt.Sprintf("source:\n  brokers: [%q]\n  topics: [%s]\n  group: %s\n  key: [sid]\n  timestamp: {field: t, layout: unix_ms}\n",
		brokers[0], inTopic, group)
	if partitioning != "" {
		yaml += "  partitioning: " + partitioning + "\n"
	}
	return yaml + fmt.Sprintf(`watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 10s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: n, fn: count}
sink: {results_topic: %[1]s-results, late_topic: %[1]s-late}
delivery: %[2]s
`, group, delivery)
}

// catchupRun is one reader's run.
type catchupRun struct {
	wall, cpu time.Duration // from the first fetch to the last output
	// The repartition topic's records (markers included) and bytes, as
	// the service counts what it produced there (the purge deletes them
	// from the topic).
	repRecords, repBytes float64
}

// catchupRead runs reader ("plain", "by_key" or "default") over the
// whole input in a new group and times it; with profile, the binary
// serves Go's profiles and a CPU profile of secs seconds from its first
// fetch is written to that file.
func catchupRead(t testing.TB, brokers []string, in catchupInput, delivery, reader, profile string, secs int) catchupRun {
	t.Helper()
	group := benchGroup("catchup-" + reader + "-" + delivery)
	partitioning := map[string]string{"plain": "by_key", "by_key": "by_key", "default": ""}[reader]
	path := filepath.Join(t.TempDir(), group+".yaml")
	if err := os.WriteFile(path, []byte(catchupConfig(brokers, group, delivery, partitioning)), 0o600); err != nil {
		t.Fatal(err)
	}
	if reader == "plain" {
		return catchupPlain(t, in, path)
	}
	defer deleteTopics(t, brokers, group)
	return catchupService(t, brokers, in, path, group, profile, secs)
}

// catchupService runs the binary with the config at path (of group).
func catchupService(t testing.TB, brokers []string, in catchupInput, path, group, profile string, secs int) catchupRun {
	t.Helper()
	results := group + "-results"
	adm := kadm.NewClient(client(t, brokers))
	if _, err := adm.CreateTopic(context.Background(), 1, -1, nil, results); err != nil {
		t.Fatal(err)
	}
	var env []string
	if profile != "" {
		env = append(env, "AGGREGATOR_HTTP_PPROF=true")
	}
	run := startBinary(t, path, env...)
	pid := run.cmd.Process.Pid
	read := readResults(brokers, results, in.results, pid)
	var start time.Time
	var startCPU time.Duration
	waitForf(t, waitTimeout, 2*time.Millisecond, func() bool {
		if metricSum(scrape(run.probes), "aggregator_kafka_consumer_fetch_bytes_total", `topic="`+inTopic+`"`) == 0 {
			return false
		}
		start, startCPU = time.Now(), processCPU(t, pid)
		return true
	}, func() string { return "the service's first fetch of " + inTopic + "\n" + run.out.String() })
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- saveProfile(run.probes, secs, profile) }()
	}
	end := <-read
	if end.err != nil {
		t.Fatalf("%v\n%s", end.err, run.out)
	}
	m := scrape(run.probes)
	r := catchupRun{wall: end.at.Sub(start), cpu: end.cpu - startCPU,
		repRecords: metricSum(m, "aggregator_produced_records_total", `topic="`+group+`-repartition"`),
		repBytes:   metricSum(m, "aggregator_repartition_bytes_total", "")}
	if profile != "" {
		if err := <-profiled; err != nil {
			t.Fatal(err)
		}
	}
	_ = run.cmd.Process.Signal(os.Interrupt)
	if code, _ := run.wait(t, time.Minute); code != 0 {
		t.Fatalf("aggregator run exited %d\n%s", code, run.out)
	}
	if err := checkCatchupResults(end.values, in); err != nil {
		t.Fatalf("%s: %v", results, err)
	}
	return r
}

// readEnd is what readResults read, when it had every result, and the
// service's CPU time then.
type readEnd struct {
	at     time.Time
	cpu    time.Duration
	values [][]byte
	err    error
}

// readResults reads topic read_committed until it holds n records, and
// then takes the CPU time of process pid.
func readResults(brokers []string, topic string, n, pid int) <-chan readEnd {
	done := make(chan readEnd, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond)) // the wait of a fetch that finds nothing: the clock's precision at the end
	if err != nil {
		done <- readEnd{err: err}
		return done
	}
	go func() {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		values := make([][]byte, 0, n)
		for len(values) < n {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				done <- readEnd{err: fmt.Errorf("%s holds %d results after 10m, want %d", topic, len(values), n)}
				return
			}
			fs.EachRecord(func(r *kgo.Record) { values = append(values, r.Value) })
		}
		at := time.Now()
		cpu, err := threadsCPU(pid)
		done <- readEnd{at: at, cpu: cpu, values: values, err: err}
	}()
	return done
}

// checkCatchupResults checks that values are the results of in: one for
// each (key, window), whose counts and sums add up to the input's.
func checkCatchupResults(values [][]byte, in catchupInput) error {
	type window struct {
		key   string
		start int64
	}
	seen := make(map[window]struct{}, len(values))
	var count, total int64
	for _, v := range values {
		var r struct {
			Key         struct{ Sid string }
			WindowStart int64 `json:"window_start"`
			Count       int64
			Aggregates  struct{ Total, N int64 }
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("result %s: %v", v, err)
		}
		if r.Aggregates.N != r.Count {
			return fmt.Errorf("result %s: count n %d, want %d", v, r.Aggregates.N, r.Count)
		}
		seen[window{r.Key.Sid, r.WindowStart}] = struct{}{}
		count += r.Count
		total += r.Aggregates.Total
	}
	if len(seen) != in.results || count != int64(in.records) || total != in.dSum {
		return fmt.Errorf("%d results of %d (key, window) pairs, counting %d records with a sum of %d; want %d pairs, %d records, %d",
			len(values), len(seen), count, total, in.results, in.records, in.dSum)
	}
	return nil
}

// saveProfile writes the CPU profile of the next secs seconds of the
// service whose probes are at probes to file.
func saveProfile(probes string, secs int, file string) error {
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", probes, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /debug/pprof/profile: %s: %s", resp.Status, body)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// deleteTopics deletes the topics of a run (those named after its group),
// so that the broker's memory holds the input and little else.
func deleteTopics(t testing.TB, brokers []string, group string) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	topics, err := adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, group+"-") {
			names = append(names, name)
		}
	}
	if _, err := adm.DeleteTopics(context.Background(), names...); err != nil {
		t.Fatal(err)
	}
}

// The plain consumer is this test binary run again with plainConsumerEnv
// set to a config file (TestMain runs plainConsumer then, and no tests).
const (
	plainConsumerEnv     = "INTEGRATION_PLAIN_CONSUMER_CONFIG"
	plainConsumerRecords = "INTEGRATION_PLAIN_CONSUMER_RECORDS"
)

// catchupPlain runs the plain consumer over the whole input with the
// config at path (its brokers, topics, group and record decoding).
func catchupPlain(t testing.TB, in catchupInput, path string) catchupRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), plainConsumerEnv+"="+path, plainConsumerRecords+"="+strconv.Itoa(in.total))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	// next returns the next line the consumer prints, with the moment and
	// its CPU time then.
	pid := cmd.Process.Pid
	next := func() (string, time.Time, time.Duration) {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the plain consumer ended: %s", stderr.String())
			}
			return line, time.Now(), processCPU(t, pid)
		case <-time.After(10 * time.Minute):
			t.Fatalf("the plain consumer printed nothing for 10m: %s", stderr.String())
			return "", time.Time{}, 0
		}
	}
	line, start, startCPU := next()
	if line != "first" {
		t.Fatalf("the plain consumer printed %q, want first", line)
	}
	line, end, endCPU := next()
	if want := fmt.Sprintf("done %d %d", in.total, in.dSum); line != want {
		t.Fatalf("the plain consumer printed %q, want %q", line, want)
	}
	stdin.Close()
	return catchupRun{wall: end.Sub(start), cpu: endCPU - startCPU}
}

// plainConsumer is the plain consumer's process: a franz-go group
// consumer that reads the config's topics from the start and decodes
// every record with the service's decoder. It prints "first" at its first
// fetched batch, and "done <records> <sum of the first aggregate's
// field>" once it has read and decoded as many as plainConsumerRecords
// says; then it waits for its stdin to close. It returns the exit status.
func plainConsumer(path string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	cfg, err := config.Load(path, func(string) string { return "" })
	if err != nil {
		return fail(err)
	}
	n, err := strconv.Atoi(os.Getenv(plainConsumerRecords))
	if err != nil {
		return fail(err)
	}
	dec, err := record.NewDecoder(cfg.RecordSpec(), record.NewSchemas())
	if err != nil {
		return fail(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Source.Brokers...), kgo.ConsumeTopics(cfg.Source.Topics...),
		kgo.ConsumerGroup(cfg.Source.Group), kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(&printFirstFetch{}))
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	var (
		in     record.Input
		rec    record.Record
		events int
		sum    float64
		bad    error
	)
	for events < n && bad == nil {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err0(); err != nil {
			return fail(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			in = record.Input{Topic: r.Topic, Partition: r.Partition, KafkaPartition: r.Partition, Offset: r.Offset,
				Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
			switch kind, err := dec.Decode(&in, &rec); {
			case err != nil:
				bad = err
			case kind != record.Event:
				bad = fmt.Errorf("offset %d of %s[%d]: a record of kind %d", r.Offset, r.Topic, r.Partition, kind)
			default:
				events++
				sum += rec.Values[0].Num
			}
		})
	}
	if bad != nil {
		return fail(bad)
	}
	fmt.Printf("done %d %d\n", events, int64(sum))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// printFirstFetch prints "first" when the client has read its first batch.
type printFirstFetch struct{ once sync.Once }

func (p *printFirstFetch) OnFetchBatchRead(kgo.BrokerMetadata, string, int32, kgo.FetchBatchMetrics) {
	p.once.Do(func() { fmt.Println("first") })
}

// catchupRow is one shape and delivery mode: every reader's runs.
type catchupRow struct {
	shape    catchupShape
	delivery string
	records  int
	runs     map[string][]catchupRun
}

// cpuPerRecord is reader's median CPU per input record, in ns.
func (r catchupRow) cpuPerRecord(reader string) float64 {
	return median(r.runs[reader], func(run catchupRun) float64 { return float64(run.cpu.Nanoseconds()) }) / float64(r.records)
}

// repartition is the default's median of what per input record.
func (r catchupRow) repartition(what func(catchupRun) float64) float64 {
	return median(r.runs["default"], what) / float64(r.records)
}

// cell is reader's CPU in CPU-seconds per million input records: the
// median, and the range over the runs.
func (r catchupRow) cell(reader string) string {
	perM := func(run catchupRun) float64 { return run.cpu.Seconds() / float64(r.records) * 1e6 }
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, run := range r.runs[reader] {
		lo, hi = min(lo, perM(run)), max(hi, perM(run))
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(r.runs[reader], perM), lo, hi)
}

// printCatchupTable writes rows as the table of docs/benchmarks.md.
func printCatchupTable(w io.Writer, rows []catchupRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nCPU-s per 1M input records, median (range) of %d runs each; ratios of the medians\n\n", len(rows[0].runs["plain"]))
	fmt.Fprintln(w, "| records per key per window | delivery | plain | by_key | default | by_key / plain | default / by_key | repartition records / input record | repartition bytes / input record |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %.2f | %.2f | %.3f | %.1f |\n",
			strings.TrimSuffix(r.shape.name, "-per-window"), r.delivery, r.cell("plain"), r.cell("by_key"), r.cell("default"),
			r.cpuPerRecord("by_key")/r.cpuPerRecord("plain"), r.cpuPerRecord("default")/r.cpuPerRecord("by_key"),
			r.repartition(func(run catchupRun) float64 { return run.repRecords }),
			r.repartition(func(run catchupRun) float64 { return run.repBytes }))
	}
}

// profileParts are where BenchmarkCatchup's profile tables put a
// sample: in the first part one of whose patterns a frame of its stack
// matches, or else in other.
var profileParts = []struct {
	name string
	re   *regexp.Regexp
}{
	{"produce: lz4", regexp.MustCompile(`pierrec/lz4.*(Compress|Writer)`)},
	{"produce: the rest", regexp.MustCompile(`kgo\.\(\*broker\)\.handleReqs|kgo\.\(\*producer\)\.|kgo\.\(\*recBuf\)\.|kgo\.\(\*Client\)\.(produce|finishRecordPromise)|producer\.\(\*batcher\)\.run`)},
	{"fetch", regexp.MustCompile(`kgo\.\(\*source\)\.`)},
	{"decode JSON", regexp.MustCompile(`record\.\(\*Decoder\)\.decode$`)},
	{"compact form: encode", regexp.MustCompile(`record\.\(\*Decoder\)\.AppendCompact|repartition\.\(\*Stage\)\.(encode|form)$`)},
	{"compact form: decode", regexp.MustCompile(`pipeline\.decodeRepartition`)},
	{"stage 1: the rest", regexp.MustCompile(`repartition\.\(\*Stage\)\.|producer\.\(\*Writer\)\.repartition|producer\.\(\*repartitionTopic\)`)},
	{"watermarks", regexp.MustCompile(`aggregator/internal/watermark\.`)},
	{"commit", regexp.MustCompile(`consumer\.\(\*Consumer\)\.commit`)},
	{"windows", regexp.MustCompile(`windowing\.`)},
	{"GC (background)", regexp.MustCompile(`runtime\.gcBgMarkWorker`)},
}

// printProfileShares writes, for each profile BenchmarkCatchup wrote, the
// shares of its samples by profileParts (read from `go tool pprof
// -traces`).
func printProfileShares(b *testing.B, w io.Writer, rows []catchupRow) {
	fmt.Fprintf(w, "\nShares of the CPU profiles' samples (%s)\n\n| profile | CPU-s |", *catchupProfile)
	for _, p := range profileParts {
		fmt.Fprintf(w, " %s |", p.name)
	}
	fmt.Fprintln(w, " other |")
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(profileParts)+1))
	for _, r := range rows {
		for _, reader := range []string{"by_key", "default"} {
			parts, total, err := profileShares(catchupProfileFile(r.shape, r.delivery, reader))
			if err != nil {
				b.Error(err)
				continue
			}
			fmt.Fprintf(w, "| %s, %s, %s | %.2f |", strings.TrimSuffix(r.shape.name, "-per-window"), r.delivery, reader, total.Seconds())
			for _, d := range parts {
				fmt.Fprintf(w, " %.1f%% |", 100*d.Seconds()/total.Seconds())
			}
			fmt.Fprintln(w)
		}
	}
}

// catchupProfileFile is where BenchmarkCatchup writes a profile.
func catchupProfileFile(shape catchupShape, delivery, reader string) string {
	return filepath.Join(*catchupProfile, fmt.Sprintf("catchup-%s-%s-%s.pprof", shape.name, delivery, reader))
}

// profileShares adds up the samples of the CPU profile of the binary in
// file by profileParts (and other, last), and in all, as `go tool pprof
// -traces` prints them.
func profileShares(file string) ([]time.Duration, time.Duration, error) {
	out, err := exec.Command("go", "tool", "pprof", "-traces", binary, file).Output()
	if err != nil {
		return nil, 0, fmt.Errorf("go tool pprof -traces %s: %w", file, err)
	}
	traces := string(out)
	if !strings.Contains(traces, "\nType: cpu\n") {
		return nil, 0, fmt.Errorf("go tool pprof -traces %s: not a CPU profile:\n%.500s", file, traces)
	}
	parts := make([]time.Duration, len(profileParts)+1)
	var total time.Duration
	for _, trace := range strings.Split(traces, "-----------+")[1:] {
		lines := strings.Split(trace, "\n")[1:] // the first is the rest of the separator
		if len(lines) == 0 {
			continue
		}
		fields := strings.Fields(lines[0])
		if len(fields) < 2 {
			continue
		}
		d, err := time.ParseDuration(fields[0])
		if err != nil {
			continue
		}
		frames := append([]string{fields[1]}, lines[1:]...)
		part := len(profileParts)
		for i, p := range profileParts {
			if slices.ContainsFunc(frames, func(f string) bool {
				f = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "(inline)"))
				return p.re.MatchString(f)
			}) {
				part = i
				break
			}
		}
		parts[part] += d
		total += d
	}
	return parts, total, nil
}

// median is the median of f over runs (NaN for none).
func median[T any](runs []T, f func(T) float64) float64 {
	if len(runs) == 0 {
		return math.NaN()
	}
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}
