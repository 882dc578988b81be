package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"aggregator/internal/config"
)

// The pairwise test's input: a seeded stream of calls in phases, each
// produced once the service has taken the one before it in (see
// pairRun.phase), so that what a record's fate is does not depend on how
// the partitions interleave:
//
//   - a main phase moves event time on, 25 units a record, a quarter of
//     them up to 600 units behind (less than max_out_of_orderness, 1000
//     units, behind their partition's latest: never late, and in their
//     window before it fires, whatever the interleaving), with nulls,
//     missing fields, records the filter rejects and malformed ones;
//   - a late phase, once the main phase's watermark W reached every
//     instance, has records up to 4000 units behind W, which moves
//     nothing: late firings, retractions of sessions they extend, late
//     events, all decided against that W;
//   - the end phase has a record a partition 30000 units past the
//     stream, of its own key (pairEndKey), which moves W past every
//     window of the stream (its own never fires, except early).
//
// The first main and late phase are written with the writer's first
// schema, which has no field r (missing), the rest with its second.

// pairParts is the input topic's partition count.
const pairParts = 4

// pairEndKey is the group key of the end phase's records.
const pairEndKey = "zz"

// pairPhase kinds.
const (
	phaseMain = iota
	phaseLate
	phaseEnd
)

// pairRecord is one input record, before it is encoded in a format.
type pairRecord struct {
	partition int32
	key       string // the Kafka record key
	phase     int    // index into the stream's phases
	sid       string // "" missing (a dead letter missing_key)
	t         int64  // event time, ms
	d         int64
	dNull     bool // d is null (JSON null, an Avro null branch, an unset optional field)
	dMissing  bool // d is not there at all (JSON and CSV; null elsewhere)
	r         string
	v2        bool // written with the second schema, which has r
	ok        int64
	c         string
	bad       string // "" or how it is malformed: garbage, time
	value     []byte // encoded in the case's format (pairStream.encode)
}

// pairStream is the phases of records; scale is the ms of one unit of
// event time, from the epoch ms base.
type pairStream struct {
	phases [][]pairRecord
	kinds  []int
	scale  int64
	base   int64
}

// newPairStream generates the stream of seed: keys spread over the
// partitions at random when spread (the repartition stage's input), else
// each key on one partition (by_key's promise).
func newPairStream(seed uint64, spread bool, scale, base int64) *pairStream {
	rng := rand.New(rand.NewPCG(seed, 41))
	s := &pairStream{scale: scale, base: base}
	maxU := map[int32]int64{} // the latest event time, in units, of an accepted record per partition
	i := 0                    // records of the main phases so far
	// No two records have one event time: first and last take the
	// earliest and the latest arrival on a tie (docs/semantics.md), and
	// with the repartition stage the arrival order of a key's records
	// from two partitions is the interleaving's.
	used := map[int64]bool{}
	unique := func(u int64) int64 {
		for used[u] {
			u--
		}
		used[u] = true
		return u
	}
	v2 := false
	main := func(n int) {
		var ph []pairRecord
		for range n {
			u := int64(i) * 25
			if rng.IntN(4) == 0 {
				u -= rng.Int64N(600)
			}
			r := s.record(rng, spread, unique(u), v2)
			switch m := rng.IntN(25); {
			case m == 0:
				r.bad = "garbage"
			case m == 1:
				r.bad = "time"
			case m == 2:
				r.sid = ""
			}
			if r.bad == "" && r.sid != "" && r.ok == 1 {
				maxU[r.partition] = max(maxU[r.partition], u)
			}
			ph = append(ph, r)
			i++
		}
		s.add(phaseMain, ph)
	}
	late := func(n int) {
		w := int64(1) << 62
		for p := range int32(pairParts) {
			w = min(w, maxU[p]-1001)
		}
		var ph []pairRecord
		for range n {
			ph = append(ph, s.record(rng, spread, unique(w-rng.Int64N(4000)), v2))
		}
		s.add(phaseLate, ph)
	}
	main(160)
	late(20)
	v2 = true
	main(160)
	late(20)
	var end []pairRecord
	top := int64(i)*25 + 30_000
	for p := range int32(pairParts) {
		end = append(end, pairRecord{partition: p, key: fmt.Sprintf("end-%d", p), sid: pairEndKey, t: base + (top+int64(p))*scale,
			d: 1, r: "eu", v2: true, ok: 1, c: "web"})
	}
	s.add(phaseEnd, end)
	return s
}

// record is a well-formed record at u units, of a random key.
func (s *pairStream) record(rng *rand.Rand, spread bool, u int64, v2 bool) pairRecord {
	k := rng.IntN(8)
	p := int32(k % pairParts)
	if spread {
		p = rng.Int32N(pairParts)
	}
	r := pairRecord{partition: p, sid: fmt.Sprintf("u%d", k), t: s.base + u*s.scale, d: rng.Int64N(50),
		r: []string{"eu", "us", "ap"}[rng.IntN(3)], v2: v2, ok: 1, c: []string{"web", "app"}[rng.IntN(2)]}
	switch rng.IntN(10) {
	case 0:
		r.dNull = true
	case 1:
		r.dMissing = true
	}
	if rng.IntN(7) == 0 {
		r.ok = 0
	}
	return r
}

