package pipeline_test

import (
	"testing"

	"aggregator/internal/config"
)

// TestGenerationMoveMidOverlap: by_key with watermark.scope global (a
// list of operators per partition, following the merged watermark).
// Instance A cuts both partitions over to 5-second windows with another
// aggregate; while the old generation still has windows, partition 1 is
// revoked and instance B restores it with both generations, goes on with
// it, and gives it back: A restores it behind (or ahead of) its own
// watermark, again with both generations. The lateness is long enough
// that no record is late under any instance's watermark, so every
// window's last result is the run's without a move: each window computed
// by its own generation, with every record of it.
func TestGenerationMoveMidOverlap(t *testing.T) {
	old := inScope(genConfig("1", "{type: tumbling, size: 1s, allowed_lateness: 30s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}]"), "global")
	next := inScope(genConfig("2", "{type: tumbling, size: 5s, allowed_lateness: 30s}", "[{name: n, fn: count}, {name: s, fn: sum, field: v}, {name: m, fn: max, field: v}]"), "global")
	const parts = 2
	ins := crashStream(29, 480, parts, false)
	at, give, back := 120, 220, 320

	first, out1 := newProcessor(t, old)
	restoreFrom(t, first, changelog{}, 0, 1)
	feed(first, ins[:at], nil)
	log := changelog{}
	log.commit(first)

	// The run without a move.
	ref, outRef := newProcessor(t, next)
	feed(ref, ins, restoreFrom(t, ref, log, 0, 1))
	ref.Flush()
	want := latest(append(append(out1.results[:0:0], out1.results...), outRef.results...))

	a, outA := newProcessor(t, next)
	fromA := restoreFrom(t, a, log, 0, 1)
	for id := range int32(parts) {
		if rep := a.GenerationReport(id); rep.Verdict != config.NewGeneration || rep.Live != 2 {
			t.Fatalf("A's restore of partition %d: %+v, want a cut-over to a second generation", id, rep)
		}
	}
	feed(a, ins[at:give], fromA)
	log.commit(a)
	if got := a.Generations(); got != 4 {
		t.Fatalf("A holds %d generations at the move, want 4 (two per partition): the move is not mid-overlap", got)
	}
	a.Revoke(1)

	b, outB := newProcessor(t, next)
	fromB := restoreFrom(t, b, log, 1)
	if rep := b.GenerationReport(1); rep.Verdict != config.Nothing || rep.Live != 2 {
		t.Fatalf("B's restore of partition 1: %+v, want both generations and nothing new", rep)
	}
	for _, in := range ins[give:back] {
		if in.part == 0 {
			feed(a, []crashInput{in}, fromA)
		} else {
			feed(b, []crashInput{in}, fromB)
		}
	}
	log.commit(b)
	if got := b.Generations(); got != 2 {
		t.Fatalf("B holds %d generations when it gives partition 1 back, want 2: not mid-overlap", got)
	}
	b.Revoke(1)
	log.commit(a)

	fromA[1] = restoreFrom(t, a, log, 1)[1]
	if rep := a.GenerationReport(1); rep.Live != 2 {
		t.Fatalf("A's restore of partition 1 again: %+v, want both generations", rep)
	}
	feed(a, ins[back:], fromA)
	a.Flush()

	got := append(append(append(out1.results[:0:0], out1.results...), outA.results...), outB.results...)
	if d := diffLatest(latest(got), want); d != "" {
		t.Fatalf("with partition 1 moved mid-overlap: %s", d)
	}
	gens := map[int64]bool{}
	for _, r := range outB.results {
		gens[r.Generation] = true
	}
	if !gens[2] {
		t.Fatalf("B fired windows of generations %v, want the new one's (the old one's fired in A, and B holds them for their lateness)", gens)
	}
	for _, r := range got {
		if r.Window.End-r.Window.Start == 5000 && r.Generation != 2 || r.Window.End-r.Window.Start == 1000 && r.Generation != 1 {
			t.Fatalf("%+v: computed by the other generation", r)
		}
	}
}

// restoreFrom assigns ids to p and restores them from log, and returns
// where each resumes: its position's offset (0: none).
func restoreFrom(t *testing.T, p core, log changelog, ids ...int32) map[int32]int64 {
	t.Helper()
	for _, id := range ids {
		p.Assign(id, 0)
	}
	from := map[int32]int64{}
	for _, id := range ids {
		res, err := p.Restore(id, log.restorer(t, id), 0)
		if err != nil {
			t.Fatalf("Restore(%d): %v", id, err)
		}
		if res.HasPosition {
			from[id] = res.Position.Offset
		}
	}
	return from
}
