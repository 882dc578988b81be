package record

import (
	"encoding/binary"
	"strconv"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaType is the kind of a registry schema.
type SchemaType uint8

const (
	SchemaAvro     SchemaType = iota + 1
	SchemaProtobuf            // fetched, not decoded yet: its records are unknown_schema
	SchemaJSON
)

// Schema is a registry schema as the registry returns it: its text and,
// for named types or imports defined elsewhere, its references (each a
// schema of the same type, with references of its own).
type Schema struct {
	Type       SchemaType
	Text       string
	References []Reference
}

// Reference is a schema that another one uses: an Avro named type's full
// name, or a Protobuf import path.
type Reference struct {
	Name   string
	Schema Schema
}

// Schemas holds the registry schemas known so far, parsed, by id. The
// shell fetches what the records need (WireSchemaID says which) and adds
// it before decoding them; every Decoder of a configuration shares one.
// It is safe for concurrent use.
type Schemas struct {
	mu   sync.RWMutex
	byID map[uint32]*parsedSchema
}

// parsedSchema is one schema ready for a decoder: err (unknown_schema) or
// the parsed form of its type.
type parsedSchema struct {
	typ   SchemaType
	err   *DecodeError
	avro  avroSchema
	proto protoSchema
	json  *jsonschema.Schema
}

// NewSchemas returns an empty Schemas.
func NewSchemas() *Schemas { return &Schemas{byID: map[uint32]*parsedSchema{}} }

// Has reports whether id was added, known or not.
func (s *Schemas) Has(id uint32) bool {
	_, ok := s.get(id)
	return ok
}

// Add parses and keeps the schema with id. A schema that does not parse is
// kept too: records written with it are dead letters unknown_schema.
func (s *Schemas) Add(id uint32, sch Schema) {
	p := &parsedSchema{typ: sch.Type}
	var err error
	switch sch.Type {
	case SchemaAvro:
		p.avro, err = parseAvro(sch)
	case SchemaProtobuf:
		p.proto, err = parseProto(sch)
	case SchemaJSON:
		p.json, err = parseJSONSchema(sch)
	default:
		err = errUnknownType
	}
	if err != nil {
		p.err = &DecodeError{Reason: ReasonUnknownSchema, Detail: "schema " + strconv.FormatUint(uint64(id), 10) + " cannot be used: " + err.Error()}
	}
	s.put(id, p)
}

// AddUnknown notes that the registry does not know id: records written
// with it are dead letters unknown_schema.
func (s *Schemas) AddUnknown(id uint32) {
	s.put(id, &parsedSchema{err: &DecodeError{Reason: ReasonUnknownSchema,
		Detail: "the schema registry has no schema " + strconv.FormatUint(uint64(id), 10)}})
}

func (s *Schemas) put(id uint32, p *parsedSchema) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[id] = p
}

func (s *Schemas) get(id uint32) (*parsedSchema, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.byID[id]
	return p, ok
}

// A MissingSchemaError is returned by Decode for a schema id that was
// never added to the decoder's Schemas: the caller skipped fetching it.
type MissingSchemaError struct{ ID uint32 }

func (e *MissingSchemaError) Error() string {
	return "schema " + strconv.FormatUint(uint64(e.ID), 10) + " was not fetched before decoding"
}

// wireHeader is Confluent's framing: magic byte 0, then the schema id as a
// big-endian uint32.
const wireHeader = 5

// WireSchemaID returns the schema id of a value in Confluent's wire
// format, and false when value is not in it.
func WireSchemaID(value []byte) (uint32, bool) {
	if len(value) < wireHeader || value[0] != 0 {
		return 0, false
	}
	return binary.BigEndian.Uint32(value[1:wireHeader]), true
}

// wireSchema splits value into its schema (which must be of type typ) and
// its body.
func (d *Decoder) wireSchema(value []byte, typ SchemaType) (uint32, *parsedSchema, []byte, error) {
	id, ok := WireSchemaID(value)
	if !ok {
		detail := "shorter than the 5-byte header"
		if len(value) >= wireHeader {
			detail = "starts with byte " + strconv.Itoa(int(value[0])) + ", not the magic byte 0"
		}
		return 0, nil, nil, &DecodeError{Reason: ReasonBadWireFormat, Detail: detail}
	}
	p, ok := d.schemas.get(id)
	switch {
	case !ok:
		return id, nil, nil, &MissingSchemaError{ID: id}
	case p.err != nil:
		return id, nil, nil, p.err
	case p.typ != typ:
		return id, nil, nil, &DecodeError{Reason: ReasonUnknownSchema,
			Detail: "schema " + strconv.FormatUint(uint64(id), 10) + " is not of the configured source.format"}
	}
	return id, p, value[wireHeader:], nil
}

// binFields is where a schema-driven decoder puts the configured fields of
// one record: tokens whose text is in the record or in buf.
type binFields struct {
	slots []token
	// instant marks the slots that hold an instant (an Avro timestamp or a
	// google.protobuf.Timestamp), not read with the layout: its ms are in
	// ms (and, as a number, in the token's text).
	instant []bool
	ms      []int64
	buf     []byte // numbers' text and rendered objects, reset per record
}

func (b *binFields) reset(n int) {
	if len(b.slots) != n {
		b.slots, b.instant, b.ms = make([]token, n), make([]bool, n), make([]int64, n)
	}
	clear(b.slots)
	clear(b.instant)
	b.buf = b.buf[:0]
}

// setInstant puts the instant ms in slot.
func (b *binFields) setInstant(slot int, ms int64) {
	b.slots[slot] = token{kind: tokNumber, text: b.appendInt(ms)}
	b.instant[slot], b.ms[slot] = true, ms
}

// appendText appends text to buf and returns it. Tokens point into buf
// while it grows: an earlier array is never written again this record.
func (b *binFields) appendText(text []byte) []byte {
	start := len(b.buf)
	b.buf = append(b.buf, text...)
	return b.buf[start:len(b.buf):len(b.buf)]
}

func (b *binFields) appendUint(n uint64) []byte {
	start := len(b.buf)
	b.buf = strconv.AppendUint(b.buf, n, 10)
	return b.buf[start:len(b.buf):len(b.buf)]
}

func (b *binFields) appendInt(n int64) []byte {
	start := len(b.buf)
	b.buf = strconv.AppendInt(b.buf, n, 10)
	return b.buf[start:len(b.buf):len(b.buf)]
}