func (s *pairStream) add(kind int, ph []pairRecord) {
	for i := range ph {
		ph[i].phase = len(s.phases)
		if ph[i].key == "" {
			ph[i].key = fmt.Sprintf("req-%d-%d", len(s.phases), i)
		}
	}
	s.phases = append(s.phases, ph)
	s.kinds = append(s.kinds, kind)
}

// encode encodes every record in f, once: some encoders (Protobuf's)
// write fields in another order each time.
func (s *pairStream) encode(f pairFormat) {
	for _, ph := range s.phases {
		for i := range ph {
			ph[i].value = f.encode(ph[i])
		}
	}
}

// phasesUntil is every record of the phases before i; phasesFrom of i
// and after.
func (s *pairStream) phasesUntil(i int) []pairRecord { return slices.Concat(s.phases[:i]...) }
func (s *pairStream) phasesFrom(i int) []pairRecord  { return slices.Concat(s.phases[i:]...) }

// all is every record, in phase order.
func (s *pairStream) all() []pairRecord {
	var out []pairRecord
	for _, ph := range s.phases {
		out = append(out, ph...)
	}
	return out
}

// pairCSVColumns are the CSV columns of the stream.
var pairCSVColumns = []string{"sid", "t", "d", "r", "ok", "c"}

// The writer's schemas of the registry formats: the second adds r.
const (
	pairAvroV1 = `{"type":"record","name":"Call","namespace":"pairwise","fields":[
		{"name":"sid","type":["null","string"]},
		{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"d","type":["null","long"]},
		{"name":"ok","type":"long"},
		{"name":"c","type":"string"}`
	pairProtoV1 = `syntax = "proto3";
package pairwise;
import "google/protobuf/timestamp.proto";
message Call {
  optional string sid = 1;
  google.protobuf.Timestamp t = 2;
  optional int64 d = 3;
  int64 ok = 4;
  string c = 5;`
	pairJSONSchemaV1 = `{"type":"object","required":["t"],"properties":{
		"sid":{"type":["string","null"]},"t":{"type":"integer"},"d":{"type":["integer","null"]},
		"ok":{"type":"integer"},"c":{"type":"string"}`
)

// pairFormat encodes records in one source.format; for the registry
// formats its two writer schemas are registered (ids 1 and 2) and
// records carry the wire format's header.
type pairFormat struct {
	name     string
	typ      sr.SchemaType // registry formats only
	v1, v2   string
	encode   func(r pairRecord) []byte
	register bool
}

// pairUnknownID is a schema id the registry does not have.
const pairUnknownID = 77

func newPairFormat(t testing.TB, name string) pairFormat {
	switch name {
	case "json":
		return pairFormat{name: name, encode: func(r pairRecord) []byte { return []byte(pairJSON(r)) }}
	case "csv":
		return pairFormat{name: name, encode: pairCSV}
	case config.FormatAvro:
		return pairAvroFormat()
	case config.FormatProtobuf:
		return pairProtoFormat(t)
	case config.FormatJSONSchema:
		v1 := pairJSONSchemaV1 + "}}"
		v2 := pairJSONSchemaV1 + `,"r":{"type":["string","null"]}}}`
		return pairFormat{name: name, typ: sr.TypeJSON, v1: v1, v2: v2, register: true, encode: func(r pairRecord) []byte {
			if r.bad == "garbage" { // bad_json; a time that is not one breaks the schema: bad_payload
				return regWire(pairSchemaID(r), []byte("not json"))
			}
			return regWire(pairSchemaID(r), []byte(pairJSON(r)))
		}}
	}
	t.Fatalf("no format %q", name)
	return pairFormat{}
}

func pairSchemaID(r pairRecord) uint32 {
	if r.v2 {
		return 2
	}
	return 1
}

// pairJSON is a record as JSON: d null or left out, r left out before the
// second schema; malformed: cut off, or a time that is not one.
func pairJSON(r pairRecord) string {
	var b strings.Builder
	b.WriteString("{")
	if r.sid != "" {
		fmt.Fprintf(&b, `"sid":%q,`, r.sid)
	}
	if r.bad == "time" {
		b.WriteString(`"t":"soon"`)
	} else {
		fmt.Fprintf(&b, `"t":%d`, r.t)
	}
	switch {
	case r.dNull:
		b.WriteString(`,"d":null`)
	case !r.dMissing:
		fmt.Fprintf(&b, `,"d":%d`, r.d)
	}
	if r.v2 {
		fmt.Fprintf(&b, `,"r":%q`, r.r)
	}
	fmt.Fprintf(&b, `,"ok":%d,"c":%q}`, r.ok, r.c)
	if r.bad == "garbage" {
		return b.String()[:b.Len()/2]
	}
	return b.String()
}

