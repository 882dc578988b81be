package integration

import (
	be "encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
	"aggregator/internal/record"
)

// The writer's schema: a nested record in a union, a union-typed value and
// a timestamp-millis event time; v2 (registered mid-stream) adds a field.
const (
	regCallV1 = `{"type":"record","name":"Call","namespace":"calls","fields":[
		{"name":"sid","type":"string"},
		{"name":"caller","type":["null",{"type":"record","name":"Caller","fields":[{"name":"region","type":"string"}]}]},
		{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"d","type":["null","long"]}]}`
	regCallV2 = `{"type":"record","name":"Call","namespace":"calls","fields":[
		{"name":"sid","type":"string"},
		{"name":"caller","type":["null",{"type":"record","name":"Caller","fields":[{"name":"region","type":"string"}]}]},
		{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"d","type":["null","long"]},
		{"name":"channel","type":"string","default":"web"}]}`
	// unknownID is a schema id no registry subject has.
	unknownID = 99
)

// registryConfig keys by a field and a nested field; format is avro or
// json, and the JSON layout reads the same instants.
func registryConfig(format, url string) string {
	reg := ""
	if format != "json" {
		reg = "\n  schema_registry: {url: '" + url + "'}"
	}
	return `
source:
  format: ` + format + reg + `
  key: [sid, caller.region]
  timestamp: {field: t, layout: unix_ms}
watermark: {strategy: bounded, max_out_of_orderness: 1s}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
  - {name: last_d, fn: last, field: d}
delivery: exactly_once
`
}

// regStream is the calls stream as Avro values (the first half written
// with v1, the rest with v2) and the same records as JSON; 1% of the
// values are not in the wire format and a few name an unknown schema id
// (in JSON: lines that are not JSON).
type regStream struct {
	avro, json []string
	bad        int // dead letters
}

func newRegStream(t testing.TB, n int, seed uint64) regStream {
	v1, v2 := avro.MustParse(regCallV1), avro.MustParse(regCallV2)
	rng := rand.New(rand.NewPCG(seed, 2))
	var s regStream
	for i, line := range calls(n, 4, seed) {
		var c struct {
			Sid  string `json:"sid"`
			T, D int64
		}
		if err := jsonUnmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		switch {
		case rng.IntN(100) == 0:
			s.avro, s.json, s.bad = append(s.avro, line), append(s.json, "not json"), s.bad+1 // plain JSON: no wire header
			continue
		case i%250 == 125:
			s.avro, s.json, s.bad = append(s.avro, string(regWire(unknownID, []byte{2, 'x'}))), append(s.json, "not json"), s.bad+1
			continue
		}
		region := []string{"eu", "us"}[c.D%2]
		v := map[string]any{"sid": c.Sid, "caller": map[string]any{"calls.Caller": map[string]any{"region": region}}, "t": c.T,
			"d": map[string]any{"long": c.D}}
		schema, id := v1, uint32(1)
		if i >= n/2 {
			schema, id = v2, 2
			v["channel"] = "app"
		}
		body, err := avro.Marshal(schema, v)
		if err != nil {
			t.Fatal(err)
		}
		s.avro = append(s.avro, string(regWire(id, body)))
		s.json = append(s.json, fmt.Sprintf(`{"sid":%q,"caller":{"region":%q},"t":%d,"d":%d}`, c.Sid, region, c.T, c.D))
	}
	return s
}

func regWire(id uint32, body []byte) []byte {
	return append(be.BigEndian.AppendUint32([]byte{0}, id), body...)
}

// switchableRegistry is srfake behind a switch: while off, every request
// gets 503, and each refusal is signalled on refused.
type switchableRegistry struct {
	*srfake.Registry
	off     atomic.Bool
	refused chan struct{}
}

func newRegistry(t testing.TB) *switchableRegistry {
	r := &switchableRegistry{Registry: srfake.New(), refused: make(chan struct{}, 1)}
	t.Cleanup(r.Close)
	r.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !r.off.Load() {
			return false
		}
		http.Error(w, "registry down", http.StatusServiceUnavailable)
		select {
		case r.refused <- struct{}{}:
		default:
		}
		return true
	})
	return r
}

