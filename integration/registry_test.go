package integration

import (
	"context"
	be "encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/producer"
	"aggregator/internal/ready"
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

// registryConfig keys by a field and a nested field; format is a
// registry format or json, and the JSON layout reads the same instants.
// partitioning is source.partitioning; "auto" leaves it out (the
// default, which picks the repartition stage for a key of fields).
func registryConfig(format, url, partitioning string) string {
	reg := ""
	if format != "json" {
		reg = "\n  schema_registry: {url: '" + url + "'}"
	}
	part := ""
	if partitioning != "auto" {
		part = "\n  partitioning: " + partitioning
	}
	return `
source:
  format: ` + format + reg + `
  key: [sid, caller.region]` + part + `
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

// regStream is the calls stream as registry values (the first half written
// with v1, the rest with v2) and the same records as JSON; 1% of the
// values are not in the wire format and a few name an unknown schema id
// (in JSON: lines that are not JSON).
type regStream struct {
	avro, json []string
	bad        int // dead letters
}

// regCall is one record of the stream, for an encoder.
type regCall struct {
	sid, region string
	t, d        int64
}

// regFormat is a registry format under test: its two writer schemas (ids
// 1 and 2 in the registry) and how a record is written with them.
type regFormat struct {
	name   string
	typ    sr.SchemaType
	v1, v2 string
	encode func(t testing.TB, c regCall, v2 bool) []byte
}

func avroFormat() regFormat {
	v1, v2 := avro.MustParse(regCallV1), avro.MustParse(regCallV2)
	return regFormat{config.FormatAvro, sr.TypeAvro, regCallV1, regCallV2, func(t testing.TB, c regCall, second bool) []byte {
		v := map[string]any{"sid": c.sid, "caller": map[string]any{"calls.Caller": map[string]any{"region": c.region}}, "t": c.t,
			"d": map[string]any{"long": c.d}}
		schema, id := v1, uint32(1)
		if second {
			schema, id = v2, 2
			v["channel"] = "app"
		}
		body, err := avro.Marshal(schema, v)
		if err != nil {
			t.Fatal(err)
		}
		return regWire(id, body)
	}}
}

func newRegStream(t testing.TB, f regFormat, n int, seed uint64) regStream {
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
		s.avro = append(s.avro, string(f.encode(t, regCall{c.Sid, region, c.T, c.D}, i >= n/2)))
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

// regPartitionings are the partitionings each registry format's stream
// runs on: by_key, and the default (auto picks the repartition stage for
// a key of fields: stage 1 decodes with the registry's schemas, stage 2
// reads the compact form).
var regPartitionings = []string{"by_key", "auto"}

// TestAvroInputThroughRegistry: Avro input with nested fields, unions,
// timestamp-millis, late records, a schema change mid-stream, values not
// in the wire format and unknown ids, and a registry outage of five
// refused requests (some 4s of backoff) while the new schema is first
// needed. The results are those of
// the same records as JSON; nothing is dead-lettered for the outage.
func TestAvroInputThroughRegistry(t *testing.T) {
	t.Parallel() // its own broker and registry; it mostly waits
	forPartitionings(t, func(t *testing.T, p string) { testRegistryInput(t, avroFormat(), regRun{partitioning: p}) })
}

// TestAvroInAndOutThroughRegistry is the same with the results as Avro
// too (sink.format avro): decoded through the registry, they are the
// JSON results.
func TestAvroInAndOutThroughRegistry(t *testing.T) {
	t.Parallel() // its own broker and registry; it mostly waits
	forPartitionings(t, func(t *testing.T, p string) {
		testRegistryInput(t, avroFormat(), regRun{partitioning: p, avroResults: true})
	})
}

// TestRegistryOutageLongerThanTransaction: the outage outlasts
// state.transaction_timeout, so the brokers abort the transaction open
// while the partition waits; nothing is lost or doubled all the same.
func TestRegistryOutageLongerThanTransaction(t *testing.T) {
	t.Parallel() // its own broker and registry
	forPartitionings(t, func(t *testing.T, p string) {
		testRegistryInput(t, avroFormat(), regRun{partitioning: p, txnTimeout: time.Second})
	})
}

// TestProtobufInputThroughRegistry is the same with Protobuf: the nested
// record a message, the union a oneof, the time a google.protobuf.Timestamp.
func TestProtobufInputThroughRegistry(t *testing.T) {
	t.Parallel() // its own broker and registry; it mostly waits
	forPartitionings(t, func(t *testing.T, p string) { testRegistryInput(t, protoFormat(t), regRun{partitioning: p}) })
}

// TestJSONSchemaInputThroughRegistry is the same with JSON Schema: the
// body is the JSON record, checked against the writer's schema.
func TestJSONSchemaInputThroughRegistry(t *testing.T) {
	t.Parallel() // its own broker and registry; it mostly waits
	forPartitionings(t, func(t *testing.T, p string) { testRegistryInput(t, jsonSchemaFormat(), regRun{partitioning: p}) })
}

// forPartitionings runs test on each of regPartitionings, in parallel.
func forPartitionings(t *testing.T, test func(t *testing.T, partitioning string)) {
	for _, p := range regPartitionings {
		t.Run(p, func(t *testing.T) {
			t.Parallel() // its own broker and registry
			test(t, p)
		})
	}
}

// regRun is how testRegistryInput runs a format's stream.
type regRun struct {
	partitioning string        // source.partitioning (registryConfig)
	txnTimeout   time.Duration // state.transaction_timeout, if set
	avroResults  bool          // sink.format avro
}

// testRegistryInput runs the stream of f as run says.
func testRegistryInput(t *testing.T, f regFormat, run regRun) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	reg := newRegistry(t)
	for _, text := range []string{f.v1, f.v2} {
		if _, _, err := reg.RegisterSchema("calls-value", sr.Schema{Schema: text, Type: f.typ}); err != nil {
			t.Fatal(err)
		}
	}
	s := newRegStream(t, f, 2000, 19)
	cfg := parseConfig(t, registryConfig(f.name, reg.URL(), run.partitioning), brokers)
	if run.partitioning != "by_key" && cfg.Source.ByKey() {
		t.Fatalf("source.partitioning %s runs by_key", run.partitioning)
	}
	if run.txnTimeout > 0 {
		cfg.State.TransactionTimeout = run.txnTimeout
	}
	if run.avroResults {
		cfg.Sink.Format = config.FormatAvro
	}
	jsonWant := replay(t, parseConfig(t, registryConfig("json", "", "by_key"), brokers), onePartition(s.json), noWallClock)
	want := replayRegistry(t, cfg, f, s.avro)
	if !slices.Equal(want.results, jsonWant.results) {
		t.Fatalf("reference runs: %s results differ from JSON's:\n%s", f.name, diff(want.results, jsonWant.results))
	}
	if len(want.dead) != s.bad || len(jsonWant.late) != len(want.late) || len(want.late) == 0 {
		t.Fatalf("reference run: %d dead letters (want %d), %d late events (JSON: %d)", len(want.dead), s.bad, len(want.late), len(jsonWant.late))
	}

	half := len(s.avro) / 2
	produce(t, brokers, s.avro[:half], func(int) int32 { return 0 })
	svc := start(t, cfg, nil)
	first := replayRegistry(t, cfg, f, s.avro[:half])
	waitCount(t, brokers, resultsTopic, int64(len(first.results)))

	reg.off.Store(true) // v2's id is first needed now: the partition waits
	produce(t, brokers, s.avro[half:], func(int) int32 { return 0 })
	for range 5 { // with the retries' backoff, about 4s of outage
		<-reg.refused
	}
	if svc.c.Serving() {
		t.Error("Ready() = true while the registry refuses, want false")
	}
	reg.off.Store(false)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	svc.stop(t)

	got := readAll(t, brokers, resultsTopic)
	if run.avroResults {
		checkAvroResults(t, reg.URL(), got, want.results)
	} else if got := values(got); !slices.Equal(got, want.results) {
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

// checkAvroResults checks that results, Avro in the wire format, decoded
// through the registry at url, are the JSON results want, in order.
func checkAvroResults(t testing.TB, url string, results []*kgo.Record, want []string) {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d", len(results), len(want))
	}
	for i, r := range results {
		if decoded, wantJSON := decodeAvroResult(t, cl, r.Value), avroNamed(jsonResult(t, want[i])); !reflect.DeepEqual(decoded, wantJSON) {
			t.Fatalf("result %d decoded through the registry:\n%v\nwant (the JSON result)\n%v", i, decoded, wantJSON)
		}
	}
}

// replayRegistry is replay for registry values: the registry's schemas
// (ids 1 and 2; unknownID unknown) are given to the pipeline first.
func replayRegistry(t testing.TB, cfg config.Config, f regFormat, values []string) expected {
	t.Helper()
	var exp expected
	p, err := pipeline.New(cfg, pipeline.Mode{})
	if err != nil {
		t.Fatal(err)
	}
	out := capture{producer.EncoderFor(cfg), &exp}
	typ := map[sr.SchemaType]record.SchemaType{sr.TypeAvro: record.SchemaAvro, sr.TypeProtobuf: record.SchemaProtobuf, sr.TypeJSON: record.SchemaJSON}[f.typ]
	p.Schemas().Add(1, record.Schema{Type: typ, Text: f.v1})
	p.Schemas().Add(2, record.Schema{Type: typ, Text: f.v2})
	p.Schemas().AddUnknown(unknownID)
	p.Assign(0, noWallClock)
	for i, v := range values {
		p.Process(&ready.Input{Topic: inTopic, Offset: int64(i), Value: []byte(v),
			Key: []byte(fmt.Sprintf("k%d", i)), Timestamp: 1_700_000_000_000 + int64(i)}, noWallClock)
		out.write(p.Step())
	}
	return exp
}

// The Protobuf writer's schemas; v2 adds a field.
const (
	protoCallV1 = `syntax = "proto3";
package calls;
import "google/protobuf/timestamp.proto";
message Call {
  message Caller { string region = 1; }
  string sid = 1;
  Caller caller = 2;
  google.protobuf.Timestamp t = 3;
  oneof amount { int64 d = 4; double cost = 5; }
}`
	protoCallV2 = `syntax = "proto3";
package calls;
import "google/protobuf/timestamp.proto";
message Call {
  message Caller { string region = 1; }
  string sid = 1;
  Caller caller = 2;
  google.protobuf.Timestamp t = 3;
  oneof amount { int64 d = 4; double cost = 5; }
  string channel = 6;
}`
)

func protoFormat(t testing.TB) regFormat {
	compile := func(text string) protoreflect.MessageDescriptor {
		c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"call.proto": text})})}
		files, err := c.Compile(context.Background(), "call.proto")
		if err != nil {
			t.Fatal(err)
		}
		return files[0].Messages().ByName("Call")
	}
	v1, v2 := compile(protoCallV1), compile(protoCallV2)
	return regFormat{config.FormatProtobuf, sr.TypeProtobuf, protoCallV1, protoCallV2, func(t testing.TB, c regCall, second bool) []byte {
		md, id := v1, uint32(1)
		if second {
			md, id = v2, 2
		}
		m := dynamicpb.NewMessage(md)
		fields := md.Fields()
		m.Set(fields.ByName("sid"), protoreflect.ValueOfString(c.sid))
		caller := dynamicpb.NewMessage(fields.ByName("caller").Message())
		caller.Set(caller.Descriptor().Fields().ByName("region"), protoreflect.ValueOfString(c.region))
		m.Set(fields.ByName("caller"), protoreflect.ValueOfMessage(caller))
		ts := dynamicpb.NewMessage(fields.ByName("t").Message())
		ts.Set(ts.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(c.t/1000))
		ts.Set(ts.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(c.t%1000)*1_000_000))
		m.Set(fields.ByName("t"), protoreflect.ValueOfMessage(ts))
		m.Set(fields.ByName("d"), protoreflect.ValueOfInt64(c.d))
		if second {
			m.Set(fields.ByName("channel"), protoreflect.ValueOfString("app"))
		}
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return regWire(id, append([]byte{0}, body...)) // message index [0]: the first message
	}}
}

// The JSON Schema writer's schemas; v2 adds a field.
const (
	jsonCallV1 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
		"properties":{"sid":{"type":"string"},"caller":{"type":["object","null"],"properties":{"region":{"type":"string"}}},
		"t":{"type":"integer"},"d":{"type":["integer","null"]}},"required":["sid","t"]}`
	jsonCallV2 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
		"properties":{"sid":{"type":"string"},"caller":{"type":["object","null"],"properties":{"region":{"type":"string"}}},
		"t":{"type":"integer"},"d":{"type":["integer","null"]},"channel":{"type":"string"}},"required":["sid","t"]}`
)

func jsonSchemaFormat() regFormat {
	return regFormat{config.FormatJSONSchema, sr.TypeJSON, jsonCallV1, jsonCallV2, func(_ testing.TB, c regCall, second bool) []byte {
		channel, id := "", uint32(1)
		if second {
			channel, id = `,"channel":"app"`, 2
		}
		return regWire(id, fmt.Appendf(nil, `{"sid":%q,"caller":{"region":%q},"t":%d,"d":%d%s}`, c.sid, c.region, c.t, c.d, channel))
	}}
}

// TestAvroResultsThroughRegistry: with sink.format avro the results are
// Avro in the wire format under a schema registered as calls-windows-value;
// decoded through the registry they are the JSON results. A restart with
// an added aggregate (as a new group: the old state has other aggregates)
// registers a second version, and its results carry it.
func TestAvroResultsThroughRegistry(t *testing.T) {
	t.Parallel() // its own broker and registry
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	reg := newRegistry(t)
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	want := replay(t, cfg, onePartition(calls(1500, 3, 23)), noWallClock)
	avroCfg := cfg
	avroCfg.Sink.Format, avroCfg.Source.SchemaRegistry.URL = config.FormatAvro, reg.URL()
	lines := calls(1500, 3, 23)
	produce(t, brokers, lines, func(int) int32 { return 0 })
	svc := start(t, avroCfg, nil)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	svc.stop(t)

	got := readAll(t, brokers, resultsTopic)
	checkAvroResults(t, reg.URL(), got, want.results)

	// A new aggregate: a second version under the same subject.
	more := avroCfg
	more.Aggregates = append(slices.Clone(avroCfg.Aggregates), config.Aggregate{Name: "max.d", Fn: "max", Field: "d"})
	// Other aggregates are other state: a new group starts afresh.
	more.Source.Group, more.State.ChangelogTopic = "aggregator-test-2", "aggregator-test-2-changelog"
	produce(t, brokers, calls(100, 3, 29), func(int) int32 { return 0 })
	svc = start(t, more, nil)
	waitCount(t, brokers, resultsTopic, int64(len(got))+1)
	svc.stop(t)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	versions, err := cl.SubjectVersions(context.Background(), resultsTopic+"-value")
	if err != nil || len(versions) != 2 {
		t.Fatalf("subject %s-value versions = %v, %v; want 2", resultsTopic, versions, err)
	}
	last := readAll(t, brokers, resultsTopic)
	aggs := decodeAvroResult(t, cl, last[len(last)-1].Value)["aggregates"].(map[string]any)
	if _, ok := aggs["max_d"]; !ok {
		t.Errorf("the last result's aggregates %v have no max_d", aggs)
	}
}

// decodeAvroResult decodes a wire-format value with the schema its id
// names in the registry, into the JSON result's shape.
func decodeAvroResult(t testing.TB, cl *sr.Client, v []byte) map[string]any {
	t.Helper()
	id, ok := record.WireSchemaID(v)
	if !ok {
		t.Fatalf("result % x is not in the wire format", v[:min(len(v), 8)])
	}
	s, err := cl.SchemaByID(context.Background(), int(id))
	if err != nil {
		t.Fatal(err)
	}
	return decodeAvroWith(t, avro.MustParse(s.Schema), v)
}

// decodeAvroWith is decodeAvroResult with the schema its id names.
func decodeAvroWith(t testing.TB, schema avro.Schema, v []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := avro.Unmarshal(schema, v[5:], &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"window_start", "window_end"} {
		m[f] = float64(m[f].(time.Time).UnixMilli())
	}
	for _, f := range []string{"count", "revision", "watermark"} {
		m[f] = float64(m[f].(int64))
	}
	aggs := m["aggregates"].(map[string]any)
	for k, a := range aggs {
		switch a := a.(type) {
		case int64:
			aggs[k] = float64(a)
		case map[string]any: // a union's branch
			for _, x := range a {
				aggs[k] = x
			}
		}
	}
	key := m["key"].(map[string]any)
	for k, x := range key {
		if b, ok := x.(map[string]any); ok {
			for _, y := range b {
				key[k] = y
			}
		}
	}
	return m
}

// avroNamed renames a JSON result's key fields and aggregates as the
// Avro results name them: every character outside [A-Za-z0-9_] is _ (a
// leading digit would get a _ in front; these names have none).
func avroNamed(m map[string]any) map[string]any {
	legal := func(r rune) rune {
		if r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}
	for _, f := range []string{"key", "aggregates"} {
		named := map[string]any{}
		for k, v := range m[f].(map[string]any) {
			named[strings.Map(legal, k)] = v
		}
		m[f] = named
	}
	return m
}

// jsonResult is a JSON result with its numbers as float64.
func jsonResult(t testing.TB, v string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := jsonUnmarshal([]byte(v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRegistryInputAcrossAnAbort: a transaction aborts (the service starts
// its state again from the changelog with a fresh processor) before the
// writer's new schema id is first met; the records after it still decode
// with the schemas fetched then, and the results are the JSON run's.
func TestRegistryInputAcrossAnAbort(t *testing.T) {
	t.Parallel() // its own broker and registry
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	reg := newRegistry(t)
	f := avroFormat()
	for _, text := range []string{f.v1, f.v2} {
		if _, _, err := reg.RegisterSchema("calls-value", sr.Schema{Schema: text, Type: f.typ}); err != nil {
			t.Fatal(err)
		}
	}
	s := newRegStream(t, f, 2000, 31)
	cfg := parseConfig(t, registryConfig(f.name, reg.URL(), "by_key"), brokers)
	want := replayRegistry(t, cfg, f, s.avro)
	if jsonWant := replay(t, parseConfig(t, registryConfig("json", "", "by_key"), brokers), onePartition(s.json), noWallClock); !slices.Equal(want.results, jsonWant.results) {
		t.Fatalf("reference runs: Avro results differ from JSON's:\n%s", diff(want.results, jsonWant.results))
	}
	svc := start(t, cfg, nil)
	produce(t, brokers, s.avro[:500], func(int) int32 { return 0 })
	waitGroupCommittedWithin(t, waitTimeout, brokers, cfg.Source.Group, map[int32]int64{0: 500}, svc)
	h := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.TransactionAbortable, Count: 1})
	produce(t, brokers, s.avro[500:1000], func(int) int32 { return 0 }) // schema 1 still
	waitGroupCommittedWithin(t, waitTimeout, brokers, cfg.Source.Group, map[int32]int64{0: 1000}, svc)
	if h.Hits() != 1 {
		t.Fatalf("EndTxn faulted %d times, want 1 (an abort before schema 2)", h.Hits())
	}
	h.Remove()
	produce(t, brokers, s.avro[1000:], func(int) int32 { return 0 }) // schema 2 from here
	waitGroupCommittedWithin(t, waitTimeout, brokers, cfg.Source.Group, map[int32]int64{0: int64(len(s.avro))}, svc)
	svc.stop(t)
	if got := values(readAll(t, brokers, resultsTopic)); !slices.Equal(got, want.results) {
		t.Errorf("results:\n%s", diff(got, want.results))
	}
	if got := events(readAll(t, brokers, dlqTopic)); !slices.Equal(got, want.dead) {
		t.Errorf("dead letters: %d, want %d", len(got), len(want.dead))
	}
}
