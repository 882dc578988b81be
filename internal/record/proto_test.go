package record_test

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// callerProto is imported by callProto (a reference in the registry).
const (
	callerProto = `syntax = "proto3";
package calls;
message Caller { string region = 1; map<string, int64> attrs = 2; }`
	callProto = `syntax = "proto3";
package calls;
import "calls/caller.proto";
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message Call {
  enum CallType { FAILED = 0; SUCCESS = 1; }
  string sid = 1;
  CallType call_type = 2;
  google.protobuf.Timestamp call_time = 3;
  repeated string tags = 4;
  Caller caller = 5;
  oneof amount { int64 duration = 6; double cost = 7; }
  optional int32 priority = 8;
  int64 retries = 9;
  message Inner { string sid = 1; }
}`
)

func protoSchemas(t testing.TB) *record.Schemas {
	t.Helper()
	s := record.NewSchemas()
	s.Add(1, record.Schema{Type: record.SchemaProtobuf, Text: callProto, References: []record.Reference{
		{Name: "calls/caller.proto", Schema: record.Schema{Type: record.SchemaProtobuf, Text: callerProto}}}})
	return s
}

// protoFiles compiles the test's schema, to write values with.
func protoFiles(t testing.TB) protoreflect.FileDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"call.proto": callProto, "calls/caller.proto": callerProto})})}
	files, err := c.Compile(context.Background(), "call.proto")
	if err != nil {
		t.Fatal(err)
	}
	return files[0]
}

// protoValue encodes the message md with set applied, framed with schema
// id 1 and the message indexes.
func protoValue(t testing.TB, md protoreflect.MessageDescriptor, indexes []int64, set func(m *dynamicpb.Message)) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	set(m)
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.BigEndian.AppendUint32([]byte{0}, 1)
	if len(indexes) == 1 && indexes[0] == 0 {
		out = append(out, 0)
	} else {
		out = binary.AppendVarint(out, int64(len(indexes)))
		for _, i := range indexes {
			out = binary.AppendVarint(out, i)
		}
	}
	return append(out, body...)
}

func setField(m *dynamicpb.Message, name string, v protoreflect.Value) {
	m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(name)), v)
}

// protoCall sets a full call: the Timestamp at ms, duration in the oneof.
func protoCall(sid string, ms int64, duration int64) func(m *dynamicpb.Message) {
	return func(m *dynamicpb.Message) {
		fields := m.Descriptor().Fields()
		setField(m, "sid", protoreflect.ValueOfString(sid))
		setField(m, "call_type", protoreflect.ValueOfEnum(1))
		ts := dynamicpb.NewMessage(fields.ByName("call_time").Message())
		setField(ts, "seconds", protoreflect.ValueOfInt64(ms/1000))
		setField(ts, "nanos", protoreflect.ValueOfInt32(int32(ms%1000)*1e6+999))
		m.Set(fields.ByName("call_time"), protoreflect.ValueOfMessage(ts))
		tags := m.NewField(fields.ByName("tags")).List()
		tags.Append(protoreflect.ValueOfString("a"))
		tags.Append(protoreflect.ValueOfString(`q"`))
		m.Set(fields.ByName("tags"), protoreflect.ValueOfList(tags))
		caller := dynamicpb.NewMessage(fields.ByName("caller").Message())
		setField(caller, "region", protoreflect.ValueOfString("eu"))
		attrs := caller.NewField(caller.Descriptor().Fields().ByName("attrs")).Map()
		attrs.Set(protoreflect.ValueOfString("n").MapKey(), protoreflect.ValueOfInt64(1))
		setField(caller, "attrs", protoreflect.ValueOfMap(attrs))
		m.Set(fields.ByName("caller"), protoreflect.ValueOfMessage(caller))
		setField(m, "duration", protoreflect.ValueOfInt64(duration))
	}
}

func protoConfig(format string) config.Config {
	cfg := avroConfig(format)
	cfg.Source.Timestamp.Field = "call_time"
	cfg.Source.Filter = []config.Filter{{Field: "call_type", Equals: "SUCCESS"}}
	cfg.Aggregates = append(cfg.Aggregates, config.Aggregate{Name: "retries", Fn: "first", Field: "retries"})
	return cfg
}

