package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/windowing"
)

// waitTimeout bounds every wait for outputs; tests fail rather than hang.
const waitTimeout = 60 * time.Second

// Topic names every test uses.
const (
	inTopic      = "calls"
	resultsTopic = "calls-windows"
	lateTopic    = "calls-late"
	dlqTopic     = "calls-dlq"
)

// pollEvery is how often the waits below look at what they wait for.
const pollEvery = 20 * time.Millisecond

// waitFor waits until cond holds, looking every pollEvery, or fails after
// d saying what it waited for. cond runs on the test's goroutine (it may
// fail the test itself).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	waitForf(t, d, pollEvery, cond, func() string { return what })
}

// pollUntil looks at cond every pollEvery until it holds (true) or d has
// passed (false): the wait for an event of another process or of the
// broker, which no channel announces. Callers that can say more than
// waitFor about what is missing fail with it.
func pollUntil(d time.Duration, cond func() bool) bool { return pollEveryUntil(d, pollEvery, cond) }

// pollEveryUntil is pollUntil looking every every.
func pollEveryUntil(d, every time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// waitForf is waitFor looking every every, with a failure message made
// when it fails (from what cond saw last).
func waitForf(t testing.TB, d, every time.Duration, cond func() bool, what func() string) {
	t.Helper()
	if !pollEveryUntil(d, every, cond) {
		t.Fatalf("%s: not after %v", what(), d)
	}
}

// newCluster starts a one-broker kfake cluster with the input topic in
// partitions partitions and one-partition output topics, so each output
// topic keeps emission order.
func newCluster(t testing.TB, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, inTopic),
		kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// parseConfig reads a YAML config and points it at the cluster's topics.
func parseConfig(t testing.TB, yaml string, brokers []string) config.Config {
	t.Helper()
	yaml += fmt.Sprintf("\nsink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s, linger: 1ms}\n",
		resultsTopic, lateTopic, dlqTopic)
	env := map[string]string{
		"AGGREGATOR_SOURCE_BROKERS": strings.Join(brokers, ","),
		"AGGREGATOR_SOURCE_TOPICS":  inTopic,
		"AGGREGATOR_SOURCE_GROUP":   "aggregator-test",
	}
	cfg, err := config.Parse([]byte(yaml), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	return cfg
}

// readConfig reads a config file of cmd/aggregator/testdata.
func readConfig(t testing.TB, path string, brokers []string) config.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(t, string(data), brokers)
}

// service is a Consumer running in a goroutine.
type service struct {
	c      *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

func start(t testing.TB, cfg config.Config, clock func() time.Time) *service {
	t.Helper()
	return startWith(t, cfg, clock, prometheus.NewRegistry())
}

func startWith(t testing.TB, cfg config.Config, clock func() time.Time, reg *prometheus.Registry) *service {
	t.Helper()
	return startLogged(t, cfg, clock, reg, zerolog.Nop())
}

// startLogged is startWith logging to log, with the extra client options
// (hooks) applied to every client of the service.
func startLogged(t testing.TB, cfg config.Config, clock func() time.Time, reg *prometheus.Registry, log zerolog.Logger, extra ...kgo.Opt) *service {
	t.Helper()
	if clock == nil {
		clock = time.Now
	}
	c, err := consumer.NewWithClock(cfg, log, reg, clock, append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond)}, extra...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := c.Run(ctx)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "integration: a service's Run returned early: %v\n", err)
		}
		s.done <- err
	}()
	t.Cleanup(func() { s.crash() })
	return s
}

// stop is a graceful shutdown: Run returns, Drain commits and leaves.
func (s *service) stop(t testing.TB) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.c.Drain(ctx); err != nil {
		t.Errorf("Drain = %v, want nil", err)
	}
}

// crash stops without committing anything more.
func (s *service) crash() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	<-s.done
	s.c.Close()
}

func client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes values to the input topic, value i to partition part(i).
func produce(t testing.TB, brokers []string, values []string, part func(i int) int32) {
	t.Helper()
	produceAs(t, brokers, nil, values, part)
}

