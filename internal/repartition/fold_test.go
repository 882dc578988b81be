package repartition_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/repartition"
	"aggregator/internal/windowing"
)

const foldYaml = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, filter: [{field: kind, equals: click}]}
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 10s}
aggregates: [{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: f, fn: first, field: v}]
`

// foldWindows is foldYaml's windows, as pipeline.WindowSpec makes them.
var foldWindows = windowing.Spec{Kind: windowing.KindTumbling, Size: 10_000,
	Aggregates: []windowing.Aggregate{{Fn: windowing.FnCount}, {Fn: windowing.FnSum}, {Fn: windowing.FnFirst}}}

// newFoldStage is a stage of foldYaml that folds (format 4) for parts
// repartition partitions, with source partitions 0 and 1 assigned.
func newFoldStage(t *testing.T, parts int32) *repartition.Stage {
	t.Helper()
	cfg, err := config.Parse([]byte(foldYaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	cfg.Source.Partitioning = "repartition"
	s, err := repartition.New(repartition.Spec{Config: cfg, Sources: 2, Partitions: parts, Windows: foldWindows})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if !s.Folds() {
		t.Fatal("a stage of format 4 and tumbling windows does not fold")
	}
	s.Assign(0, 0)
	s.Assign(1, 0)
	s.AllowFolding(true, nil)
	return s
}

func click(user string, t, v int) string {
	return fmt.Sprintf(`{"user":%q,"kind":"click","t":%d,"v":%d}`, user, t, v)
}

// feed processes values as the next records of source partition p.
func feed(t *testing.T, s *repartition.Stage, p int32, values ...string) {
	t.Helper()
	for _, v := range values {
		in := input(p, next[p], "", v)
		next[p]++
		if _, ok := s.Process(in, 1); !ok {
			t.Fatalf("Process(%s) not applied", v)
		}
	}
}

var next = map[int32]int64{}

// TestStageFoldRule: stage 1 folds an accepted record whose pane closes
// above its watermark, and sends its group before anything of the same
// source that follows it to the same partition: a record that goes alone
// (its pane closed: late, or one the filter rejects), a record that would
// take the watermark to a pane's close, the commit's markers.
func TestStageFoldRule(t *testing.T) {
	clear(next)
	s := newFoldStage(t, 1) // one repartition partition: every key meets there
	feed(t, s, 0, click("a", 1_000, 1), click("a", 2_000, 2), click("b", 3_000, 3))
	if got := describe(s.Step(1)); len(got) != 0 {
		t.Fatalf("after three records of open panes: %q, want nothing yet (folded)", got)
	}
	feed(t, s, 0, `{"user":"a","kind":"view","t":4000,"v":1}`) // the filter rejects it: alone, after the group
	feed(t, s, 0, click("c", 5_000, 1))
	feed(t, s, 1, click("a", 1_500, 1))  // another source: its own group
	feed(t, s, 0, click("a", 11_500, 1)) // its watermark, 10499, is past [0, 10000)'s close, 9999
	feed(t, s, 0, click("a", 4_000, 9))  // behind: its pane [0, 10000) closed: alone
	got := describe(s.Step(1))
	want := []string{
		"group of 3 to 0",
		`data {"user":"a"} {"user":"a","kind":"view","t":4000,"v":1} filtered`,
		"group of 1 to 0", // c at 5000: before a at 11500, whose watermark passes its pane's close
		"group of 1 to 0", // a at 11500: before the record that goes alone
		`data {"user":"a"} {"user":"a","kind":"click","t":4000,"v":9}`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Step:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = describe(s.Commit(1))
	want = []string{"group of 1 to 0", "marker 0/2 10499", "marker 1/2 499"} // source 1's group, then the markers
	if !slices.Equal(got, want) {
		t.Fatalf("Commit:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestStageFoldDrops: a revoked partition's pending groups, and every
// pending group of an aborted commit, are dropped: the next owner (or the
// stage after the rewind) reads their records again.
func TestStageFoldDrops(t *testing.T) {
	clear(next)
	s := newFoldStage(t, 2)
	feed(t, s, 0, click("a", 1_000, 1))
	feed(t, s, 1, click("a", 1_000, 1))
	s.Revoke(1)
	if got := describe(s.Commit(1)); !slices.Equal(got, []string{"group of 1 to " + fmt.Sprint(repartition.PartitionOf(`{"user":"a"}`, 2)), "marker 0/2 -1"}) {
		t.Fatalf("commit after revoking source 1: %q, want source 0's group and marker only", got)
	}
	s.Accept()
	feed(t, s, 0, click("a", 2_000, 1))
	s.Abort(1)
	if got := describe(s.Commit(1)); slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, "group") }) {
		t.Fatalf("commit after an abort: %q, want no group", got)
	}
}

// TestStageFoldNotAllowed: while stage 2 does not welcome partials, every
// record goes alone.
func TestStageFoldNotAllowed(t *testing.T) {
	clear(next)
	s := newFoldStage(t, 1)
	s.AllowFolding(false, nil)
	feed(t, s, 0, click("a", 1_000, 1), click("a", 2_000, 2))
	if got := describe(s.Step(1)); len(got) != 2 || !strings.HasPrefix(got[0], "data") {
		t.Fatalf("Step = %q, want two records alone", got)
	}
}

// TestStageFoldSizeLimit: a group is flushed once it holds about 256 KiB.
func TestStageFoldSizeLimit(t *testing.T) {
	clear(next)
	s := newFoldStage(t, 1)
	key := strings.Repeat("k", 200)
	for i := range 2000 {
		feed(t, s, 0, click(fmt.Sprint(key, i), 1_000, 1))
	}
	got := describe(s.Step(1))
	if len(got) == 0 || !strings.HasPrefix(got[0], "group") {
		t.Fatalf("2000 keys of 200 bytes: Step = %d outputs, want a group flushed before the commit", len(got))
	}
	for _, o := range s.Commit(1).Outputs {
		if o.Kind == ready.Repartition && len(o.Repart.Encoded) > 400<<10 {
			t.Errorf("a group of %d bytes", len(o.Repart.Encoded))
		}
	}
}

// goldenV4 is a group's value as this release (the one that added format
// 4) writes it: source 1 of 2 (topic "calls", Kafka partition 1), records
// at offsets 0, 1 and 2 (a at 1000 and 2000, b at 3000), two partials.
// These bytes are the format's contract with the releases that read it:
// never update them.
const goldenV4 = "0467000101020563616c6c73<tag>00049e1f0301ffffffffffffffff7f0100e8070100e80702340110026100007b2275736572223a2261227d0400020000000000000040000000000000004001d00f01000000000000f03f000131340110026200007b2275736572223a2262227d040001000000000000f03f000000000000f03f01f02e01000000000000f03f000131"

// TestCodecGoldenV4: a group is written as the golden bytes, and the
// golden bytes read back as what was written.
func TestCodecGoldenV4(t *testing.T) {
	clear(next)
	s := newFoldStage(t, 1)
	next[1] = 0
	for i, v := range []string{click("a", 1_000, 1), click("a", 2_000, 1), click("b", 3_000, 1)} {
		in := &ready.Input{Topic: "calls", Partition: 1, KafkaPartition: 1, Offset: int64(i), Value: []byte(v), Timestamp: 77}
		s.Process(in, 1)
	}
	var g *ready.Repart
	for _, o := range s.Commit(1).Outputs {
		if o.Kind == ready.Repartition {
			g = o.Repart
		}
	}
	if g == nil || g.Folded != 3 {
		t.Fatalf("the commit holds no group of the 3 records: %+v", g)
	}
	got := hex.EncodeToString(g.Encoded)
	cfg, _ := config.Parse([]byte(foldYaml), nil)
	dec, err := record.NewDecoder(cfg.RecordSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The tag is a hash of the decoder's and the windows' specs, which
	// the golden does not fix: it is the running release's.
	tag := hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, repartition.GroupTag(dec.SpecTag(), windowing.FoldTag(foldWindows))))
	golden := strings.Replace(goldenV4, "<tag>", tag, 1)
	b, err := hex.DecodeString(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != golden {
		t.Errorf("the group's value = %s, want the golden %s", got, golden)
	}
	pg, err := repartition.ParseGroup(b, 0, 9, []string{"calls"})
	if err != nil {
		t.Fatalf("ParseGroup(golden): %v", err)
	}
	recs, err := pg.AppendRecords(nil)
	wantRecs := []repartition.Folded{{0, math.MinInt64, -1}, {1, -1, 999}, {2, 999, 1999}}
	if err != nil || !slices.Equal(recs, wantRecs) || pg.In.SourceID != 1 || pg.In.KafkaPartition != 1 || pg.In.Topic != "calls" ||
		pg.In.Sources != 2 || pg.First != 0 || pg.Last != 2 || pg.In.After != 1999 || pg.Records != 3 || pg.In.RepartitionOffset != 9 {
		t.Errorf("ParseGroup(golden) = %+v, records %v, %v; want source 1 of 2 (calls[1]), offsets 0 to 2, M 1999, records %v", pg, recs, err, wantRecs)
	}
	n := 0
	if err := pg.EachPartial(func([]byte) error { n++; return nil }); err != nil || n != 2 {
		t.Errorf("EachPartial(golden): %d partials, %v; want 2", n, err)
	}
}
