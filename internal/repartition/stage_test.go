package repartition_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/watermark"
)

const yaml = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, filter: [{field: kind, equals: click}]}
watermark: {max_out_of_orderness: 1s, idle_timeout: 5s, max_future_skew: 1h}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}]
`

func newStage(t *testing.T, doc string, sources int32, parts ...int32) *repartition.Stage {
	t.Helper()
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	cfg.Source.Partitioning = "repartition" // the mode a Stage runs in
	s, err := repartition.New(repartition.Spec{Config: cfg, Sources: sources})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, p := range parts {
		s.Assign(p, 0)
	}
	return s
}

func input(part int32, off int64, key, value string) *ready.Input {
	return &ready.Input{Topic: "in", Partition: part, KafkaPartition: part, Offset: off, Key: []byte(key), Value: []byte(value), Timestamp: 77}
}

// describe renders a Ready's outputs as one line each.
func describe(rd ready.Ready) []string {
	var out []string
	for _, o := range rd.Outputs {
		switch o.Kind {
		case ready.Repartition:
			if o.Repart.Folded > 0 {
				out = append(out, fmt.Sprintf("group of %d to %d", o.Repart.Folded, o.Repart.Partition))
				continue
			}
			line := "data " + o.Repart.Key + " " + string(o.Repart.In.Value)
			if o.Repart.Filtered {
				line += " filtered"
			}
			if o.Repart.Record == nil {
				line += " without a form"
			}
			out = append(out, line)
		case ready.Marker:
			m := o.Repart.Mark
			wm := fmt.Sprint(m.Watermark)
			if m.Watermark == math.MinInt64 {
				wm = "-inf"
			}
			out = append(out, fmt.Sprintf("marker %d/%d %s%s", m.Source, m.Count, wm, map[bool]string{true: " idle"}[m.Idle]))
		case ready.DeadLetter:
			var de *record.DecodeError
			errors.As(o.Event.Err, &de)
			out = append(out, "dead "+de.Reason+" "+string(o.Event.In.Value))
		default:
			out = append(out, "unexpected kind")
		}
	}
	return out
}

// TestStage: format 2 filters in stage 1; format 3 (the default)
// forwards the record its filter rejects, marked filtered.
func TestStage(t *testing.T) {
	for _, format := range []int32{repartition.Format2, repartition.Format3} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) { testStage(t, format) })
	}
}

func testStage(t *testing.T, format int32) {
	const now = 1_000_000
	s := newStage(t, yaml+fmt.Sprintf("state: {repartition_format: %d}\n", format), 3, 0, 1)
	view, viewData := repartition.Filtered, []string(nil)
	if format == repartition.Format3 {
		view, viewData = repartition.Forwarded, []string{`data {"user":"b"} {"user":"b","t":7000,"kind":"view"} filtered`}
	}
	steps := []struct {
		in      *ready.Input
		want    repartition.Route
		applied bool
	}{
		{input(0, 10, "r1", `{"user":"a","t":5000,"kind":"click"}`), repartition.Forwarded, true},
		{input(0, 11, "r2", `{"user":"b","t":7000,"kind":"view"}`), view, true},
		{input(0, 12, "r3", `{"user":"b","t":"x","kind":"click"}`), repartition.DeadLetter, true},
		{input(0, 13, "r4", `{"user":"b","t":99999999999,"kind":"click"}`), repartition.DeadLetter, true},
		{input(0, 11, "r2", `{"user":"b","t":7000,"kind":"click"}`), 0, false}, // fetched again
		{input(1, 4, "r5", `{"user":"b","t":3000,"kind":"click"}`), repartition.Forwarded, true},
		{input(2, 0, "r6", `{"user":"c","t":3000,"kind":"click"}`), 0, false}, // not assigned
	}
	for i, st := range steps {
		if got, applied := s.Process(st.in, now); got != st.want || applied != st.applied {
			t.Errorf("%d: Process(%s) = %d, %v, want %d, %v", i, st.in.Value, got, applied, st.want, st.applied)
		}
	}
	if got := describe(s.Step(now)); !slices.Equal(got, slices.Concat([]string{
		`data {"user":"a"} {"user":"a","t":5000,"kind":"click"}`}, viewData, []string{
		`dead bad_timestamp {"user":"b","t":"x","kind":"click"}`,
		`dead future_timestamp {"user":"b","t":99999999999,"kind":"click"}`,
		`data {"user":"b"} {"user":"b","t":3000,"kind":"click"}`,
	})) {
		t.Errorf("Step outputs =\n%s", strings.Join(got, "\n"))
	}
	rd := s.Commit(now)
	if got := describe(rd); !slices.Equal(got, []string{"marker 0/3 3999", "marker 1/3 1999"}) {
		t.Errorf("the first commit's outputs = %q, want a marker of each partition", got)
	}
	if want := []ready.Offset{{Partition: 0, Offset: 14}, {Partition: 1, Offset: 5}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("offsets = %+v, want %+v", rd.Offsets, want)
	}
	s.Accept()
	// Nothing moved: no marker until the heartbeat.
	if got := describe(s.Commit(now + watermark.Heartbeat - 1)); len(got) != 0 {
		t.Errorf("nothing changed: outputs = %q, want none", got)
	}
	if got := describe(s.Commit(now + watermark.Heartbeat)); len(got) != 2 {
		t.Errorf("heartbeat: outputs = %q, want both markers", got)
	}
	// A record moves partition 1: its data, then its marker.
	s.Process(input(1, 5, "r7", `{"user":"a","t":9000,"kind":"click"}`), now+watermark.Heartbeat)
	if got := describe(s.Commit(now + watermark.Heartbeat + 1)); !slices.Equal(got, []string{
		`data {"user":"a"} {"user":"a","t":9000,"kind":"click"}`, "marker 1/3 7999"}) {
		t.Errorf("partition 1 moved: outputs = %q", got)
	}
}

// TestStageForwardsFiltered: in format 3 a record the filter rejects is
// forwarded with its whole decoding and the verdict, which reads back
// as Filtered under the config and as the record under a config without
// the filter; it moves no watermark. One whose aggregate value does not
// decode goes without a form; one without an event time or group key (it
// has no partition) or past the future guard is filtered in stage 1, as
// the config's filter says.
func TestStageForwardsFiltered(t *testing.T) {
	const doc = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, filter: [{field: kind, equals: click}]}
watermark: {max_out_of_orderness: 1s, idle_timeout: 5s, max_future_skew: 1h}
window: {type: tumbling, size: 2s}
aggregates: [{name: total, fn: sum, field: v}]
`
	const now = 1_000_000
	s := newStage(t, doc, 1, 0)
	steps := []struct {
		value string
		want  repartition.Route
	}{
		{`{"user":"a","t":5000,"kind":"click","v":1}`, repartition.Forwarded},
		{`{"user":"b","t":9000,"kind":"view","v":2}`, repartition.Forwarded},
		{`{"user":"b","t":99999999999,"kind":"view","v":2}`, repartition.Filtered}, // past the future guard: a dead letter for any filter that took it
		{`{"user":"c","t":6000,"kind":"view","v":"x"}`, repartition.Forwarded},     // its sum's value does not decode
		{`{"user":"c","kind":"view","v":1}`, repartition.Filtered},                 // no event time
		{`{"t":6000,"kind":"view","v":1}`, repartition.Filtered},                   // no group key
		{`{"user":"c","t":"x","kind":"click","v":1}`, repartition.DeadLetter},
	}
	for i, st := range steps {
		if got, applied := s.Process(input(0, int64(i), "r", st.value), now); got != st.want || !applied {
			t.Errorf("%d: Process(%s) = %d, %v, want %d", i, st.value, got, applied, st.want)
		}
	}
	rd := s.Step(now)
	if got := describe(rd); !slices.Equal(got, []string{
		`data {"user":"a"} {"user":"a","t":5000,"kind":"click","v":1}`,
		`data {"user":"b"} {"user":"b","t":9000,"kind":"view","v":2} filtered`,
		`data {"user":"c"} {"user":"c","t":6000,"kind":"view","v":"x"} filtered without a form`,
		`dead bad_timestamp {"user":"c","t":"x","kind":"click","v":1}`,
	}) {
		t.Fatalf("Step outputs =\n%s", strings.Join(got, "\n"))
	}
	for i, o := range rd.Outputs[1:3] {
		if in := o.Repart.In; in.Before != 3999 || in.After != 3999 {
			t.Errorf("filtered record %d: watermark before %d, after %d; want 3999 (the click's) both", i, in.Before, in.After)
		}
	}
	if wm, _ := s.PartitionWatermark(0); wm != 3999 {
		t.Errorf("watermark = %d, want 3999: filtered records do not move it", wm)
	}
	cfg, err := config.Parse([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	own, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source.Filter = nil
	open, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rd.Outputs[1].Repart
	var in ready.Input
	form, filtered, err := repartition.ParseValue(r.Encoded, 0, 0, nil, &in)
	if err != nil || !filtered || form == nil {
		t.Fatalf("ParseValue = %q, %v, %v; want a form, filtered", form, filtered, err)
	}
	var rec record.Record
	if kind, err := repartition.Decode(own, form, filtered, []byte(r.Key), &in, &rec); kind != record.Filtered || err != nil {
		t.Errorf("under the config: %v, %v; want Filtered", kind, err)
	}
	if kind, err := repartition.Decode(open, form, filtered, []byte(r.Key), &in, &rec); kind != record.Event || err != nil || rec.Time != 9000 || rec.Values[0].Num != 2 {
		t.Errorf("under a config without the filter: %v, %v, %+v; want the event", kind, err, rec)
	}
	r = rd.Outputs[2].Repart
	if form, filtered, err = repartition.ParseValue(r.Encoded, 0, 0, nil, &in); err != nil || !filtered || form != nil {
		t.Fatalf("ParseValue = %q, %v, %v; want no form, filtered", form, filtered, err)
	}
	if kind, err := repartition.Decode(open, form, filtered, []byte(r.Key), &in, &rec); kind != record.Event || err == nil {
		t.Errorf("without a form, under a config without the filter: %v, %v; want its value's dead letter", kind, err)
	}
}

func TestStageIdleAndSources(t *testing.T) {
	s := newStage(t, yaml, 2, 0, 1)
	s.Process(input(0, 0, "", `{"user":"a","t":5000,"kind":"click"}`), 0)
	s.Fetched(0, 1, 0)
	s.SetCaughtUp(1, true, 0)
	s.Commit(0)
	s.Tick(5_000)
	if got := describe(s.Commit(5_000)); !slices.Equal(got, []string{"marker 0/2 3999 idle", "marker 1/2 -inf idle"}) {
		t.Errorf("both caught up for idle_timeout: outputs = %q", got)
	}
	if wm, idle := s.PartitionWatermark(0); wm != 3999 || !idle {
		t.Errorf("PartitionWatermark(0) = %d, %v, want 3999, true", wm, idle)
	}
	s.SetSources(4)
	s.Process(input(1, 0, "", `{"user":"a","t":8000,"kind":"click"}`), 6_000)
	// A new count announces every partition again: readers of it wait for all.
	if got := describe(s.Commit(6_000)); !slices.Equal(got, []string{`data {"user":"a"} {"user":"a","t":8000,"kind":"click"}`, "marker 0/4 3999 idle", "marker 1/4 6999"}) {
		t.Errorf("partition 1 active again, 4 sources: outputs = %q", got)
	}
	s.Revoke(0)
	if got := s.Partitions(); !slices.Equal(got, []int32{1}) {
		t.Errorf("Partitions() after Revoke(0) = %v, want [1]", got)
	}
	if _, applied := s.Process(input(0, 1, "", `{"user":"a","t":8000,"kind":"click"}`), 6_000); applied {
		t.Errorf("a record of a revoked partition was applied")
	}
	if rd := s.Commit(7_000); len(rd.Offsets) != 1 || rd.Offsets[0].Partition != 1 {
		t.Errorf("offsets after Revoke(0) = %+v, want partition 1's only", rd.Offsets)
	}
}

// TestStageAbort: an abort drops what was not handed over, starts the
// generators again (the shell rewinds to the committed offsets) and
// announces every partition again.
func TestStageAbort(t *testing.T) {
	s := newStage(t, yaml, 1, 0)
	s.Process(input(0, 0, "", `{"user":"a","t":5000,"kind":"click"}`), 0)
	s.Commit(0)
	s.Accept()
	s.Process(input(0, 1, "", `{"user":"a","t":9000,"kind":"click"}`), 1)
	s.Abort(2)
	if rd := s.Commit(3); len(rd.Outputs) != 1 || rd.Outputs[0].Kind != ready.Marker || len(rd.Offsets) != 0 {
		t.Errorf("after Abort, before any record: Ready = %q, offsets %+v, want a marker at -inf and no offset", describe(rd), rd.Offsets)
	}
	if _, applied := s.Process(input(0, 1, "", `{"user":"a","t":9000,"kind":"click"}`), 4); !applied {
		t.Fatalf("after Abort the record at the committed offset was not applied")
	}
	if got := describe(s.Commit(5)); !slices.Equal(got, []string{`data {"user":"a"} {"user":"a","t":9000,"kind":"click"}`, "marker 0/1 7999"}) {
		t.Errorf("after Abort: outputs = %q", got)
	}
}

func TestStagePunctuated(t *testing.T) {
	s := newStage(t, `
source: {key: [user], timestamp: {field: t, layout: unix_ms}}
watermark: {strategy: punctuated, marker_field: wm}
window: {type: tumbling, size: 2s}
aggregates: [{name: n, fn: count}]
`, 1, 0)
	if got, _ := s.Process(input(0, 0, "", `{"wm":4000}`), 0); got != repartition.Marker {
		t.Fatalf("a marker record: Process = %d, want Marker", got)
	}
	s.Process(input(0, 1, "", `{"user":"a","t":9000}`), 0)
	if got := describe(s.Commit(0)); !slices.Equal(got, []string{`data {"user":"a"} {"user":"a","t":9000}`, "marker 0/1 4000"}) {
		t.Errorf("outputs = %q: the marker record is not forwarded, and sets the watermark", got)
	}
}

func TestCodec(t *testing.T) {
	ins := map[string]ready.Input{
		"keyed": {Topic: "orders", Partition: 7, KafkaPartition: 3, Offset: 1 << 40, Key: []byte("req-1"), Timestamp: -5,
			Sources: 4, Before: math.MinInt64, After: 1_700_000_000_000},
		"null key": {Topic: "", Partition: 0, KafkaPartition: 0, Offset: 0, Key: nil, Timestamp: math.MaxInt64, Sources: 1, Before: 7, After: 7},
		"empty key": {Topic: "t", Partition: math.MaxInt32, KafkaPartition: math.MaxInt32, Offset: math.MaxInt64,
			Key: []byte{}, Timestamp: math.MinInt64, Sources: math.MaxInt32, Before: math.MinInt64, After: math.MaxInt64},
	}
	for name, in := range ins {
		t.Run(name, func(t *testing.T) {
			var got ready.Input
			m, marker, err := repartition.Parse(repartition.AppendData(nil, &in), []byte("v"), 2, 99, []string{"orders"}, &got)
			want := in
			want.Partition, want.SourceID, want.RepartitionOffset, want.Value = 2, in.Partition, 99, []byte("v")
			if err != nil || marker || m != (watermark.Mark{}) || got.Topic != want.Topic || got.Partition != 2 ||
				got.SourceID != want.SourceID || got.KafkaPartition != want.KafkaPartition || got.Offset != want.Offset ||
				got.Timestamp != want.Timestamp || got.Sources != in.Sources || got.Before != in.Before || got.After != in.After ||
				got.RepartitionOffset != 99 || string(got.Value) != "v" ||
				(got.Key == nil) != (in.Key == nil) || string(got.Key) != string(in.Key) {
				t.Errorf("Parse(AppendData(%+v)) = %+v, %v, %v, want %+v", in, got, marker, err, want)
			}
		})
	}
	for _, m := range []watermark.Mark{{Source: 0, Count: 1, Watermark: math.MinInt64}, {Source: 63, Count: 64, Watermark: 1_700_000_000_000, Idle: true}} {
		var in ready.Input
		if got, marker, err := repartition.Parse(repartition.AppendMarker(nil, m), nil, 0, 0, nil, &in); err != nil || !marker || got != m {
			t.Errorf("Parse(AppendMarker(%+v)) = %+v, %v, %v", m, got, marker, err)
		}
	}
	data := repartition.AppendData(nil, &ready.Input{Topic: "orders", Key: []byte("k")})
	mark := repartition.AppendMarker(nil, watermark.Mark{Count: 2})
	for name, h := range map[string][]byte{
		"empty": nil, "version 2": append([]byte{2}, data[1:]...), "unknown kind": append([]byte{1, 'x'}, data[2:]...),
		"short data": data[:6], "short marker": mark[:len(mark)-1], "marker left over": append(mark, 0),
		"bad idle": append(mark[:len(mark)-1:len(mark)-1], 2),
	} {
		var in ready.Input
		if _, _, err := repartition.Parse(h, nil, 0, 0, nil, &in); !errors.Is(err, repartition.ErrCorrupt) {
			t.Errorf("Parse(%s %q) = %v, want ErrCorrupt", name, h, err)
		}
	}
}

// TestStageLagAndUnfetched: a partition no fetch has returned a record of
// is listed for the shell's end-offset check, and its lag is unknown
// until a fetch says where its log ends.
func TestStageLagAndUnfetched(t *testing.T) {
	s := newStage(t, yaml, 2, 0, 1)
	if got := s.Unfetched(); len(got) != 2 || got[0] != -1 || got[1] != -1 {
		t.Errorf("fresh: Unfetched() = %v, want both at -1", got)
	}
	if _, ok := s.Lag(0); ok {
		t.Errorf("fresh: Lag(0) is known")
	}
	s.Process(input(0, 3, "", `{"user":"a","t":5000,"kind":"click"}`), 0)
	s.Fetched(0, 10, 0)
	if got := s.Unfetched(); len(got) != 1 || got[1] != -1 {
		t.Errorf("partition 0 fetched: Unfetched() = %v, want partition 1 only", got)
	}
	if lag, ok := s.Lag(0); !ok || lag != 6 {
		t.Errorf("Lag(0) = %d, %v, want 6, true (position 4, log end 10)", lag, ok)
	}
	if _, ok := s.Lag(7); ok {
		t.Errorf("Lag of an unassigned partition is known")
	}
	if s.Sources() != 2 {
		t.Errorf("Sources() = %d, want 2", s.Sources())
	}
}

// TestStageSkip: a transaction's control record of an input partition
// moves its position past it (the commit's offset, and a partition read
// to its end lags by nothing); one behind the position, or of a partition
// not assigned, changes nothing.
func TestStageSkip(t *testing.T) {
	s := newStage(t, yaml, 2, 0)
	s.Process(input(0, 0, "r0", `{"user":"a","kind":"click","t":1000}`), 0)
	s.Skip(0, 1)
	s.Skip(0, 0)
	s.Skip(1, 5)
	rd := s.Commit(0)
	if want := []ready.Offset{{Partition: 0, Offset: 2}}; !slices.Equal(rd.Offsets, want) {
		t.Errorf("Commit().Offsets = %+v, want %+v", rd.Offsets, want)
	}
	s.Fetched(0, 2, 0)
	if lag, ok := s.Lag(0); lag != 0 || !ok {
		t.Errorf("Lag(0) = %d, %v, want 0, true (read to its log end)", lag, ok)
	}
}

// TestStageRecordForm: a forwarded record carries its compact form, which
// reads back as the record stage 1 decoded, and costs no allocation of its
// own (forms and Reparts are cut from chunks).
func TestStageRecordForm(t *testing.T) {
	s := newStage(t, yaml, 1, 0)
	in := input(0, 0, "r", `{"user":"a\"b","t":5000,"kind":"click"}`)
	s.Process(in, 0)
	rd := s.Step(0)
	if len(rd.Outputs) != 1 || rd.Outputs[0].Repart == nil {
		t.Fatalf("outputs = %v, want one repartition record", describe(rd))
	}
	r := rd.Outputs[0].Repart
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var want, got record.Record
	if _, err := dec.Decode(in, &want); err != nil {
		t.Fatal(err)
	}
	if _, err := dec.DecodeCompact([]byte(r.Key), r.Record, in, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the form reads back as %+v, %v, want %+v", got, err, want)
	}
	off := int64(1)
	in = input(0, 0, "r", `{"user":"a","t":5000,"kind":"click"}`) // an escaped key costs its decoding an allocation
	allocs := testing.AllocsPerRun(2000, func() {
		in.Offset, off = off, off+1
		s.Process(in, 0)
		if off%100 == 0 {
			s.Step(0)
		}
	})
	if allocs > 0.05 {
		t.Errorf("Process: %v allocations per forwarded record, want at most 0.05", allocs)
	}
}

// TestCodecValue: a format 2 or 3 value reads back as the input record
// it was made from, its compact form (format 3: none, or the filter's
// verdict) and its value; a cut or foreign one is ErrCorrupt.
func TestCodecValue(t *testing.T) {
	ins := map[string]ready.Input{
		"keyed": {Topic: "orders", Partition: 7, KafkaPartition: 3, Offset: 1 << 40, Key: []byte("req-1"), Value: []byte(`{"a":1}`),
			Timestamp: -5, Sources: 4, Before: math.MinInt64, After: 1_700_000_000_000},
		"null key": {Topic: "", Key: nil, Value: []byte("v"), Timestamp: math.MaxInt64, Sources: 1, Before: 7, After: 7},
		"empty key and value": {Topic: "t", Partition: math.MaxInt32, KafkaPartition: math.MaxInt32, Offset: math.MaxInt64,
			Key: []byte{}, Value: []byte{}, Timestamp: math.MinInt64, Sources: math.MaxInt32, Before: math.MinInt64, After: math.MaxInt64},
	}
	for name, in := range ins {
		for _, v := range []struct {
			name     string
			form     []byte
			filtered bool
			append   func([]byte, *ready.Input, []byte, bool) []byte
		}{
			{"format 2", []byte("form"), false, func(dst []byte, in *ready.Input, form []byte, _ bool) []byte {
				return repartition.AppendValue(dst, in, form)
			}},
			{"format 3", []byte("form"), false, repartition.AppendValue3},
			{"format 3 filtered", []byte("form"), true, repartition.AppendValue3},
			{"format 3 filtered without a form", nil, true, repartition.AppendValue3},
		} {
			t.Run(name+"/"+v.name, func(t *testing.T) {
				value := v.append(nil, &in, v.form, v.filtered)
				if len(value) > repartition.ValueSize(&in, v.form) {
					t.Errorf("%s wrote %d bytes, more than ValueSize's %d", v.name, len(value), repartition.ValueSize(&in, v.form))
				}
				var got ready.Input
				form, filtered, err := repartition.ParseValue(value, 2, 99, []string{"orders"}, &got)
				want := in
				want.Partition, want.SourceID, want.RepartitionOffset = 2, in.Partition, 99
				if err != nil || string(form) != string(v.form) || (form == nil) != (v.form == nil) || filtered != v.filtered || !reflect.DeepEqual(got, want) {
					t.Errorf("ParseValue(%s(%+v)) = %+v, %q, %v, %v, want %+v", v.name, in, got, form, filtered, err, want)
				}
			})
		}
	}
	in := ready.Input{Topic: "orders", Key: []byte("k"), Value: []byte("v")}
	value := repartition.AppendValue(nil, &in, []byte("form"))
	for name, v := range map[string][]byte{
		"empty": nil, "format 1 value": []byte(`{"a":1}`), "a marker's kind": append([]byte{2, 'm'}, value[2:]...),
		"cut in the key": value[:len(value)-len("formv")-2], "cut in the form": value[:len(value)-3], "bad key flag": append(value[:16:16], 7),
		"format 4":           append([]byte{4}, value[1:]...),
		"format 3 bad flags": repartition.AppendValue3(nil, &in, []byte("form"), false)[:2:2],
		"format 3 flag 2":    append([]byte{3, 'd', 2}, value[2:]...),
	} {
		var got ready.Input
		if _, _, err := repartition.ParseValue(v, 0, 0, nil, &got); !errors.Is(err, repartition.ErrCorrupt) {
			t.Errorf("ParseValue(%s %q) = %v, want ErrCorrupt", name, v, err)
		}
	}
}

// TestStageEncoded: the stage hands the writer its records encoded: a
// data record of format 2 as a value that reads back as the input and
// its compact form, of format 1 as the header value beside the input
// value, a marker as the header value; the writer writes those bytes as
// they are.
func TestStageEncoded(t *testing.T) {
	for _, format := range []int32{repartition.Format3, repartition.Format2, repartition.Format1} {
		t.Run(fmt.Sprint("format ", format), func(t *testing.T) {
			s := newStage(t, yaml+fmt.Sprintf("state: {repartition_format: %d}\n", format), 3, 1)
			in := input(1, 41, "r", `{"user":"a","t":5000,"kind":"click"}`)
			s.Process(in, 0)
			rd := s.Commit(0)
			if len(rd.Outputs) != 2 || rd.Outputs[0].Kind != ready.Repartition || rd.Outputs[1].Kind != ready.Marker {
				t.Fatalf("outputs = %v, want a data record and a marker", describe(rd))
			}
			r := rd.Outputs[0].Repart
			var got ready.Input
			var form []byte
			var err error
			if format == repartition.Format1 {
				if r.Header != repartition.Header {
					t.Fatalf("format 1: header %q, want %q", r.Header, repartition.Header)
				}
				_, _, err = repartition.Parse(r.Encoded, r.In.Value, 0, 0, nil, &got)
				form = r.Record
			} else {
				if r.Header != "" {
					t.Fatalf("format 2: header %q, want none", r.Header)
				}
				var filtered bool
				form, filtered, err = repartition.ParseValue(r.Encoded, 0, 0, nil, &got)
				if filtered {
					t.Errorf("an accepted record reads back as filtered")
				}
			}
			if err != nil || got.SourceID != 1 || got.Offset != 41 || string(got.Key) != "r" || got.Sources != 3 ||
				got.After != r.In.After || got.Before != r.In.Before || string(got.Value) != string(in.Value) || string(form) != string(r.Record) {
				t.Errorf("data record reads back as %+v, form %v, %v", got, form, err)
			}
			mk := rd.Outputs[1].Repart
			m, marker, err := repartition.Parse(mk.Encoded, nil, 0, 0, nil, &got)
			if mk.Header != repartition.Header || err != nil || !marker || m != mk.Mark {
				t.Errorf("marker: header %q, reads back as %+v, %v, %v, want %+v", mk.Header, m, marker, err, mk.Mark)
			}
		})
	}
}

// A format 3 data record's value as this release (the one that added
// format 3) writes it: the golden input with the form 01 02 03, accepted,
// filtered, and filtered without a form. These bytes are the format's
// contract with the releases that read it: never update them.
var goldenV3 = map[string]string{
	"accepted":                "0364000501a410d09882d0f26f08808982d0f26f801b0563616c6c7301057265712d39030102037b22736964223a227369645f31222c2274223a313932323335303230343435362c2276223a2278227d",
	"filtered":                "0364010501a410d09882d0f26f08808982d0f26f801b0563616c6c7301057265712d39030102037b22736964223a227369645f31222c2274223a313932323335303230343435362c2276223a2278227d",
	"filtered without a form": "0364010501a410d09882d0f26f08808982d0f26f801b0563616c6c7301057265712d39007b22736964223a227369645f31222c2274223a313932323335303230343435362c2276223a2278227d",
}

// TestCodecGoldenV3: format 3 values are written as the golden bytes and
// the golden bytes read back as what was written.
func TestCodecGoldenV3(t *testing.T) {
	in := ready.Input{Topic: "calls", Partition: 5, KafkaPartition: 1, Offset: 1042, Key: []byte("req-9"),
		Value: []byte(`{"sid":"sid_1","t":1922350204456,"v":"x"}`), Timestamp: 1_922_350_204_456,
		Sources: 8, Before: 1_922_350_200_000, After: 1_922_350_203_456}
	for name, golden := range goldenV3 {
		t.Run(name, func(t *testing.T) {
			form, filtered := []byte{1, 2, 3}, name != "accepted"
			if name == "filtered without a form" {
				form = nil
			}
			if got := hex.EncodeToString(repartition.AppendValue3(nil, &in, form, filtered)); got != golden {
				t.Errorf("AppendValue3 = %s, want the golden %s", got, golden)
			}
			b, err := hex.DecodeString(golden)
			if err != nil {
				t.Fatal(err)
			}
			var got ready.Input
			gotForm, gotFiltered, err := repartition.ParseValue(b, 2, 7, []string{"calls"}, &got)
			want := in
			want.Partition, want.SourceID, want.RepartitionOffset = 2, 5, 7
			if err != nil || !reflect.DeepEqual(got, want) || string(gotForm) != string(form) || (gotForm == nil) != (form == nil) || gotFiltered != filtered {
				t.Errorf("ParseValue(golden) = %+v, %v, %v, %v; want %+v, %v, %v", got, gotForm, gotFiltered, err, want, form, filtered)
			}
		})
	}
}

// TestStageForwardsUndecoded: with format 3 a record the filter accepts
// whose aggregate value does not decode is forwarded without a form, not
// filtered, moving no watermark, for stage 2 to decide per generation;
// one whose time or key does not read, or that the future guard refuses,
// stays a dead letter of stage 1, and format 2 dead-letters them all.
func TestStageForwardsUndecoded(t *testing.T) {
	const doc = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, filter: [{field: kind, equals: click}]}
watermark: {max_out_of_orderness: 1s, idle_timeout: 5s, max_future_skew: 1h}
window: {type: tumbling, size: 2s}
aggregates: [{name: total, fn: sum, field: v}]
`
	const now = 1_000_000
	values := []string{
		`{"user":"a","t":5000,"kind":"click","v":1}`,
		`{"user":"b","t":9000,"kind":"click","v":"x"}`,        // its sum's value does not decode
		`{"user":"b","t":99999999999,"kind":"click","v":"x"}`, // nor does its time pass the future guard
		`{"user":"b","t":"x","kind":"click","v":1}`,           // no event time
		`{"t":6000,"kind":"click","v":"x"}`,                   // no group key
	}
	tests := map[string]struct {
		format int32
		routes []repartition.Route
		want   []string
	}{
		"format 3": {3, []repartition.Route{repartition.Forwarded, repartition.Forwarded, repartition.DeadLetter, repartition.DeadLetter, repartition.DeadLetter}, []string{
			`data {"user":"a"} {"user":"a","t":5000,"kind":"click","v":1}`,
			`data {"user":"b"} {"user":"b","t":9000,"kind":"click","v":"x"} without a form`,
			`dead non_numeric {"user":"b","t":99999999999,"kind":"click","v":"x"}`,
			`dead bad_timestamp {"user":"b","t":"x","kind":"click","v":1}`,
			`dead missing_key {"t":6000,"kind":"click","v":"x"}`,
		}},
		"format 2": {2, []repartition.Route{repartition.Forwarded, repartition.DeadLetter, repartition.DeadLetter, repartition.DeadLetter, repartition.DeadLetter}, []string{
			`data {"user":"a"} {"user":"a","t":5000,"kind":"click","v":1}`,
			`dead non_numeric {"user":"b","t":9000,"kind":"click","v":"x"}`,
			`dead non_numeric {"user":"b","t":99999999999,"kind":"click","v":"x"}`,
			`dead bad_timestamp {"user":"b","t":"x","kind":"click","v":1}`,
			`dead missing_key {"t":6000,"kind":"click","v":"x"}`,
		}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := newStage(t, fmt.Sprintf("%sstate: {repartition_format: %d}\n", doc, tt.format), 1, 0)
			for i, v := range values {
				if got, applied := s.Process(input(0, int64(i), "r", v), now); got != tt.routes[i] || !applied {
					t.Errorf("%d: Process(%s) = %d, %v, want %d", i, v, got, applied, tt.routes[i])
				}
			}
			rd := s.Step(now)
			if got := describe(rd); !slices.Equal(got, tt.want) {
				t.Fatalf("Step outputs =\n%s", strings.Join(got, "\n"))
			}
			if wm, _ := s.PartitionWatermark(0); wm != 3999 {
				t.Errorf("watermark = %d, want 3999: records that did not decode do not move it", wm)
			}
			if tt.format != 3 {
				return
			}
			r := rd.Outputs[1].Repart
			if in := r.In; in.Before != 3999 || in.After != 3999 {
				t.Errorf("watermark before %d, after %d; want 3999 both", in.Before, in.After)
			}
			cfg, err := config.Parse([]byte(doc), nil)
			if err != nil {
				t.Fatal(err)
			}
			own, err := record.NewDecoder(cfg.RecordSpec(), nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Aggregates[0].Fn = "last" // another generation's aggregate, which reads text
			other, err := record.NewDecoder(cfg.RecordSpec(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var in ready.Input
			form, filtered, err := repartition.ParseValue(r.Encoded, 0, 0, nil, &in)
			if err != nil || filtered || form != nil {
				t.Fatalf("ParseValue = %q, %v, %v; want no form, not filtered", form, filtered, err)
			}
			if in.Topic != "in" || in.KafkaPartition != 0 || in.Offset != 1 || string(in.Value) != values[1] {
				t.Errorf("ParseValue: source %s[%d]@%d %s, want in[0]@1 and the input value", in.Topic, in.KafkaPartition, in.Offset, in.Value)
			}
			var rec record.Record
			var de *record.DecodeError
			if kind, err := repartition.Decode(own, form, filtered, []byte(r.Key), &in, &rec); kind != record.Event || !errors.As(err, &de) || de.Reason != record.ReasonNonNumeric {
				t.Errorf("under the config: %v, %v; want its non_numeric dead letter", kind, err)
			}
			if kind, err := repartition.Decode(other, form, filtered, []byte(r.Key), &in, &rec); kind != record.Event || err != nil || rec.Time != 9000 || rec.Key != `{"user":"b"}` {
				t.Errorf("under a config whose aggregate reads text: %v, %v, %+v; want the event", kind, err, rec)
			}
		})
	}
}
