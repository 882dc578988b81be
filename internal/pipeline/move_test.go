package pipeline_test

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/windowing"
)

// Where the move tests cut the stream (indexes into each partition's
// records, which are also their offsets).
const (
	moveN  = 300
	cut0   = 100 // A's commit: partition 0's records before it
	cut1   = 100 // and partition 1's
	more0  = 200 // B has partition 0's records up to here when partition 1 comes
	again0 = 230 // B's commit before partition 0 moves on (TestMoveAgain)
	again1 = 180 // and partition 1's
)

// moveStream is moveN records per partition, event times increasing by
// 137ms: partition 0's from 100s, partition 1's from 10s (far behind),
// keys k0 to k4. Partition 0's records from more0 on include stragglers
// (every tenth, 20s old), late wherever partition 0 was judged.
func moveStream() (p0, p1 []crashInput) {
	for i := range moveN {
		t0 := 100_000 + 137*i
		if i >= more0 && i%10 == 5 {
			t0 -= 20_000
		}
		p0 = append(p0, crashInput{0, int64(i), fmt.Sprintf(`{"k": "k%d", "t": %d, "v": %d}`, i%5, t0, i%9)})
		p1 = append(p1, crashInput{1, int64(i), fmt.Sprintf(`{"k": "k%d", "t": %d, "v": %d}`, (i*3)%5, 10_000+137*i, (i*7)%9)})
	}
	return p0, p1
}

// stragglers are the offsets of partition 0's stragglers in [from, to).
func stragglers(from, to int) []int64 {
	var out []int64
	for i := max(from, more0); i < to; i++ {
		if i%10 == 5 {
			out = append(out, int64(i))
		}
	}
	return out
}

// interleave alternates a and b.
func interleave(a, b []crashInput) []crashInput {
	var out []crashInput
	for i := range max(len(a), len(b)) {
		out = append(out, a[min(i, len(a)):min(i+1, len(a))]...)
		out = append(out, b[min(i, len(b)):min(i+1, len(b))]...)
	}
	return out
}

func resultsOf(rs []windowing.Result, part int32) []windowing.Result {
	var out []windowing.Result
	for _, r := range rs {
		if r.Partition == part {
			out = append(out, r)
		}
	}
	return out
}

// windowID is a (partition, key, window).
type windowID struct {
	part  int32
	key   string
	start int64
}

func idOfResult(r windowing.Result) windowID { return windowID{r.Partition, r.Key, r.Window.Start} }

// contents is what a window's result says of its records.
type contents struct {
	count int64
	aggs  string
}

// latest is the last result's contents per window.
func latest(rs []windowing.Result) map[windowID]contents {
	m := map[windowID]contents{}
	for _, r := range rs {
		m[idOfResult(r)] = contents{r.Count, fmt.Sprint(r.Aggregates)}
	}
	return m
}

// twiceOnTime returns the windows with more than one on-time or final firing.
func twiceOnTime(rs []windowing.Result) []string {
	n := map[windowID]int{}
	var out []string
	for _, r := range rs {
		if r.Firing == windowing.Late {
			continue
		}
		id := idOfResult(r)
		n[id]++
		if n[id] == 2 {
			out = append(out, fmt.Sprintf("%+v (then %v rev %d count %d at %d)", id, r.Firing, r.Revision, r.Count, r.Watermark))
		}
	}
	return out
}

// diffLatest describes how two latest maps differ, or returns "".
func diffLatest(got, want map[windowID]contents) string {
	byWindow := func(a, b windowID) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.key, b.key), cmp.Compare(a.part, b.part))
	}
	for _, id := range slices.SortedFunc(maps.Keys(want), byWindow) {
		if g, ok := got[id]; !ok || g != want[id] {
			return fmt.Sprintf("%+v ends with %+v (there: %v), want %+v", id, g, ok, want[id])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d windows with results, want %d", len(got), len(want))
	}
	return ""
}

// commit writes p's checkpoint to log, data before positions.
func (c changelog) commit(p core) {
	data, positions := p.Checkpoint()
	c.write(data)
	c.write(positions)
}

// restore assigns parts to p, then restores them in order.
func restore(t *testing.T, p core, log changelog, parts ...int32) {
	t.Helper()
	for _, part := range parts {
		p.Assign(part, 0)
	}
	for _, part := range parts {
		if _, err := p.Restore(part, log.restorer(t, part), 0); err != nil {
			t.Fatalf("Restore(%d): %v", part, err)
		}
	}
}

// moved is TestMovePartitionBehind's setup: A held both partitions and
// committed after cut0 and cut1 records; B restored partition 0, went on
// to more0 with it, then partition 1 joined it.
type moved struct {
	p0, p1     []crashInput
	log        changelog
	a, b       core
	outA, outB *tape
	committedA int   // len(outA.results) at A's commit
	joined     int   // len(outB.results) when partition 1 joined
	wm1        int64 // partition 1's watermark at A's commit
	ahead      int64 // B's watermark when partition 1 joined
}

