package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/metrics"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
)

// TestRepartitionThreeInstances: P = 3 instances over 6 input partitions
// (and 6 repartition partitions: 4 partitions apiece), the input of
// TestRepartitionMatchesReplay (keyed by request id, the last partition's
// producer 20 s behind, stragglers behind their own partition), give the
// results, late events and dead letters of replay --kcat, in both
// delivery modes.
func TestRepartitionThreeInstances(t *testing.T) {
	const parts = 6
	first, second := repartitionInputN(parts, 900)
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
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
// writer, in slices of 100 records each ending with a commit's markers:
// the repartition records, markers and dead letters written, the input
// offsets committed. Stage 2 has read none of it: the group has no offset
// of the repartition topic (its instance died first, or the partitions
// moved to an instance that had not read them yet).
func forwardAsStage1(t testing.TB, brokers []string, cfg config.Config, parts int32, ins []keyedInput) {
	t.Helper()
	produceKeyed(t, brokers, ins)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if err := cluster.EnsureRepartition(ctx, adm, cfg.State.RepartitionTopic, parts, cfg.Sink); err != nil {
		t.Fatal(err)
	}
	core, err := repartition.New(cfg, parts, nil)
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
	offsets := map[int32]int64{}
	var rd ready.Ready
	for lo := 0; lo < len(ins); lo += 100 {
		for _, in := range ins[lo:min(lo+100, len(ins))] {
			core.Process(&ready.Input{Topic: inTopic, Partition: in.partition, KafkaPartition: in.partition, Offset: offsets[in.partition],
				Key: []byte(in.key), Value: []byte(in.value), Timestamp: 1_700_000_000_000}, now)
			offsets[in.partition]++
		}
		rd = core.Ready(true, now)
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

// TestRepartitionStartLatest: source.start_offset latest is where a new
// group starts in the input, never in the repartition topic, which only
// holds what stage 1 took from the input. The group's stage 1 forwarded
// the first phase and committed its input offsets, and no stage 2 read
// it (forwardAsStage1); an instance with start_offset latest then reads
// every repartition partition from its first record, and the outputs are
// replay --kcat's of both phases (the dead letters are stage 1's).
func TestRepartitionStartLatest(t *testing.T) {
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
