package pipeline_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/windowing"
)

// TestMergedListsAsOneList: by_key with watermark.scope global gives
// every partition a list of its own, following the merged watermark;
// the release before generations kept every partition in one operator.
// The outputs are exactly the one operator's, every window kind: the
// same windows, values, revisions, late events and dead letters, and
// each partition's results in the one operator's order (at one step of
// the watermark the partitions' firings come partition by partition,
// docs/semantics.md#more-on-windows-and-firings). The stream has each
// key on every partition (input not keyed by the group key, a misuse):
// a key keeps a window per partition, as before. A partition is
// revoked, the others go on ahead, and it is restored behind them.
func TestMergedListsAsOneList(t *testing.T) {
	const parts = 3
	ins := crashStream(23, 600, parts, true)
	for name, yaml := range joinConfigs(crashConfigs, windowKindConfigs) {
		if !strings.Contains(yaml, "scope: partition") {
			t.Run(name, func(t *testing.T) {
				got := mergedRun(t, yaml, ins, parts, false)
				want := mergedRun(t, yaml, ins, parts, true)
				if !reflect.DeepEqual(got.late, want.late) || !reflect.DeepEqual(got.dead, want.dead) {
					t.Fatalf("late events %v and dead letters %v, want %v and %v", got.late, got.dead, want.late, want.dead)
				}
				if len(got.results) != len(want.results) {
					t.Fatalf("%d results, one operator for all gave %d", len(got.results), len(want.results))
				}
				for id := range int32(parts) {
					g, w := resultsOfPartition(got.results, id), resultsOfPartition(want.results, id)
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("partition %d: results differ from one operator for all:\n%s", id, firstDiff(g, w))
					}
				}
				if len(got.results) == 0 {
					t.Fatal("no results: the case tests nothing")
				}
			})
		}
	}
}

// mergedRun runs yaml over ins: records of every partition, a commit,
// partition 2 revoked while the others go on, then restored from the
// changelog behind them, and the rest. oneList: with one operator list
// for every partition.
func mergedRun(t *testing.T, yaml string, ins []crashInput, parts int32, oneList bool) *tape {
	t.Helper()
	p, out := newProcessor(t, yaml)
	if oneList {
		pipeline.WithOneList(p.Processor)
	}
	for id := range parts {
		p.Assign(id, 0)
	}
	third := len(ins) / 3
	feed(p, ins[:third], nil)
	log := changelog{}
	log.write(p.Checkpoint())
	p.Revoke(2)
	var rest []crashInput
	for _, in := range ins[third : 2*third] {
		if in.part != 2 {
			rest = append(rest, in)
		}
	}
	feed(p, rest, nil)
	p.Assign(2, 0)
	res, err := p.Restore(2, log.restorer(t, 2), 0)
	if err != nil {
		t.Fatalf("Restore(2): %v", err)
	}
	// Partition 2 from its position (the records revoked ones among
	// them), the others from where they were.
	for i, in := range ins[third:] {
		if in.part == 2 && in.offset >= res.Position.Offset || in.part != 2 && third+i >= 2*third {
			feed(p, ins[third+i:third+i+1], nil)
		}
	}
	p.Flush()
	return out
}

// resultsOfPartition is rs's results of partition id, in order.
func resultsOfPartition(rs []windowing.Result, id int32) []windowing.Result {
	var out []windowing.Result
	for _, r := range rs {
		if r.Partition == id {
			out = append(out, r)
		}
	}
	return out
}

// TestMergedListsOrderAtCutOver: every partition has a list of its own,
// following the merged watermark: when one step of the watermark makes
// windows of several due, they fire partition by partition in ascending
// order (each in order of window end, then key), and in a partition that
// cut over, the old generation's first. Partition 0 has no state yet (its
// first generation is the config's), partition 1 cuts over from
// 1-second windows to 2-second ones at T = 2000.
func TestMergedListsOrderAtCutOver(t *testing.T) {
	const old = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
window: {type: tumbling, size: 1s}
aggregates: [{name: n, fn: count}]
state: {config_version: 1}
`
	next := strings.Replace(strings.Replace(old, "size: 1s", "size: 2s", 1), "config_version: 1", "config_version: 2", 1)
	first, _ := newProcessor(t, old)
	restoreFrom(t, first, changelog{}, 0, 1, 2)
	feed(first, []crashInput{{1, 0, `{"k":"a","t":1500}`}}, nil)
	log := changelog{}
	log.commit(first)
	p, out := newProcessor(t, next)
	from := restoreFrom(t, p, log, 0, 1, 2) // partition 2 holds the watermark back
	if rep := p.GenerationReport(1); rep.Cutover != 2000 || rep.Live != 2 {
		t.Fatalf("partition 1: %+v, want a cut-over at 2000", rep)
	}
	feed(p, []crashInput{
		{0, 0, `{"k":"a","t":100}`}, {1, 1, `{"k":"b","t":1200}`}, {0, 1, `{"k":"b","t":1100}`},
		{1, 2, `{"k":"a","t":2500}`}, {0, 2, `{"k":"a","t":2600}`}, {0, 3, `{"k":"z","t":9000}`}, {1, 3, `{"k":"z","t":9000}`},
	}, from)
	if len(out.results) != 0 {
		t.Fatalf("fired %v while partition 2 holds the watermark at minus infinity", out.results)
	}
	p.Revoke(2) // the watermark goes to 8999 at once
	var fired []string
	for _, r := range out.results {
		fired = append(fired, fmt.Sprintf("p%d %s [%d,%d) gen %d", r.Partition, r.Key, r.Window.Start, r.Window.End, r.Generation))
	}
	want := []string{
		`p0 {"k":"a"} [0,2000) gen 2`, `p0 {"k":"b"} [0,2000) gen 2`, `p0 {"k":"a"} [2000,4000) gen 2`,
		`p1 {"k":"a"} [1000,2000) gen 1`, `p1 {"k":"b"} [1000,2000) gen 1`, `p1 {"k":"a"} [2000,4000) gen 2`,
	}
	if !slices.Equal(fired, want) {
		t.Errorf("fired\n%q\nwant\n%q", fired, want)
	}
}
