package state_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"

	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// codecEntries are entries of every kind and aggregate state, for the
// round trip test and the fuzz seeds.
func codecEntries(t testing.TB) map[string]*windowing.Entry {
	sid, sidSplit := groupID("sid", "sid_1")
	nul, nulSplit := groupID("k", "a\x00b")
	uni, uniSplit := groupID("k", "héllo 世界 🎉")
	slice := func(en windowing.Entry) *windowing.Entry {
		en.Kind, en.ID, en.Split = windowing.SliceEntry, sid, sidSplit
		return &en
	}
	negZero := math.Copysign(0, -1)
	return map[string]*windowing.Entry{
		"count only": slice(windowing.Entry{Start: 10_000, Count: 3}),
		"count zero": slice(windowing.Entry{Start: 0}),
		"sum and avg": slice(windowing.Entry{Start: 5000, Count: 2, Revision: 1,
			Nums: []float64{1.5, -2.25}}),
		"nums special": slice(windowing.Entry{Start: -5000, Count: math.MaxInt64, Revision: math.MaxInt64,
			Nums: []float64{math.NaN(), math.Inf(1), math.Inf(-1), negZero, 0, math.MaxFloat64,
				math.SmallestNonzeroFloat64, -math.MaxFloat64, math.Float64frombits(0x7ff0_0000_0000_0001), math.Float64frombits(0xfff8_0000_0000_0000)}}),
		"picks numeric": slice(windowing.Entry{Start: 1000, Count: 4, Picks: []windowing.Pick{
			{Value: record.Number(42), Time: 1234, Seq: 1},
			{Value: record.Number(negZero), Time: math.MinInt64, Seq: 0},
			{Value: record.Number(math.Inf(-1)), Time: math.MaxInt64, Seq: math.MaxUint64},
			{Value: record.Value{IsNum: true, Num: math.NaN(), Raw: "NaN"}, Time: -1, Seq: 7},
			{Value: record.Number(1e-300), Time: 0, Seq: 1 << 63},
		}}),
		"picks strings": slice(windowing.Entry{Start: 1000, Count: 5, Picks: []windowing.Pick{
			{Value: record.Text(""), Time: 1, Seq: 2},
			{Value: record.Text("héllo 世界 🎉"), Time: -1, Seq: 3},
			{Value: record.Text("a\x00b\n\"q\""), Time: 2, Seq: 4},
			{Value: record.Text("\xff\xfe not UTF-8"), Time: 3, Seq: 5},
			{Value: record.Value{Str: "", Raw: ""}, Time: 4, Seq: 6}, // the zero Value
		}}),
		"sets": slice(windowing.Entry{Start: 2000, Count: 6, Sets: []map[string]struct{}{
			{},
			{"": {}, "\x00": {}, "a\x00b": {}, "\x00\x00\x00": {}},
			{"日本": {}, "sid_1": {}, "🎉": {}, "\xff": {}},
		}}),
		"sketches": slice(windowing.Entry{Start: 3000, Count: 7, Nums: []float64{-3, 1e9}, Sketches: []*ddsketch.DDSketch{
			sketch(t),
			sketch(t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
			sketch(t, -3, -1, 0, 0, 1e-320, 0.5, 1e9, -1e9),
			sketch(t, 42),
		}}),
		"tops": slice(windowing.Entry{Start: 4000, Count: 8, Tops: []map[string]int64{
			{},
			{"\x01?\xf0\x00\x00\x00\x00\x00\x00": 2, "\x02a": 3, "\x02": 1, "\x03true": math.MaxInt64, "\x04[1,2]": 1 << 40},
		}}),
		"every kind": {Kind: windowing.SliceEntry, Partition: math.MaxInt32, ID: uni, Split: uniSplit,
			Start: math.MinInt64, Revision: 3, Count: 9,
			Nums:     []float64{negZero, math.NaN()},
			Picks:    []windowing.Pick{{Value: record.Text(""), Time: 5, Seq: 1}, {Value: record.Number(-1), Time: 6, Seq: 2}},
			Sets:     []map[string]struct{}{{}, {"x\x00": {}}},
			Sketches: []*ddsketch.DDSketch{sketch(t, 0.001, 1000, 123456)},
			Tops:     []map[string]int64{{"\x02x": 4}}},
		"exact quantiles": slice(windowing.Entry{Start: 6000, Count: 3, Nums: []float64{1, 3, 2},
			Sketches: []*ddsketch.DDSketch{sketch(t), sketch(t), sketch(t, 5)},
			Exact:    [][]float64{{3, -1, 0.5}, {}, {}}}),
		"exact quantiles, tops and early mark": slice(windowing.Entry{Start: 6000, Count: 2, Revision: 1, EarlyOnly: true, Changed: true,
			Sketches: []*ddsketch.DDSketch{sketch(t)}, Exact: [][]float64{{math.Inf(1), negZero}},
			Tops: []map[string]int64{{"\x02a": 2}}}),
		"picks of no value": slice(windowing.Entry{Start: 7000, Count: 2, Picks: []windowing.Pick{
			{Value: record.NullValue}, {Value: record.Number(1), Time: 3, Seq: 9}}}),
		"negative partition, max start": slice(windowing.Entry{Partition: -1, Start: math.MaxInt64, Count: 1}),
		"key with NUL":                  {Kind: windowing.SliceEntry, Partition: 3, ID: nul, Split: nulSplit, Start: 7, Count: 1},
		"empty key":                     {Kind: windowing.SliceEntry, Start: 7, Count: 1},
		"key is all sort key":           {Kind: windowing.SliceEntry, ID: "\x02a\x00\x00", Split: 4, Start: 7, Count: 1},
		"window":                        {Kind: windowing.WindowEntry, Partition: 2, ID: sid, Split: sidSplit, Start: -5000, Revision: 3},
		"window fired early only":       {Kind: windowing.WindowEntry, Partition: 2, ID: sid, Split: sidSplit, Start: -5000, Revision: 2, EarlyOnly: true},
		"slice fired early only":        slice(windowing.Entry{Start: 5000, Count: 2, Revision: 4, EarlyOnly: true, Nums: []float64{1}}),
		"slice changed since early":     slice(windowing.Entry{Start: 5000, Count: 3, Revision: 4, EarlyOnly: true, Changed: true}),
		"slice changed, not fired":      slice(windowing.Entry{Start: 5000, Count: 3, Changed: true}),
		"slice early only with tops": slice(windowing.Entry{Start: 5000, Count: 2, Revision: 1, EarlyOnly: true,
			Tops: []map[string]int64{{"\x02a": 2}}}),
		"window max revision": {Kind: windowing.WindowEntry, ID: uni, Split: uniSplit, Start: math.MaxInt64, Revision: math.MaxInt64},
		"window min start":    {Kind: windowing.WindowEntry, ID: nul, Split: nulSplit, Start: math.MinInt64, Revision: 1},
		"session": {Kind: windowing.SessionEntry, Partition: 1, ID: sid, Split: sidSplit, Start: 1000, End: 15_000, Revision: 2, Count: 3,
			Nums: []float64{60}, Picks: []windowing.Pick{{Value: record.Text("x"), Time: 1000, Seq: 4}},
			Sets: []map[string]struct{}{{"a": {}}}, Sketches: []*ddsketch.DDSketch{sketch(t, 10, 20, 30)}},
		"count slice": {Kind: windowing.CountEntry, Partition: 1, ID: sid, Split: sidSplit, Start: 7, Count: 3, Lo: -5, Hi: math.MaxInt64, First: 12,
			Nums: []float64{2}, Tops: []map[string]int64{{"\x02a": 3}}},
		"count key, no window open":  {Kind: windowing.CountEntry, ID: uni, Split: uniSplit, Revision: 41},
		"session at the end of time": {Kind: windowing.SessionEntry, ID: uni, Split: uniSplit, Start: math.MaxInt64 - 1, End: math.MaxInt64, Count: 1},
		"session before the epoch":   {Kind: windowing.SessionEntry, ID: nul, Split: nulSplit, Start: math.MinInt64, End: -5, Count: 1},
	}
}

// TestCodecRoundTrip: an entry written with AppendKey and AppendValue and
// read back by a Restorer is the entry.
func TestCodecRoundTrip(t *testing.T) {
	for name, en := range codecEntries(t) {
		for _, tag := range []uint64{1, 127, 128, 1 << 40, math.MaxUint64 - 1} {
			t.Run(fmt.Sprintf("%s/tag %d", name, tag), func(t *testing.T) {
				got := restore(t, []rec{entryRec(en, tag), posRec(tag, 0)})
				gotDesc := describeAll(got.entries)
				if want := []string{describe(en)}; !slices.Equal(gotDesc, want) {
					t.Errorf("Finish(AppendValue(en, %d)) = %q,\nwant %q", tag, gotDesc, want)
				}
				if got.res.Entries != 1 || len(got.res.Repairs) != 0 || got.res.NextTag != state.NextOwner(tag) {
					t.Errorf("Finish(AppendValue(en, %d)) = {Entries %d, Repairs %d, NextTag %d}, want {1, 0, %d}",
						tag, got.res.Entries, len(got.res.Repairs), got.res.NextTag, state.NextOwner(tag))
				}
			})
		}
	}
}

// TestDecodeReusesEntry: a record decoded into an Entry that held
// another entry (a restore reuses one Entry for every record) is the
// record's entry, nothing of the other left: every field is set.
func TestDecodeReusesEntry(t *testing.T) {
	ens := codecEntries(t)
	for name, en := range ens {
		for other, prev := range ens {
			key, value := state.AppendKey(nil, en), state.AppendValue(nil, en, 1)
			var fresh, reused windowing.Entry
			if err := state.Decode(key, value, &fresh); err != nil {
				t.Fatalf("%s: Decode = %v", name, err)
			}
			if err := state.Decode(state.AppendKey(nil, prev), state.AppendValue(nil, prev, 1), &reused); err != nil {
				t.Fatalf("%s: Decode = %v", other, err)
			}
			reused.End, reused.Deleted, reused.Lo, reused.Hi, reused.First = 7, true, 7, 7, 7
			if err := state.Decode(key, value, &reused); err != nil {
				t.Fatalf("%s after %s: Decode = %v", name, other, err)
			}
			if g, w := describe(&reused), describe(&fresh); g != w || reused.Deleted || reused.End != fresh.End || reused.Lo != fresh.Lo {
				t.Errorf("Decode(%s) into the Entry of %s = %s, want %s", name, other, g, w)
			}
		}
	}
}

// TestCodecTombstone: a tombstone (nil value, tag in TagHeader) after an
// entry deletes it, for every kind of entry.
func TestCodecTombstone(t *testing.T) {
	for name, en := range codecEntries(t) {
		t.Run(name, func(t *testing.T) {
			gone := *en
			gone.Deleted = true
			log := []rec{entryRec(en, 1), posRec(1, 10), entryRec(&gone, 2), posRec(2, 20)}
			got := restore(t, log)
			if len(got.entries) != 0 || len(got.res.Repairs) != 0 || got.res.NextTag != 1<<32 {
				t.Errorf("Finish(entry, tombstone) = {%d entries, %d repairs, NextTag %d}, want {0, 0, 1<<32}",
					len(got.entries), len(got.res.Repairs), got.res.NextTag)
			}
		})
	}
}

func TestCodecPosition(t *testing.T) {
	tests := map[string]struct {
		part int32
		pos  state.Position
		tag  uint64
	}{
		"zero":          {0, state.Position{}, 1},
		"min":           {0, state.Position{Offset: math.MinInt64, MaxTimestamp: math.MinInt64, Watermark: math.MinInt64, Merged: math.MinInt64}, 2},
		"max":           {0, state.Position{Offset: math.MaxInt64, MaxTimestamp: math.MaxInt64, Watermark: math.MaxInt64, Merged: math.MaxInt64}, 3},
		"mixed":         {7, state.Position{Offset: 12345, MaxTimestamp: 1_700_000_000_000, Watermark: -1, Merged: math.MinInt64}, 1 << 40},
		"max partition": {math.MaxInt32, state.Position{Offset: -1, MaxTimestamp: 1, Watermark: math.MaxInt64, Merged: 0}, 127},
		"min partition": {math.MinInt32, state.Position{Offset: 1, MaxTimestamp: -1}, math.MaxUint64 - 1},
		"sources": {3, state.Position{Offset: 9, MaxTimestamp: math.MinInt64, Watermark: 40, Merged: 40, Floor: 40, Sources: watermark.Table{Count: 2,
			Sources: []watermark.Source{{Reported: true, Watermark: 40, Applied: 17}, {Reported: true, Idle: true, Watermark: math.MinInt64, Applied: -1}, {Watermark: math.MaxInt64, Applied: math.MaxInt64}}}}, 5},
		"offsets only":  {0, state.Position{Offset: 1, Sources: watermark.Table{Sources: []watermark.Source{{Watermark: math.MinInt64, Applied: 3}}}}, 1},
		"filtered lead": {2, state.Position{Offset: 4, MaxTimestamp: 1000, Watermark: 0, FilteredLead: 500}, 1},
		"filtered lead from minus infinity": {2, state.Position{Offset: 4, MaxTimestamp: math.MinInt64, Watermark: math.MinInt64,
			FilteredLead: state.LeadOf(math.MinInt64, math.MaxInt64)}, 1},
		"sources and a filtered lead": {3, state.Position{Offset: 9, Sources: watermark.Table{Count: 1, Sources: []watermark.Source{{Reported: true}}}, FilteredLead: 1}, 5},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := state.NewRestorer()
			if err := r.Add(state.PositionKey(nil, tt.part), state.AppendPosition(nil, tt.pos, tt.tag), nil); err != nil {
				t.Fatalf("Add(PositionKey(%d), AppendPosition(%+v, %d)) = %v, want nil", tt.part, tt.pos, tt.tag, err)
			}
			if got, ok := r.Position(); !reflect.DeepEqual(got, tt.pos) || !ok {
				t.Errorf("Position() = %+v, %v, want %+v, true", got, ok, tt.pos)
			}
			res, err := r.Finish(func(*windowing.Entry) error { return nil })
			want := state.Result{Position: tt.pos, HasPosition: true, NextTag: state.NextOwner(tt.tag)}
			if err != nil || !reflect.DeepEqual(res.Position, want.Position) || !res.HasPosition || res.NextTag != want.NextTag || res.Entries != 0 || len(res.Repairs) != 0 {
				t.Errorf("Finish() = %+v, %v, want %+v, nil", res, err, want)
			}
		})
	}
}

