package state_test

import (
	"fmt"
	"slices"
	"testing"

	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// A tiny log language for Restorer tests: keys "a", "b", ... of group key
// {"k":...}; a slice holds count n and sum 10n.

func sliceEn(k string, start, n int64) *windowing.Entry {
	id, split := groupID("k", k)
	return &windowing.Entry{Kind: windowing.SliceEntry, ID: id, Split: split, Start: start, Count: n, Nums: []float64{10 * float64(n)}}
}

func windowEn(k string, start, rev int64) *windowing.Entry {
	id, split := groupID("k", k)
	return &windowing.Entry{Kind: windowing.WindowEntry, ID: id, Split: split, Start: start, Revision: rev}
}

// put is the record of k's slice at start holding n, tagged tag.
func put(k string, start, n int64, tag uint64) rec { return entryRec(sliceEn(k, start, n), tag) }

// del is the tombstone of k's slice at start, tagged tag.
func del(k string, start int64, tag uint64) rec {
	en := sliceEn(k, start, 0)
	en.Deleted = true
	return entryRec(en, tag)
}

// fired is the record of k's sliding window at start, fired rev times.
func fired(k string, start, rev int64, tag uint64) rec { return entryRec(windowEn(k, start, rev), tag) }

// brief is an entry in a line: "s {"k":"a"}@0 n=1 sum=10 rev=0".
func brief(en *windowing.Entry) string {
	kind := map[windowing.EntryKind]string{windowing.SliceEntry: "s", windowing.WindowEntry: "w"}[en.Kind]
	return fmt.Sprintf("%s %s@%d n=%d sum=%v rev=%d", kind, en.ID[en.Split:], en.Start, en.Count, en.Nums, en.Revision)
}

func briefs(ens []*windowing.Entry) []string {
	out := make([]string, len(ens))
	for i, en := range ens {
		out[i] = brief(en)
	}
	slices.Sort(out)
	return out
}

// briefRepairs describes repairs, sorted: "tag=3 s {"k":"a"}@0 n=1 ..." for
// a value (read back by a Restorer of its own), "tombstone <key>" else.
func briefRepairs(t *testing.T, reps []state.Repair) []string {
	t.Helper()
	out := make([]string, len(reps))
	for i, rep := range reps {
		if rep.Value == nil {
			out[i] = fmt.Sprintf("tombstone %q", rep.Key)
			continue
		}
		tag := uint64(valueTag(rep.Value))
		got := restore(t, []rec{{key: rep.Key, value: rep.Value}, posRec(tag, 0)})
		out[i] = fmt.Sprintf("tag=%d %q", tag, briefs(got.entries))
	}
	slices.Sort(out)
	return out
}

func tombstoneOf(en *windowing.Entry) string {
	return fmt.Sprintf("tombstone %q", state.AppendKey(nil, en))
}

func repairOf(en *windowing.Entry, tag uint64) string {
	return fmt.Sprintf("tag=%d %q", tag, []string{brief(en)})
}

// orphanLogs are changelogs whose last commit was cut short, with the
// state they restore, for TestRestorer and TestRestorerRepairedLog.
var orphanLogs = map[string]struct {
	log     []rec
	want    []string // briefs, sorted
	repairs []string // briefRepairs
	next    uint64
	offset  int64 // of the last position; 0: none
}{
	"cut short: key existed": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), put("a", 0, 2, 2)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: []string{repairOf(sliceEn("a", 0, 1), e1)},
		next:    e1,
		offset:  10,
	},
	"cut short: new key": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), put("b", 0, 2, 2), put("a", 1000, 5, 2)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: slices.Sorted(slices.Values([]string{tombstoneOf(sliceEn("b", 0, 0)), tombstoneOf(sliceEn("a", 1000, 0))})),
		next:    e1,
		offset:  10,
	},
	"cut short: tombstone of a committed key": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), del("a", 0, 2)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: []string{repairOf(sliceEn("a", 0, 1), e1)},
		next:    e1,
		offset:  10,
	},
	"cut short: value over a committed tombstone": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), del("a", 0, 2), posRec(2, 20), put("a", 0, 4, 3)},
		want:    []string{},
		repairs: []string{tombstoneOf(sliceEn("a", 0, 0))},
		next:    e1,
		offset:  20,
	},
	"cut short: only part of the keys": {
		log: []rec{put("a", 0, 1, 1), put("b", 0, 1, 1), posRec(1, 10),
			put("a", 0, 2, 2), put("b", 0, 2, 2), posRec(2, 20),
			put("b", 0, 3, 3)},
		want:    []string{brief(sliceEn("a", 0, 2)), brief(sliceEn("b", 0, 2))},
		repairs: []string{repairOf(sliceEn("b", 0, 2), e1)},
		next:    e1,
		offset:  20,
	},
	"two orphan commits in a row": {
		log: []rec{put("a", 0, 1, 1), posRec(1, 10),
			put("a", 0, 2, 2), put("b", 0, 1, 2),
			put("a", 0, 3, 3), put("b", 0, 2, 3)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: slices.Sorted(slices.Values([]string{repairOf(sliceEn("a", 0, 1), e1), tombstoneOf(sliceEn("b", 0, 0))})),
		next:    e1,
		offset:  10,
	},
	"orphan after commits that wrote only a position": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), posRec(2, 20), posRec(3, 30), put("a", 0, 2, 4)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: []string{repairOf(sliceEn("a", 0, 1), e1)},
		next:    e1,
		offset:  30,
	},
	"cut short: sliding window revision": {
		log:     []rec{put("a", 0, 1, 1), fired("a", 0, 1, 1), posRec(1, 10), put("a", 0, 2, 2), fired("a", 0, 2, 2)},
		want:    []string{brief(sliceEn("a", 0, 1)), brief(windowEn("a", 0, 1))},
		repairs: []string{repairOf(sliceEn("a", 0, 1), e1), repairOf(windowEn("a", 0, 1), e1)},
		next:    e1,
		offset:  10,
	},
	"orphan tombstone carries the highest tag": {
		log:     []rec{put("a", 0, 1, 1), posRec(1, 10), del("a", 0, 9)},
		want:    []string{brief(sliceEn("a", 0, 1))},
		repairs: []string{repairOf(sliceEn("a", 0, 1), e1)},
		next:    e1,
		offset:  10,
	},
	"no position at all": {
		log:     []rec{put("a", 0, 1, 1), put("b", 0, 1, 1)},
		want:    []string{},
		repairs: slices.Sorted(slices.Values([]string{tombstoneOf(sliceEn("a", 0, 0)), tombstoneOf(sliceEn("b", 0, 0))})),
		next:    e1,
		offset:  0,
	},
}

