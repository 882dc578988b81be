package record

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Special field names that read the Kafka record instead of its value.
const (
	FieldKafkaKey       = "$key"       // the record key, as a string
	FieldKafkaTimestamp = "$timestamp" // the record timestamp, ms
)

// source says where a field comes from.
type source uint8

const (
	srcValue          source = iota // a JSON path or CSV column of the value
	srcKafkaKey                     // Input.Key
	srcKafkaTimestamp               // Input.Timestamp
)

// fieldRef is a compiled reference to a configured field.
type fieldRef struct {
	name string
	src  source
	slot int // JSON path slot or CSV column index
}

type filterRef struct {
	ref    fieldRef
	equals string
}

type keyRef struct {
	ref    fieldRef
	prefix []byte // what precedes the value in the key: {"sid": or ,"x":
}

type aggRef struct {
	ref  fieldRef
	need Need
}

// span locates a string inside the arena.
type span struct{ start, end int }

// pendingString is a Value string that will point into the record's arena
// string once it is built.
type pendingString struct {
	dst *string
	at  span
}

// Decoder turns record values into Records for one configuration. It keeps
// scratch buffers between calls: it is not safe for concurrent use; make
// one per goroutine.
type Decoder struct {
	csv bool
	// wire is the registry format, with schemas (wireNone: plain JSON or CSV).
	wire      wireFormat
	schemas   *Schemas
	bin       binFields
	avroPlans map[uint32]*avroNode // compiled for this decoder's paths, by schema id
	protoMsgs map[protoKey]*protoMsg
	indexes   []int64 // a Protobuf value's message indexes
	json      jsonScanner
	cells     csvScanner
	fields    []token        // json.slots or cells.cells, by slot
	columns   map[string]int // CSV column index by name
	timeField fieldRef
	times     *TimeParser // nil when the event time is $timestamp and there are no markers
	marker    *fieldRef   // punctuated: the marker field
	filters   []filterRef
	keys      []keyRef
	aggs      []aggRef
	gap       *fieldRef // window.gap_field of a session window

	interned internTable
	keyParts []keyPart // one per key field, for the record being decoded
	partBuf  []byte    // key parts that are not in the record as they are
	keyBuf   []byte
	arena    []byte // the text of this record's Values, one string at the end
	pending  []pendingString
	scratch  []byte // unescaped content, valid until the next content call
	tsText   []byte // in.Timestamp as text, for $timestamp fields
	metaTok  token  // what metaToken returns

	compactKeys internTable // DecodeCompact's interned keys, made on first use
	specTag     uint32      // the hash of the Spec that compact forms carry
}

// wireFormat is a registry format: values in Confluent's wire format.
type wireFormat uint8

const (
	wireNone wireFormat = iota
	wireAvro
	wireProtobuf
	wireJSONSchema
)

// protoKey names a compiled Protobuf message: the schema id and the first
// message indexes (values nested deeper are compiled each time).
type protoKey struct {
	id  uint32
	n   uint8
	idx [4]int64
}