// TestCodecPositionBefore: a position written before positions had a
// table of sources (these bytes) still decodes, with a zero table; one
// with a table that does not end where it should is corrupt.
func TestCodecPositionBefore(t *testing.T) {
	old := []byte{1, 3, 10, 1, 79, 0, 0} // tag 3, offset 5, max timestamp -1, watermark -40, merged 0, floor 0
	r := state.NewRestorer()
	if err := r.Add(state.PositionKey(nil, 0), old, nil); err != nil {
		t.Fatalf("Add(old position) = %v", err)
	}
	want := state.Position{Offset: 5, MaxTimestamp: -1, Watermark: -40}
	if got, ok := r.Position(); !reflect.DeepEqual(got, want) || !ok {
		t.Errorf("Position() = %+v, %v, want %+v, true", got, ok, want)
	}
	if got := state.AppendPosition(nil, want, 3); !slices.Equal(got, old) {
		t.Errorf("AppendPosition(%+v) = %v, want the old bytes %v", want, got, old)
	}
	withTable := state.AppendPosition(nil, state.Position{Sources: watermark.Table{Count: 1, Sources: []watermark.Source{{Reported: true}}}}, 1)
	withLead := state.AppendPosition(nil, state.Position{FilteredLead: 3}, 1)
	for name, v := range map[string][]byte{
		"unknown section":      append(slices.Clone(old), 'x'),
		"left over":            append(slices.Clone(withTable), 0),
		"left over the lead":   append(slices.Clone(withLead), 0),
		"a zero lead":          append(slices.Clone(old), 'f', 0),
		"a lead, then a table": append(slices.Clone(withLead), withTable[len(withLead)-2:]...),
		"short table":          withTable[:len(withTable)-1],
		"count above sources":  state.AppendPosition(nil, state.Position{Sources: watermark.Table{Count: 2, Sources: []watermark.Source{{}}}}, 1),
	} {
		r := state.NewRestorer()
		if err := r.Add(state.PositionKey(nil, 0), v, nil); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("Add(%s %v) = %v, want ErrCorrupt", name, v, err)
		}
	}
}