func TestRestorer(t *testing.T) {
	type want struct {
		entries []string // briefs, sorted
		repairs []string // briefRepairs
		next    uint64
		hasPos  bool
		offset  int64
	}
	tests := map[string]struct {
		log  []rec
		want want
	}{
		"empty log": {nil, want{entries: []string{}, repairs: []string{}, next: e1}},
		"latest wins": {
			[]rec{put("a", 0, 1, 1), put("b", 0, 7, 1), posRec(1, 10), put("a", 0, 2, 2), posRec(2, 20), put("a", 0, 3, 3), posRec(3, 30)},
			want{entries: []string{brief(sliceEn("a", 0, 3)), brief(sliceEn("b", 0, 7))}, repairs: []string{}, next: e1, hasPos: true, offset: 30},
		},
		"latest of one commit wins": { // a repair and a change of one key in one commit
			[]rec{put("a", 0, 1, 1), put("a", 0, 2, 1), posRec(1, 10)},
			want{entries: []string{brief(sliceEn("a", 0, 2))}, repairs: []string{}, next: e1, hasPos: true, offset: 10},
		},
		"tombstone deletes": {
			[]rec{put("a", 0, 1, 1), put("a", 1000, 1, 1), posRec(1, 10), del("a", 0, 2), posRec(2, 20)},
			want{entries: []string{brief(sliceEn("a", 1000, 1))}, repairs: []string{}, next: e1, hasPos: true, offset: 20},
		},
		"tombstone then a new value": {
			[]rec{put("a", 0, 1, 1), posRec(1, 10), del("a", 0, 2), posRec(2, 20), put("a", 0, 5, 3), posRec(3, 30)},
			want{entries: []string{brief(sliceEn("a", 0, 5))}, repairs: []string{}, next: e1, hasPos: true, offset: 30},
		},
		"tombstone of the same commit": {
			[]rec{put("a", 0, 1, 1), del("a", 0, 1), posRec(1, 10)},
			want{entries: []string{}, repairs: []string{}, next: e1, hasPos: true, offset: 10},
		},
		"slices and windows": {
			[]rec{put("a", 0, 1, 1), put("a", 1000, 2, 1), fired("a", 0, 1, 1), posRec(1, 10), fired("a", 0, 2, 2), posRec(2, 20)},
			want{entries: []string{brief(sliceEn("a", 0, 1)), brief(sliceEn("a", 1000, 2)), brief(windowEn("a", 0, 2))}, repairs: []string{}, next: e1, hasPos: true, offset: 20},
		},
	}
	for name, tt := range orphanLogs {
		tests[name] = struct {
			log  []rec
			want want
		}{tt.log, want{entries: tt.want, repairs: tt.repairs, next: tt.next, hasPos: tt.offset != 0, offset: tt.offset}}
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := restore(t, tt.log)
			if g := briefs(got.entries); !slices.Equal(g, tt.want.entries) {
				t.Errorf("Finish(log) entries = %q,\nwant %q", g, tt.want.entries)
			}
			if g := briefRepairs(t, got.res.Repairs); !slices.Equal(g, tt.want.repairs) {
				t.Errorf("Finish(log).Repairs = %q,\nwant %q", g, tt.want.repairs)
			}
			if got.res.NextTag != tt.want.next {
				t.Errorf("Finish(log).NextTag = %d, want %d", got.res.NextTag, tt.want.next)
			}
			if got.res.HasPosition != tt.want.hasPos || got.res.Position.Offset != tt.want.offset {
				t.Errorf("Finish(log) position = %v at offset %d, want %v at %d", got.res.HasPosition, got.res.Position.Offset, tt.want.hasPos, tt.want.offset)
			}
			if got.res.Entries != len(got.entries) {
				t.Errorf("Finish(log).Entries = %d, want %d (the entries handed out)", got.res.Entries, len(got.entries))
			}
		})
	}
}

