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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
	"aggregator/internal/repartition"
)

// The repartition stage (source.partitioning repartition) on the real
// clients: input keyed by a request id, grouped by a JSON field, over 4
// partitions, partition 3's producer 20 s behind in event time, and
// records of the other partitions 4–10 s behind their own partition (late
// on a watermark of their own partitions, never on the group's). 1 and 2
// instances give the results, late events and dead letters of replay
// --kcat over the same records (one state per group key, W the minimum
// over the partitions), and the repartition topic is purged.

// repartitionYaml names no source.partitioning: auto picks repartition
// for a key of fields.
const repartitionYaml = `
source:
  format: json
  key: [sid]
  timestamp: {field: t, layout: unix_ms}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
`

// keyedInput is one input record: its partition, request-id key and value.
type keyedInput struct {
	partition  int32
	key, value string
}

// repartitionInput is the first phase (the stream, with a few malformed
// records) and the second (records an hour behind, produced once the
// first phase's windows fired: late wherever they are judged).
func repartitionInput() (first, second []keyedInput) { return repartitionInputN(4, 1200, 25) }

// repartitionInputN is repartitionInput over parts partitions, n records
// step ms apart in the first phase; the last partition lags.
func repartitionInputN(parts int32, n int, step int64) (first, second []keyedInput) {
	rng := rand.New(rand.NewPCG(17, 4))
	for i := range n {
		p := int32(rng.IntN(int(parts)))
		t := int64(base) + int64(i)*step
		switch {
		case p == parts-1:
			t -= 20_000 // a lagging producer
		case i%29 == 0:
			t -= 4_000 + rng.Int64N(6_000) // behind its own partition, ahead of the group's watermark
		}
		v := fmt.Sprintf(`{"sid":"u%d","t":%d,"d":%d}`, rng.IntN(12), t, i%10)
		if i%97 == 0 {
			v = fmt.Sprintf(`{"sid":"u%d","t":"soon","d":1}`, rng.IntN(12))
		}
		first = append(first, keyedInput{p, fmt.Sprintf("req-%d", i), v})
	}
	for i := range 6 {
		second = append(second, keyedInput{int32(i) % parts, fmt.Sprintf("late-%d", i), fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i, int64(base)-3_600_000)})
	}
	return first, second
}

// produceSliced produces ins in slices of sliceRecords, each committed by
// stage 1 before the next: with the whole stream in one burst, one
// instance's stage 1 can run further ahead of the other's than the
// lagging partition's 20 s, and a straggler judged against the group's
// watermark then is late, which replay (and the stream as it would
// arrive) does not make it: an outcome that depends on how the instances
// interleave, which the test must not have.
func produceSliced(t testing.TB, brokers []string, group string, ins []keyedInput) {
	t.Helper()
	const sliceRecords = 200 // 5 s of event time
	ends := map[int32]int64{}
	for lo := 0; lo < len(ins); lo += sliceRecords {
		slice := ins[lo:min(lo+sliceRecords, len(ins))]
		produceKeyed(t, brokers, slice)
		for _, in := range slice {
			ends[in.partition]++
		}
		durWaitCommitted(t, brokers, group, ends)
	}
}