// NewDecoder compiles spec, which Config.RecordSpec built from a validated
// config; an error means a spec no valid config gives (a field that is not
// a CSV column, a layout NewTimeParser refuses). The registry formats take
// their schemas from schemas, which the caller fills (nil for JSON and CSV).
func NewDecoder(spec Spec, schemas *Schemas) (*Decoder, error) {
	d := &Decoder{interned: newInternTable(), schemas: schemas, avroPlans: map[uint32]*avroNode{},
		protoMsgs: map[protoKey]*protoMsg{}, specTag: specTag(spec)}
	if err := d.setFormat(spec); err != nil {
		return nil, err
	}
	steps := []func(Spec) error{d.compileTime, d.compileMarker, d.compileFilters, d.compileKeys, d.compileAggregates, d.compileGap}
	for _, step := range steps {
		if err := step(spec); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *Decoder) setFormat(spec Spec) error {
	switch spec.Format {
	case FormatJSON:
		return nil
	case FormatCSV:
	case FormatAvro, FormatProtobuf, FormatJSONSchema:
		d.wire = map[Format]wireFormat{FormatAvro: wireAvro, FormatProtobuf: wireProtobuf, FormatJSONSchema: wireJSONSchema}[spec.Format]
		if d.schemas == nil {
			return errors.New("a registry format needs Schemas")
		}
		return nil
	default:
		return fmt.Errorf("unknown format %d", spec.Format)
	}
	d.csv = true
	delim := spec.CSVDelimiter
	if r, n := utf8.DecodeRuneInString(delim); n == 0 || n != len(delim) || r == '"' || r == '\r' || r == '\n' || r == utf8.RuneError {
		return fmt.Errorf("CSV delimiter %q: want one character, not '\"' or a line break", delim)
	}
	if len(spec.CSVColumns) == 0 {
		return errors.New("CSV without columns")
	}
	d.cells = csvScanner{delim: []byte(delim), columns: len(spec.CSVColumns), cells: make([]token, 0, len(spec.CSVColumns))}
	d.columns = make(map[string]int, len(spec.CSVColumns))
	for i, name := range spec.CSVColumns {
		if _, dup := d.columns[name]; dup {
			return fmt.Errorf("CSV column %q repeats", name)
		}
		d.columns[name] = i
	}
	return nil
}

// ref compiles a field name; what names it (for errors) is what.
func (d *Decoder) ref(what, name string) (fieldRef, error) {
	switch name {
	case "":
		return fieldRef{}, fmt.Errorf("%s: no field name", what)
	case FieldKafkaKey:
		return fieldRef{name: name, src: srcKafkaKey}, nil
	case FieldKafkaTimestamp:
		return fieldRef{name: name, src: srcKafkaTimestamp}, nil
	}
	if !d.csv {
		return fieldRef{name: name, slot: d.json.addPath(name)}, nil
	}
	if i, ok := d.columns[name]; ok {
		return fieldRef{name: name, slot: i}, nil
	}
	return fieldRef{}, fmt.Errorf("%s: %q is not a CSV column", what, name)
}

func (d *Decoder) compileTime(spec Spec) error {
	var err error
	if d.timeField, err = d.ref("time field", spec.TimeField); err != nil {
		return err
	}
	if d.timeField.src == srcKafkaTimestamp && spec.MarkerField == "" && spec.Layout == "" {
		return nil // no time to parse
	}
	loc := spec.Location
	if loc == nil {
		loc = time.UTC
	}
	if d.times, err = NewTimeParser(spec.Layout, loc); err != nil {
		return fmt.Errorf("time layout %q: %w", spec.Layout, err)
	}
	return nil
}

func (d *Decoder) compileMarker(spec Spec) error {
	if spec.MarkerField == "" {
		return nil
	}
	r, err := d.ref("marker field", spec.MarkerField)
	if err == nil && r.src != srcValue {
		err = fmt.Errorf("marker field %q: want a field of the record value", r.name)
	}
	d.marker = &r
	return err
}

func (d *Decoder) compileFilters(spec Spec) error {
	for i, f := range spec.Filters {
		r, err := d.ref(fmt.Sprintf("filter %d", i), f.Field)
		if err != nil {
			return err
		}
		d.filters = append(d.filters, filterRef{ref: r, equals: f.Equals})
	}
	return nil
}

func (d *Decoder) compileKeys(spec Spec) error {
	for i, name := range spec.Key {
		r, err := d.ref(fmt.Sprintf("key field %d", i), name)
		if err != nil {
			return err
		}
		prefix := []byte{','}
		if i == 0 {
			prefix[0] = '{'
		}
		prefix = append(AppendQuoted(prefix, []byte(name)), ':')
		d.keys = append(d.keys, keyRef{ref: r, prefix: prefix})
	}
	d.keyParts = make([]keyPart, len(d.keys))
	return nil
}

func (d *Decoder) compileAggregates(spec Spec) error {
	for i, a := range spec.Aggregates {
		if a.Need == NeedNothing {
			d.aggs = append(d.aggs, aggRef{need: NeedNothing})
			continue
		}
		r, err := d.ref(fmt.Sprintf("aggregate %d", i), a.Field)
		if err != nil {
			return err
		}
		d.aggs = append(d.aggs, aggRef{ref: r, need: a.Need})
	}
	return nil
}

func (d *Decoder) compileGap(spec Spec) error {
	if spec.GapField == "" {
		return nil
	}
	r, err := d.ref("gap field", spec.GapField)
	d.gap = &r
	return err
}

// readGap reads a session gap field (docs/semantics.md#sessions): a JSON number or a string
// holding a plain decimal number is ms, any other string a Go duration;
// missing or null is 0 (the configured gap). It must come to a positive,
// whole number of ms; anything else is a bad_gap error.
func (d *Decoder) readGap(tok *token) (int64, error) {
	var ms float64
	switch tok.kind {
	case tokMissing, tokNull:
		return 0, nil
	case tokNumber:
		ms = parseFloat(tok.text)
	case tokString:
		text := d.content(tok)
		if isPlainDecimal(text) {
			ms = parseFloat(text)
			break
		}
		dur, err := time.ParseDuration(string(text))
		if err != nil {
			return 0, d.badGap(tok, "is neither a number of ms nor a duration")
		}
		if dur%time.Millisecond != 0 {
			return 0, d.badGap(tok, "is not a whole number of ms")
		}
		ms = float64(dur / time.Millisecond)
	default:
		return 0, d.badGap(tok, "is not a gap")
	}
	switch {
	case !(ms > 0):
		return 0, d.badGap(tok, "must be positive")
	case ms != math.Trunc(ms):
		return 0, d.badGap(tok, "is not a whole number of ms")
	case ms >= 1<<63:
		return 0, d.badGap(tok, "is too large")
	}
	return int64(ms), nil
}

func (d *Decoder) badGap(tok *token, why string) error {
	return &DecodeError{Reason: ReasonBadGap, Field: d.gap.name, Detail: d.describe(tok) + " " + why}
}

// isPlainDecimal reports whether text is digits with an optional fraction
// (no sign, exponent or spaces): "3000", "3000.0".
func isPlainDecimal(text []byte) bool {
	digits, dot := 0, false
	for i, c := range text {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && i > 0 && i < len(text)-1:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

// Decode fills rec from one record value, reusing its slices, and says
// what the record is:
//   - Marker (punctuated strategy, the record has the marker field): only
//     rec.Time is set, to the marker's value read with the timestamp layout.
//     A marker needs no other field and is not filtered.
//   - Filtered: a source.filter does not hold (or its field is missing).
//     rec.Time is math.MinInt64: not read.
//   - Event: Time, Key, KeyFields and Values are set.
//
// Partition and Offset always come from in. Any problem with the data is
// a *DecodeError (then the Kind is Event and rec is unusable).
func (d *Decoder) Decode(in *Input, rec *Record) (Kind, error) {
	return d.decode(in, rec, rejectedStop)
}

// DecodeAll is Decode, except that a record the filter rejects is decoded
// whole too: its Kind is Filtered, with rec set as for an Event, or with
// the error of its decoding (rec.Key is set if the error came after the
// group key; rec.Time is math.MinInt64 if the event time did not read).
// Stage 1 of source.partitioning repartition forwards such records
// (repartition.Format3), for the generations of other filters.
func (d *Decoder) DecodeAll(in *Input, rec *Record) (Kind, error) {
	return d.decode(in, rec, rejectedWhole)
}

// DecodeTimed is Decode, except that a record the filter rejects has its
// event time read, and nothing after it: rec.Time, or math.MinInt64 if
// it does not read (it is Filtered without an error all the same). Stage
// 2 and by_key decode with it: a cut-over's T comes after every event
// time a partition read.
func (d *Decoder) DecodeTimed(in *Input, rec *Record) (Kind, error) {
	return d.decode(in, rec, rejectedTime)
}

// What decode reads of a record the filter rejects.
const (
	rejectedStop  = iota // nothing: Decode
	rejectedTime         // its event time, without an error: DecodeTimed
	rejectedWhole        // all of it, with its errors: DecodeAll
)

func (d *Decoder) decode(in *Input, rec *Record, rejected int) (Kind, error) {
	rec.Partition, rec.Offset, rec.Time = in.Partition, in.Offset, 0
	rec.Key, rec.KeyFields, rec.Values = "", rec.KeyFields[:0], rec.Values[:0]
	if err := d.split(in.Value); err != nil {
		return Event, err
	}
	if d.marker != nil {
		if tok := d.token(d.marker, in); tok.kind != tokMissing && tok.kind != tokNull {
			t, err := d.markerTime(tok)
			if err != nil {
				return Event, err
			}
			rec.Time = t
			return Marker, nil
		}
	}
	kind := Event
	for i := range d.filters {
		if f := &d.filters[i]; !d.equals(d.token(&f.ref, in), f.equals) {
			kind, rec.Time = Filtered, math.MinInt64
			if rejected == rejectedStop {
				return Filtered, nil
			}
			break
		}
	}
	t, err := d.eventTime(in)
	if kind == Filtered && rejected == rejectedTime {
		if err == nil {
			rec.Time = t
		}
		return Filtered, nil
	}
	if err != nil {
		return kind, err
	}
	rec.Time = t // (a Filtered record's time stays math.MinInt64 unless it reads)
	d.arena, d.pending = d.arena[:0], d.pending[:0]
	if err := d.key(in, rec); err != nil {
		return kind, err
	}
	if err := d.values(in, rec); err != nil {
		return kind, err
	}
	if rec.Gap = 0; d.gap != nil {
		if rec.Gap, err = d.readGap(d.token(d.gap, in)); err != nil {
			return kind, err
		}
	}
	d.resolvePending()
	return kind, nil
}

// split finds the fields of value and points d.fields at them.
func (d *Decoder) split(value []byte) error {
	switch d.wire {
	case wireAvro:
		return d.splitAvro(value)
	case wireProtobuf:
		return d.splitProto(value)
	case wireJSONSchema:
		_, p, body, err := d.wireSchema(value, SchemaJSON)
		if err != nil {
			return err
		}
		if err := d.json.scan(body); err != nil {
			return err
		}
		d.fields = d.json.slots
		return validateJSON(p.json, body)
	}
	if d.csv {
		err := d.cells.split(value)
		d.fields = d.cells.cells
		return err
	}
	err := d.json.scan(value)
	d.fields = d.json.slots
	return err
}

// splitAvro decodes an Avro value with its writer schema, compiled for the
// configured paths the first time this decoder meets its id.
func (d *Decoder) splitAvro(value []byte) error {
	id, ok := WireSchemaID(value)
	plan, body := d.avroPlans[id], value[min(len(value), wireHeader):]
	if !ok || plan == nil {
		_, p, b, err := d.wireSchema(value, SchemaAvro)
		if err != nil {
			return err
		}
		plan, body = compileAvro(p.avro, d.json.nodes), b
		d.avroPlans[id] = plan
	}
	d.bin.reset(len(d.json.slots))
	d.fields = d.bin.slots
	w := avroWalker{data: body, out: &d.bin}
	end, err := w.value(plan, 0, 0)
	if err == nil && end != len(body) {
		err = w.fail(strconv.Itoa(len(body)-end) + " bytes after the value")
	}
	return err
}

// splitProto decodes a Protobuf value: its message indexes name the
// message of its schema; each is compiled for the configured paths once.
func (d *Decoder) splitProto(value []byte) error {
	id, p, body, err := d.wireSchema(value, SchemaProtobuf)
	if err != nil {
		return err
	}
	var ok bool
	if d.indexes, body, ok = readIndexes(body, d.indexes); !ok {
		return &DecodeError{Reason: ReasonBadPayload, Detail: "bad Protobuf message indexes after the schema id"}
	}
	key := protoKey{id: id, n: uint8(len(d.indexes))}
	copy(key.idx[:], d.indexes)
	m := d.protoMsgs[key]
	if m == nil {
		md, ok := protoMessage(p.proto, d.indexes)
		if !ok {
			return &DecodeError{Reason: ReasonBadPayload, Detail: "message indexes " + fmt.Sprint(d.indexes) +
				" name no message of schema " + strconv.FormatUint(uint64(id), 10)}
		}
		if m = compileProto(md, d.json.nodes, 0); len(d.indexes) <= len(key.idx) {
			d.protoMsgs[key] = m
		}
	}
	d.bin.reset(len(d.json.slots))
	d.fields = d.bin.slots
	w := protoWalker{out: &d.bin}
	return w.message(m, body, 0)
}

// scanned reports whether the record's strings were checked by the JSON
// scanner: an unescaped string then has no quote, backslash or control
// character.
func (d *Decoder) scanned() bool { return !d.csv && d.wire != wireAvro && d.wire != wireProtobuf }

// instant reports whether r holds an instant (already ms) in this record.
func (d *Decoder) instant(r *fieldRef) bool {
	return r.src == srcValue && (d.wire == wireAvro || d.wire == wireProtobuf) && d.bin.instant[r.slot]
}

// token returns the field r of the record just split, valid until the
// next call. It is small enough to be inlined. Tokens, r and in are
// passed by pointer: copying a token just written by the scanner stalls on
// store forwarding, and copying the others showed in profiles too.
func (d *Decoder) token(r *fieldRef, in *Input) *token {
	if r.src != srcValue {
		return d.metaToken(r.src, in)
	}
	return &d.fields[r.slot]
}

// metaToken returns $key or $timestamp.
func (d *Decoder) metaToken(src source, in *Input) *token {
	switch {
	case src == srcKafkaTimestamp:
		d.tsText = strconv.AppendInt(d.tsText[:0], in.Timestamp, 10)
		d.metaTok = token{kind: tokNumber, text: d.tsText}
	case in.Key == nil:
		d.metaTok = token{}
	default:
		d.metaTok = token{kind: tokString, text: in.Key}
	}
	return &d.metaTok
}

// content returns a string token's text with escapes resolved. The result
// may live in d.scratch: use it before the next call.
func (d *Decoder) content(tok *token) []byte {
	if !tok.esc {
		return tok.text
	}
	if d.csv {
		d.scratch = unescapeCSV(d.scratch[:0], tok.text)
	} else {
		d.scratch = unescapeJSON(d.scratch[:0], tok.text)
	}
	return d.scratch
}

// equals reports whether a filter field has the text want: the content of
// a string, or the literal of a number, true, false or null. Missing
// fields, objects and arrays never match.
func (d *Decoder) equals(tok *token, want string) bool {
	switch tok.kind {
	case tokMissing, tokObject, tokArray:
		return false
	case tokString:
		return string(d.content(tok)) == want
	}
	return string(tok.text) == want
}

func (d *Decoder) eventTime(in *Input) (int64, error) {
	if d.timeField.src == srcKafkaTimestamp {
		if in.Timestamp < 0 { // Kafka's "no timestamp" is -1
			return 0, &DecodeError{Reason: ReasonMissingTimestamp, Field: FieldKafkaTimestamp, Detail: "the Kafka record has no timestamp"}
		}
		return in.Timestamp, nil
	}
	tok := d.token(&d.timeField, in)
	if d.instant(&d.timeField) {
		return d.bin.ms[d.timeField.slot], nil
	}
	if tok.kind == tokNumber && d.times.unix { // the usual unix_* number, two calls sooner
		if ms, ok := parseUnixInt(tok.text, d.times.shift); ok {
			return ms, nil
		}
	}
	return d.parseTime(d.timeField.name, tok)
}

func (d *Decoder) markerTime(tok *token) (int64, error) {
	if d.instant(d.marker) {
		return d.bin.ms[d.marker.slot], nil
	}
	return d.parseTime(d.marker.name, tok)
}

// parseTime reads the time in tok (the field named field) with the layout.
func (d *Decoder) parseTime(field string, tok *token) (int64, error) {
	var text []byte
	switch tok.kind {
	case tokMissing, tokNull:
		return 0, &DecodeError{Reason: ReasonMissingTimestamp, Field: field, Detail: missingTimeDetail(tok)}
	case tokString:
		text = d.content(tok)
	case tokNumber:
		text = tok.text
	default:
		return 0, &DecodeError{Reason: ReasonBadTimestamp, Field: field, Detail: d.describe(tok) + " is not a time"}
	}
	ms, err := d.times.Parse(text)
	if err != nil {
		return 0, &DecodeError{Reason: ReasonBadTimestamp, Field: field,
			Detail: quoteTrunc(text) + " does not match layout " + strconv.Quote(d.times.Layout())}
	}
	return ms, nil
}

// keyPart is how the value of one key field goes into the key.
type keyPart struct {
	// text is the value's JSON text or, when quoted, the content of a
	// string that goes between quotes as it is. It points into the
	// record, or with inBuf into d.partBuf from start to end (set once all
	// parts are, as partBuf may move while it grows).
	text       []byte
	quoted     bool // text is also the field's Str
	strIsRaw   bool // a boolean: its Str is its JSON text
	inBuf      bool
	start, end int
	num        float64 // a number's value
	isNum      bool
}

// rawLen returns the length of the part's JSON text in the key.
func (p *keyPart) rawLen() int {
	if p.quoted {
		return len(p.text) + 2
	}
	return len(p.text)
}

// key sets rec.Key (interned) and rec.KeyFields. The key is the JSON
// object of the configured prefixes and the fields' JSON texts; it is
// looked up in the intern table by its parts, so that a key seen before
// is neither written out nor copied.
func (d *Decoder) key(in *Input, rec *Record) error {
	if len(d.keys) == 0 {
		rec.Key = "{}"
		return nil
	}
	rec.KeyFields = grow(rec.KeyFields, len(d.keys))
	parts := d.keyParts
	d.partBuf = d.partBuf[:0]
	for i := range d.keys {
		k := &d.keys[i]
		tok := d.token(&k.ref, in)
		switch tok.kind {
		case tokMissing, tokNull:
			return &DecodeError{Reason: ReasonMissingKey, Field: k.ref.name, Detail: missingDetail(tok)}
		case tokObject, tokArray:
			return &DecodeError{Reason: ReasonBadKey, Field: k.ref.name, Detail: d.describe(tok) + " cannot be a key"}
		}
		d.setKeyPart(&parts[i], k.ref.src, tok, &rec.KeyFields[i].Str)
	}
	size := 1 // the closing brace
	var h uint64
	for i := range parts {
		p := &parts[i]
		if p.inBuf {
			p.text = d.partBuf[p.start:p.end]
		}
		size += len(d.keys[i].prefix) + p.rawLen()
		h = d.interned.fold(h, p.text, p.quoted)
	}
	key, ok := d.interned.lookup(h, d.isKey, size)
	if !ok {
		key = d.interned.add(h, d.appendKey(d.keyBuf[:0]))
	}
	rec.Key = key
	off := 0
	for i := range parts {
		p := &parts[i]
		off += len(d.keys[i].prefix)
		n := p.rawLen()
		// Field by field: building the Value on the stack and copying it
		// stalls on store forwarding.
		v := &rec.KeyFields[i]
		v.Raw, v.Num, v.IsNum = key[off:off+n], p.num, p.isNum
		switch {
		case p.quoted:
			v.Str = v.Raw[1 : n-1]
		case p.strIsRaw:
			v.Str = v.Raw
		default:
			v.Str = "" // or pending in the arena, set by resolvePending
		}
		off += n
	}
	return nil
}

// setKeyPart sets p for a key field's token from src. A string that would
// not go into the key as it is (escapes, invalid UTF-8) is quoted into
// d.partBuf, and its Str is arranged in the arena through str.
func (d *Decoder) setKeyPart(p *keyPart, src source, tok *token, str *string) {
	p.quoted, p.strIsRaw, p.inBuf, p.num, p.isNum = false, false, false, 0, false
	switch tok.kind {
	case tokNumber:
		p.text, p.num, p.isNum = tok.text, parseFloat(tok.text), true
		return
	case tokBool:
		p.text, p.strIsRaw = tok.text, true
		return
	}
	if !tok.esc {
		// The JSON scanner proved that an unescaped string has no quote,
		// backslash or control character; only its UTF-8 is unchecked.
		if src == srcValue && d.scanned() && (isASCII(tok.text) || utf8.Valid(tok.text)) || quotesAsIs(tok.text) {
			p.text, p.quoted = tok.text, true
			return
		}
	}
	text := d.content(tok) // may be d.scratch: copied before the next call
	p.inBuf, p.start = true, len(d.partBuf)
	if quotesAsIs(text) {
		d.partBuf = append(d.partBuf, text...)
		p.quoted = true
	} else {
		d.partBuf = AppendQuoted(d.partBuf, text)
		d.addPending(str, textValid, text)
	}
	p.end = len(d.partBuf)
}

// isKey reports whether s is the key that d.keyParts describe, given that
// the key has size bytes. Every key of d starts with the first prefix and
// ends with '}', so those are not compared.
func (d *Decoder) isKey(s string, size int) bool {
	if len(s) != size {
		return false
	}
	off := len(d.keys[0].prefix)
	for i := range d.keyParts {
		if i > 0 {
			prefix := d.keys[i].prefix
			if s[off:off+len(prefix)] != string(prefix) {
				return false
			}
			off += len(prefix)
		}
		p := &d.keyParts[i]
		text := p.text
		if p.quoted {
			if s[off] != '"' || s[off+1+len(text)] != '"' {
				return false
			}
			off++
		}
		if s[off:off+len(text)] != string(text) {
			return false
		}
		off += len(text)
		if p.quoted {
			off++
		}
	}
	return true
}

// appendKey appends the key that d.keyParts describe to buf.
func (d *Decoder) appendKey(buf []byte) []byte {
	for i := range d.keyParts {
		buf = append(buf, d.keys[i].prefix...)
		p := &d.keyParts[i]
		if p.quoted {
			buf = append(buf, '"')
			buf = append(buf, p.text...)
			buf = append(buf, '"')
		} else {
			buf = append(buf, p.text...)
		}
	}
	d.keyBuf = append(buf, '}')
	return d.keyBuf
}

// values sets rec.Values, one per aggregate.
func (d *Decoder) values(in *Input, rec *Record) error {
	rec.Values = grow(rec.Values, len(d.aggs))
	for i := range d.aggs {
		a, v := &d.aggs[i], &rec.Values[i]
		if a.need == NeedNothing {
			*v = Value{}
			continue
		}
		tok := d.token(&a.ref, in)
		switch {
		case tok.kind == tokMissing || tok.kind == tokNull: // SQL's NULL: the aggregate skips it
			*v = NullValue
			continue
		case a.need == NeedPresence:
			*v = Value{}
			continue
		}
		if a.need == NeedNumber { // the engine reads only Num: no text to copy
			n, ok := d.number(tok)
			if !ok {
				return &DecodeError{Reason: ReasonNonNumeric, Field: a.ref.name, Detail: d.describe(tok) + " is not a number"}
			}
			*v = Value{Num: n, IsNum: true}
			continue
		}
		*v = Value{}
		if tok.kind == tokNumber {
			v.Num, v.IsNum = parseFloat(tok.text), true
		}
		d.setText(v, tok)
	}
	return nil
}

// number returns the value of a JSON number, or of a string holding one
// (surrounding spaces allowed), and false for anything else, including
// numbers beyond float64.
func (d *Decoder) number(tok *token) (float64, bool) {
	text := tok.text
	switch tok.kind {
	case tokNumber:
	case tokString:
		text = trimSpaces(d.content(tok))
		if end, ok := scanNumber(text, 0); !ok || end != len(text) {
			return 0, false
		}
	default:
		return 0, false
	}
	if f, ok := parseSimpleFloat(text); ok {
		return f, true
	}
	f, err := strconv.ParseFloat(string(text), 64)
	return f, err == nil
}

// setText sets v.Raw (and v.Str for strings and booleans) to the value's
// text in the arena.
func (d *Decoder) setText(v *Value, tok *token) {
	switch tok.kind {
	case tokString:
		text := d.content(tok)
		start := len(d.arena)
		d.addPending(&v.Raw, textQuoted, text)
		if end := len(d.arena); end-start == len(text)+2 {
			d.pending = append(d.pending, pendingString{&v.Str, span{start + 1, end - 1}})
		} else {
			d.addPending(&v.Str, textValid, text)
		}
	case tokNumber:
		d.addPending(&v.Raw, textAsIs, tok.text)
	default: // true, false, objects and arrays: their text is also their Str
		d.addPending(&v.Raw, textAsIs, tok.text)
		d.pending = append(d.pending, pendingString{&v.Str, d.pending[len(d.pending)-1].at})
	}
}

// textForm is how addPending copies text into the arena.
type textForm uint8

const (
	textAsIs   textForm = iota // a JSON literal
	textQuoted                 // string content, as a JSON string
	textValid                  // string content, invalid UTF-8 replaced
)

// addPending appends text to the arena in form and arranges for *dst to be
// set to it.
func (d *Decoder) addPending(dst *string, form textForm, text []byte) {
	start := len(d.arena)
	switch form {
	case textAsIs:
		d.arena = append(d.arena, text...)
	case textQuoted:
		d.arena = AppendQuoted(d.arena, text)
	case textValid:
		d.arena = appendValidUTF8(d.arena, text)
	}
	d.pending = append(d.pending, pendingString{dst, span{start, len(d.arena)}})
}

// resolvePending makes the arena one string (the only allocation for the
// Values of a record) and points the pending strings into it.
func (d *Decoder) resolvePending() {
	if len(d.pending) == 0 {
		return
	}
	s := string(d.arena)
	for _, p := range d.pending {
		*p.dst = s[p.at.start:p.at.end]
	}
}

// describe names a value in an error message.
func (d *Decoder) describe(tok *token) string {
	switch tok.kind {
	case tokObject:
		return "an object"
	case tokArray:
		return "an array"
	case tokString:
		return quoteTrunc(d.content(tok))
	}
	return truncate(string(tok.text))
}

// missingDetail says why a field counts as missing: absent (no detail
// needed) or null.
func missingDetail(tok *token) string {
	if tok.kind == tokNull {
		return "the value is null"
	}
	return ""
}

// missingTimeDetail says what is missing and, as a record without the
// field may carry its time in the Kafka timestamp, how to use that.
func missingTimeDetail(tok *token) string {
	what := "the record has no such field"
	if tok.kind == tokNull {
		what = "the value is null"
	}
	return what + `; the field "` + FieldKafkaTimestamp + `" is the Kafka record timestamp`
}

// maxQuoted is how much of an offending value an error message shows.
const maxQuoted = 64

// quoteTrunc quotes text for an error message, cut to maxQuoted bytes.
func quoteTrunc(text []byte) string {
	if len(text) <= maxQuoted {
		return strconv.Quote(string(text))
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return strconv.Quote(string(text[:cut])) + "..."
}

func truncate(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	return s[:maxQuoted] + "..."
}

func parseFloat(text []byte) float64 {
	if f, ok := parseSimpleFloat(text); ok {
		return f
	}
	f, _ := strconv.ParseFloat(string(text), 64) // ±Inf beyond float64
	return f
}

// float64Pow10 holds the powers of ten that float64 represents exactly.
var float64Pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseSimpleFloat is strconv.ParseFloat's exact fast path for a valid
// JSON number without exponent: at most 2^53 as an integer of its digits,
// at most 22 of them after the point. Both operands of the one division
// are exact, so the result is correctly rounded, the same float64. It
// reports false for anything else.
func parseSimpleFloat(text []byte) (float64, bool) {
	i, neg := 0, false
	if len(text) > 0 && text[0] == '-' {
		i, neg = 1, true
	}
	var mant uint64
	digits, point := 0, -1
	for ; i < len(text); i++ {
		c := text[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
		case c == '.' && point < 0:
			point = digits
		default:
			return 0, false
		}
	}
	frac := 0
	if point >= 0 {
		frac = digits - point
	}
	if digits == 0 || digits > 19 || mant > 1<<53 || frac >= len(float64Pow10) {
		return 0, false
	}
	f := float64(mant)
	if frac > 0 { // no division for an integer: it is the slow part
		f /= float64Pow10[frac]
	}
	if neg {
		f = -f
	}
	return f, true
}

// grow returns s resized to n, reusing its array when it is big enough.
func grow(s []Value, n int) []Value {
	if cap(s) < n {
		return make([]Value, n)
	}
	return s[:n]
}

// appendValidUTF8 appends s with each invalid byte replaced by U+FFFD, as
// AppendQuoted does.
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, "\ufffd"...)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}
