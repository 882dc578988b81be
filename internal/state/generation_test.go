package state_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

var update = flag.Bool("update", false, "rewrite testdata/release2_changelog.txt")

// genRec is partition 0's record of g in the commit tagged tag.
func genRec(g state.Generation, tag uint64) rec {
	return rec{key: state.GenerationKey(nil, 0, g.Version), value: state.AppendGeneration(nil, g, tag)}
}

// genRetired is the tombstone of generation version's record.
func genRetired(version int64, tag uint64) rec {
	return rec{key: state.GenerationKey(nil, 0, version), tag: state.AppendTag(nil, tag)}
}

// genPut is k's slice at start holding n in generation gen.
func genPut(gen int64, k string, start, n int64, tag uint64) rec {
	en := sliceEn(k, start, n)
	return rec{key: state.AppendGenerationKey(nil, gen, en), value: state.AppendValue(nil, en, tag)}
}

func genDel(gen int64, k string, start int64, tag uint64) rec {
	en := sliceEn(k, start, 0)
	return rec{key: state.AppendGenerationKey(nil, gen, en), tag: state.AppendTag(nil, tag)}
}

var (
	gen3 = state.Generation{Version: 3, Cutover: state.NoCutover, Settings: []byte("\x01{\"settings\":3}"), Identity: []byte("\x01{\"key\":[\"k\"]}"), Run: []byte("r")}
	gen4 = state.Generation{Version: 4, Cutover: 300, Settings: []byte("\x01{\"settings\":4}"), Identity: []byte("\x01{\"key\":[\"k\"]}"), Run: []byte("r")}
	// gen4d: gen4 with the optional trailing bound of windows dropped
	// under a lower lateness.
	gen4d = state.Generation{Version: 4, Cutover: 300, Settings: []byte("\x01{\"settings\":4}"), Identity: []byte("\x01{\"key\":[\"k\"]}"), Run: []byte("r"), Dropped: true, DroppedTo: -250}
	gen7  = state.Generation{Version: 7, Cutover: 900, Settings: []byte("\x01{\"settings\":7}"), Identity: []byte("\x01{\"key\":[\"k\"]}"), Run: []byte("r")}
)

// restoreGens restores log and returns each entry as "gen brief".
func restoreGens(t *testing.T, log []rec) ([]string, state.Result, error) {
	t.Helper()
	r := state.NewRestorer()
	for i, x := range log {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			t.Fatalf("Add(log[%d] = %v) = %v, want nil", i, x, err)
		}
	}
	var got []string
	res, err := r.FinishGenerations(func(gen int64, en *windowing.Entry) error {
		got = append(got, fmt.Sprintf("%d %s", gen, brief(en)))
		return nil
	})
	slices.Sort(got)
	return got, res, err
}

