package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"aggregator/internal/config"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
)

// TestRegistryRepartitionThreeInstances: each registry format's stream
// (the schema change mid-stream, values not in the wire format, unknown
// ids, late records) on three instances with source.partitioning
// repartition: stage 1 decodes the input partition with the registry's
// schemas on one of them, stage 2 runs on the three repartition
// partitions, spread over all three, two of which never decode an input
// record. Results, late events and dead letters are replay's.
func TestRegistryRepartitionThreeInstances(t *testing.T) {
	t.Parallel()
	formats := []regFormat{avroFormat(), protoFormat(t), jsonSchemaFormat()}
	if raceEnabled { // CI's time: the formats differ in stage 1's decoding only, which the other registry tests cover on every partitioning
		formats = formats[:1]
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // its own broker and registry
			kc := newCluster(t, 1)
			brokers := kc.ListenAddrs()
			reg := registerCalls(t, f)
			s := newRegStream(t, f, 1500, 37)
			cfg := parseConfig(t, registryConfig(f.name, reg.URL(), "repartition")+"state: {repartition_partitions: 3}\n", brokers)
			want := replayRegistry(t, cfg, f, s.avro)
			if len(want.dead) != s.bad || len(want.late) == 0 || len(want.results) == 0 {
				t.Fatalf("replay gives %d results, %d late events, %d dead letters (want %d): the test tests little", len(want.results), len(want.late), len(want.dead), s.bad)
			}
			var svcs []*service
			for range 3 {
				svcs = append(svcs, start(t, cfg, nil))
			}
			waitSpread(t, brokers, cfg.Source.Group, 3)
			produce(t, brokers, s.avro, func(int) int32 { return 0 })
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			waitCount(t, brokers, lateTopic, int64(len(want.late)))
			for _, svc := range svcs {
				svc.stop(t)
			}
			compareReplay(t, brokers, "exactly_once", want)
		})
	}
}

// registerCalls is a registry holding f's two writer schemas (ids 1 and
// 2) under calls-value.
func registerCalls(t testing.TB, f regFormat) *switchableRegistry {
	t.Helper()
	reg := newRegistry(t)
	for _, text := range []string{f.v1, f.v2} {
		if _, _, err := reg.RegisterSchema("calls-value", sr.Schema{Schema: text, Type: f.typ}); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// waitSpread waits until the group is stable with members members, each
// holding a partition at least.
func waitSpread(t testing.TB, brokers []string, group string, members int) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	waitFor(t, waitTimeout, fmt.Sprintf("group %s spread over %d members", group, members), func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok || g.State != "Stable" || len(g.Members) != members {
			return false
		}
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			if len(c.Topics) == 0 {
				return false
			}
		}
		return true
	})
}