// pairCSV is a record as CSV (pairCSVColumns): a missing value is an
// empty cell; malformed: a column short, or a time that is not one.
func pairCSV(r pairRecord) []byte {
	d, reg, ts := strconv.FormatInt(r.d, 10), "", strconv.FormatInt(r.t, 10)
	if r.dNull || r.dMissing {
		d = ""
	}
	if r.v2 {
		reg = r.r
	}
	if r.bad == "time" {
		ts = "soon"
	}
	cells := []string{r.sid, ts, d, reg, strconv.FormatInt(r.ok, 10), r.c}
	if r.bad == "garbage" {
		cells = cells[:4]
	}
	return []byte(strings.Join(cells, ","))
}

func pairAvroFormat() pairFormat {
	v1, v2 := pairAvroV1+"]}", pairAvroV1+`,{"name":"r","type":["null","string"],"default":null}]}`
	s1, s2 := avro.MustParse(v1), avro.MustParse(v2)
	return pairFormat{name: config.FormatAvro, typ: sr.TypeAvro, v1: v1, v2: v2, register: true, encode: func(r pairRecord) []byte {
		switch r.bad {
		case "garbage": // plain JSON: bad_wire_format
			return []byte(pairJSON(pairRecord{sid: r.sid, t: r.t, ok: r.ok, c: r.c}))
		case "time": // no time to be had: a schema the registry has not
			return regWire(pairUnknownID, []byte{2, 'x'})
		}
		v := map[string]any{"sid": nil, "t": r.t, "d": nil, "ok": r.ok, "c": r.c}
		if r.sid != "" {
			v["sid"] = map[string]any{"string": r.sid}
		}
		if !r.dNull && !r.dMissing {
			v["d"] = map[string]any{"long": r.d}
		}
		schema := s1
		if r.v2 {
			schema, v["r"] = s2, map[string]any{"string": r.r}
		}
		body, err := avro.Marshal(schema, v)
		if err != nil {
			panic(fmt.Sprintf("avro: %v", err))
		}
		return regWire(pairSchemaID(r), body)
	}}
}

func pairProtoFormat(t testing.TB) pairFormat {
	v1, v2 := pairProtoV1+"\n}", pairProtoV1+"\n  optional string r = 6;\n}"
	compile := func(text string) protoreflect.MessageDescriptor {
		c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"call.proto": text})})}
		files, err := c.Compile(context.Background(), "call.proto")
		if err != nil {
			t.Fatal(err)
		}
		return files[0].Messages().ByName("Call")
	}
	m1, m2 := compile(v1), compile(v2)
	return pairFormat{name: config.FormatProtobuf, typ: sr.TypeProtobuf, v1: v1, v2: v2, register: true, encode: func(r pairRecord) []byte {
		if r.bad == "garbage" {
			return []byte(pairJSON(pairRecord{sid: r.sid, t: r.t, ok: r.ok, c: r.c}))
		}
		md := m1
		if r.v2 {
			md = m2
		}
		m := dynamicpb.NewMessage(md)
		f := md.Fields()
		if r.sid != "" {
			m.Set(f.ByName("sid"), protoreflect.ValueOfString(r.sid))
		}
		if r.bad != "time" { // an unset Timestamp: missing_timestamp
			ts := dynamicpb.NewMessage(f.ByName("t").Message())
			ts.Set(ts.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(r.t/1000))
			ts.Set(ts.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(r.t%1000)*1_000_000))
			m.Set(f.ByName("t"), protoreflect.ValueOfMessage(ts))
		}
		if !r.dNull && !r.dMissing {
			m.Set(f.ByName("d"), protoreflect.ValueOfInt64(r.d))
		}
		m.Set(f.ByName("ok"), protoreflect.ValueOfInt64(r.ok))
		m.Set(f.ByName("c"), protoreflect.ValueOfString(r.c))
		if r.v2 {
			m.Set(f.ByName("r"), protoreflect.ValueOfString(r.r))
		}
		body, err := proto.Marshal(m)
		if err != nil {
			panic(fmt.Sprintf("protobuf: %v", err))
		}
		return regWire(pairSchemaID(r), append([]byte{0}, body...))
	}}
}

// registerPairSchemas registers f's writer schemas (ids 1 and 2) with reg.
func registerPairSchemas(t testing.TB, reg *switchableRegistry, f pairFormat) {
	t.Helper()
	if !f.register {
		return
	}
	for _, text := range []string{f.v1, f.v2} {
		if _, _, err := reg.RegisterSchema(inTopic+"-value", sr.Schema{Schema: text, Type: f.typ}); err != nil {
			t.Fatal(err)
		}
	}
}

// wellFormed reports whether the record decodes, with a key and a time.
func (r pairRecord) wellFormed() bool { return r.bad == "" && r.sid != "" }

// groupKey is the record's group key as results write it.
func (r pairRecord) groupKey() string {
	k, _ := json.Marshal(map[string]string{"sid": r.sid})
	return string(k)
}