func TestRestoreGenerations(t *testing.T) {
	tests := map[string]struct {
		log     []rec
		gens    []state.Generation
		entries []string
	}{
		"empty": {nil, nil, nil},
		"one generation": {[]rec{genRec(gen3, 1), genPut(3, "a", 0, 1, 1), posRec(1, 1)},
			[]state.Generation{gen3}, []string{`3 s {"k":"a"}@0 n=1 sum=[10] rev=0`}},
		"two generations, the same key in both": {
			[]rec{genRec(gen3, 1), genPut(3, "a", 200, 1, 1), posRec(1, 1),
				genRec(gen4, 2), genPut(3, "a", 200, 2, 2), genPut(4, "a", 300, 1, 2), posRec(2, 3)},
			[]state.Generation{gen3, gen4},
			[]string{`3 s {"k":"a"}@200 n=2 sum=[20] rev=0`, `4 s {"k":"a"}@300 n=1 sum=[10] rev=0`}},
		"a dropped bound, then a record without it": {
			[]rec{genRec(gen3, 1), genRec(gen4d, 1), genPut(4, "a", 300, 1, 1), posRec(1, 1)},
			[]state.Generation{gen3, gen4d}, []string{`4 s {"k":"a"}@300 n=1 sum=[10] rev=0`}},
		"a dropped bound given up": {
			[]rec{genRec(gen4d, 1), genPut(4, "a", 300, 1, 1), posRec(1, 1), genRec(gen4, 2), posRec(2, 2)},
			[]state.Generation{gen4}, []string{`4 s {"k":"a"}@300 n=1 sum=[10] rev=0`}},
		"three generations, written in any order": {
			[]rec{genRec(gen7, 1), genRec(gen3, 1), genRec(gen4, 1), genPut(7, "b", 900, 1, 1), genPut(4, "b", 300, 1, 1), genPut(3, "b", 0, 1, 1), posRec(1, 1)},
			[]state.Generation{gen3, gen4, gen7},
			[]string{`3 s {"k":"b"}@0 n=1 sum=[10] rev=0`, `4 s {"k":"b"}@300 n=1 sum=[10] rev=0`, `7 s {"k":"b"}@900 n=1 sum=[10] rev=0`}},
		"retired: its last entry dropped and its record tombstoned": {
			[]rec{genRec(gen3, 1), genPut(3, "a", 200, 1, 1), posRec(1, 1),
				genRec(gen4, 2), genPut(4, "a", 300, 1, 2), posRec(2, 2),
				genDel(3, "a", 200, 3), genRetired(3, 3), posRec(3, 3)},
			[]state.Generation{gen4}, []string{`4 s {"k":"a"}@300 n=1 sum=[10] rev=0`}},
		"a cut-over cut short is left out": {
			[]rec{genRec(gen3, 1), genPut(3, "a", 200, 1, 1), posRec(1, 1),
				genRec(gen4, 2), genPut(4, "a", 300, 1, 2)},
			[]state.Generation{gen3}, []string{`3 s {"k":"a"}@200 n=1 sum=[10] rev=0`}},
		"a changelog written before generations": {
			[]rec{put("a", 0, 1, 1), fired("a", 0, 1, 1), posRec(1, 1)},
			[]state.Generation{{Version: 0, Cutover: state.NoCutover, LegacyKeys: true}},
			[]string{`0 s {"k":"a"}@0 n=1 sum=[10] rev=0`, `0 w {"k":"a"}@0 n=0 sum=[] rev=1`}},
		"the legacy generation adopted, then a new one": {
			[]rec{put("a", 0, 1, 1), posRec(1, 1),
				genRec(state.Generation{Version: 2, Cutover: state.NoCutover, LegacyKeys: true, Settings: []byte("s2")}, 2), posRec(2, 2),
				genRec(gen4, 3), genPut(4, "a", 300, 1, 3), posRec(3, 3)},
			[]state.Generation{{Version: 2, Cutover: state.NoCutover, LegacyKeys: true, Settings: []byte("s2"), Identity: []byte{}, Run: []byte{}}, gen4},
			[]string{`2 s {"k":"a"}@0 n=1 sum=[10] rev=0`, `4 s {"k":"a"}@300 n=1 sum=[10] rev=0`}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, res, err := restoreGens(t, tt.log)
			if err != nil {
				t.Fatalf("FinishGenerations() = %v", err)
			}
			if !slices.Equal(got, tt.entries) {
				t.Errorf("entries = %q, want %q", got, tt.entries)
			}
			if !reflect.DeepEqual(res.Generations, tt.gens) {
				t.Errorf("Generations = %+v, want %+v", res.Generations, tt.gens)
			}
		})
	}
}

func TestRestoreGenerationsRefused(t *testing.T) {
	legacy := state.Generation{Version: 1, Cutover: state.NoCutover, LegacyKeys: true, Settings: []byte("s")}
	tests := map[string][]rec{
		"an entry of a generation without a record": {genRec(gen3, 1), genPut(4, "a", 0, 1, 1), posRec(1, 1)},
		"legacy entries beside records not of them": {put("a", 0, 1, 1), genRec(gen3, 1), posRec(1, 1)},
		"two generations of legacy entries":         {genRec(legacy, 1), genRec(state.Generation{Version: 2, LegacyKeys: true}, 1), posRec(1, 1)},
		"a byte after the dropped bound":            {{key: state.GenerationKey(nil, 0, 4), value: append(state.AppendGeneration(nil, gen4d, 1), 0)}, posRec(1, 1)},
		"a dropped bound cut short":                 {{key: state.GenerationKey(nil, 0, 4), value: append(state.AppendGeneration(nil, gen4, 1), 0x80)}, posRec(1, 1)},
		"a generation's settings cut short":         {{key: state.GenerationKey(nil, 0, 3), value: state.AppendGeneration(nil, gen3, 1)[:12]}, posRec(1, 1)},
	}
	for name, log := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := restoreGens(t, log); !errors.Is(err, state.ErrCorrupt) {
				t.Errorf("FinishGenerations() = %v, want an error wrapping ErrCorrupt", err)
			}
		})
	}
	// Finish, today's restore, refuses more than one generation.
	r := state.NewRestorer()
	for _, x := range []rec{genRec(gen3, 1), genRec(gen4, 1), posRec(1, 1)} {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Finish(func(*windowing.Entry) error { return nil }); !errors.Is(err, state.ErrGenerations) {
		t.Errorf("Finish() of two generations = %v, want an error wrapping ErrGenerations", err)
	}
}

