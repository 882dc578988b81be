package record_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"aggregator/internal/record"
)

// compactSpec reads every kind of key field and value: a string key that
// may need escapes, a numeric or boolean one, the Kafka key; sum, first,
// count_distinct, count with a field and count; a session's gap field.
func compactSpec() record.Spec {
	return record.Spec{
		Format: record.FormatJSON, Key: []string{"sid", "a.b", record.FieldKafkaKey}, TimeField: "t", Layout: "unix_ms",
		Aggregates: []record.Aggregate{{Field: "d", Need: record.NeedNumber}, {Field: "v", Need: record.NeedValue},
			{Field: "a.c", Need: record.NeedValue}, {Field: "v", Need: record.NeedPresence}, {Need: record.NeedNothing}},
		GapField: "gap",
	}
}

func compactDecoder(t testing.TB, spec record.Spec) *record.Decoder {
	t.Helper()
	d, err := record.NewDecoder(spec, nil)
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	return d
}

// roundTrip decodes value, makes its compact form, and reads that back
// with another decoder (stage 2's); it fails the test if the two Records
// differ.
func roundTrip(t *testing.T, dec, dec2 *record.Decoder, key, value string) {
	t.Helper()
	in := record.Input{Partition: 3, Offset: 17, Key: []byte(key), Value: []byte(value)}
	var rec record.Record
	kind, err := dec.Decode(&in, &rec)
	if err != nil || kind != record.Event {
		return // only events are forwarded to stage 2
	}
	form := dec.AppendCompact(nil, &rec)
	var got record.Record
	in2 := record.Input{Partition: 3, Offset: 17, Value: []byte("never read")}
	if _, err := dec2.DecodeCompact([]byte(rec.Key), form, &in2, &got); err != nil {
		t.Fatalf("DecodeCompact(AppendCompact(%s)) = %v", value, err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("DecodeCompact(AppendCompact(%s)) =\n%+v, want\n%+v", value, got, rec)
	}
}

func TestCompactRoundTrip(t *testing.T) {
	tests := map[string]struct{ key, value string }{
		"strings":         {"k1", `{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"w","gap":100}`},
		"numbers":         {"k", `{"sid":1e3,"a":{"b":-0.5,"c":7},"t":"2000","d":"3","v":42,"gap":0}`},
		"booleans":        {"", `{"sid":true,"a":{"b":false,"c":true},"t":1,"d":0,"v":false}`},
		"escaped key":     {"\xff", `{"sid":"a\"b\\c\u0001","a":{"b":"\u00e9","c":"x\ny"},"t":5,"d":1,"v":"tab\t"}`},
		"invalid utf8":    {"q", "{\"sid\":\"a\xffb\",\"a\":{\"b\":\"\",\"c\":\"\"},\"t\":5,\"d\":1,\"v\":\"\"}"},
		"object value":    {"k", `{"sid":"s","a":{"b":1,"c":{"x":[1,2]}},"t":5,"d":1,"v":[1,"a"]}`},
		"null gap":        {"k", `{"sid":"s","a":{"b":1,"c":2},"t":5,"d":1,"v":"x","gap":null}`},
		"nulls":           {"k", `{"sid":"s","a":{"b":1,"c":null},"t":5}`},
		"same text twice": {"s", `{"sid":"s","a":{"b":"s","c":"s"},"t":5,"d":1,"v":"s"}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, compactDecoder(t, compactSpec()), compactDecoder(t, compactSpec()), tt.key, tt.value)
		})
	}
	t.Run("no key fields, count only", func(t *testing.T) {
		spec := record.Spec{Format: record.FormatJSON, TimeField: "t", Layout: "unix_ms", Aggregates: []record.Aggregate{{Need: record.NeedNothing}}}
		roundTrip(t, compactDecoder(t, spec), compactDecoder(t, spec), "", `{"t":99}`)
	})
}

// TestCompactNull: a missing or null aggregate field reads back as the
// null Value, which the aggregate skips, as Decode gives it.
func TestCompactNull(t *testing.T) {
	dec, dec2 := compactDecoder(t, compactSpec()), compactDecoder(t, compactSpec())
	for _, value := range []string{
		`{"sid":"s","a":{"b":1,"c":null},"t":5,"v":null}`, // sum's d and gap missing, first's a.c and v null
		`{"sid":"s","a":{"b":1},"t":5,"d":null}`,
	} {
		var rec, got record.Record
		in := record.Input{Key: []byte("k"), Value: []byte(value)}
		if _, err := dec.Decode(&in, &rec); err != nil {
			t.Fatalf("Decode(%s): %v", value, err)
		}
		nulls := 0
		for _, v := range rec.Values {
			if v.Null {
				nulls++
			}
		}
		if nulls < 3 {
			t.Fatalf("Decode(%s) has %d null values, want at least 3: the test tests nothing", value, nulls)
		}
		if _, err := dec2.DecodeCompact([]byte(rec.Key), dec.AppendCompact(nil, &rec), &in, &got); err != nil || !reflect.DeepEqual(got, rec) {
			t.Errorf("DecodeCompact(%s) = %+v, %v, want %+v", value, got.Values, err, rec.Values)
		}
	}
	// A null Value has every other field zero: a null number is corrupt.
	one := compactDecoder(t, record.Spec{Format: record.FormatJSON, TimeField: "t", Layout: "unix_ms",
		Aggregates: []record.Aggregate{{Field: "d", Need: record.NeedNumber}}})
	head := one.AppendCompact(nil, &record.Record{Key: "{}"})[:5:5] // version and spec
	for flags, wantErr := range map[byte]bool{0x40: false, 0x41: true} {
		form := append(head, 0, 0, 0, 1, flags)
		if flags&1 != 0 {
			form = append(form, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f) // 1.0
		}
		var got record.Record
		_, err := one.DecodeCompact([]byte("{}"), form, &record.Input{}, &got)
		if (err != nil) != wantErr || err == nil && got.Values[0] != record.NullValue {
			t.Errorf("DecodeCompact(flags %#x) = %+v, %v, want an error: %v", flags, got.Values, err, wantErr)
		}
	}
}

// TestCompactNoAllocations: a repeated key and numeric values cost stage 2
// no allocation.
func TestCompactNoAllocations(t *testing.T) {
	spec := record.Spec{Format: record.FormatJSON, Key: []string{"sid"}, TimeField: "t", Layout: "unix_ms",
		Aggregates: []record.Aggregate{{Field: "d", Need: record.NeedNumber}, {Need: record.NeedNothing}}}
	dec, dec2 := compactDecoder(t, spec), compactDecoder(t, spec)
	in := record.Input{Value: []byte(`{"sid":"sid_1","t":1000,"d":2}`)}
	var rec, got record.Record
	if _, err := dec.Decode(&in, &rec); err != nil {
		t.Fatal(err)
	}
	form, key := dec.AppendCompact(nil, &rec), []byte(rec.Key)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := dec2.DecodeCompact(key, form, &in, &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("DecodeCompact: %v allocations per record, want 0", allocs)
	}
}

func TestCompactCorrupt(t *testing.T) {
	dec := compactDecoder(t, compactSpec())
	var rec record.Record
	in := record.Input{Key: []byte("k1"), Value: []byte(`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"w"}`)}
	if _, err := dec.Decode(&in, &rec); err != nil {
		t.Fatal(err)
	}
	form := dec.AppendCompact(nil, &rec)
	key := []byte(rec.Key)
	head := form[:5:5] // version and spec
	with := func(b ...byte) []byte { return append(head, b...) }
	for name, tt := range map[string]struct{ key, form []byte }{
		"empty":            {key, nil},
		"version 2":        {key, append([]byte{2}, form[1:]...)},
		"short":            {key, form[:len(form)-1]},
		"left over":        {key, append(form[:len(form):len(form)], 0)},
		"key not object":   {[]byte("k"), form},
		"empty key":        {nil, form},
		"huge count":       {key, with(0, 0, 0xff, 0xff, 0x03)},
		"unknown flag":     {key, with(0, 0, 1, 0x80, 0)},
		"raw twice":        {key, with(0, 0, 1, 0x06, 0, 1, 1, 'x', 0)},
		"raw beyond key":   {key, with(0, 0, 1, 0x02, 5, 100, 0)},
		"quoted too short": {key, with(0, 0, 1, 0x12, 0, 1, 0)},
		"two str forms":    {key, with(0, 0, 1, 0x18, 0)},
		"too few values":   {key, with(0, 0, 3, 0, 0, 0, 1, 0)},
	} {
		var got record.Record
		_, err := dec.DecodeCompact(tt.key, tt.form, &in, &got)
		var de *record.DecodeError
		if !errors.As(err, &de) || de.Reason != record.ReasonBadRepartitionRecord {
			t.Errorf("DecodeCompact(%s) = %v, want a %s DecodeError", name, err, record.ReasonBadRepartitionRecord)
		}
	}
}

// TestCompactOtherSpec: a form made under another config (a rollout that
// changes the aggregates or the filter) is left aside: the record is
// decoded from its value, as the reader's config says.
func TestCompactOtherSpec(t *testing.T) {
	old := compactSpec()
	changed := compactSpec()
	changed.Aggregates = append(changed.Aggregates, record.Aggregate{Field: "d", Need: record.NeedNumber})
	filtered := compactSpec()
	filtered.Filters = []record.Filter{{Field: "v", Equals: "other"}}
	value := `{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"w"}`
	in := record.Input{Key: []byte("k1"), Value: []byte(value)}
	var rec record.Record
	dec := compactDecoder(t, old)
	if _, err := dec.Decode(&in, &rec); err != nil {
		t.Fatal(err)
	}
	form := dec.AppendCompact(nil, &rec)
	for name, tt := range map[string]struct {
		spec record.Spec
		kind record.Kind
	}{"an aggregate added": {changed, record.Event}, "a filter": {filtered, record.Filtered}} {
		t.Run(name, func(t *testing.T) {
			reader := compactDecoder(t, tt.spec)
			var want, got record.Record
			wantKind, wantErr := reader.DecodeTimed(&in, &want)
			kind, err := reader.DecodeCompact([]byte(rec.Key), form, &in, &got)
			if kind != tt.kind || kind != wantKind || err != wantErr || !reflect.DeepEqual(got, want) {
				t.Errorf("DecodeCompact under another spec = %v, %+v, %v; want Decode's %v, %+v, %v", kind, got, err, wantKind, want, wantErr)
			}
		})
	}
}

// TestDecodeAll: a record the filter rejects is decoded whole, as Decode
// decodes one the filter accepts, and its form read back with the
// filter's verdict is Filtered with the same record; a record the filter
// accepts decodes as with Decode. A decoding error after the filter is
// the record's error, with the group key when it came after it.
func TestDecodeAll(t *testing.T) {
	withFilter := compactSpec()
	withFilter.Filters = []record.Filter{{Field: "v", Equals: "keep"}}
	dec, open, reader := compactDecoder(t, withFilter), compactDecoder(t, compactSpec()), compactDecoder(t, withFilter)
	tests := map[string]struct {
		value   string
		kind    record.Kind
		key     bool // rec.Key is set
		errKind string
	}{
		"accepted":         {`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"keep"}`, record.Event, true, ""},
		"rejected":         {`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"drop"}`, record.Filtered, true, ""},
		"rejected, bad d":  {`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":"x","v":"drop"}`, record.Filtered, true, record.ReasonNonNumeric},
		"rejected, no t":   {`{"sid":"s1","a":{"b":"x","c":"y"},"d":1,"v":"drop"}`, record.Filtered, false, record.ReasonMissingTimestamp},
		"rejected, no sid": {`{"a":{"b":"x","c":"y"},"t":1000,"d":1,"v":"drop"}`, record.Filtered, false, record.ReasonMissingKey},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			in := record.Input{Key: []byte("k1"), Value: []byte(tt.value)}
			var rec, want record.Record
			kind, err := dec.DecodeAll(&in, &rec)
			if kind != tt.kind || (rec.Key != "") != tt.key {
				t.Fatalf("DecodeAll = %v, key %q, %v; want %v, key set %v", kind, rec.Key, err, tt.kind, tt.key)
			}
			var de *record.DecodeError
			if tt.errKind != "" {
				if !errors.As(err, &de) || de.Reason != tt.errKind {
					t.Fatalf("DecodeAll error = %v, want reason %s", err, tt.errKind)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeAll error = %v", err)
			}
			// What a decoder without the filter makes of it.
			if k, err := open.Decode(&in, &want); k != record.Event || err != nil {
				t.Fatalf("Decode without the filter = %v, %v", k, err)
			}
			if !reflect.DeepEqual(rec, want) {
				t.Fatalf("DecodeAll =\n%+v, want\n%+v", rec, want)
			}
			if tt.kind == record.Event {
				var plain record.Record
				if k, err := dec.Decode(&in, &plain); k != record.Event || err != nil || !reflect.DeepEqual(plain, rec) {
					t.Fatalf("Decode = %v, %v, %+v; DecodeAll's %+v", k, err, plain, rec)
				}
			}
			form := dec.AppendCompact(nil, &rec)
			var got record.Record
			k, err := reader.DecodeForm([]byte(rec.Key), form, tt.kind == record.Filtered, &record.Input{Value: []byte("never read")}, &got)
			if k != tt.kind || err != nil || !reflect.DeepEqual(got, rec) {
				t.Fatalf("DecodeForm = %v, %v, %+v; want %v, %+v", k, err, got, tt.kind, rec)
			}
		})
	}
	// A reader of another filter decodes the value under its own: the
	// form's verdict is not its filter's.
	in := record.Input{Key: []byte("k1"), Value: []byte(tests["rejected"].value)}
	var rec, got record.Record
	if _, err := dec.DecodeAll(&in, &rec); err != nil {
		t.Fatal(err)
	}
	other := compactSpec()
	other.Filters = []record.Filter{{Field: "v", Equals: "drop"}}
	if k, err := compactDecoder(t, other).DecodeForm([]byte(rec.Key), dec.AppendCompact(nil, &rec), true, &in, &got); k != record.Event || err != nil || got.Key != rec.Key {
		t.Fatalf("DecodeForm under another filter = %v, %v, %+v; want its own Event", k, err, got)
	}
}

