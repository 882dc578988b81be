package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/metrics"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/registry"
	"aggregator/internal/repartition"
)

// TestRepartitionThreeInstances: P = 3 instances over 6 input partitions
// (and 6 repartition partitions: 4 partitions apiece), the input of
// TestRepartitionMatchesReplay (keyed by request id, the last partition's
// producer 20 s behind, stragglers behind their own partition), give the
// results, late events and dead letters of replay --kcat, in both
// delivery modes.
func TestRepartitionThreeInstances(t *testing.T) {
	t.Parallel()
	const parts = 6
	first, second := repartitionInputN(parts, 500, 60) // 30 s of event time, in 3 slices
	deliveries := []string{"exactly_once", "at_least_once"}
	if raceEnabled {
		deliveries = deliveries[:1] // CI's time: TestRepartitionMatchesReplay runs at_least_once with 2 instances
	}
	for _, delivery := range deliveries {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			kc := newCluster(t, parts)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, repartitionYaml+"delivery: "+delivery+"\n", brokers)
			want := replayKcatN(t, cfg, parts, first, second)
			if len(want.late) != len(second) || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters: the test tests nothing", len(want.results), len(want.late), len(want.dead))
			}
			var svcs []*service
			for range 3 {
				svcs = append(svcs, start(t, cfg, nil))
			}
			waitEven(t, brokers, cfg.Source.Group, 3, 2*parts/3) // each stage's partitions split over the three
			produceSliced(t, brokers, cfg.Source.Group, first)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			for _, s := range svcs {
				s.stop(t)
			}
			compareReplay(t, brokers, delivery, want)
			t.Logf("%s, 3 instances: %d results, %d late events, %d dead letters as replay --kcat", delivery, len(want.results), len(want.late), len(want.dead))
		})
	}
}

// orderedKeyed is input keyed by request id over parts partitions whose
// times only go up across the partitions (record i at base + 25i on
// partition i%parts, one of 12 users), with malformed records mixed in,
// and a second phase an hour behind: no record's fate and no window's
// firings depend on how partitions interleave, in either stage.
func orderedKeyed(parts int32, n int) (first, second []keyedInput) {
	rng := rand.New(rand.NewPCG(17, 9))
	for i := range n {
		v := fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, rng.IntN(12), int64(base)+int64(i)*25, i%10)
		if i%53 == 0 {
			v = fmt.Sprintf(`{"sid":"u%d","t":"soon","d":1}`, rng.IntN(12))
		}
		first = append(first, keyedInput{int32(i) % parts, fmt.Sprintf("req-%d", i), v})
	}
	for i := range 6 {
		second = append(second, keyedInput{int32(i) % parts, fmt.Sprintf("late-%d", i), fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i, int64(base)-3_600_000)})
	}
	return first, second
}

