package state_test

import (
	"errors"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/watermark"
	"aggregator/internal/windowing"
)

// FuzzRestorerAdd: no record makes a Restorer panic; the errors of Add
// and Finish wrap ErrCorrupt; a repair is a record Add reads, tagged
// NextTag; and an entry Finish hands out is written and read back as is.
func FuzzRestorerAdd(f *testing.F) {
	for _, en := range codecEntries(f) {
		f.Add(state.AppendKey(nil, en), state.AppendValue(nil, en, 3), []byte(nil), false, uint64(3))
		f.Add(state.AppendKey(nil, en), state.AppendValue(nil, en, 4), []byte(nil), false, uint64(3)) // cut short
		f.Add(state.AppendKey(nil, en), []byte(nil), state.AppendTag(nil, 3), true, uint64(3))
		f.Add(state.AppendKey(nil, en), []byte(nil), state.AppendTag(nil, 9), true, uint64(3))
	}
	f.Add(state.PositionKey(nil, 0), state.AppendPosition(nil, state.Position{Offset: 5, Watermark: -1}, 3), []byte(nil), false, uint64(4))
	f.Add(state.PositionKey(nil, 0), state.AppendPosition(nil, state.Position{Offset: 5, Sources: watermark.Table{Count: 1,
		Sources: []watermark.Source{{Reported: true, Watermark: 9, Applied: 4}, {Watermark: -1, Applied: 2}}}}, 3), []byte(nil), false, uint64(4))
	f.Add(state.PositionKey(nil, 0), []byte(nil), []byte(nil), true, uint64(1))
	// a generation's record and entry (docs/design.md#generations-in-the-changelog)
	f.Add(state.GenerationKey(nil, 0, 3), state.AppendGeneration(nil, state.Generation{Version: 3, Cutover: 5, LegacyKeys: true, Settings: []byte("s")}, 3), []byte(nil), false, uint64(3))
	f.Add(state.GenerationKey(nil, 0, 3), []byte(nil), state.AppendTag(nil, 3), true, uint64(3))
	for _, en := range codecEntries(f) {
		f.Add(state.AppendGenerationKey(nil, 3, en), state.AppendValue(nil, en, 3), []byte(nil), false, uint64(3))
	}
	f.Add([]byte{}, []byte{}, []byte{}, false, uint64(0))
	// the committed state the fuzzed record meets: tag 1, and a key
	// of its own at tag 2
	prelude := []rec{put("a", 0, 1, 1), fired("a", 0, 1, 1), posRec(1, 10), put("a", 0, 2, 2), posRec(2, 20)}
	f.Fuzz(func(t *testing.T, key, value, tag []byte, tombstone bool, posTag uint64) {
		if tombstone {
			value = nil
		}
		r := state.NewRestorer()
		for _, x := range prelude {
			if err := r.Add(x.key, x.value, x.tag); err != nil {
				t.Fatalf("Add(%v) = %v", x, err)
			}
		}
		for range 2 { // the second time, a record of the same tag
			if err := r.Add(key, value, tag); err != nil && !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("Add(%q, %q, %q) = %v, want nil or an error wrapping ErrCorrupt", key, value, tag, err)
			}
		}
		p := rec{key: state.PositionKey(nil, 0), value: state.AppendPosition(nil, state.Position{Offset: 30}, posTag)}
		if err := r.Add(p.key, p.value, nil); err != nil {
			t.Fatalf("Add(position of tag %d) = %v", posTag, err)
		}
		var ens []*windowing.Entry
		res, err := r.Finish(func(en *windowing.Entry) error { ens = append(ens, kept(en)); return nil })
		if err != nil {
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("Finish() after Add(%q, %q, %q) = %v, want nil or an error wrapping ErrCorrupt", key, value, tag, err)
			}
			return
		}
		for _, rep := range res.Repairs {
			if err := state.NewRestorer().Add(rep.Key, rep.Value, state.AppendTag(nil, res.NextTag)); err != nil {
				t.Errorf("Add(repair %q, %q) = %v, want nil", rep.Key, rep.Value, err)
			}
			if tag := valueTag(rep.Value); tag != -1 && uint64(tag) != res.NextTag {
				t.Errorf("repair %q has tag %d, want NextTag %d", rep.Key, tag, res.NextTag)
			}
		}
		for _, en := range ens {
			again := restore(t, []rec{entryRec(en, 1), posRec(1, 0)})
			if len(again.entries) != 1 || describe(again.entries[0]) != describe(en) {
				t.Errorf("Finish(AppendValue(%s)) = %q, want it back", describe(en), describeAll(again.entries))
			}
		}
	})
}