// TestDecodeTimed: a record the filter rejects is Filtered without an
// error, with its event time if it reads (math.MinInt64 if not) and
// nothing after it (no group key: none is interned); Decode leaves the
// time unread; an accepted record decodes as with Decode.
func TestDecodeTimed(t *testing.T) {
	spec := compactSpec()
	spec.Filters = []record.Filter{{Field: "v", Equals: "keep"}}
	dec := compactDecoder(t, spec)
	for _, tt := range []struct {
		value string
		kind  record.Kind
		time  int64
	}{
		{`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"keep"}`, record.Event, 1000},
		{`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":"x","v":"drop"}`, record.Filtered, 1000},
		{`{"sid":"s1","t":"soon","v":"drop"}`, record.Filtered, math.MinInt64},
	} {
		in := record.Input{Key: []byte("k1"), Value: []byte(tt.value)}
		var rec, plain record.Record
		kind, err := dec.DecodeTimed(&in, &rec)
		if kind != tt.kind || err != nil || rec.Time != tt.time || kind == record.Filtered && rec.Key != "" {
			t.Errorf("DecodeTimed(%s) = %v, %v, time %d, key %q; want %v, time %d", tt.value, kind, err, rec.Time, rec.Key, tt.kind, tt.time)
		}
		pk, perr := dec.Decode(&in, &plain)
		if pk != kind || perr != nil || kind == record.Event && !reflect.DeepEqual(plain, rec) || kind == record.Filtered && plain.Time != math.MinInt64 {
			t.Errorf("Decode(%s) = %v, %v, %+v; want %v (a filtered record's time unread)", tt.value, pk, perr, plain, kind)
		}
	}
}

