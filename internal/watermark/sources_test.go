package watermark

import (
	"math"
	"testing"
	"time"

	"aggregator/internal/config"
)

// step is one thing that happens to a Sources: a marker read from a
// repartition partition, or a tick of the wall clock.
type step struct {
	part int32
	mark Mark
	tick int64 // > 0: Tick(tick) instead of a marker
}

func mk(part, src, count int32, wm int64, idle bool) step {
	return step{part: part, mark: Mark{Source: src, Count: count, Watermark: wm, Idle: idle}}
}

func TestSources(t *testing.T) {
	cfg := config.Watermark{MaxOutOfOrderness: time.Second, IdleTimeout: 5 * time.Second}
	advance := cfg
	advance.IdleAdvance = true
	tests := map[string]struct {
		cfg   config.Watermark
		parts []int32
		steps []step
		want  int64
	}{
		"no marker":                   {cfg, []int32{0}, nil, minusInf},
		"not every source reported":   {cfg, []int32{0}, []step{mk(0, 0, 3, 100, false), mk(0, 2, 3, 200, false)}, minusInf},
		"every source reported":       {cfg, []int32{0}, []step{mk(0, 0, 3, 100, false), mk(0, 2, 3, 200, false), mk(0, 1, 3, 50, false)}, 50},
		"a source never goes back":    {cfg, []int32{0}, []step{mk(0, 0, 2, 100, false), mk(0, 1, 2, 300, false), mk(0, 1, 2, 150, false), mk(0, 0, 2, 400, false)}, 300},
		"W never goes back":           {cfg, []int32{0}, []step{mk(0, 0, 1, 100, false), mk(0, 0, 2, 100, false)}, 100},
		"idle sources are left out":   {cfg, []int32{0}, []step{mk(0, 0, 2, 100, false), mk(0, 1, 2, 10, true)}, 100},
		"an idle source comes back":   {cfg, []int32{0}, []step{mk(0, 0, 2, 100, false), mk(0, 1, 2, 10, true), mk(0, 1, 2, 150, false), mk(0, 0, 2, 200, false)}, 150},
		"an idle source must report":  {cfg, []int32{0}, []step{mk(0, 0, 2, 100, false)}, minusInf},
		"the minimum over partitions": {cfg, []int32{0, 1}, []step{mk(0, 0, 1, 100, false), mk(1, 0, 1, 70, false)}, 70},
		"a partition without markers holds W": {cfg, []int32{0, 1},
			[]step{mk(0, 0, 1, 100, false)}, minusInf},
		"an all-idle partition is left out": {cfg, []int32{0, 1},
			[]step{mk(0, 0, 2, 100, false), mk(0, 1, 2, 100, false), mk(1, 0, 2, 100, true), mk(1, 1, 2, 20, true)}, 100},
		"a changed count reopens the wait": {cfg, []int32{0},
			[]step{mk(0, 0, 1, 100, false), mk(0, 0, 2, 300, false)}, 100},
		"a lower count is ignored": {cfg, []int32{0},
			[]step{mk(0, 0, 2, 100, false), mk(0, 1, 2, 200, false), mk(0, 0, 1, 300, false)}, 100},
		"the wait ends once the new count reported": {cfg, []int32{0},
			[]step{mk(0, 0, 1, 100, false), mk(0, 0, 2, 300, false), mk(0, 1, 2, 250, false)}, 250},
		"a bad marker is ignored": {cfg, []int32{0},
			[]step{mk(0, 0, 1, 100, false), mk(0, 3, 2, 300, false), mk(0, 0, 0, 500, false), mk(0, -1, 1, 500, false)}, 100},
		"all idle without idle_advance stays": {cfg, []int32{0},
			[]step{mk(0, 0, 1, 100, false), mk(0, 0, 1, 100, true), {tick: 60_000}}, 100},
		"all idle with idle_advance moves": {advance, []int32{0},
			[]step{mk(0, 0, 1, 100, false), mk(0, 0, 1, 100, true), {tick: 60_000}}, 60_000 - 1_000 - 5_000},
		"idle_advance never goes back": {advance, []int32{0},
			[]step{mk(0, 0, 1, 100_000, false), mk(0, 0, 1, 100_000, true), {tick: 60_000}}, 100_000},
		"idle_advance waits for every partition": {advance, []int32{0, 1},
			[]step{mk(0, 0, 1, 100, true), mk(1, 0, 1, 100, false), {tick: 60_000}}, 100},
		"idle_advance waits for every source": {advance, []int32{0},
			[]step{mk(0, 0, 2, 100, true), {tick: 60_000}}, minusInf},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSources(tt.cfg)
			for _, p := range tt.parts {
				s.Assign(p)
			}
			last := s.Current()
			for i, st := range tt.steps {
				if st.tick > 0 {
					s.Tick(st.tick)
				} else {
					s.Mark(st.part, st.mark)
				}
				if s.Current() < last {
					t.Fatalf("step %d %+v: W went from %d back to %d", i, st, last, s.Current())
				}
				last = s.Current()
			}
			if got := s.Current(); got != tt.want {
				t.Errorf("Current() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSourcesRevokeAndRestore(t *testing.T) {
	s := NewSources(config.Watermark{})
	s.Assign(0)
	s.Assign(1)
	s.Mark(0, Mark{Source: 0, Count: 1, Watermark: 500})
	if got := s.Current(); got != minusInf {
		t.Fatalf("partition 1 has no marker: Current() = %d, want minus infinity", got)
	}
	s.Revoke(1)
	if got := s.Current(); got != 500 {
		t.Fatalf("after Revoke(1): Current() = %d, want 500", got)
	}
	tab := s.Table(0)
	other := NewSources(config.Watermark{})
	other.Restore(0, tab)
	if got := other.Current(); got != 500 {
		t.Errorf("restored from Table(0) = %+v: Current() = %d, want 500", tab, got)
	}
	s.Mark(0, Mark{Source: 0, Count: 1, Watermark: 900})
	if got := other.Table(0).Sources[0].Watermark; got != 500 {
		t.Errorf("Restore kept a reference to the table: its watermark became %d", got)
	}
	other.Lower(100)
	if got := other.Current(); got != 100 {
		t.Errorf("Lower(100): Current() = %d, want 100", got)
	}
}

func TestSourcesSeen(t *testing.T) {
	s := NewSources(config.Watermark{})
	s.Assign(3)
	type seen struct {
		src  int32
		off  int64
		want bool
	}
	for i, c := range []seen{{0, 5, false}, {0, 6, false}, {0, 5, true}, {0, 6, true}, {2, 0, false}, {2, 0, true}, {0, 7, false}, {-1, 0, false}} {
		if got := s.Seen(3, c.src, c.off); got != c.want {
			t.Errorf("%d: Seen(3, %d, %d) = %v, want %v", i, c.src, c.off, got, c.want)
		}
	}
	// Data before the first marker grew the table; the marker still waits for all.
	if got := s.Unreported(3); got != -1 {
		t.Errorf("no marker yet: Unreported(3) = %d, want -1", got)
	}
	s.Mark(3, Mark{Source: 1, Count: 3, Watermark: 10})
	if got := s.Unreported(3); got != 2 {
		t.Errorf("one of three reported: Unreported(3) = %d, want 2", got)
	}
	if !s.Seen(3, 0, 6) {
		t.Errorf("the first marker forgot source 0's offsets applied before it")
	}
	// A lower count is a reporter that has not seen the sources grow: ignored.
	s.Mark(3, Mark{Source: 0, Count: 2, Watermark: 10})
	if got := s.Unreported(3); got != 2 {
		t.Errorf("a marker of count 2 after count 3: Unreported(3) = %d, want 2 (ignored)", got)
	}
	// A higher count reopens the wait and forgets the offsets applied: the
	// ids may name other partitions now.
	s.Mark(3, Mark{Source: 3, Count: 4, Watermark: 10})
	if s.Seen(3, 0, 6) {
		t.Errorf("after count 3 became 4, Seen(3, 0, 6) = true, want false (offsets applied forgotten)")
	}
	if got, _ := s.Partition(3); got != minusInf {
		t.Errorf("count 4, one reported: Partition(3) = %d, want minus infinity", got)
	}
	if got, idle := s.Partition(9); got != minusInf || idle {
		t.Errorf("Partition(9) (unassigned) = %d, %v, want minus infinity, false", got, idle)
	}
}

func TestAnnouncer(t *testing.T) {
	m := NewMerged(config.Watermark{IdleTimeout: 5 * time.Second})
	m.Assign(0, 0)
	m.Assign(1, 0)
	a := NewAnnouncer()
	due := func(now int64) []Mark { return a.Due(nil, m, m.Partitions(), 2, now) }
	if got := due(0); len(got) != 2 || got[0] != (Mark{Source: 0, Count: 2, Watermark: minusInf}) || got[1].Source != 1 {
		t.Fatalf("first commit: Due = %+v, want both partitions at minus infinity", got)
	}
	if got := due(1_000); len(got) != 0 {
		t.Errorf("nothing changed: Due = %+v, want none", got)
	}
	m.OnEvent(1, 5_000, 2_000)
	if got := due(2_000); len(got) != 1 || got[0] != (Mark{Source: 1, Count: 2, Watermark: 4_999}) {
		t.Errorf("partition 1 moved: Due = %+v, want partition 1 at 4999", got)
	}
	m.SetCaughtUp(0, true, 2_000)
	m.Tick(7_000)
	if got := due(7_000); len(got) != 1 || got[0] != (Mark{Source: 0, Count: 2, Watermark: minusInf, Idle: true}) {
		t.Errorf("partition 0 went idle: Due = %+v, want partition 0 idle", got)
	}
	if got := due(2_000 + Heartbeat - 1); len(got) != 0 {
		t.Errorf("before a heartbeat: Due = %+v, want none", got)
	}
	if got := due(2_000 + Heartbeat); len(got) != 1 || got[0].Source != 1 {
		t.Errorf("partition 1's heartbeat (announced at 2000): Due = %+v, want partition 1", got)
	}
	if got := due(7_000 + Heartbeat); len(got) != 1 || got[0] != (Mark{Source: 0, Count: 2, Watermark: minusInf, Idle: true}) {
		t.Errorf("partition 0's heartbeat (announced at 7000): Due = %+v, want partition 0 idle", got)
	}
	a.Forget(1)
	if got := due(7_000 + Heartbeat + 1); len(got) != 1 || got[0].Source != 1 {
		t.Errorf("after Forget(1): Due = %+v, want partition 1", got)
	}
	a.Reset()
	if got := due(7_000 + Heartbeat + 2); len(got) != 2 {
		t.Errorf("after Reset: Due = %+v, want both partitions", got)
	}
}

// TestSourcesMarkChanged: Mark reports whether it may have moved a
// partition's watermark or W, so that a data record whose source's
// watermark stayed costs no firing check; partitions are found by id
// after others come and go.
func TestSourcesMarkChanged(t *testing.T) {
	s := NewSources(config.Watermark{})
	for _, p := range []int32{3, 0, 7} {
		s.Assign(p)
	}
	s.Revoke(0)
	steps := []struct {
		part int32
		mark Mark
		want bool
	}{
		{3, Mark{Source: 0, Count: 2, Watermark: 100}, true}, // first report
		{3, Mark{Source: 0, Count: 2, Watermark: 100}, false},
		{3, Mark{Source: 0, Count: 2, Watermark: 50}, false}, // never goes down
		{3, Mark{Source: 0, Count: 2, Watermark: 150}, true},
		{3, Mark{Source: 1, Count: 2, Watermark: 120}, true},
		{3, Mark{Source: 1, Count: 1, Watermark: 999}, false}, // a lower count: ignored
		{3, Mark{Source: 2, Count: 2, Watermark: 999}, false}, // no such source
		{3, Mark{Source: 1, Count: 2, Watermark: 120, Idle: true}, true},
		{7, Mark{Source: 0, Count: 1, Watermark: 10}, true},
		{0, Mark{Source: 0, Count: 1, Watermark: 10}, true}, // revoked: assigned again
	}
	for i, st := range steps {
		if got := s.Mark(st.part, st.mark); got != st.want {
			t.Errorf("step %d: Mark(%d, %+v) = %v, want %v", i, st.part, st.mark, got, st.want)
		}
	}
	if wm, _ := s.Partition(3); wm != 150 {
		t.Errorf("Partition(3) = %d, want 150 (source 1 idle)", wm)
	}
	if wm, _ := s.Partition(7); wm != 10 {
		t.Errorf("Partition(7) = %d, want 10", wm)
	}
	if got := s.Partitions(); len(got) != 3 || got[0] != 0 || got[1] != 3 || got[2] != 7 {
		t.Errorf("Partitions() = %v, want [0 3 7]", got)
	}
}

// TestSourcesRaised: Raised is the watermark Mark would take a
// partition to, and changes nothing.
func TestSourcesRaised(t *testing.T) {
	s := NewSources(config.Watermark{})
	s.Assign(0)
	if got := s.Raised(0, Mark{Source: 0, Count: 2, Watermark: 50}); got != math.MinInt64 {
		t.Errorf("Raised before any marker = %d, want MinInt64 (a source unreported)", got)
	}
	s.Mark(0, Mark{Source: 0, Count: 2, Watermark: 10})
	s.Mark(0, Mark{Source: 1, Count: 2, Watermark: 30})
	tests := map[string]struct {
		m    Mark
		want int64
	}{
		"raises the low source":    {Mark{Source: 0, Count: 2, Watermark: 20}, 20},
		"past the other source":    {Mark{Source: 0, Count: 2, Watermark: 99}, 30},
		"never lowers":             {Mark{Source: 0, Count: 2, Watermark: 5}, 10},
		"raises the high source":   {Mark{Source: 1, Count: 2, Watermark: 40}, 10},
		"more sources: wait again": {Mark{Source: 0, Count: 3, Watermark: 99}, math.MinInt64},
		"fewer sources: ignored":   {Mark{Source: 0, Count: 1, Watermark: 99}, 10},
	}
	for name, tt := range tests {
		if got := s.Raised(0, tt.m); got != tt.want {
			t.Errorf("%s: Raised(0, %+v) = %d, want %d", name, tt.m, got, tt.want)
		}
	}
	s.Mark(0, Mark{Source: 1, Count: 2, Watermark: 30, Idle: true})
	if got := s.Raised(0, Mark{Source: 0, Count: 2, Watermark: 99}); got != 99 {
		t.Errorf("Raised with the other source idle = %d, want 99", got)
	}
	if wm, _ := s.Partition(0); wm != 10 {
		t.Errorf("Partition(0) = %d after Raised, want 10: Raised must not mark", wm)
	}
}
