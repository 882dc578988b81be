package demo

import (
	"encoding/binary"
	"time"
)

// AvroSchema is the schema of the calls demo --format avro writes: the
// JSON record's fields, callType an enum and callTime an instant.
const AvroSchema = `{"type":"record","name":"Call","namespace":"demo","fields":[
  {"name":"sid","type":"string"},
  {"name":"callType","type":{"type":"enum","name":"CallType","symbols":["success","fail"]}},
  {"name":"callTime","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"duration","type":"long"}]}`

// UnknownSchemaID is the id some malformed Avro records name: the demo's
// registry has no schema with it.
const UnknownSchemaID = 1 << 20

// avroValue writes a call in Confluent's wire format with AvroSchema as
// schema id. Avro's binary encoding of this flat record is a few varints
// and strings, written here rather than through a codec.
func avroValue(id uint32, sid, callType string, at time.Time, duration int64) []byte {
	b := binary.BigEndian.AppendUint32([]byte{0}, id)
	b = binary.AppendVarint(b, int64(len(sid)))
	b = append(b, sid...)
	symbol := int64(0)
	if callType == "fail" {
		symbol = 1
	}
	b = binary.AppendVarint(b, symbol)
	b = binary.AppendVarint(b, at.UnixMilli())
	return binary.AppendVarint(b, duration)
}

// malformedAvro returns one of the three ways an Avro record can fail to
// decode: not in the wire format, an unknown schema id, a truncated body.
func (g *Generator) malformedAvro(sid string, at time.Time, duration int64) []byte {
	switch g.rng.IntN(3) {
	case 0: // a JSON value on an Avro topic
		return []byte(`{"sid":"` + sid + `"}`)
	case 1:
		return avroValue(UnknownSchemaID, sid, "success", at, duration)
	}
	v := avroValue(g.cfg.AvroSchemaID, sid, "success", at, duration)
	return v[:len(v)-1]
}
