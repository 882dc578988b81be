package state_test

import (
	"bytes"
	"testing"

	"aggregator/internal/ready"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// TestEncoderRecyclesOnAccept: a commit's records are encoded as
// AppendKey and AppendValue encode them, repairs first as they are; the
// next commit encodes into the same buffer once the last one is
// accepted, and into a new one after Drop (the client may still hold
// the dropped records).
func TestEncoderRecyclesOnAccept(t *testing.T) {
	id, split := groupID("sid", "sid_1")
	live := &windowing.Entry{Kind: windowing.SliceEntry, Partition: 3, ID: id, Split: split, Start: 10_000, Count: 2}
	gone := &windowing.Entry{Kind: windowing.SliceEntry, Partition: 3, ID: id, Split: split, Start: 20_000, Deleted: true}
	var e state.Encoder
	commit := func() []ready.Changelog {
		e.Begin()
		e.Add(ready.Changelog{Partition: 1, Key: []byte("repair"), Value: []byte("v"), Tag: 4})
		e.Entry(live, 7)
		e.Entry(gone, 7)
		return e.Finish()
	}
	recs := commit()
	want := []ready.Changelog{
		{Partition: 1, Key: []byte("repair"), Value: []byte("v"), Tag: 4},
		{Partition: 3, Key: state.AppendKey(nil, live), Value: state.AppendValue(nil, live, 7), Tag: 7},
		{Partition: 3, Key: state.AppendKey(nil, gone), Tag: 7},
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		w := want[i]
		if r.Partition != w.Partition || r.Tag != w.Tag || !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	first := &recs[1].Key[0]
	e.Accept()
	if again := commit(); &again[1].Key[0] != first {
		t.Error("after Accept: the next commit's bytes are in a new buffer, want the accepted one's")
	}
	e.Drop()
	if again := commit(); &again[1].Key[0] == first {
		t.Error("after Drop: the next commit reuses the dropped records' buffer")
	}
}