// TestAvroInputThroughRegistry: Avro input with nested fields, unions,
// timestamp-millis, late records, a schema change mid-stream, values not
// in the wire format and unknown ids, and a registry outage of several
// retries while the new schema is first needed. The results are those of
// the same records as JSON; nothing is dead-lettered for the outage.
func TestAvroInputThroughRegistry(t *testing.T) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	reg := newRegistry(t)
	if _, _, err := reg.RegisterSchema("calls-value", sr.Schema{Schema: regCallV1, Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.RegisterSchema("calls-value", sr.Schema{Schema: regCallV2, Type: sr.TypeAvro}); err != nil {
		t.Fatal(err)
	}
	s := newRegStream(t, 2000, 19)
	cfg := parseConfig(t, registryConfig(config.FormatAvro, reg.URL()), brokers)
	jsonWant := replay(t, parseConfig(t, registryConfig("json", ""), brokers), onePartition(s.json), noWallClock)
	want := replayAvro(t, cfg, s.avro)
	if !slices.Equal(want.results, jsonWant.results) {
		t.Fatalf("reference runs: Avro results differ from JSON's:\n%s", diff(want.results, jsonWant.results))
	}
	if len(want.dead) != s.bad || len(jsonWant.late) != len(want.late) || len(want.late) == 0 {
		t.Fatalf("reference run: %d dead letters (want %d), %d late events (JSON: %d)", len(want.dead), s.bad, len(want.late), len(jsonWant.late))
	}

	half := len(s.avro) / 2
	produce(t, brokers, s.avro[:half], func(int) int32 { return 0 })
	svc := start(t, cfg, nil)
	first := replayAvro(t, cfg, s.avro[:half])
	waitValue(t, brokers, resultsTopic, first.results[len(first.results)-1])

	reg.off.Store(true) // v2's id is first needed now: the partition waits
	produce(t, brokers, s.avro[half:], func(int) int32 { return 0 })
	for range 3 {
		<-reg.refused
	}
	if svc.c.Ready() {
		t.Error("Ready() = true while the registry refuses, want false")
	}
	reg.off.Store(false)
	waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
	svc.stop(t)

	if got := values(readAll(t, brokers, resultsTopic)); !slices.Equal(got, want.results) {
		t.Errorf("results:\n%s", diff(got, want.results))
	}
	if got := events(readAll(t, brokers, dlqTopic)); !slices.Equal(got, want.dead) {
		t.Errorf("dead letters: %d, want %d", len(got), len(want.dead))
	}
	reasons := map[string]int{}
	for _, d := range want.dead {
		for _, r := range []string{record.ReasonBadWireFormat, record.ReasonUnknownSchema} {
			if strings.Contains(d.headers, r) {
				reasons[r]++
			}
		}
	}
	if reasons[record.ReasonBadWireFormat] == 0 || reasons[record.ReasonUnknownSchema] == 0 || reasons[record.ReasonBadWireFormat]+reasons[record.ReasonUnknownSchema] != s.bad {
		t.Errorf("dead-letter reasons = %v, want both, %d in all", reasons, s.bad)
	}
	if got := events(readAll(t, brokers, lateTopic)); !slices.Equal(got, want.late) {
		t.Errorf("late events: %d, want %d", len(got), len(want.late))
	}
}

// replayAvro is replay for Avro values: the registry's schemas (ids 1
// and 2; unknownID unknown) are given to the pipeline first.
func replayAvro(t testing.TB, cfg config.Config, values []string) expected {
	t.Helper()
	var exp expected
	p, err := pipeline.New(cfg, capture{producer.NewEncoder(cfg.AggregateNames()), &exp})
	if err != nil {
		t.Fatal(err)
	}
	p.Schemas().Add(1, record.Schema{Type: record.SchemaAvro, Text: regCallV1})
	p.Schemas().Add(2, record.Schema{Type: record.SchemaAvro, Text: regCallV2})
	p.Schemas().AddUnknown(unknownID)
	p.Assign(0, noWallClock)
	for i, v := range values {
		p.Process(&pipeline.Input{Topic: inTopic, Offset: int64(i), Value: []byte(v),
			Key: []byte(fmt.Sprintf("k%d", i)), Timestamp: 1_700_000_000_000 + int64(i)}, noWallClock)
	}
	return exp
}