// TestRestoreGenerationsAtEveryOffset restores every prefix of a log of
// commits that cuts over from generation 3 to 4, retires 3, and gives 4 a
// dropped bound (a restart under a longer lateness) then gives it up: a
// prefix restores the state of its last whole commit, generations and
// their bounds included.
func TestRestoreGenerationsAtEveryOffset(t *testing.T) {
	commits := [][]rec{
		{genRec(gen3, 1), genPut(3, "a", 0, 1, 1), genPut(3, "b", 100, 1, 1)},
		{genPut(3, "a", 0, 2, 2), genPut(3, "a", 200, 1, 2)},
		{genRec(gen4, 3), genPut(3, "b", 200, 1, 3), genPut(4, "a", 300, 1, 3)},
		{genDel(3, "a", 0, 4), genDel(3, "b", 100, 4), genPut(4, "b", 300, 2, 4)},
		{genDel(3, "a", 200, 5), genDel(3, "b", 200, 5), genRetired(3, 5), genPut(4, "a", 300, 5, 5)},
		{genRec(gen4d, 6), genPut(4, "a", 300, 6, 6)},
		{genPut(4, "b", 300, 3, 7)},
		{genRec(gen4, 8), genPut(4, "a", 300, 7, 8)},
	}
	var log []rec
	type want struct {
		entries []string
		gens    []string // version/dropped bound
	}
	gensOf := func(gs []state.Generation) (gens []string) {
		for _, g := range gs {
			gens = append(gens, fmt.Sprintf("%d/%v/%d", g.Version, g.Dropped, g.DroppedTo))
		}
		return gens
	}
	var ends []int // log length after each commit's position
	var wants []want
	for i, c := range commits {
		log = append(log, c...)
		log = append(log, posRec(uint64(i+1), int64(i+1)))
		ends = append(ends, len(log))
		got, res, err := restoreGens(t, log)
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		wants = append(wants, want{got, gensOf(res.Generations)})
	}
	if w := wants[len(wants)-2]; !slices.Equal(w.gens, []string{"4/true/-250"}) {
		t.Fatalf("after the bound's commits: generations %v, want [4/true/-250]", w.gens)
	}
	if last := wants[len(wants)-1]; !slices.Equal(last.gens, []string{"4/false/0"}) || len(last.entries) != 2 {
		t.Fatalf("after the last commit: generations %v, entries %q; want [4] and 2 entries", last.gens, last.entries)
	}
	for off := range len(log) + 1 {
		got, res, err := restoreGens(t, log[:off])
		if err != nil {
			t.Fatalf("restore of the first %d records: %v", off, err)
		}
		w := want{}
		for i, end := range ends {
			if end <= off {
				w = wants[i]
			}
		}
		gens := gensOf(res.Generations)
		if !slices.Equal(got, w.entries) || !slices.Equal(gens, w.gens) {
			t.Errorf("restore of the first %d records: entries %q, generations %v; want %q, %v", off, got, gens, w.entries, w.gens)
		}
	}
}

