package record

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"aggregator/internal/config"
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
	srcKafkaKey                     // meta.Key
	srcKafkaTimestamp               // meta.Timestamp
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

// aggKind is what an aggregate needs from its field.
type aggKind uint8

const (
	aggCount   aggKind = iota // no field
	aggNumeric                // sum, min, max, avg, quantile: a number
	aggAny                    // first, last, count_distinct: any value
)

type aggRef struct {
	ref  fieldRef
	kind aggKind
}

// span locates a string inside the key or the arena.
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
	csv       bool
	json      jsonScanner
	cells     csvScanner
	columns   map[string]int // CSV column index by name
	timeField fieldRef
	times     *TimeParser // nil when the event time is $timestamp and there are no markers
	marker    *fieldRef   // punctuated: the marker field
	filters   []filterRef
	keys      []keyRef
	aggs      []aggRef

	interned internTable
	keyBuf   []byte
	keySpans []keySpan
	arena    []byte // the text of this record's Values, one string at the end
	pending  []pendingString
	scratch  []byte // unescaped content, valid until the next content call
	tsText   []byte // meta.Timestamp as text, for $timestamp fields
}

// keySpan locates a key field's Raw and Str inside the key string.
type keySpan struct {
	raw, str span
	strIn    bool // Str is inside the key (else pending in the arena, or none)
}