// forwardAsStage1 produces ins to the input topic and does what a stage 1
// of cfg's group does with them, with the service's own stage-1 core and
// writer (and, for a registry format, the schemas the records name,
// fetched from cfg's registry), in slices of 100 records each ending with
// a commit's markers: the repartition records, markers and dead letters
// written, the input offsets committed. Stage 2 has read none of it: the
// group has no offset of the repartition topic (its instance died first,
// or the partitions moved to an instance that had not read them yet).
func forwardAsStage1(t testing.TB, brokers []string, cfg config.Config, parts int32, ins []keyedInput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	offsets := map[int32]int64{} // where ins go: the input's end offsets
	ends, err := adm.ListEndOffsets(ctx, inTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) { offsets[o.Partition] = o.Offset })
	produceKeyed(t, brokers, ins)
	if err := cluster.EnsureRepartition(ctx, adm, cfg.State.RepartitionTopic, parts, cfg.Sink); err != nil {
		t.Fatal(err)
	}
	core, err := repartition.New(cfg, parts, stage1Schemas(ctx, t, cfg, ins))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for id := range parts {
		core.Assign(id, now)
	}
	w := producer.NewWriter(cl, cfg, metrics.New(prometheus.NewRegistry()), time.Now, nil, zerolog.Nop())
	defer w.Close()
	w.SetRepartitionPartitions(parts)
	var rd ready.Ready
	for lo := 0; lo < len(ins); lo += 100 {
		for _, in := range ins[lo:min(lo+100, len(ins))] {
			core.Process(&ready.Input{Topic: inTopic, Partition: in.partition, KafkaPartition: in.partition, Offset: offsets[in.partition],
				Key: []byte(in.key), Value: []byte(in.value), Timestamp: 1_700_000_000_000}, now)
			offsets[in.partition]++
		}
		rd = core.Commit(now)
		w.Write(rd.Outputs)
	}
	w.Sync()
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	commit := kadm.Offsets{}
	for _, o := range rd.Offsets {
		commit.Add(kadm.Offset{Topic: inTopic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	}
	if err := adm.CommitAllOffsets(ctx, cfg.Source.Group, commit); err != nil {
		t.Fatalf("commit stage 1's input offsets: %v", err)
	}
}

// stage1Schemas are the registry schemas the values of ins name, fetched
// from cfg's registry as a stage 1 fetches them; nil unless
// source.format is a registry format.
func stage1Schemas(ctx context.Context, t testing.TB, cfg config.Config, ins []keyedInput) *record.Schemas {
	t.Helper()
	if !cfg.RecordSpec().Format.Registry() {
		return nil
	}
	c, err := registry.New(cfg.Source.SchemaRegistry, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	schemas := record.NewSchemas()
	if err := c.Resolve(ctx, schemas, func(yield func([]byte) bool) {
		for _, in := range ins {
			if !yield([]byte(in.value)) {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return schemas
}

// TestRepartitionStartLatest: source.start_offset latest is where a new
// group starts in the input, never in the repartition topic, which only
// holds what stage 1 took from the input. The group's stage 1 forwarded
// the first phase and committed its input offsets, and no stage 2 read
// it (forwardAsStage1); an instance with start_offset latest then reads
// every repartition partition from its first record, and the outputs are
// replay --kcat's of both phases (the dead letters are stage 1's).
func TestRepartitionStartLatest(t *testing.T) {
	t.Parallel()
	const parts = 4
	first, second := orderedKeyed(parts, 400)
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			kc := newCluster(t, parts)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, repartitionYaml+"delivery: "+delivery+"\n", brokers)
			cfg.Source.StartOffset = "latest"
			want := replayKcatN(t, cfg, parts, first, second)
			if len(want.late) != len(second) || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters: the test tests nothing", len(want.results), len(want.late), len(want.dead))
			}
			forwardAsStage1(t, brokers, cfg, parts, first)
			reg := prometheus.NewRegistry()
			s := startWith(t, cfg, nil, reg)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			// Read to the end, every partition of both stages lags by 0
			// records: with exactly_once a repartition partition ends in
			// a transaction's control record, which the position passes.
			waitAll(t, reg, "aggregator_consumer_lag_records", 2*parts, 0)
			s.stop(t)
			compareReplay(t, brokers, delivery, want)
		})
	}
}

// waitAll waits until the gauge vector name has n series, each at want.
func waitAll(t testing.TB, reg *prometheus.Registry, name string, n int, want float64) {
	t.Helper()
	var last []string
	waitForf(t, waitTimeout, pollEvery, func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		last = last[:0]
		ok := false
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			ok = len(mf.GetMetric()) == n
			for _, m := range mf.GetMetric() {
				last = append(last, m.String())
				ok = ok && m.GetGauge().GetValue() == want
			}
		}
		return ok
	}, func() string { return fmt.Sprintf("%s: %d series at %v, got %v", name, n, want, last) })
}

// startWithOpts is startWith with extra options for the service's Kafka
// clients, and the wall clock.
func startWithOpts(t testing.TB, cfg config.Config, reg *prometheus.Registry, opts ...kgo.Opt) *service {
	t.Helper()
	c, err := consumer.NewWithClock(cfg, zerolog.Nop(), reg, time.Now, append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- c.Run(ctx) }()
	t.Cleanup(func() { s.crash() })
	return s
}

// TestRepartitionPartitionsAdded: partitions added to the input topic
// while the service runs (kadm CreatePartitions) are counted by the
// markers from the next commit on, so stage 2 waits for their watermarks
// again: their records, 30 s behind the other partitions', are not late,
// and the outputs are replay --kcat's over all six partitions (where the
// new ones hold the watermark from the start, and the first phase's
// windows fire later, with the same contents).
func TestRepartitionPartitionsAdded(t *testing.T) {
	t.Parallel()
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, repartitionYaml+"delivery: exactly_once\n", brokers)
	rec := func(i int, t int64) string { return fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, i%12, t, i%10) }
	var first, second []keyedInput
	for i := range 400 { // base .. base+10s on partitions 0-3
		first = append(first, keyedInput{int32(i % 4), fmt.Sprintf("a-%d", i), rec(i, int64(base)+int64(i)*25)})
	}
	for i := range 800 { // base+10s .. base+50s on partitions 0-3
		second = append(second, keyedInput{int32(i % 4), fmt.Sprintf("b-%d", i), rec(i, int64(base)+10_000+int64(i)*50)})
	}
	for i := range 200 { // base+10s .. base+20s on the new partitions 4 and 5
		second = append(second, keyedInput{int32(4 + i%2), fmt.Sprintf("c-%d", i), rec(i+5, int64(base)+10_000+int64(i)*50)})
	}
	want := replayKcatN(t, cfg, 6, first, second)
	if len(want.results) == 0 || len(want.late) != 0 {
		t.Fatalf("replay gives %d results and %d late events, want some and none", len(want.results), len(want.late))
	}
	reg := prometheus.NewRegistry()
	// The client sees the new partitions within its metadata's max age.
	s := startWithOpts(t, cfg, reg, kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond))
	produceSliced(t, brokers, cfg.Source.Group, first)
	waitCount(t, brokers, resultsTopic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := kadm.NewClient(client(t, brokers)).CreatePartitions(ctx, 2, inTopic); err != nil {
		t.Fatalf("add 2 partitions to %s: %v", inTopic, err)
	}
	// A new partition, with no record yet, holds the watermark.
	waitGauge(t, reg, "aggregator_watermark_source_partition", 4)
	produceKeyed(t, brokers, second)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	s.stop(t)
	compareReplay(t, brokers, "exactly_once", want)
}

