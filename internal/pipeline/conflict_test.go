package pipeline_test

import (
	"fmt"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
)

const spreadJSON = `
source: {key: [user], timestamp: {field: t, layout: unix_ms}, partitioning: by_key}
window: {size: 10s}
aggregates: [{name: n, fn: count}]
`

func event(partition int32, offset int64, user string, t int64) *ready.Input {
	return &ready.Input{Partition: partition, KafkaPartition: partition, Offset: offset,
		Value: fmt.Appendf(nil, `{"user":%q,"t":%d}`, user, t)}
}

// TestKeyPartitionConflicts checks the by_key check: a key seen on a
// second partition of the instance counts each of its records there, and
// one conflict is handed out to be logged per minute of the caller's clock.
func TestKeyPartitionConflicts(t *testing.T) {
	p, _ := newProcessor(t, spreadJSON)
	p.Assign(0, 0)
	p.Assign(1, 0)
	p.Process(event(0, 0, "a", 1000), 0)
	p.Process(event(1, 0, "b", 1000), 0)
	p.Process(event(0, 1, "a", 1100), 0)
	if n, _, ok := p.TakeConflicts(0); n != 0 || ok {
		t.Fatalf("TakeConflicts with each key on one partition = %d, %v; want 0, false", n, ok)
	}
	p.Process(event(1, 1, "a", 1200), 0) // a: first on 0, now on 1
	p.Process(event(1, 2, "a", 1300), 0)
	p.Process(event(0, 2, "b", 1300), 0) // b: first on 1, now on 0
	n, c, ok := p.TakeConflicts(5_000)
	if want := (ready.Conflict{Key: `{"user":"a"}`, First: 0, Second: 1}); n != 3 || !ok || c != want {
		t.Fatalf("TakeConflicts = %d, %+v, %v; want 3, %+v, true", n, c, ok, want)
	}
	p.Process(event(0, 3, "b", 1400), 5_000)
	if n, _, ok := p.TakeConflicts(64_999); n != 1 || ok {
		t.Fatalf("TakeConflicts within the minute = %d, %v; want 1, false (counted, not logged)", n, ok)
	}
	n, c, ok = p.TakeConflicts(65_000)
	if want := (ready.Conflict{Key: `{"user":"b"}`, First: 1, Second: 0}); n != 0 || !ok || c != want {
		t.Fatalf("TakeConflicts a minute later = %d, %+v, %v; want 0, %+v, true", n, c, ok, want)
	}
	if n, _, ok := p.TakeConflicts(200_000); n != 0 || ok {
		t.Fatalf("TakeConflicts with nothing new = %d, %v; want 0, false", n, ok)
	}
	// Partition 0 leaves: the keys first seen on it are forgotten, so its
	// next owner being this instance again is no conflict for a.
	p.Revoke(0)
	p.Assign(2, 0)
	p.Process(event(2, 0, "a", 1500), 0)
	p.Process(event(1, 3, "a", 1600), 0)
	if n, _, _ := p.TakeConflicts(300_000); n != 1 {
		t.Fatalf("TakeConflicts after a revocation = %d; want 1 (a on 2, then on 1)", n)
	}
}

// TestKeyPartitionConflictsOnePartition checks that an instance holding
// one partition never counts: nothing of its own can conflict.
func TestKeyPartitionConflictsOnePartition(t *testing.T) {
	p, _ := newProcessor(t, spreadJSON)
	p.Assign(3, 0)
	for i := range int64(5) {
		p.Process(event(3, i, "a", 1000+i), 0)
	}
	if n, _, ok := p.TakeConflicts(0); n != 0 || ok {
		t.Fatalf("TakeConflicts = %d, %v; want 0, false", n, ok)
	}
}

// TestOneState checks replay's mode: a key's records on two partitions
// are one window state, fired once W (the minimum over the partitions)
// passes its end, and a record late on the merged watermark is late.
func TestOneState(t *testing.T) {
	out := &tape{}
	p := newCoreMode(t, spreadJSON, out, pipeline.Mode{OneState: true})
	p.Assign(0, 0)
	p.Assign(1, 0)
	p.Process(event(0, 0, "a", 1000), 0)
	p.Process(event(1, 0, "a", 2000), 0)
	p.Process(event(0, 1, "a", 3000), 0)
	p.Process(event(0, 2, "a", 25000), 0) // partition 0 at 25s, 1 still at 2s: W = 1999
	if len(out.results) != 0 {
		t.Fatalf("fired %d results before the slower partition passed the window", len(out.results))
	}
	p.Process(event(1, 1, "a", 12000), 0) // W = 11999: [0,10s) fires with 3 records
	if len(out.results) != 1 || out.results[0].Aggregates[0].Num != 3 {
		t.Fatalf("results = %+v; want one result of [0,10s) counting 3 records of two partitions", out.results)
	}
	p.Process(event(1, 2, "a", 4000), 0)
	if len(out.late) != 1 || out.late[0] != 2 {
		t.Fatalf("late = %v; want partition 1's offset 2", out.late)
	}
	if n, _, ok := p.TakeConflicts(0); n != 0 || ok {
		t.Fatalf("TakeConflicts in one-state mode = %d, %v; want 0, false", n, ok)
	}
}