// TestDecodeProtobuf: the same logical record as JSON; enums as names,
// field names as in the .proto, Timestamp as an instant, a proto3 scalar
// unset is its default, the oneof as its set field.
func TestDecodeProtobuf(t *testing.T) {
	fd := protoFiles(t)
	dec, err := record.NewDecoder(protoConfig(config.FormatProtobuf).RecordSpec(), protoSchemas(t))
	if err != nil {
		t.Fatal(err)
	}
	jsonCfg := protoConfig("json")
	jsonCfg.Source.Timestamp.Layout = "unix_ms"
	jdec := newDecoder(t, jsonCfg)
	value := protoValue(t, fd.Messages().ByName("Call"), []int64{1}, protoCall("s1", 1922350204456, 3))
	got, err := decode(dec, string(value), record.Input{})
	want, jerr := decode(jdec, `{"sid":"s1","call_type":"SUCCESS","call_time":1922350204456,"tags":["a","q\""],`+
		`"caller":{"region":"eu","attrs":{"n":1}},"duration":3,"retries":0}`, record.Input{})
	if err != nil || jerr != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(protobuf) = %+v, %v\nwant (as JSON) %+v, %v", got, err, want, jerr)
	}

	noDuration := protoValue(t, fd.Messages().ByName("Call"), []int64{1}, func(m *dynamicpb.Message) {
		protoCall("s1", 5, 0)(m)
		m.Clear(m.Descriptor().Fields().ByName("duration"))
	})
	if got, err := decode(dec, string(noDuration), record.Input{}); err != nil || len(got.Values) == 0 || !got.Values[0].Null {
		t.Errorf("Decode(oneof unset) = %+v, %v; want the duration the null Value", got.Values, err)
	}
	failed := protoValue(t, fd.Messages().ByName("Call"), []int64{1}, func(m *dynamicpb.Message) {
		protoCall("s1", 5, 1)(m)
		m.Clear(m.Descriptor().Fields().ByName("call_type")) // proto3: FAILED, the enum's first value
	})
	if got, err := decode(dec, string(failed), record.Input{}); err != nil || got.Kind != record.Filtered {
		t.Errorf("Decode(call_type unset) = %v, %v; want Filtered (FAILED)", got.Kind, err)
	}
	other := protoValue(t, fd.Messages().ByName("Other"), []int64{0}, func(*dynamicpb.Message) {})
	if got, err := decode(dec, string(other), record.Input{}); err != nil || got.Kind != record.Filtered {
		t.Errorf("Decode(another message, index [0]) = %v, %v; want Filtered (it has no call_type)", got.Kind, err)
	}
	for name, idx := range map[string][]byte{"index out of range": {2, 10}, "nested index out of range": {4, 2, 4}, "truncated indexes": {4}} {
		v := append(binary.BigEndian.AppendUint32([]byte{0}, 1), idx...)
		if _, err := decode(dec, string(v), record.Input{}); !isReason(err, record.ReasonBadPayload) {
			t.Errorf("Decode(%s) error = %v, want %s", name, err, record.ReasonBadPayload)
		}
	}
	if _, err := decode(dec, string(append(value[:len(value)-1:len(value)-1], 0xff)), record.Input{}); !isReason(err, record.ReasonBadPayload) {
		t.Errorf("Decode(bad body) error = %v, want %s", err, record.ReasonBadPayload)
	}
}

func isReason(err error, reason string) bool {
	var de *record.DecodeError
	return errors.As(err, &de) && de.Reason == reason
}

func FuzzDecodeProtobuf(f *testing.F) {
	fd := protoFiles(f)
	dec, err := record.NewDecoder(protoConfig(config.FormatProtobuf).RecordSpec(), protoSchemas(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(protoValue(f, fd.Messages().ByName("Call"), []int64{1}, protoCall("s1", 1922350204456, 3)))
	f.Add(protoValue(f, fd.Messages().ByName("Call"), []int64{1, 0}, func(*dynamicpb.Message) {}))
	f.Add([]byte{0, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rec record.Record
		if _, err := dec.Decode(&record.Input{Value: data}, &rec); err != nil && !errors.As(err, new(*record.DecodeError)) && !errors.As(err, new(*record.MissingSchemaError)) {
			t.Fatalf("Decode(%x) = %v, want nil, a *record.DecodeError or (an id never added) a *record.MissingSchemaError", data, err)
		}
	})
}

// BenchmarkDecodeProtobuf decodes the same logical record as Protobuf and
// as JSON.
func BenchmarkDecodeProtobuf(b *testing.B) {
	fd := protoFiles(b)
	cfg := protoConfig(config.FormatProtobuf)
	cfg.Aggregates = cfg.Aggregates[:1]
	protoRecs, jsonRecs := make([][]byte, 64), make([][]byte, 64)
	for i := range protoRecs {
		ms := 1922350204456 + int64(i)*37
		sid := "sid_" + string(rune('a'+i%26))
		protoRecs[i] = protoValue(b, fd.Messages().ByName("Call"), []int64{1}, protoCall(sid, ms, int64(i)))
		jsonRecs[i] = []byte(`{"sid":"` + sid + `","call_type":"SUCCESS","call_time":` + itoa(ms) +
			`,"tags":["a","q\""],"caller":{"region":"eu","attrs":{"n":1}},"duration":` + itoa(int64(i)) + `}`)
	}
	b.Run("protobuf", func(b *testing.B) {
		d, err := record.NewDecoder(cfg.RecordSpec(), protoSchemas(b))
		if err != nil {
			b.Fatal(err)
		}
		var rec record.Record
		benchLoop(b, protoRecs, func(v []byte) error { _, err := d.Decode(&record.Input{Value: v}, &rec); return err })
	})
	b.Run("json", func(b *testing.B) {
		jc := protoConfig("json")
		jc.Aggregates, jc.Source.Timestamp.Layout = cfg.Aggregates, "unix_ms"
		benchDecoder(b, jc, jsonRecs)
	})
}