// NewDecoder compiles the source, watermark and aggregate config. It uses
// cfg.Source (format, csv, key, timestamp, filter), cfg.Watermark
// (strategy, marker_field) and the field of each aggregate. Errors are
// *config.KeyError (config.Load reports them first).
func NewDecoder(cfg config.Config) (*Decoder, error) {
	src := cfg.Source
	d := &Decoder{interned: newInternTable()}
	if err := d.setFormat(src); err != nil {
		return nil, err
	}
	steps := []func(config.Config) error{d.compileTime, d.compileMarker, d.compileFilters, d.compileKeys, d.compileAggregates}
	for _, step := range steps {
		if err := step(cfg); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *Decoder) setFormat(src config.Source) error {
	switch src.Format {
	case "", "json":
		return nil
	case "csv":
	default:
		return &config.KeyError{Key: "source.format", Value: src.Format, Reason: "must be json or csv"}
	}
	d.csv = true
	delim := src.CSV.Delimiter
	if delim == "" {
		delim = ","
	}
	if r, n := utf8.DecodeRuneInString(delim); n != len(delim) || r == '"' || r == '\r' || r == '\n' || r == utf8.RuneError {
		return &config.KeyError{Key: "source.csv.delimiter", Value: delim, Reason: `must be one character, not '"' or a line break`}
	}
	if len(src.CSV.Columns) == 0 {
		return &config.KeyError{Key: "source.csv.columns", Value: "[]", Reason: "required for source.format csv"}
	}
	d.cells = csvScanner{delim: []byte(delim), columns: len(src.CSV.Columns), cells: make([]token, 0, len(src.CSV.Columns))}
	d.columns = make(map[string]int, len(src.CSV.Columns))
	for i, name := range src.CSV.Columns {
		if _, dup := d.columns[name]; dup {
			return &config.KeyError{Key: "source.csv.columns", Value: name, Reason: "repeats a column name"}
		}
		d.columns[name] = i
	}
	return nil
}

// ref compiles a field name used at config key key.
func (d *Decoder) ref(key, name string) (fieldRef, error) {
	switch name {
	case "":
		return fieldRef{}, &config.KeyError{Key: key, Reason: "required: a record field name"}
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
	return fieldRef{}, &config.KeyError{Key: key, Value: name, Reason: "is not one of source.csv.columns"}
}

func (d *Decoder) compileTime(cfg config.Config) error {
	ts := cfg.Source.Timestamp
	var err error
	if d.timeField, err = d.ref("source.timestamp.field", ts.Field); err != nil {
		return err
	}
	needLayout := d.timeField.src != srcKafkaTimestamp || cfg.Watermark.Strategy == "punctuated"
	if !needLayout && ts.Layout == "" {
		return nil
	}
	loc := time.UTC
	if ts.Timezone != "" {
		if loc, err = time.LoadLocation(ts.Timezone); err != nil {
			return &config.KeyError{Key: "source.timestamp.timezone", Value: ts.Timezone, Reason: "must be an IANA time zone name, such as UTC or Europe/Berlin"}
		}
	}
	if ts.Layout == "" {
		return &config.KeyError{Key: "source.timestamp.layout", Reason: "required: a Go layout or unix_s, unix_ms, unix_us, unix_ns, rfc3339"}
	}
	if d.times, err = NewTimeParser(ts.Layout, loc); err != nil {
		return &config.KeyError{Key: "source.timestamp.layout", Value: ts.Layout, Reason: err.Error()}
	}
	return nil
}

func (d *Decoder) compileMarker(cfg config.Config) error {
	if cfg.Watermark.Strategy != "punctuated" {
		return nil
	}
	r, err := d.ref("watermark.marker_field", cfg.Watermark.MarkerField)
	if err == nil && r.src != srcValue {
		err = &config.KeyError{Key: "watermark.marker_field", Value: r.name, Reason: "must be a field of the record value"}
	}
	d.marker = &r
	return err
}

func (d *Decoder) compileFilters(cfg config.Config) error {
	for i, f := range cfg.Source.Filter {
		r, err := d.ref(fmt.Sprintf("source.filter[%d].field", i), f.Field)
		if err != nil {
			return err
		}
		d.filters = append(d.filters, filterRef{ref: r, equals: f.Equals})
	}
	return nil
}

func (d *Decoder) compileKeys(cfg config.Config) error {
	for i, name := range cfg.Source.Key {
		r, err := d.ref(fmt.Sprintf("source.key[%d]", i), name)
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
	d.keySpans = make([]keySpan, len(d.keys))
	return nil
}

func (d *Decoder) compileAggregates(cfg config.Config) error {
	for i, a := range cfg.Aggregates {
		var kind aggKind
		switch a.Fn {
		case "count":
			d.aggs = append(d.aggs, aggRef{kind: aggCount})
			continue
		case "sum", "min", "max", "avg", "quantile":
			kind = aggNumeric
		case "first", "last", "count_distinct":
			kind = aggAny
		default:
			return &config.KeyError{Key: fmt.Sprintf("aggregates[%d].fn", i), Value: a.Fn, Reason: "is not a known function"}
		}
		r, err := d.ref(fmt.Sprintf("aggregates[%d].field", i), a.Field)
		if err != nil {
			return err
		}
		d.aggs = append(d.aggs, aggRef{ref: r, kind: kind})
	}
	return nil
}

// Decode fills rec from one record value, reusing its slices, and says
// what the record is:
//   - Marker (punctuated strategy, the record has the marker field): only
//     rec.Time is set, to the marker's value read with the timestamp layout.
//     A marker needs no other field and is not filtered.
//   - Filtered: a source.filter does not hold (or its field is missing).
//   - Event: Time, Key, KeyFields and Values are set.
//
// Partition and Offset always come from meta. Any problem with the data is
// a *DecodeError (then the Kind is Event and rec is unusable).
func (d *Decoder) Decode(value []byte, meta Meta, rec *Record) (Kind, error) {
	rec.Partition, rec.Offset, rec.Time = meta.Partition, meta.Offset, 0
	rec.Key, rec.KeyFields, rec.Values = "", rec.KeyFields[:0], rec.Values[:0]
	if err := d.split(value); err != nil {
		return Event, err
	}
	if d.marker != nil {
		if tok := d.token(*d.marker, meta); tok.kind != tokMissing && tok.kind != tokNull {
			t, err := d.parseTime(d.marker.name, tok)
			if err != nil {
				return Event, err
			}
			rec.Time = t
			return Marker, nil
		}
	}
	for _, f := range d.filters {
		if !d.equals(d.token(f.ref, meta), f.equals) {
			return Filtered, nil
		}
	}
	t, err := d.eventTime(meta)
	if err != nil {
		return Event, err
	}
	rec.Time = t
	d.arena, d.pending = d.arena[:0], d.pending[:0]
	if err := d.key(meta, rec); err != nil {
		return Event, err
	}
	if err := d.values(meta, rec); err != nil {
		return Event, err
	}
	d.resolvePending()
	return Event, nil
}

func (d *Decoder) split(value []byte) error {
	if d.csv {
		return d.cells.split(value)
	}
	return d.json.scan(value)
}

// token returns the field r of the record just split.
func (d *Decoder) token(r fieldRef, meta Meta) token {
	switch r.src {
	case srcKafkaKey:
		if meta.Key == nil {
			return token{}
		}
		return token{kind: tokString, text: meta.Key}
	case srcKafkaTimestamp:
		d.tsText = strconv.AppendInt(d.tsText[:0], meta.Timestamp, 10)
		return token{kind: tokNumber, text: d.tsText}
	}
	if d.csv {
		return d.cells.cells[r.slot]
	}
	return d.json.slots[r.slot]
}

// content returns a string token's text with escapes resolved. The result
// may live in d.scratch: use it before the next call.
func (d *Decoder) content(tok token) []byte {
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
func (d *Decoder) equals(tok token, want string) bool {
	switch tok.kind {
	case tokMissing, tokObject, tokArray:
		return false
	case tokString:
		return string(d.content(tok)) == want
	}
	return string(tok.text) == want
}

func (d *Decoder) eventTime(meta Meta) (int64, error) {
	if d.timeField.src == srcKafkaTimestamp {
		if meta.Timestamp < 0 { // Kafka's "no timestamp" is -1
			return 0, &DecodeError{Reason: ReasonMissingTimestamp, Field: FieldKafkaTimestamp, Detail: "the Kafka record has no timestamp"}
		}
		return meta.Timestamp, nil
	}
	return d.parseTime(d.timeField.name, d.token(d.timeField, meta))
}

// parseTime reads the time in tok (the field named field) with the layout.
func (d *Decoder) parseTime(field string, tok token) (int64, error) {
	var text []byte
	switch tok.kind {
	case tokMissing, tokNull:
		return 0, &DecodeError{Reason: ReasonMissingTimestamp, Field: field, Detail: missingDetail(tok)}
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

// key sets rec.Key (interned) and rec.KeyFields.
func (d *Decoder) key(meta Meta, rec *Record) error {
	if len(d.keys) == 0 {
		rec.Key = "{}"
		return nil
	}
	rec.KeyFields = grow(rec.KeyFields, len(d.keys))
	buf := d.keyBuf[:0]
	for i, k := range d.keys {
		tok := d.token(k.ref, meta)
		switch tok.kind {
		case tokMissing, tokNull:
			return &DecodeError{Reason: ReasonMissingKey, Field: k.ref.name, Detail: missingDetail(tok)}
		case tokObject, tokArray:
			return &DecodeError{Reason: ReasonBadKey, Field: k.ref.name, Detail: d.describe(tok) + " cannot be a key"}
		}
		buf = append(buf, k.prefix...)
		buf = d.appendKeyField(buf, tok, &rec.KeyFields[i], &d.keySpans[i])
	}
	buf = append(buf, '}')
	d.keyBuf = buf
	key := d.interned.intern(buf)
	rec.Key = key
	for i, sp := range d.keySpans {
		rec.KeyFields[i].Raw = key[sp.raw.start:sp.raw.end]
		if sp.strIn {
			rec.KeyFields[i].Str = key[sp.str.start:sp.str.end]
		}
	}
	return nil
}

// appendKeyField appends the JSON text of a key field to buf, sets v's
// number and records where v's strings are.
func (d *Decoder) appendKeyField(buf []byte, tok token, v *Value, sp *keySpan) []byte {
	*v, *sp = Value{}, keySpan{}
	start := len(buf)
	switch tok.kind {
	case tokNumber:
		v.Num, v.IsNum = parseFloat(tok.text), true
		buf = append(buf, tok.text...)
	case tokBool:
		buf = append(buf, tok.text...)
		sp.str, sp.strIn = span{start, len(buf)}, true
	default:
		text := d.content(tok)
		buf = AppendQuoted(buf, text)
		if len(buf)-start == len(text)+2 { // nothing was escaped: Str is inside
			sp.str, sp.strIn = span{start + 1, len(buf) - 1}, true
		} else {
			d.addPending(&v.Str, textValid, text)
		}
	}
	sp.raw = span{start, len(buf)}
	return buf
}

// values sets rec.Values, one per aggregate.
func (d *Decoder) values(meta Meta, rec *Record) error {
	rec.Values = grow(rec.Values, len(d.aggs))
	for i, a := range d.aggs {
		v := &rec.Values[i]
		*v = Value{}
		if a.kind == aggCount {
			continue
		}
		tok := d.token(a.ref, meta)
		switch tok.kind {
		case tokMissing, tokNull:
			return &DecodeError{Reason: ReasonMissingField, Field: a.ref.name, Detail: missingDetail(tok)}
		}
		if a.kind == aggNumeric { // the engine reads only Num: no text to copy
			n, ok := d.number(tok)
			if !ok {
				return &DecodeError{Reason: ReasonNonNumeric, Field: a.ref.name, Detail: d.describe(tok) + " is not a number"}
			}
			v.Num, v.IsNum = n, true
			continue
		}
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
func (d *Decoder) number(tok token) (float64, bool) {
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
func (d *Decoder) setText(v *Value, tok token) {
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
func (d *Decoder) describe(tok token) string {
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
func missingDetail(tok token) string {
	if tok.kind == tokNull {
		return "the value is null"
	}
	return ""
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
	f := float64(mant) / float64Pow10[frac]
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