// repairRecs is what the next commit writes of res: its repairs, tagged
// res.NextTag, as Processor.Checkpoint writes them.
func repairRecs(res state.Result) []rec {
	var out []rec
	for _, rep := range res.Repairs {
		r := rec{key: rep.Key, value: rep.Value}
		if rep.Value == nil {
			r.tag = state.AppendTag(nil, res.NextTag)
		}
		out = append(out, r)
	}
	return out
}

// TestRestorerRepairedLog: a log that is repaired (its repairs written
// under NextTag, then a position of NextTag) restores the state of the
// repair, with nothing left to repair; one whose repair was cut short in
// turn restores the same state and repairs it again.
func TestRestorerRepairedLog(t *testing.T) {
	for name, tt := range orphanLogs {
		t.Run(name, func(t *testing.T) {
			first := restore(t, tt.log)
			for _, rep := range first.res.Repairs {
				if tag := valueTag(rep.Value); tag != -1 && uint64(tag) != first.res.NextTag {
					t.Errorf("Finish(log).Repairs: %q has tag %d, want NextTag %d", rep.Key, tag, first.res.NextTag)
				}
			}
			repaired := slices.Concat(tt.log, repairRecs(first.res), []rec{posRec(first.res.NextTag, 99)})
			got := restore(t, repaired)
			if g, w := briefs(got.entries), briefs(first.entries); !slices.Equal(g, w) {
				t.Errorf("Finish(repaired log) entries = %q,\nwant %q", g, w)
			}
			if len(got.res.Repairs) != 0 || got.res.NextTag != state.NextOwner(first.res.NextTag) || got.res.Position.Offset != 99 {
				t.Errorf("Finish(repaired log) = {Repairs %q, NextTag %d, Offset %d}, want {none, %d, 99}",
					briefRepairs(t, got.res.Repairs), got.res.NextTag, got.res.Position.Offset, state.NextOwner(first.res.NextTag))
			}

			halfRepaired := slices.Concat(tt.log, repairRecs(first.res)) // no position: cut short too
			again := restore(t, halfRepaired)
			if g, w := briefs(again.entries), briefs(first.entries); !slices.Equal(g, w) {
				t.Errorf("Finish(log with repairs cut short) entries = %q,\nwant %q", g, w)
			}
			if g, w := len(again.res.Repairs), len(first.res.Repairs); g != w || again.res.NextTag != state.NextOwner(first.res.NextTag) {
				t.Errorf("Finish(log with repairs cut short) = {%d repairs, NextTag %d}, want {%d, %d}", g, again.res.NextTag, w, state.NextOwner(first.res.NextTag))
			}
		})
	}
}

// TestFinishSlicesFirst: Finish hands out every slice before any window,
// however the log interleaves them.
func TestFinishSlicesFirst(t *testing.T) {
	var log []rec
	for i := range int64(200) {
		k := fmt.Sprint("k", i%17)
		log = append(log, fired(k, i*1000, 1, 1), put(k, i*1000, i+1, 1))
	}
	log = append(log, posRec(1, 1))
	got := restore(t, log)
	kinds := make([]windowing.EntryKind, len(got.entries))
	for i, en := range got.entries {
		kinds[i] = en.Kind
	}
	if len(kinds) != 400 || !slices.IsSorted(kinds) { // SliceEntry < WindowEntry
		t.Errorf("Finish(log) kinds = %v, want 200 slices (1) then 200 windows (2)", kinds)
	}
}