func produceKeyed(t testing.TB, brokers []string, ins []keyedInput) {
	t.Helper()
	cl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, len(ins))
	for i, in := range ins {
		recs[i] = &kgo.Record{Topic: inTopic, Partition: in.partition, Key: []byte(in.key), Value: []byte(in.value), Timestamp: time.UnixMilli(1_700_000_000_000)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// replayKcat is replay --kcat over the dump: partition by partition, then
// the second phase, one state per group key (with watermark.scope
// partition, as replay runs it: each partition's own state and watermark).
func replayKcat(t testing.TB, cfg config.Config, first, second []keyedInput) expected {
	t.Helper()
	return replayKcatN(t, cfg, 4, first, second)
}

// replayKcatN is replayKcat over parts partitions.
func replayKcatN(t testing.TB, cfg config.Config, parts int32, first, second []keyedInput) expected {
	t.Helper()
	p, err := pipeline.New(cfg, pipeline.Mode{OneState: cfg.Watermark.GlobalScope()}) // one stage, as replay runs a repartition config
	if err != nil {
		t.Fatal(err)
	}
	var exp expected
	out := capture{producer.EncoderFor(cfg), &exp}
	for id := range parts {
		p.Assign(id, noWallClock)
	}
	offsets := map[int32]int64{}
	feed := func(ins []keyedInput) {
		for part := range parts {
			for _, in := range ins {
				if in.partition != part {
					continue
				}
				off := offsets[part]
				offsets[part]++
				p.Process(&ready.Input{Topic: inTopic, Partition: part, KafkaPartition: part, Offset: off,
					Key: []byte(in.key), Value: []byte(in.value), Timestamp: 1_700_000_000_000}, noWallClock)
				out.write(p.Step())
			}
		}
	}
	feed(first)
	feed(second)
	return exp
}

// withoutWatermark drops what depends on when a judgement happened: the
// result's watermark field and a late event's watermark header.
func withoutWatermark(evs []lateEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		var hs []string
		for _, h := range strings.Split(e.headers, ";") {
			if !strings.HasPrefix(h, producer.HeaderWatermark+"=") {
				hs = append(hs, h)
			}
		}
		out[i] = e.value + " " + strings.Join(hs, ";")
	}
	slices.Sort(out)
	return out
}

// TestRepartitionMatchesReplay: one or two instances give replay --kcat's
// outputs; so do two whose stage 1 write the repartition record in
// different formats (a rolling upgrade from a release before format 2,
// with state.repartition_format: 1 on the instances already upgraded;
// format 2 beside format 4 with a filter: one stage 1 filters, the other
// forwards what its filter rejects, for stage 2 to filter; and format 3
// beside 4: one sends every record alone, the other folds). With one
// instance of the default format, stage 1 folds records into partials.
func TestRepartitionMatchesReplay(t *testing.T) {
	t.Parallel()
	first, second := repartitionInput()
	type run struct {
		delivery  string
		instances int
		format    int32 // the first instance's state.repartition_format (0: the default, 4)
		filter    bool  // source.filter keeps the records of d = 1 (and the late ones)
	}
	runs := []run{{"exactly_once", 2, repartition.Format1, false}, {"exactly_once", 2, repartition.Format2, true},
		{"at_least_once", 2, repartition.Format3, false}}
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		for _, instances := range []int{1, 2} {
			runs = append(runs, run{delivery, instances, 0, false})
		}
	}
	for _, r := range runs {
		delivery, instances := r.delivery, r.instances
		name := fmt.Sprintf("%s/%d", delivery, instances)
		if r.format != 0 {
			name += fmt.Sprintf("/formats_%d_and_4", r.format)
		}
		if r.filter {
			name += "/filter"
		}
		t.Run(name, func(t *testing.T) {
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, repartitionYaml+"delivery: "+delivery+"\n", brokers)
			if r.filter {
				cfg.Source.Filter = []config.Filter{{Field: "d", Equals: "1"}}
			}
			want := replayKcat(t, cfg, first, second)
			if len(want.late) != len(second) || len(want.dead) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters: the test tests nothing", len(want.results), len(want.late), len(want.dead))
			}
			var svcs []*service
			reg := prometheus.NewRegistry()
			for i := range instances {
				c := cfg
				if r.format != 0 && i == 0 {
					c.State.RepartitionFormat = r.format
				}
				if i == 0 {
					svcs = append(svcs, startWith(t, c, nil, reg))
				} else {
					svcs = append(svcs, start(t, c, nil))
				}
			}
			if instances == 2 {
				waitEven(t, brokers, cfg.Source.Group, 2, 4) // each stage's partitions split over both
			}
			produceSliced(t, brokers, cfg.Source.Group, first)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			if instances == 1 {
				// What an operator asks when windows stall: who holds them back.
				waitGauge(t, reg, "aggregator_sources_unreported", 0)
				waitGauge(t, reg, "aggregator_watermark_source_partition", 3) // the lagging producer's
			}
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			waitPurged(t, brokers, cfg.State.RepartitionTopic)
			for _, s := range svcs {
				s.stop(t)
			}
			compareReplay(t, brokers, delivery, want)
			if instances == 1 && counterValue(t, reg, "aggregator_repartition_folded_records_total", "", "") == 0 {
				t.Error("aggregator_repartition_folded_records_total = 0: stage 1 folded nothing")
			}
		})
	}
}

// compareReplay compares what a read_committed reader sees of the
// outputs with replay --kcat's (with at_least_once, repeats dropped: each
// is identical but for the watermark).
func compareReplay(t *testing.T, brokers []string, delivery string, want expected) {
	t.Helper()
	dedup := func(vs []string) []string {
		if delivery == "at_least_once" {
			return slices.Compact(vs)
		}
		return vs
	}
	if got, want := dedup(contents(values(readAll(t, brokers, resultsTopic)))), contents(want.results); !slices.Equal(got, want) {
		t.Errorf("results differ from replay --kcat:\n%s", diff(got, want))
	}
	if got, want := dedup(withoutWatermark(events(readAll(t, brokers, lateTopic)))), withoutWatermark(want.late); !slices.Equal(got, want) {
		t.Errorf("late events differ from replay --kcat:\n%s", diff(got, want))
	}
	if got, want := dedup(withoutWatermark(events(readAll(t, brokers, dlqTopic)))), withoutWatermark(want.dead); !slices.Equal(got, want) {
		t.Errorf("dead letters differ from replay --kcat:\n%s", diff(got, want))
	}
}

