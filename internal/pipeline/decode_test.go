package pipeline

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
)

// A data record and a marker of the repartition topic as the release
// before format 2 (2aa1e63) wrote them: format 1, the header, the input's
// value to decode again. These bytes are the format's contract with a
// running older release (a rolling upgrade): never update them.
const (
	goldenV1Data   = "01640501a410d09882d0f26f08808982d0f26f801b0563616c6c73017265712d39"
	goldenV1Marker = "016d0508808982d0f26f00"
	goldenKey      = `{"sid":"sid_1"}`
	goldenValue    = `{"sid":"sid_1","t":1922350204456,"d":3,"v":"x\n"}`
)

func goldenDecoder(t *testing.T) *record.Decoder {
	t.Helper()
	cfg := config.Config{
		Source: config.Source{Format: "json", Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"}},
		Aggregates: []config.Aggregate{{Name: "d", Fn: "sum", Field: "d"}, {Name: "n", Fn: "count"},
			{Name: "v", Fn: "last", Field: "v"}},
	}
	dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatalf("NewDecoder: %v", err)
	}
	return dec
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fetched is a record of a repartition partition as the shell fetched
// it: what Decode takes.
type fetched struct {
	in      ready.Input
	headers bool
	header  []byte
}

// repartRecord is a record of repartition partition 2 at offset 7, as
// the shell fetched it, with the value of its repartition.Header header
// if header is given.
func repartRecord(value string, header ...[]byte) *fetched {
	f := &fetched{in: ready.Input{Topic: "g-repartition", Partition: 2, KafkaPartition: 2, Offset: 7, Key: []byte(goldenKey), Value: []byte(value),
		Timestamp: time.UnixMilli(1_922_350_204_456).UnixMilli()}, headers: len(header) > 0}
	if len(header) > 0 {
		f.header = header[0]
	}
	return f
}

// decodeFetched is decodeRepartition of f into d.
func decodeFetched(dec *record.Decoder, f *fetched, topics []string, d *Decoded) {
	d.In = f.in
	decodeRepartition(dec, f.headers, f.header, topics, 0, d)
}

// TestDecodeRepartitionGolden: stage 2 reads format 2 data records (no
// headers; the compact form in the value) and the format 1 records of a
// release before it (the header; the value decoded again) as the same
// input record, decoded alike; from format 2, the input value is not
// decoded.
func TestDecodeRepartitionGolden(t *testing.T) {
	want := ready.Input{Topic: "calls", Partition: 2, KafkaPartition: 1, Offset: 1042, Key: []byte("req-9"),
		Value: []byte(goldenValue), Timestamp: 1_922_350_204_456, SourceID: 5, RepartitionOffset: 7,
		Sources: 8, Before: 1_922_350_200_000, After: 1_922_350_203_456}
	dec := goldenDecoder(t)
	var wantRec record.Record
	if _, err := dec.Decode(&want, &wantRec); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	form := dec.AppendCompact(nil, &wantRec)
	format2 := func(value string) string {
		in := want
		in.Partition, in.Value = in.SourceID, []byte(value)
		return string(repartition.AppendValue(nil, &in, form))
	}
	header := unhex(t, goldenV1Data)
	tests := map[string]struct {
		rec       *fetched
		wantValue string
	}{
		"format 1":       {repartRecord(goldenValue, header), goldenValue},
		"format 2":       {repartRecord(format2(goldenValue)), goldenValue},
		"value not read": {repartRecord(format2("not JSON")), "not JSON"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var d Decoded
			decodeFetched(goldenDecoder(t), tt.rec, []string{"calls"}, &d)
			w := want
			w.Value = []byte(tt.wantValue)
			if d.Err != nil || d.Kind != record.Event || !reflect.DeepEqual(d.In, w) {
				t.Fatalf("decodeRepartition = %+v, %v, %v, want %+v", d.In, d.Kind, d.Err, w)
			}
			d.Rec.Partition, d.Rec.Offset = wantRec.Partition, wantRec.Offset
			if !reflect.DeepEqual(d.Rec, wantRec) {
				t.Errorf("decodeRepartition's record = %+v, want %+v", d.Rec, wantRec)
			}
		})
	}
	t.Run("marker", func(t *testing.T) {
		var d Decoded
		decodeFetched(dec, repartRecord("", unhex(t, goldenV1Marker)), nil, &d)
		if want := (watermark.Mark{Source: 5, Count: 8, Watermark: 1_922_350_203_456}); d.Err != nil || d.Kind != record.Marker || d.Mark != want {
			t.Errorf("decodeRepartition(marker) = %v, %+v, %v, want %+v", d.Kind, d.Mark, d.Err, want)
		}
	})
}