// TestFinishCallbackError: Finish stops at fn's first error and returns it.
func TestFinishCallbackError(t *testing.T) {
	r := state.NewRestorer()
	for _, x := range []rec{put("a", 0, 1, 1), put("b", 0, 1, 1), posRec(1, 1)} {
		if err := r.Add(x.key, x.value, x.tag); err != nil {
			t.Fatalf("Add(%v) = %v", x, err)
		}
	}
	stop := fmt.Errorf("stop")
	calls := 0
	_, err := r.Finish(func(*windowing.Entry) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("Finish(fn failing) = %v after %d calls, want %v after 1", err, calls, stop)
	}
}

// TestRestorerCopies: a Restorer keeps copies: the caller may reuse the
// buffers it passed to Add.
func TestRestorerCopies(t *testing.T) {
	r := state.NewRestorer()
	key, value := put("a", 0, 3, 1).key, put("a", 0, 3, 1).value
	if err := r.Add(key, value, nil); err != nil {
		t.Fatalf("Add = %v", err)
	}
	clear(key)
	clear(value)
	p := posRec(1, 1)
	if err := r.Add(p.key, p.value, nil); err != nil {
		t.Fatalf("Add(position) = %v", err)
	}
	var got []*windowing.Entry
	if _, err := r.Finish(func(en *windowing.Entry) error { got = append(got, kept(en)); return nil }); err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	if g, w := briefs(got), []string{brief(sliceEn("a", 0, 3))}; !slices.Equal(g, w) {
		t.Errorf("Finish() after the caller cleared its buffers = %q, want %q", g, w)
	}
}

// TestRestorerStaleWriter: a zombie (at_least_once: an instance paused
// past its session, then finishing the commit it had in hand) writes a
// commit tagged below the positions the partition's next owner wrote
// meanwhile (the owner's tags are of a later epoch), interleaved with
// them. The owner's state wins key by key: the zombie's records and its
// position are left out (Stale counts them), and the keys it wrote are
// repaired (a tombstone where the owner deleted the key or never wrote
// it), so that compaction cannot make a stale record a key's last.
func TestRestorerStaleWriter(t *testing.T) {
	log := []rec{
		put("a", 0, 1, 1), posRec(1, 10), // the zombie's last commit before its pause
		put("a", 0, 2, e1), posRec(e1, 20), // the next owner restored (NextTag e1) and commits
		del("a", 0, e1+1), put("a", 1000, 1, e1+1), posRec(e1+1, 30), // the slice at 0 is dropped: its windows fired
		put("a", 0, 5, 2), put("b", 0, 1, 2), // the zombie wakes: its commit tagged 2
		posRec(e1+2, 40),        // the owner's next position (only the position moved)
		posRec(2, 15),           // the zombie's position, last in the log
		put("a", 1000, 2, e1+3), // the owner's next commit, cut short
	}
	got := restore(t, log)
	if g, w := briefs(got.entries), []string{brief(sliceEn("a", 1000, 1))}; !slices.Equal(g, w) {
		t.Errorf("entries = %q, want %q (the owner's state, not the zombie's slice at 0 nor its key b)", g, w)
	}
	if !got.res.HasPosition || got.res.Position.Offset != 40 {
		t.Errorf("position = %v at %d, want the owner's, at 40", got.res.HasPosition, got.res.Position.Offset)
	}
	if got.res.Stale != 3 {
		t.Errorf("Stale = %d, want 3 (two records and a position)", got.res.Stale)
	}
	wantRepairs := slices.Sorted(slices.Values([]string{
		tombstoneOf(sliceEn("a", 0, 0)), tombstoneOf(sliceEn("b", 0, 0)), // the zombie's keys
		repairOf(sliceEn("a", 1000, 1), 2*e1), // the owner's commit cut short
	}))
	if g := briefRepairs(t, got.res.Repairs); !slices.Equal(g, wantRepairs) {
		t.Errorf("Repairs = %q,\nwant %q", g, wantRepairs)
	}
	if got.res.NextTag != 2*e1 {
		t.Errorf("NextTag = %d, want %d (epoch 2)", got.res.NextTag, uint64(2*e1))
	}
	// Repaired (the repairs and a position tagged NextTag), the log
	// restores the same state with nothing left to repair.
	repaired := slices.Concat(log, repairRecs(got.res), []rec{posRec(got.res.NextTag, 50)})
	again := restore(t, repaired)
	if g, w := briefs(again.entries), briefs(got.entries); !slices.Equal(g, w) {
		t.Errorf("repaired log: entries = %q, want %q", g, w)
	}
	if len(again.res.Repairs) != 0 || again.res.Position.Offset != 50 {
		t.Errorf("repaired log: repairs %q, position at %d; want none, 50", briefRepairs(t, again.res.Repairs), again.res.Position.Offset)
	}
}