// TestRegistryStage2DecodesValues: stage 2 decodes the input value a
// repartition record carries where it cannot use the record's compact
// form: a format-1 record (it has none), a form of another config (a
// rollout that changes the aggregates), format 3's records whose values
// did not decode in stage 1, and, under a partition's older generation,
// every record. Stage 1 ran elsewhere (another instance, or before a
// restart): the instance running stage 2 has never decoded a record of
// these schemas, and fetches them from the registry before it decodes.
// Its outputs are replay's, or, across the generations, those of the same
// steps with the records as JSON.
func TestRegistryStage2DecodesValues(t *testing.T) {
	t.Parallel()
	f := avroFormat()
	withAggregate := func(c config.Config, a config.Aggregate) config.Config {
		c.Aggregates = append(slices.Clone(c.Aggregates), a)
		return c
	}
	cases := []struct {
		name string
		// stage1 and stage2 are the configs of the two stages, made from
		// the test's config.
		stage1, stage2 func(config.Config) config.Config
	}{
		{"format_1", func(c config.Config) config.Config { c.State.RepartitionFormat = repartition.Format1; return c }, same},
		{"forms_of_another_config", func(c config.Config) config.Config { c.Aggregates = c.Aggregates[:2]; return c }, same},
		// channel is "app" in the records of schema 2: a sum of it does
		// not decode, stage 1 forwards those records without a form and
		// stage 2 dead-letters them, non_numeric.
		{"values_stage_1_did_not_decode", func(c config.Config) config.Config {
			return withAggregate(c, config.Aggregate{Name: "channels", Fn: "sum", Field: "channel"})
		}, func(c config.Config) config.Config {
			return withAggregate(c, config.Aggregate{Name: "channels", Fn: "sum", Field: "channel"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // its own broker and registry
			kc := newCluster(t, 1)
			brokers := kc.ListenAddrs()
			reg := registerCalls(t, f)
			s := newRegStream(t, f, 1500, 41)
			cfg := parseConfig(t, registryConfig(f.name, reg.URL(), "repartition"), brokers)
			want := replayRegistry(t, tc.stage2(cfg), f, s.avro)
			stage2Only(t, brokers, []stage2Phase{{tc.stage1(cfg), tc.stage2(cfg), keyedStream(s.avro)}})
			compareReplay(t, brokers, "exactly_once", want)
			if tc.name == "values_stage_1_did_not_decode" && !slices.ContainsFunc(want.dead, func(d lateEvent) bool { return strings.Contains(d.headers, record.ReasonNonNumeric) }) {
				t.Errorf("no dead letter %s: no record reached stage 2 without a form", record.ReasonNonNumeric)
			}
		})
	}
	t.Run("older_generation", func(t *testing.T) {
		t.Parallel() // its own brokers and registries
		// 5s windows at config_version 1, then 10s ones at 2: the
		// partition's generation 1 keeps its open windows after the
		// change, and decodes each record under its own settings.
		s := newRegStream(t, f, 1500, 43)
		run := func(format string, values []string) (results, late, dead []*kgo.Record) {
			kc := newCluster(t, 1)
			brokers := kc.ListenAddrs()
			reg := registerCalls(t, f)
			v1 := parseConfig(t, registryConfig(format, reg.URL(), "repartition")+"state: {config_version: 1}\n", brokers)
			v2 := v1
			v2.Window.Size, v2.State.ConfigVersion = 10*time.Second, 2
			ins := keyedStream(values)
			half := len(ins) / 2
			stage2Only(t, brokers, []stage2Phase{{v1, v1, ins[:half]}, {v2, v2, ins[half:]}})
			return readAll(t, brokers, resultsTopic), readAll(t, brokers, lateTopic), readAll(t, brokers, dlqTopic)
		}
		results, late, dead := run(f.name, s.avro)
		jsonResults, jsonLate, jsonDead := run("json", s.json)
		if got, want := contents(values(results)), contents(values(jsonResults)); !slices.Equal(got, want) || len(got) == 0 {
			t.Errorf("results differ from those of the records as JSON:\n%s", diff(got, want))
		}
		if len(late) != len(jsonLate) || len(dead) != len(jsonDead) || len(dead) != s.bad {
			t.Errorf("%d late events and %d dead letters, want %d and %d (the records as JSON: %d)", len(late), len(dead), len(jsonLate), s.bad, len(jsonDead))
		}
	})
}

func same(c config.Config) config.Config { return c }

// keyedStream is values on partition 0, keyed as produce keys them.
func keyedStream(values []string) []keyedInput {
	out := make([]keyedInput, len(values))
	for i, v := range values {
		out[i] = keyedInput{0, fmt.Sprintf("k%d", i), v}
	}
	return out
}

// stage2Phase is one phase of stage2Only: its records, forwarded as a
// stage 1 of stage1 would, then read by a service of stage2.
type stage2Phase struct {
	stage1, stage2 config.Config
	ins            []keyedInput
}

// stage2Only runs phases on one input partition: each forwards its
// records as a stage 1 (forwardAsStage1), then runs a service of its
// stage-2 config, which finds them read from the input and reads the
// repartition topic only, until it has committed them, and stops it.
func stage2Only(t testing.TB, brokers []string, phases []stage2Phase) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	for _, ph := range phases {
		forwardAsStage1(t, brokers, ph.stage1, 1, ph.ins)
		ends, err := adm.ListEndOffsets(context.Background(), ph.stage2.State.RepartitionTopic)
		if err != nil {
			t.Fatal(err)
		}
		svc := start(t, ph.stage2, nil)
		waitFor(t, waitTimeout, "the repartition topic read", func() bool {
			offs, err := adm.FetchOffsets(context.Background(), ph.stage2.Source.Group)
			read := err == nil
			ends.Each(func(e kadm.ListedOffset) {
				o, ok := offs.Lookup(e.Topic, e.Partition)
				read = read && ok && o.At >= e.Offset
			})
			return read
		})
		svc.stop(t)
	}
}
