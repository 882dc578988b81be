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

// TestMergedListsAsOneList: by_key with watermark.scope global keeps a
// list of operators per partition, every one following the merged
// watermark, where the release before kept one operator for every
// partition. With one generation the results are the same: the same
// windows, values, revisions and late events, and each partition's
// results in the same order (so each key's, a key being on one
// partition). What differs is the order across partitions within one
// step of the watermark: partition by partition, ascending, where one
// operator gave them in order of window end, key, partition. The stream
// has each key on every partition (input not keyed by the group key, a
// misuse): a key keeps a window per partition, as before. A partition is
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
				for id := range int32(parts) {
					g, w := resultsOfPartition(got.results, id), resultsOfPartition(want.results, id)
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("partition %d's results differ from one operator for all:\n%s", id, firstDiff(g, w))
					}
				}
				if len(got.results) == 0 || len(got.results) != len(want.results) {
					t.Fatalf("%d results, want %d (and some)", len(got.results), len(want.results))
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

// TestMergedListsOrder: two partitions whose windows one watermark step
// makes due together: one operator for all fired them in order of window
// end, key, partition; the lists per partition fire them partition by
// partition. The same key on both partitions (a misuse) has a window on
// each, and the later partition's result of a window comes after the
// earlier's either way.
func TestMergedListsOrder(t *testing.T) {
	const yaml = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
window: {type: tumbling, size: 1s}
aggregates: [{name: n, fn: count}]
`
	fired := func(oneList bool) []string {
		p, out := newProcessor(t, yaml)
		if oneList {
			pipeline.WithOneList(p.Processor)
		}
		for id := range int32(3) {
			p.Assign(id, 0)
		}
		feed(p, []crashInput{ // partition 2 holds the watermark back
			{0, 0, `{"k":"a","t":100}`}, {1, 0, `{"k":"a","t":200}`}, {1, 1, `{"k":"b","t":1100}`},
			{0, 1, `{"k":"b","t":1200}`}, {0, 2, `{"k":"a","t":5000}`}, {1, 2, `{"k":"a","t":5000}`},
		}, nil)
		if len(out.results) != 0 {
			t.Fatalf("fired %v while partition 2 holds the watermark at minus infinity", out.results)
		}
		p.Revoke(2) // the watermark goes to 4999 at once
		var s []string
		for _, r := range out.results {
			s = append(s, fmt.Sprintf("p%d %s [%d,%d)", r.Partition, r.Key, r.Window.Start, r.Window.End))
		}
		return s
	}
	one := []string{`p0 {"k":"a"} [0,1000)`, `p1 {"k":"a"} [0,1000)`, `p0 {"k":"b"} [1000,2000)`, `p1 {"k":"b"} [1000,2000)`}
	lists := []string{`p0 {"k":"a"} [0,1000)`, `p0 {"k":"b"} [1000,2000)`, `p1 {"k":"a"} [0,1000)`, `p1 {"k":"b"} [1000,2000)`}
	if got := fired(true); !slices.Equal(got, one) {
		t.Errorf("one operator for all fired %q, want %q", got, one)
	}
	if got := fired(false); !slices.Equal(got, lists) {
		t.Errorf("a list per partition fired %q, want %q", got, lists)
	}
}