// TestDecodeRepartitionBad: a format 2 record or a header this release
// cannot read makes the repartition record a dead letter; a format 1
// record whose value does not decode is that value's dead letter, as
// stage 1 judged it.
func TestDecodeRepartitionBad(t *testing.T) {
	header := unhex(t, goldenV1Data)
	in := ready.Input{Topic: "calls", Key: []byte("k"), Value: []byte(goldenValue)}
	withForm := func(form []byte) string { return string(repartition.AppendValue(nil, &in, form)) }
	full := withForm([]byte{1, 0, 0, 0, 0})
	tests := map[string]struct {
		rec          *fetched
		reason       string
		wantSourceID int32
	}{
		"corrupt form":           {repartRecord(withForm([]byte{9})), record.ReasonBadRepartitionRecord, -1},
		"empty form":             {repartRecord(withForm(nil)), record.ReasonBadRepartitionRecord, -1},
		"no headers, no format":  {repartRecord(goldenValue), record.ReasonBadRepartitionRecord, -1},
		"format 2 cut short":     {repartRecord(full[:8]), record.ReasonBadRepartitionRecord, -1},
		"corrupt header":         {repartRecord(goldenValue, []byte{1}), record.ReasonBadRepartitionRecord, -1},
		"format 1, not JSON":     {repartRecord("{", header), record.ReasonBadJSON, 5},
		"format 1, key absent":   {repartRecord(`{"t":1}`, header), record.ReasonMissingKey, 5},
		"unknown header version": {repartRecord(goldenValue, append([]byte{3}, unhex(t, goldenV1Data)[1:]...)), record.ReasonBadRepartitionRecord, -1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var d Decoded
			decodeFetched(goldenDecoder(t), tt.rec, []string{"calls"}, &d)
			var de *record.DecodeError
			if !errors.As(d.Err, &de) || de.Reason != tt.reason || d.In.SourceID != tt.wantSourceID {
				t.Errorf("decodeRepartition = %v (source id %d), want a %s dead letter with source id %d", d.Err, d.In.SourceID, tt.reason, tt.wantSourceID)
			}
		})
	}
}