// FuzzCompactRoundTrip: whatever Decode makes of a value, the compact form
// reads back as the same Record.
func FuzzCompactRoundTrip(f *testing.F) {
	dec, dec2 := compactDecoder(f, compactSpec()), compactDecoder(f, compactSpec())
	for _, s := range []string{
		`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"w","gap":100}`,
		`{"sid":"a\"b\\c\u0001","a":{"b":"\u00e9","c":"x\ny"},"t":5,"d":1,"v":"tab\t"}`,
		"{\"sid\":\"a\xffb\",\"a\":{\"b\":\"\",\"c\":\"\"},\"t\":5,\"d\":1,\"v\":\"\"}",
		`{"sid":1e3,"a":{"b":-0.5,"c":{"x":[1,2]}},"t":"2000","d":"3","v":null}`,
	} {
		f.Add("k", s)
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		roundTrip(t, dec, dec2, key, value)
	})
}

// FuzzDecodeCompact: any bytes read as a record or a DecodeError.
func FuzzDecodeCompact(f *testing.F) {
	dec := compactDecoder(f, compactSpec())
	var rec record.Record
	in := record.Input{Key: []byte("k1"), Value: []byte(`{"sid":"s1","a":{"b":"x","c":"y"},"t":1000,"d":2.5,"v":"w"}`)}
	if _, err := dec.Decode(&in, &rec); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(rec.Key), dec.AppendCompact(nil, &rec))
	f.Fuzz(func(t *testing.T, key, form []byte) {
		var got record.Record
		_, err := dec.DecodeCompact(key, form, &in, &got)
		if de := (*record.DecodeError)(nil); err != nil && !errors.As(err, &de) {
			t.Fatalf("DecodeCompact(%q, %q) = %v, want nil or a DecodeError", key, form, err)
		}
	})
}