// produceAs is produce by a client with the options as (how it
// authenticates: see authSetup).
func produceAs(t testing.TB, brokers []string, as []kgo.Opt, values []string, part func(i int) int32) {
	t.Helper()
	cl := client(t, brokers, append(as, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: inTopic, Partition: part(i), Value: []byte(v),
			Key: []byte(fmt.Sprintf("k%d", i)), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitCount waits until topic holds at least n committed records (a
// transaction's control records take offsets too, so end offsets do not
// count records).
func waitCount(t testing.TB, brokers []string, topic string, n int64) {
	t.Helper()
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var total int64
	for total < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s holds %d records after %v, want %d", topic, total, waitTimeout, n)
		}
		total += int64(fs.NumRecords())
	}
}

// readAll reads every committed record of topic (read_committed), up to
// its end offsets now.
func readAll(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	return readAllAs(t, brokers, nil, topic)
}

// readAllAs is readAll by a client with the options as.
func readAllAs(t testing.TB, brokers []string, as []kgo.Opt, topic string) []*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers, as...))
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{} // partition → end offset, for those not read to it
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := client(t, brokers, append(as, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())...)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: %d records, partitions %v not at their end: %v", topic, len(out), left, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	slices.SortStableFunc(out, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out
}

func values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// expected is what the pipeline emits for the same input, without a
// flush: the Kafka service never sees the end of its input.
type expected struct {
	results []string
	late    []lateEvent
	dead    []lateEvent
}

type lateEvent struct {
	value   string
	headers string
}

// capture keeps a Ready's outputs encoded like the producer.
type capture struct {
	enc *producer.Encoder
	exp *expected
}

func (c capture) write(rd ready.Ready) {
	for i := range rd.Outputs {
		o := &rd.Outputs[i]
		switch o.Kind {
		case ready.Result:
			c.Result(&o.Result)
		case ready.Late:
			c.Late(&o.Event.In, o.Event.EventTime, o.Event.Watermark, o.Event.Missed)
		case ready.DeadLetter:
			c.DeadLetter(&o.Event.In, o.Event.Err)
		}
	}
}

// Result keeps a result's value, or a retraction as "retract " and the
// Kafka key its tombstone has.
func (c capture) Result(r *windowing.Result) {
	if r.Firing == windowing.Retract {
		c.exp.results = append(c.exp.results, string(c.enc.AppendKey([]byte(retractPrefix), r)))
		return
	}
	c.exp.results = append(c.exp.results, string(c.enc.AppendResult(nil, r)))
}

const retractPrefix = "retract "

func (c capture) Late(in *ready.Input, eventTime, watermark int64, missed windowing.Window) {
	c.exp.late = append(c.exp.late, lateEvent{string(in.Value), headerString(producer.LateHeaders(in, eventTime, watermark, missed))})
}

func (c capture) DeadLetter(in *ready.Input, err error) {
	c.exp.dead = append(c.exp.dead, lateEvent{string(in.Value), headerString(producer.DeadLetterHeaders(in, err))})
}

func headerString(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%s=%s;", h.Key, h.Value)
	}
	return b.String()
}

func events(recs []*kgo.Record) []lateEvent {
	out := make([]lateEvent, len(recs))
	for i, r := range recs {
		out[i] = lateEvent{string(r.Value), headerString(r.Headers)}
	}
	return out
}

// input is one record for the reference run.
type input struct {
	partition int32
	offset    int64
	value     string
}

// replay runs the pipeline over inputs in the given order, as `replay`
// does, with the wall clock at now.
func replay(t testing.TB, cfg config.Config, inputs []input, now int64) expected {
	t.Helper()
	return run(t, cfg, inputs, now, false)
}

// run is replay, with the end-of-input flush if flush is set.
func run(t testing.TB, cfg config.Config, inputs []input, now int64, flush bool) expected {
	t.Helper()
	var exp expected
	// replay --kcat of a repartition config: one state per group key, as
	// the repartition stage gives.
	p, err := pipeline.New(cfg, pipeline.Mode{OneState: !cfg.Source.ByKey()})
	if err != nil {
		t.Fatal(err)
	}
	out := capture{producer.EncoderFor(cfg), &exp}
	assigned := map[int32]bool{}
	for _, in := range inputs {
		if !assigned[in.partition] {
			p.Assign(in.partition, now)
			assigned[in.partition] = true
		}
	}
	for _, in := range inputs {
		p.Process(&ready.Input{Topic: inTopic, Partition: in.partition, KafkaPartition: in.partition, Offset: in.offset, Value: []byte(in.value),
			Key: []byte(fmt.Sprintf("k%d", in.offset)), Timestamp: 1_700_000_000_000 + in.offset}, now)
		out.write(p.Step())
	}
	if flush {
		p.Flush()
		out.write(p.Step())
	}
	return exp
}

// onePartition numbers lines as offsets of partition 0.
func onePartition(lines []string) []input {
	out := make([]input, len(lines))
	for i, l := range lines {
		out[i] = input{0, int64(i), l}
	}
	return out
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// noWallClock is the now replay uses: no idleness, no future guard.
const noWallClock = math.MaxInt64

// fakeClock is a wall clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