// TestAddCorrupt: records this release cannot read are errors that wrap
// ErrCorrupt, from Add or, for the body of a value, from Finish.
func TestAddCorrupt(t *testing.T) {
	en := codecEntries(t)["every kind"]
	key := state.AppendKey(nil, en)
	value := state.AppendValue(nil, en, 1)
	pos := state.AppendPosition(nil, state.Position{Offset: 5}, 1)
	tests := map[string]rec{
		"empty key":               {key: nil, value: value},
		"short key":               {key: key[:5], value: value},
		"key version 3":           {key: append([]byte{3}, key[1:]...), value: value},
		"generation key, short":   {key: state.GenerationKey(nil, 0, 3)[:13], value: value},
		"generation key, long":    {key: append(state.GenerationKey(nil, 0, 3), 0), value: value},
		"generation key of v2":    {key: append([]byte{2}, state.GenerationKey(nil, 0, 3)[1:]...), value: value},
		"position key of v2":      {key: append([]byte{2}, state.PositionKey(nil, 0)[1:]...), value: pos},
		"v2 key without start":    {key: state.AppendGenerationKey(nil, 3, en)[:21], value: value},
		"unknown kind":            {key: append([]byte{1, 'x'}, key[2:]...), value: value},
		"slice key without start": {key: key[:13], value: value},
		"split past the ID":       {key: append(append([]byte(nil), key[:14]...), 5, 'a'), value: value},
		"split not a varint":      {key: append(append([]byte(nil), key[:14]...), 0x80), value: value},
		"long position key":       {key: append(state.PositionKey(nil, 0), 0), value: pos},
		"value version 2":         {key: key, value: append([]byte{2}, value[1:]...)},
		"empty value":             {key: key, value: []byte{}},
		"value without tag":       {key: key, value: []byte{1}},
		"position truncated":      {key: state.PositionKey(nil, 0), value: pos[:len(pos)-1]},
		"position version 0":      {key: state.PositionKey(nil, 0), value: append([]byte{0}, pos[1:]...)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if err := state.NewRestorer().Add(tt.key, tt.value, tt.tag); !errors.Is(err, state.ErrCorrupt) {
				t.Errorf("Add(%q, %q) = %v, want an error wrapping ErrCorrupt", tt.key, tt.value, err)
			}
		})
	}
}