// TestRestoreRelease2Changelog restores a changelog partition as the
// release before generations wrote it (testdata, its bytes): one
// generation of unknown settings that holds every entry.
func TestRestoreRelease2Changelog(t *testing.T) {
	const path = "testdata/release2_changelog.txt"
	if *update {
		writeRelease2(t, path)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var log []rec
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		fields := strings.Fields(sc.Text())
		var x rec
		for i, h := range fields {
			if h == "-" {
				continue
			}
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			switch {
			case i == 0:
				x.key = b
			case i == 1:
				x.value = b
			case i == 2:
				x.tag = b
			}
		}
		log = append(log, x)
	}
	got, res, err := restoreGens(t, log)
	if err != nil {
		t.Fatalf("FinishGenerations() = %v", err)
	}
	want := []string{`0 s {"k":"a"}@10 n=3 sum=[30] rev=0`, `0 s {"k":"b"}@10 n=1 sum=[10] rev=0`, `0 w {"k":"a"}@0 n=0 sum=[] rev=2`}
	if !slices.Equal(got, want) {
		t.Errorf("entries = %q, want %q", got, want)
	}
	if len(res.Generations) != 1 || res.Generations[0].Known() || !res.Generations[0].LegacyKeys || res.Generations[0].Cutover != state.NoCutover {
		t.Errorf("Generations = %+v, want one of unknown settings holding the version-1 keys", res.Generations)
	}
	if !res.HasPosition || res.Position.Offset != 7 {
		t.Errorf("Position = %+v, %v; want offset 7", res.Position, res.HasPosition)
	}
}

// writeRelease2 writes the testdata changelog with this release's
// AppendKey and AppendValue: run once, under -update, by the release
// that added generations, and never again (it is the old release's bytes).
func writeRelease2(t *testing.T, path string) {
	del := sliceEn("a", 0, 0)
	del.Deleted = true
	log := []rec{put("a", 0, 2, 1), put("a", 10, 1, 1), fired("a", 0, 1, 1), posRec(1, 4),
		entryRec(del, 2), put("a", 10, 3, 2), put("b", 10, 1, 2), fired("a", 0, 2, 2), posRec(2, 7)}
	var b strings.Builder
	b.WriteString("# A changelog partition as the release before generations wrote it: key, value (- for a tombstone), tag header.\n")
	b.WriteString("# tumbling 10 ms, aggregate sum; two commits, the first window fired twice and its slice dropped.\n")
	for _, x := range log {
		v := "-"
		if x.value != nil {
			v = hex.EncodeToString(x.value)
		}
		fmt.Fprintf(&b, "%s %s %s\n", hex.EncodeToString(x.key), v, hex.EncodeToString(x.tag))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzGeneration: no generation record makes a Restorer panic or fails
// otherwise than with ErrCorrupt; one that restores is written back as is.
func FuzzGeneration(f *testing.F) {
	for _, g := range []state.Generation{gen3, gen4, gen4d, {Version: 1, Cutover: state.NoCutover, LegacyKeys: true}} {
		f.Add(g.Version, state.AppendGeneration(nil, g, 1))
	}
	f.Add(int64(-5), []byte{1, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, version int64, value []byte) {
		r := state.NewRestorer()
		if err := r.Add(state.GenerationKey(nil, 0, version), value, nil); err != nil {
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("Add = %v, want nil or ErrCorrupt", err)
			}
			return
		}
		p := posRec(^uint64(0), 0) // every tag is at or below it
		if err := r.Add(p.key, p.value, nil); err != nil {
			t.Fatal(err)
		}
		res, err := r.FinishGenerations(func(int64, *windowing.Entry) error { return nil })
		if err != nil {
			if !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("FinishGenerations = %v, want nil or ErrCorrupt", err)
			}
			return
		}
		if value == nil && len(res.Generations) == 0 {
			return // a tombstone: retired
		}
		if len(res.Generations) != 1 {
			t.Fatalf("Generations = %+v, want one", res.Generations)
		}
		g := res.Generations[0]
		r = state.NewRestorer()
		again := genRec(g, 1)
		again.key = state.GenerationKey(nil, 0, version)
		for _, x := range []rec{again, posRec(1, 0)} {
			if err := r.Add(x.key, x.value, x.tag); err != nil {
				t.Fatalf("Add(AppendGeneration(%+v)) = %v", g, err)
			}
		}
		res, err = r.FinishGenerations(func(int64, *windowing.Entry) error { return nil })
		if err != nil || len(res.Generations) != 1 || !reflect.DeepEqual(res.Generations[0], g) {
			t.Errorf("AppendGeneration(%+v) restores as %+v, %v; want it back", g, res.Generations, err)
		}
	})
}
