package pipeline_test

import (
	"math"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/state"
	"aggregator/internal/watermark"
)

const sharedJSON = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
watermark: {idle_timeout: 1s, idle_advance: true}
window: {size: 10s}
aggregates: [{name: n, fn: count}]
`

// restoreEmpty assigns and restores partitions with no changelog records.
func restoreEmpty(t *testing.T, p core, parts ...int32) {
	t.Helper()
	for _, part := range parts {
		p.Assign(part, 0)
		if _, err := p.Restore(part, state.NewRestorer(), 0); err != nil {
			t.Fatalf("Restore(%d): %v", part, err)
		}
	}
}

func (c core) Peer(partition int32, wm int64, idle bool) {
	defer c.drain()
	c.Processor.Peer(partition, wm, idle)
}

// newSharing is a checkpointed processor of sharedJSON in a group of n
// partitions.
func newSharing(t *testing.T, n int32) (core, *tape) {
	t.Helper()
	out := &tape{}
	return newCoreMode(t, sharedJSON, out, pipeline.Mode{Checkpointed: true, Group: n}), out
}

// published is the Watermarks of a commit Ready, accepted.
func published(p core) []watermark.Mark {
	rd := p.Commit()
	p.Accept()
	return append([]watermark.Mark(nil), rd.Watermarks...)
}

// TestShareWatermarks: a processor holding partitions 0 and 1 of a group
// of 3 publishes its partitions when they change, at most once per
// commit; its watermark is the minimum over the group, partition 2 by its
// published value (minus infinity before one); a published value of an
// owned partition does not count, and does once the partition is revoked.
func TestShareWatermarks(t *testing.T) {
	p, out := newSharing(t, 3)
	restoreEmpty(t, p, 0, 1)
	mark := func(id int32, wm int64) watermark.Mark { return watermark.Mark{Source: id, Count: 3, Watermark: wm} }
	if got := published(p); len(got) != 2 || got[0] != mark(0, math.MinInt64) || got[1] != mark(1, math.MinInt64) {
		t.Fatalf("first commit publishes %+v, want partitions 0 and 1 at minus infinity", got)
	}
	if got := published(p); len(got) != 0 {
		t.Fatalf("nothing changed: the commit publishes %+v, want nothing", got)
	}
	p.Process(event(0, 0, "a", 1_000), 0)
	p.Process(event(0, 1, "a", 12_000), 0)
	p.Process(event(1, 0, "b", 25_000), 0)
	if w := p.Watermark(); w != math.MinInt64 || len(out.results) != 0 {
		t.Fatalf("partition 2 never reported: watermark %d and %d results, want minus infinity and none", w, len(out.results))
	}
	if got := published(p); len(got) != 2 || got[0] != mark(0, 11_999) || got[1] != mark(1, 24_999) {
		t.Fatalf("after records: the commit publishes %+v, want partitions 0 at 11999 and 1 at 24999", got)
	}
	p.Peer(2, 30_000, false)
	if w := p.Watermark(); w != 11_999 || len(out.results) != 1 {
		t.Fatalf("partition 2 reported 30000: watermark %d and %d results, want 11999 (partition 0) and a's window", w, len(out.results))
	}
	p.Peer(0, 30_000, false) // its own value, read back: the live generator counts
	if w := p.Watermark(); w != 11_999 {
		t.Fatalf("a published value of an owned partition moved the watermark to %d, want 11999", w)
	}
	if wm, _, reported := p.GroupPartition(0); wm != 11_999 || !reported {
		t.Errorf("GroupPartition(0) = %d, %v, want the live 11999", wm, reported)
	}
	p.Revoke(0)
	if w := p.Watermark(); w != 24_999 {
		t.Fatalf("partition 0 revoked, published at 30000: watermark %d, want 24999 (partition 1)", w)
	}
	if wm, _, reported := p.GroupPartition(0); wm != 30_000 || !reported {
		t.Errorf("GroupPartition(0) after the revoke = %d, %v, want the published 30000", wm, reported)
	}
	restoreEmpty(t, p, 0)
	if got := published(p); len(got) != 1 || got[0] != mark(0, math.MinInt64) {
		t.Fatalf("partition 0 assigned again: the commit publishes %+v, want it at minus infinity", got)
	}
	if w := p.Watermark(); w != 24_999 {
		t.Fatalf("partition 0 back with a fresh generator: watermark %d, want 24999 (it never goes down)", w)
	}
	if _, _, reported := p.GroupPartition(5); reported {
		t.Error("GroupPartition(5), outside the group: reported, want not")
	}
}

// TestShareWatermarksAbort: an aborted commit keeps what the others
// published, and publishes every partition again once restored.
func TestShareWatermarksAbort(t *testing.T) {
	p, _ := newSharing(t, 2)
	restoreEmpty(t, p, 0)
	p.Process(event(0, 0, "a", 5_000), 0)
	p.Peer(1, 2_000, false)
	published(p)
	p.Abort(0)
	if wm, _, reported := p.GroupPartition(1); wm != 2_000 || !reported {
		t.Fatalf("after Abort: GroupPartition(1) = %d, %v, want the published 2000", wm, reported)
	}
	if got := published(p); len(got) != 0 {
		t.Fatalf("partition 0 waits for its restore: the commit publishes %+v, want nothing", got)
	}
	if _, err := p.Restore(0, state.NewRestorer(), 0); err != nil {
		t.Fatal(err)
	}
	if got := published(p); len(got) != 1 || got[0].Source != 0 {
		t.Fatalf("partition 0 restored after the abort: the commit publishes %+v, want it again", got)
	}
}

// TestShareWatermarksIdle: a published idle partition does not hold the
// watermark back, and idle_advance moves it only once every partition of
// the group is idle.
func TestShareWatermarksIdle(t *testing.T) {
	p, _ := newSharing(t, 2)
	restoreEmpty(t, p, 0)
	p.Process(event(0, 0, "a", 5_000), 0)
	p.SetCaughtUp(0, true, 0)
	p.Tick(60_000)
	if w := p.Watermark(); w != math.MinInt64 {
		t.Fatalf("partition 0 idle, partition 1 never reported: watermark %d, want minus infinity", w)
	}
	if got := published(p); len(got) != 1 || !got[0].Idle {
		t.Fatalf("partition 0 went idle: the commit publishes %+v, want it idle", got)
	}
	p.Peer(1, 2_000, false)
	p.Tick(61_000)
	if w := p.Watermark(); w != 2_000 {
		t.Fatalf("partition 0 idle, partition 1 active at 2000: watermark %d, want 2000", w)
	}
	p.Peer(1, 2_000, true)
	p.Tick(62_000)
	if w := p.Watermark(); w != 61_000 {
		t.Fatalf("every partition of the group idle: watermark %d, want 61000 (idle_advance)", w)
	}
}

// TestNotShared: without Mode.Group a commit publishes nothing and
// published values are ignored.
func TestNotShared(t *testing.T) {
	p, _ := newProcessor(t, sharedJSON)
	restoreEmpty(t, p, 0)
	p.Process(event(0, 0, "a", 5_000), 0)
	p.Peer(1, 100, false)
	if w := p.Watermark(); w != 4_999 {
		t.Fatalf("watermark %d, want 4999 (partition 0 alone)", w)
	}
	if got := published(p); len(got) != 0 {
		t.Fatalf("the commit publishes %+v, want nothing", got)
	}
}