// TestRestorerZombieInterleaved: the zombie's stale changes land between
// the next owner's commits with tags that, counted on from its own, are
// the tag of the owner's next commit (TestChaos at_least_once seed 11: a
// zombie's slice taken as committed by the owner's next position, whose
// watermark is past its windows, made every restore fail with "slice has
// no open window"). The tags each writer uses are the ones the pipeline
// uses: the zombie counts on from its last commit; the owner starts at
// the NextTag of what it restored. The zombie's changes, before or after
// the owner's first position, are never committed by the owner's
// positions, nor by the zombie's own position after the owner wrote.
func TestRestorerZombieInterleaved(t *testing.T) {
	prefix := []rec{
		put("a", 0, 1, 1), posRec(1, 10), // the zombie's commits, read by the next owner
		put("b", 0, 1, 2), posRec(2, 20),
		put("c", 0, 1, 3), // its commit 3 cut short by its pause (positions unwritten)
	}
	owner := restore(t, prefix).res.NextTag
	for name, tt := range map[string]struct {
		log  []rec
		want []string
	}{
		"after the owner's commit": {
			log: slices.Concat(prefix, []rec{
				del("c", 0, owner), put("a", 0, 2, owner), posRec(owner, 30), // the owner's commit (c repaired)
				put("d", 0, 1, 4), del("b", 0, 4), posRec(4, 25), // the zombie's next commits, tagged 4 and 5
				put("e", 0, 1, 5), put("a", 0, 9, 5),
				put("a", 0, 3, owner+1), posRec(owner+1, 40), // the owner's next commit
				posRec(5, 35), // the zombie's position
			}),
			want: []string{brief(sliceEn("a", 0, 3)), brief(sliceEn("b", 0, 1))},
		},
		"before the owner's first position": {
			log: slices.Concat(prefix, []rec{
				del("c", 0, owner), put("a", 0, 2, owner), // the owner's commit, its position not yet written
				put("d", 0, 1, 4), put("a", 0, 9, 4), del("b", 0, 4), posRec(4, 25), // the zombie's commit
				posRec(owner, 30), // the owner's position
				put("a", 0, 3, owner+1), posRec(owner+1, 40),
			}),
			want: []string{brief(sliceEn("a", 0, 3)), brief(sliceEn("b", 0, 1))},
		},
		"between the owner's restore and its first change": {
			log: slices.Concat(prefix, []rec{
				put("d", 0, 1, 3), put("a", 0, 9, 3), del("b", 0, 3), // the zombie finishes its commit 3 ...
				put("d", 0, 2, 4), // ... and starts the next
				del("c", 0, owner), put("a", 0, 2, owner), posRec(owner, 30),
				put("a", 0, 3, owner+1), posRec(owner+1, 40),
			}),
			want: []string{brief(sliceEn("a", 0, 3)), brief(sliceEn("b", 0, 1))},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := restore(t, tt.log)
			if g := briefs(got.entries); !slices.Equal(g, tt.want) {
				t.Errorf("entries = %q,\nwant %q (the owner's state: none of the zombie's changes after its restore)", g, tt.want)
			}
			if !got.res.HasPosition || got.res.Position.Offset != 40 {
				t.Errorf("position = %v at %d, want the owner's, at 40", got.res.HasPosition, got.res.Position.Offset)
			}
			if got.res.NextTag <= owner+1 {
				t.Errorf("NextTag = %d, want above the owner's %d", got.res.NextTag, owner+1)
			}
			// Repaired, the log restores the same state, nothing left to repair.
			again := restore(t, slices.Concat(tt.log, repairRecs(got.res), []rec{posRec(got.res.NextTag, 50)}))
			if g := briefs(again.entries); !slices.Equal(g, tt.want) || len(again.res.Repairs) != 0 {
				t.Errorf("repaired log: entries %q, repairs %q; want %q, none", g, briefRepairs(t, again.res.Repairs), tt.want)
			}
		})
	}
}