// TestRepartitionEarlierTopicGrows: with two input topics, a partition
// added to the first would take an id of the second's partitions (source
// partitions are numbered topic after topic): the running service does
// not assign it and ends with an error saying so; its restart numbers the
// partitions anew.
func TestRepartitionEarlierTopicGrows(t *testing.T) {
	t.Parallel()
	kc := newCluster(t, 2)
	brokers := kc.ListenAddrs()
	adm := kadm.NewClient(client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "calls-b"); err != nil {
		t.Fatalf("create calls-b: %v", err)
	}
	cfg := parseConfig(t, repartitionYaml+"delivery: exactly_once\n", brokers)
	cfg.Source.Topics = []string{inTopic, "calls-b"}
	reg := prometheus.NewRegistry()
	s := startWithOpts(t, cfg, reg, kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(250*time.Millisecond))
	waitGauge(t, reg, "aggregator_ready", 1)
	if _, err := adm.CreatePartitions(ctx, 1, inTopic); err != nil {
		t.Fatalf("add a partition to %s: %v", inTopic, err)
	}
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup's crash
		if err == nil || !strings.Contains(err.Error(), "input topic calls has 3 partitions, 2 when the service started") {
			t.Errorf("Run = %v, want the error naming calls and its partition counts", err)
		}
	case <-ctx.Done():
		t.Fatalf("the service still runs %v after a partition was added to the first of two input topics", waitTimeout)
	}
}

// TestRepartitionIdleAdvance: once every source partition is idle (stage
// 1 found each caught up for idle_timeout by the wall clock and its
// markers said so), idle_advance moves stage 2's watermark with the wall
// clock, so the last windows close when traffic stops, as replay's flush
// closes them: the results are replay's with the end-of-input flush.
func TestRepartitionIdleAdvance(t *testing.T) {
	t.Parallel()
	const parts = 4
	first, _ := orderedKeyed(parts, 400)
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, repartitionYaml+"delivery: exactly_once\n", brokers)
	cfg.Watermark.IdleTimeout, cfg.Watermark.IdleAdvance = time.Second, true
	var ins []input
	offsets := map[int32]int64{}
	for _, in := range first {
		ins = append(ins, input{in.partition, offsets[in.partition], in.value})
		offsets[in.partition]++
	}
	slices.SortStableFunc(ins, func(a, b input) int { return int(a.partition - b.partition) })
	running := replay(t, cfg, ins, noWallClock)
	all := flushed(t, cfg, ins)
	if len(all) <= len(running.results) {
		t.Fatalf("the flush fires %d windows more, want some", len(all)-len(running.results))
	}
	clock := &fakeClock{t: time.UnixMilli(base)}
	reg := prometheus.NewRegistry()
	s := startWith(t, cfg, clock.Now, reg)
	produceKeyed(t, brokers, first)
	waitCount(t, brokers, resultsTopic, int64(len(running.results)))
	clock.Set(time.UnixMilli(base + 2_000)) // every source caught up and quiet for 2 s
	waitGauge(t, reg, "aggregator_idle_partitions", parts)
	if n := len(readAll(t, brokers, resultsTopic)); n != len(running.results) {
		t.Fatalf("%d results with every source idle, before idle_advance can move the watermark, want %d", n, len(running.results))
	}
	clock.Set(time.UnixMilli(base + 3_600_000)) // traffic stopped long ago
	waitCount(t, brokers, resultsTopic, int64(len(all)))
	s.stop(t)
	if got := contents(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, contents(all)) {
		t.Errorf("after idle_advance, results differ from replay's with the flush:\n%s", diff(got, contents(all)))
	}
}

// TestRepartitionTransactionalInput: input written by a transactional
// producer ends in a commit marker, which takes an offset: stage 1's
// position passes it, so its partitions lag by 0 once read and go idle
// after idle_timeout (they never did: their position stayed one short of
// the log end), and stage 2 sees every source idle.
func TestRepartitionTransactionalInput(t *testing.T) {
	t.Parallel()
	const parts = 2
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, repartitionYaml+"delivery: exactly_once\n", brokers)
	cfg.Watermark.IdleTimeout = 300 * time.Millisecond
	txn := client(t, brokers, kgo.TransactionalID("upstream"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		r := &kgo.Record{Topic: inTopic, Partition: int32(i % parts), Key: []byte(fmt.Sprintf("req-%d", i)),
			Value: []byte(fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i%5, int64(base)+int64(i)*100))}
		if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit the upstream transaction: %v", err)
	}
	reg := prometheus.NewRegistry()
	s := startWith(t, cfg, nil, reg)
	waitAll(t, reg, "aggregator_consumer_lag_records", 2*parts, 0)
	waitGauge(t, reg, "aggregator_idle_partitions", parts) // every source idle in both repartition partitions
	s.stop(t)
}