// TestRepartitionCrash: of two instances, one dies half-way through the
// stream without committing; the other takes both stages' partitions
// over (stage 2's from the changelog, with the sources' watermarks), and
// the outputs are still replay --kcat's.
func TestRepartitionCrash(t *testing.T) {
	t.Parallel()
	first, second := repartitionInput()
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, repartitionYaml+"delivery: "+delivery+"\n", brokers)
			want := replayKcat(t, cfg, first, second)
			a, b := start(t, cfg, nil), start(t, cfg, nil)
			waitEven(t, brokers, cfg.Source.Group, 2, 4)
			half := len(first) / 2
			produceKeyed(t, brokers, first[:half])
			waitCount(t, brokers, resultsTopic, 1)
			b.crash()
			produceKeyed(t, brokers, first[half:])
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			produceKeyed(t, brokers, second)
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			a.stop(t)
			compareReplay(t, brokers, delivery, want)
		})
	}
}

// waitPurged waits until some partition of the repartition topic starts
// past offset 0: records stage 2 committed were deleted.
func waitPurged(t testing.TB, brokers []string, topic string) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	waitFor(t, waitTimeout, "a partition of "+topic+" purged", func() bool {
		starts, err := adm.ListStartOffsets(context.Background(), topic)
		purged := false
		if err == nil {
			starts.Each(func(o kadm.ListedOffset) { purged = purged || o.Offset > 0 })
		}
		return purged
	})
}

// waitEven waits until the group has members members holding each
// partitions apiece (of any topic).
func waitEven(t testing.TB, brokers []string, group string, members, each int) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	waitForf(t, waitTimeout, pollEvery, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok || g.State != "Stable" || len(g.Members) != members {
			return false
		}
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			n := 0
			for _, tp := range c.Topics {
				n += len(tp.Partitions)
			}
			if n != each {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("group %s splitting its partitions %d apiece over %d members", group, each, members)
	})
}

// TestRepartitionSilentSource: a source partition that never gets a
// record holds every window back (its marker says minus infinity) until
// stage 1 finds it caught up for idle_timeout and marks it idle. The
// others went idle meanwhile too (their records came in one burst), and
// with every source idle the watermark stays; once a record comes again
// to each of the others (one event time for all three, so that it does
// not matter which goes idle first) their windows fire, as replay over
// the partitions with records gives them.
func TestRepartitionSilentSource(t *testing.T) {
	t.Parallel()
	var ins []keyedInput
	for i := range 150 {
		p := int32(i % 3) // partition 3 stays empty
		ins = append(ins, keyedInput{p, fmt.Sprintf("req-%d", i), fmt.Sprintf(`{"sid":"u%d","t":%d,"d":1}`, i%7, int64(base)+int64(i)*100)})
	}
	for p := range int32(3) {
		ins = append(ins, keyedInput{p, fmt.Sprintf("later-%d", p), fmt.Sprintf(`{"sid":"u0","t":%d,"d":1}`, int64(base)+3_600_000)})
	}
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, repartitionYaml+"delivery: exactly_once\n", brokers)
	cfg.Watermark.IdleTimeout = 300 * time.Millisecond
	p, err := pipeline.New(cfg, pipeline.Mode{OneState: true})
	if err != nil {
		t.Fatal(err)
	}
	var want expected
	out := capture{producer.EncoderFor(cfg), &want}
	offsets := map[int32]int64{}
	for id := range int32(3) {
		p.Assign(id, noWallClock)
	}
	for _, in := range ins {
		off := offsets[in.partition]
		offsets[in.partition]++
		p.Process(&ready.Input{Topic: inTopic, Partition: in.partition, KafkaPartition: in.partition, Offset: off,
			Key: []byte(in.key), Value: []byte(in.value), Timestamp: 1_700_000_000_000}, noWallClock)
		out.write(p.Step())
	}
	if len(want.results) == 0 {
		t.Fatal("replay gives no results: the test tests nothing")
	}
	reg := prometheus.NewRegistry()
	s := startWith(t, cfg, nil, reg)
	produceKeyed(t, brokers, ins[:150])
	waitGauge(t, reg, "aggregator_idle_partitions", 4) // every source idle in every repartition partition
	if n := len(readAll(t, brokers, resultsTopic)); n != 0 {
		t.Fatalf("%d results while partition 3 had not reported idle, want none", n)
	}
	produceKeyed(t, brokers, ins[150:])
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	s.stop(t)
	if got, want := contents(values(readAll(t, brokers, resultsTopic))), contents(want.results); !slices.Equal(got, want) {
		t.Errorf("results differ from replay of the partitions with records:\n%s", diff(got, want))
	}
}