// TestDecodeRepartitionOtherConfig: a format 2 record whose form another
// config made (an instance not yet rolled to this config) is decoded from
// its value under this one, as a format 1 record would be.
func TestDecodeRepartitionOtherConfig(t *testing.T) {
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 1042, Value: []byte(goldenValue)}
	other, err := record.NewDecoder(config.Config{
		Source:     config.Source{Format: "json", Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"}},
		Aggregates: []config.Aggregate{{Name: "n", Fn: "count"}},
	}.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var theirs, want record.Record
	if _, err := other.Decode(&in, &theirs); err != nil {
		t.Fatal(err)
	}
	rec := repartRecord(string(repartition.AppendValue(nil, &in, other.AppendCompact(nil, &theirs))))
	dec := goldenDecoder(t)
	var d Decoded
	decodeFetched(dec, rec, []string{"calls"}, &d)
	wantIn := d.In
	if _, err := goldenDecoder(t).Decode(&wantIn, &want); err != nil {
		t.Fatal(err)
	}
	d.Rec.Partition, d.Rec.Offset = want.Partition, want.Offset
	if d.Err != nil || d.Kind != record.Event || d.In.SourceID != 5 || len(d.Rec.Values) != 3 || !reflect.DeepEqual(d.Rec, want) {
		t.Errorf("decodeRepartition of another config's form = %+v, %v, %v; want the value decoded under this config, %+v", d.Rec, d.Kind, d.Err, want)
	}
}

// TestDecodeRepartitionAllocs: reading a format 2 record of a known key
// and numeric aggregates costs no allocation (text values cost decoding
// one, their arena).
func TestDecodeRepartitionAllocs(t *testing.T) {
	dec, err := record.NewDecoder(config.Config{
		Source:     config.Source{Format: "json", Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"}},
		Aggregates: []config.Aggregate{{Name: "d", Fn: "sum", Field: "d"}, {Name: "n", Fn: "count"}},
	}.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := ready.Input{Topic: "calls", Partition: 5, Value: []byte(goldenValue)}
	var rec record.Record
	if _, err := dec.Decode(&in, &rec); err != nil {
		t.Fatal(err)
	}
	r := repartRecord(string(repartition.AppendValue(nil, &in, dec.AppendCompact(nil, &rec))))
	var d Decoded
	allocs := testing.AllocsPerRun(100, func() { decodeFetched(dec, r, []string{"calls"}, &d) })
	if d.Err != nil || allocs != 0 {
		t.Errorf("decodeRepartition: %v allocations per record (%v), want 0", allocs, d.Err)
	}
}

// TestDecodeRepartitionFormat3: a format 3 record the filter of stage
// 1's config rejected reads back as Filtered under that config (its form
// is the whole record), and as the record under a config without the
// filter (another spec: the value is decoded); one without a form is its
// value decoded under the reader's config.
func TestDecodeRepartitionFormat3(t *testing.T) {
	filterCfg := config.Config{
		Source: config.Source{Format: "json", Key: []string{"sid"}, Timestamp: config.Timestamp{Field: "t", Layout: "unix_ms"},
			Filter: []config.Filter{{Field: "v", Equals: "y"}}},
		Aggregates: []config.Aggregate{{Name: "d", Fn: "sum", Field: "d"}, {Name: "n", Fn: "count"},
			{Name: "v", Fn: "last", Field: "v"}},
	}
	filterDec := func() *record.Decoder {
		dec, err := record.NewDecoder(filterCfg.RecordSpec(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 1042, Value: []byte(goldenValue)}
	var rec, want record.Record
	if kind, err := filterDec().DecodeAll(&in, &rec); kind != record.Filtered || err != nil {
		t.Fatalf("DecodeAll = %v, %v; want Filtered", kind, err)
	}
	withForm := repartRecord(string(repartition.AppendValue3(nil, &in, filterDec().AppendCompact(nil, &rec), true)))
	noForm := repartRecord(string(repartition.AppendValue3(nil, &in, nil, true)))
	for name, tt := range map[string]struct {
		rec  *fetched
		dec  *record.Decoder
		kind record.Kind
	}{
		"the filter's config":          {withForm, filterDec(), record.Filtered},
		"a config without the filter":  {withForm, goldenDecoder(t), record.Event},
		"no form, the filter's config": {noForm, filterDec(), record.Filtered},
		"no form, without the filter":  {noForm, goldenDecoder(t), record.Event},
	} {
		t.Run(name, func(t *testing.T) {
			var d Decoded
			decodeFetched(tt.dec, tt.rec, []string{"calls"}, &d)
			if d.Err != nil || d.Kind != tt.kind || d.In.SourceID != 5 {
				t.Fatalf("decodeRepartition = %v, %v (source %d); want %v", d.Kind, d.Err, d.In.SourceID, tt.kind)
			}
			if tt.kind == record.Event {
				wantIn := d.In
				if _, err := goldenDecoder(t).Decode(&wantIn, &want); err != nil {
					t.Fatal(err)
				}
				d.Rec.Partition, d.Rec.Offset = want.Partition, want.Offset
				if !reflect.DeepEqual(d.Rec, want) {
					t.Errorf("decodeRepartition's record = %+v, want %+v", d.Rec, want)
				}
			}
		})
	}
}