func move(t *testing.T, yaml string) *moved {
	t.Helper()
	m := &moved{log: changelog{}}
	m.p0, m.p1 = moveStream()
	m.a, m.outA = newProcessor(t, yaml)
	m.a.Assign(0, 0)
	m.a.Assign(1, 0)
	feed(m.a, interleave(m.p0[:cut0], m.p1[:cut1]), nil)
	m.log.commit(m.a)
	m.wm1, _ = m.a.PartitionWatermark(1)
	m.committedA = len(m.outA.results)

	m.b, m.outB = newProcessor(t, yaml)
	restore(t, m.b, m.log, 0)
	feed(m.b, m.p0[cut0:more0], nil)
	feed(m.a, m.p0[cut0:more0], nil)
	m.ahead = m.b.Watermark()
	m.joined = len(m.outB.results)
	restore(t, m.b, m.log, 1)
	return m
}

// TestMovePartitionBehind: processor A holds partitions 0 and 1, 1's
// event times far behind 0's, and commits. Partition 0 moves to B, which
// goes on with more of 0's records, so B's watermark goes far ahead of
// 1's. Then partition 1 moves to B too: B's watermark goes back to 1's
// position watermark, and 1's records have the fates and results they
// have in A (which kept both partitions and got the same records in the
// same order): no late events, the same counts, revisions and
// watermarks. 0's windows that B fired on time before 1 came do not
// fire on time again; 0's stragglers stay late (as in B0, which never
// got partition 1), and each of 0's windows ends as in B0.
func TestMovePartitionBehind(t *testing.T) {
	for name, yaml := range crashConfigs {
		t.Run(name, func(t *testing.T) {
			m := move(t, yaml)
			if m.ahead <= m.wm1 {
				t.Fatalf("B's watermark with partition 0 only = %d, want above partition 1's %d", m.ahead, m.wm1)
			}
			if got := m.b.Watermark(); got != m.wm1 {
				t.Errorf("Watermark() after Restore(1) = %d, want partition 1's position watermark %d (B was at %d)", got, m.wm1, m.ahead)
			}
			if got := m.outB.results[m.joined:]; len(got) != 0 {
				t.Errorf("Restore(1) emitted %d results, want none; first %+v", len(got), got[0])
			}
			feed(m.b, m.p1[cut1:], nil)
			feed(m.a, m.p1[cut1:], nil)
			if len(m.outA.late)+len(m.outB.late) != 0 {
				t.Errorf("late events of partition 1: A %v, B %v, want none", m.outA.late, m.outB.late)
			}
			gotB, wantA := resultsOf(m.outB.results, 1), resultsOf(m.outA.results[m.committedA:], 1)
			if len(wantA) == 0 {
				t.Fatal("A fired none of partition 1's windows after its commit: the test proves nothing")
			}
			if !reflect.DeepEqual(gotB, wantA) {
				t.Errorf("partition 1's results in B differ from A's:\n%s", firstDiff(gotB, wantA))
			}

			// Partition 0 goes on in B, and in B0, which has it alone.
			b0, out0 := newProcessor(t, yaml)
			restore(t, b0, m.log, 0)
			feed(b0, m.p0[cut0:], nil)
			lateBefore := len(m.outB.late)
			feed(m.b, m.p0[more0:], nil)
			feed(m.a, m.p0[more0:], nil)
			if got, want := m.outB.late[lateBefore:], stragglers(more0, moveN); !slices.Equal(got, want) {
				t.Errorf("late events of partition 0 in B after partition 1 joined = %v, want the stragglers %v", got, want)
			}
			if !slices.Equal(m.outB.late, out0.late) {
				t.Errorf("late events in B = %v, want B0's %v", m.outB.late, out0.late)
			}
			m.b.Flush()
			m.a.Flush()
			b0.Flush()
			gotB, wantA = resultsOf(m.outB.results, 1), resultsOf(m.outA.results[m.committedA:], 1)
			if !reflect.DeepEqual(gotB, wantA) {
				t.Errorf("partition 1's results in B after Flush differ from A's:\n%s", firstDiff(gotB, wantA))
			}
			before := resultsOf(m.outA.results[:m.committedA], 0)
			if len(resultsOf(m.outB.results[:m.joined], 0)) == 0 {
				t.Fatal("B fired none of partition 0's windows before partition 1 came: the test proves nothing")
			}
			all := append(slices.Clone(before), resultsOf(m.outB.results, 0)...)
			if dup := twiceOnTime(all); len(dup) != 0 {
				t.Errorf("%d of partition 0's windows fired on time twice, first %s", len(dup), dup[0])
			}
			if d := diffLatest(latest(all), latest(append(slices.Clone(before), out0.results...))); d != "" {
				t.Errorf("partition 0 in B, against B0: %s", d)
			}
			if n := m.b.OpenWindows(); n != 0 {
				t.Errorf("OpenWindows() after Flush = %d, want 0", n)
			}
		})
	}
}