// TestFinishCorrupt: a value whose header reads but whose body does not
// is an error of Finish that wraps ErrCorrupt.
func TestFinishCorrupt(t *testing.T) {
	en := codecEntries(t)["every kind"]
	key := state.AppendKey(nil, en)
	value := state.AppendValue(nil, en, 1)
	win := codecEntries(t)["window"]
	tests := map[string]rec{
		"truncated":               {key: key, value: value[:len(value)-1]},
		"header only":             {key: key, value: value[:2]},
		"bytes left over":         {key: key, value: append(append([]byte(nil), value...), 0)},
		"huge nums count":         {key: key, value: []byte{1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		"window revision missing": {key: state.AppendKey(nil, win), value: []byte{1, 1}},
		// version, tag 1, revision, count, no nums, picks or sets, one
		// sketch of no bytes: no index mapping.
		"sketch without mapping": {key: key, value: []byte{1, 1, 0, 0, 0, 0, 0, 1, 0}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := state.NewRestorer()
			if err := r.Add(tt.key, tt.value, tt.tag); err != nil {
				t.Fatalf("Add(%q, %q) = %v, want nil", tt.key, tt.value, err)
			}
			if err := r.Add(state.PositionKey(nil, 0), state.AppendPosition(nil, state.Position{}, 1), nil); err != nil {
				t.Fatalf("Add(position) = %v, want nil", err)
			}
			_, err := r.Finish(func(*windowing.Entry) error { return nil })
			if !errors.Is(err, state.ErrCorrupt) {
				t.Errorf("Finish() of %q = %v, want an error wrapping ErrCorrupt", tt.value, err)
			}
		})
	}
}

// TestPositionFilteredLead: a by_key position keeps the latest event time
// of a record its filter rejected as its lead past MaxTimestamp, in a
// trailing section written only when there is one (the bytes of a
// position without it are the ones before it: TestCodecPositionBefore),
// and Latest is the later of the two.
func TestPositionFilteredLead(t *testing.T) {
	tests := map[string]struct{ max, filtered, latest int64 }{
		"none":                  {1000, math.MinInt64, 1000},
		"before the latest":     {1000, 900, 1000},
		"at the latest":         {1000, 1000, 1000},
		"past it":               {1000, 1500, 1500},
		"no accepted record":    {math.MinInt64, -5, -5},
		"from one end to other": {math.MinInt64, math.MaxInt64, math.MaxInt64},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pos := state.Position{Offset: 3, MaxTimestamp: tt.max, FilteredLead: state.LeadOf(tt.max, tt.filtered)}
			if got := pos.Latest(); got != tt.latest {
				t.Errorf("Position{MaxTimestamp: %d, FilteredLead: LeadOf(%d, %d)}.Latest() = %d, want %d", tt.max, tt.max, tt.filtered, got, tt.latest)
			}
			b := state.AppendPosition(nil, pos, 1)
			plain := state.AppendPosition(nil, state.Position{Offset: 3, MaxTimestamp: tt.max}, 1)
			if extra := tt.latest != tt.max; extra == slices.Equal(b, plain) {
				t.Errorf("AppendPosition = %v, without a lead %v: want other bytes only with a lead", b, plain)
			}
		})
	}
}