// TestMoveAgain: after partition 1 joined B (TestMovePartitionBehind)
// and both went on, B commits; then partition 0 moves on to C alone, or
// both move to C (B crashed). A window of partition 0 that B dropped is
// not made again from the slices its later windows share: no window
// fires on time twice, and C with both partitions emits what B would
// have, whatever the restore order.
func TestMoveAgain(t *testing.T) {
	for name, yaml := range crashConfigs {
		t.Run(name, func(t *testing.T) {
			m := move(t, yaml)
			feed(m.b, interleave(m.p0[more0:again0], m.p1[cut1:again1]), nil)
			m.log.commit(m.b)
			committedB, lateB := len(m.outB.results), len(m.outB.late)
			before := append(resultsOf(m.outA.results[:m.committedA], 0), resultsOf(m.outB.results, 0)...)

			c0, out0 := newProcessor(t, yaml)
			restore(t, c0, m.log, 0)
			feed(c0, m.p0[again0:], nil)
			c0.Flush()
			if dup := twiceOnTime(append(slices.Clone(before), out0.results...)); len(dup) != 0 {
				t.Errorf("partition 0 moved on alone: %d windows fired on time twice, first %s", len(dup), dup[0])
			}
			if got, want := out0.late, stragglers(again0, moveN); !slices.Equal(got, want) {
				t.Errorf("partition 0 moved on alone: late events %v, want the stragglers %v", got, want)
			}

			rest := interleave(m.p0[again0:], m.p1[again1:])
			feed(m.b, rest, nil)
			m.b.Flush()
			want, wantLate := m.outB.results[committedB:], m.outB.late[lateB:]
			for _, order := range [][]int32{{0, 1}, {1, 0}} {
				c, out := newProcessor(t, yaml)
				restore(t, c, m.log, order...)
				feed(c, rest, nil)
				c.Flush()
				if !reflect.DeepEqual(out.results, want) {
					t.Errorf("both moved on (restored in order %v): results differ from B's:\n%s", order, firstDiff(out.results, want))
				}
				if !slices.Equal(out.late, wantLate) {
					t.Errorf("both moved on (restored in order %v): late events %v, want B's %v", order, out.late, wantLate)
				}
			}
		})
	}
}

// lateTape also keeps what Late is told.
type lateTape struct {
	tape
	judged []lateEvent
}

type lateEvent struct{ offset, eventTime, watermark int64 }

func (l *lateTape) Late(in *ready.Input, eventTime, watermark int64, missed windowing.Window) {
	l.tape.Late(in, eventTime, watermark, missed)
	l.judged = append(l.judged, lateEvent{in.Offset, eventTime, watermark})
}

// TestMoveLateWatermark: a late event carries the watermark it was judged
// against (docs/results.md: `aggregator.watermark`, "when it was judged late"),
// which is at least its event time. After partition 1 joined B, partition
// 0's stragglers are judged against 0's floor, not the watermark of 1.
func TestMoveLateWatermark(t *testing.T) {
	for name, yaml := range crashConfigs {
		t.Run(name, func(t *testing.T) {
			m := move(t, yaml)
			out := &lateTape{}
			b := newCoreMode(t, yaml, out, pipeline.Mode{Checkpointed: true})
			restore(t, b, m.log, 0)
			feed(b, m.p0[cut0:more0], nil)
			restore(t, b, m.log, 1)
			feed(b, m.p0[more0:], nil)
			if len(out.judged) == 0 {
				t.Fatal("no late events: the test proves nothing")
			}
			bad := slices.DeleteFunc(slices.Clone(out.judged), func(l lateEvent) bool { return l.watermark >= l.eventTime })
			if len(bad) > 0 {
				t.Errorf("%d of %d late events carry a watermark below their event time, first: offset %d, event time %d, watermark %d (B's %d)",
					len(bad), len(out.judged), bad[0].offset, bad[0].eventTime, bad[0].watermark, b.Watermark())
			}
		})
	}
}

// TestMoveBothAtOnce: both partitions move to B together (assigned
// first, as the consumer does), in either restore order: nothing goes
// back, and B emits what A does.
func TestMoveBothAtOnce(t *testing.T) {
	p0, p1 := moveStream()
	for name, yaml := range crashConfigs {
		t.Run(name, func(t *testing.T) {
			a, outA := newProcessor(t, yaml)
			a.Assign(0, 0)
			a.Assign(1, 0)
			feed(a, interleave(p0[:cut0], p1[:cut1]), nil)
			log := changelog{}
			log.commit(a)
			committed, wm := len(outA.results), a.Watermark()
			feed(a, interleave(p0[cut0:], p1[cut1:]), nil)
			a.Flush()
			for _, order := range [][]int32{{0, 1}, {1, 0}} {
				b, outB := newProcessor(t, yaml)
				restore(t, b, log, order...)
				if got := b.Watermark(); got != wm {
					t.Errorf("restore order %v: Watermark() = %d, want A's %d", order, got, wm)
				}
				feed(b, interleave(p0[cut0:], p1[cut1:]), nil)
				b.Flush()
				if !reflect.DeepEqual(outB.results, outA.results[committed:]) {
					t.Errorf("restore order %v: results differ from A's:\n%s", order, firstDiff(outB.results, outA.results[committed:]))
				}
				if !slices.Equal(outB.late, outA.late) {
					t.Errorf("restore order %v: late events %v, want A's %v", order, outB.late, outA.late)
				}
			}
		})
	}
}
