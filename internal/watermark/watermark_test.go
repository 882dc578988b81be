package watermark

import (
	"math"
	"slices"
	"testing"
	"time"

	"aggregator/internal/config"
)

const minusInf = math.MinInt64

func TestBounded(t *testing.T) {
	tests := map[string]struct {
		ooo    int64
		events []int64
		want   int64
	}{
		"before any record":     {0, nil, minusInf},
		"one record":            {0, []int64{10_000}, 9_999},
		"out of orderness":      {2_000, []int64{10_000}, 7_999},
		"older record is no-op": {0, []int64{10_000, 5_000}, 9_999},
		"max of all records":    {1_000, []int64{3_000, 12_161, 11_000}, 11_160},
		"saturates at min":      {0, []int64{math.MinInt64}, minusInf},
		"saturates with ooo":    {5, []int64{math.MinInt64 + 3}, minusInf},
		"huge out of orderness": {math.MaxInt64, []int64{0}, minusInf + 1},
		"negative ooo counts 0": {-7, []int64{100}, 99},
		"largest event time":    {0, []int64{math.MaxInt64}, math.MaxInt64 - 1},
		"before the epoch":      {0, []int64{-5_000}, -5_001},
		"markers are ignored":   {0, nil, minusInf},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewBounded(tt.ooo)
			for _, ts := range tt.events {
				g.OnEvent(ts)
			}
			g.OnMarker(math.MaxInt64)
			if got := g.Current(); got != tt.want {
				t.Errorf("NewBounded(%d) after %v: Current() = %d, want %d", tt.ooo, tt.events, got, tt.want)
			}
		})
	}
}

func TestPunctuated(t *testing.T) {
	tests := map[string]struct {
		markers []int64
		want    int64
	}{
		"before any marker":     {nil, minusInf},
		"one marker":            {[]int64{5_000}, 5_000},
		"never goes down":       {[]int64{5_000, 3_000}, 5_000},
		"rises":                 {[]int64{5_000, 3_000, 8_000}, 8_000},
		"before the epoch":      {[]int64{-10}, -10},
		"events do not move it": {[]int64{}, minusInf},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewPunctuated()
			for _, v := range tt.markers {
				g.OnMarker(v)
			}
			g.OnEvent(math.MaxInt64)
			if got := g.Current(); got != tt.want {
				t.Errorf("NewPunctuated() after markers %v: Current() = %d, want %d", tt.markers, got, tt.want)
			}
		})
	}
}

// An op is one call on a Merged.
type op func(m *Merged)

func assign(p int32, now int64) op { return func(m *Merged) { m.Assign(p, now) } }
func revoke(p int32) op            { return func(m *Merged) { m.Revoke(p) } }
func event(p int32, ts, now int64) op {
	return func(m *Merged) { m.OnEvent(p, ts, now) }
}
func marker(p int32, v, now int64) op { return func(m *Merged) { m.OnMarker(p, v, now) } }
func caughtUp(p int32, up bool, now int64) op {
	return func(m *Merged) { m.SetCaughtUp(p, up, now) }
}
func tick(now int64) op { return func(m *Merged) { m.Tick(now) } }

func bounded(ooo, idle time.Duration, advance bool) config.Watermark {
	return config.Watermark{Strategy: "bounded", MaxOutOfOrderness: ooo, IdleTimeout: idle, IdleAdvance: advance}
}

func TestMerged(t *testing.T) {
	const s = int64(time.Second / time.Millisecond)
	punctuated := config.Watermark{Strategy: "punctuated", MarkerField: "wm", IdleTimeout: 10 * time.Second}
	tests := map[string]struct {
		cfg config.Watermark
		ops []op
		// want is W after each op.
		want []int64
	}{
		"no partitions": {bounded(0, 0, false), []op{tick(100 * s)}, []int64{minusInf}},
		"one partition": {bounded(0, 0, false),
			[]op{assign(0, 0), event(0, 10*s, 0), event(0, 5*s, 0), event(0, 12*s, 0)},
			[]int64{minusInf, 10*s - 1, 10*s - 1, 12*s - 1}},
		"minimum of partitions": {bounded(0, 0, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 10*s, 0), event(1, 7*s, 0), event(1, 20*s, 0)},
			[]int64{minusInf, minusInf, minusInf, 7*s - 1, 10*s - 1}},
		"unknown partition is assigned": {bounded(time.Second, 0, false),
			[]op{event(3, 10*s, 0)},
			[]int64{9*s - 1}},
		"a new partition holds W without lowering it": {bounded(0, 0, false),
			[]op{event(0, 10*s, 0), assign(1, 0), event(0, 20*s, 0), event(1, 15*s, 0)},
			[]int64{10*s - 1, 10*s - 1, 10*s - 1, 15*s - 1}},
		"revoking the slowest raises W": {bounded(0, 0, false),
			[]op{event(0, 10*s, 0), event(1, 5*s, 0), revoke(1)},
			[]int64{10*s - 1, 10*s - 1, 10*s - 1}},
		"silent partition with idle_timeout: W follows the others": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), caughtUp(1, true, 0), event(0, 50*s, 5*s), tick(9 * s), tick(10 * s), event(0, 60*s, 11*s)},
			[]int64{minusInf, minusInf, minusInf, minusInf, minusInf, 50*s - 1, 60*s - 1}},
		"silent partition returns with old timestamps: W does not go down": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), event(1, 40*s, 0), caughtUp(1, true, 1*s), tick(11 * s), event(0, 60*s, 12*s), event(1, 41*s, 13*s), event(1, 70*s, 14*s)},
			[]int64{minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 50*s - 1, 60*s - 1, 60*s - 1, 60*s - 1}},
		"idle timer counts from the last record": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), caughtUp(1, true, 0), event(1, 40*s, 5*s), tick(14 * s), tick(15 * s)},
			[]int64{minusInf, minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 50*s - 1}},
		"idle timer counts from catching up": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), event(1, 40*s, 0), caughtUp(1, true, 20*s), tick(29 * s), caughtUp(1, true, 29*s), tick(30 * s), event(0, 55*s, 31*s)},
			[]int64{minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 40*s - 1, 40*s - 1, 50*s - 1, 55*s - 1}},
		"never idle while not caught up": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), event(1, 40*s, 0), tick(100 * s), caughtUp(1, true, 100*s), caughtUp(1, false, 200*s), tick(300 * s), event(0, 60*s, 301*s)},
			[]int64{minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 40*s - 1, 40*s - 1, 40*s - 1, 40*s - 1}},
		"falling behind ends idleness": {bounded(0, 10*time.Second, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), event(1, 40*s, 0), caughtUp(1, true, 0), tick(10 * s), caughtUp(1, false, 11*s), event(0, 60*s, 12*s)},
			[]int64{minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 50*s - 1, 50*s - 1, 50*s - 1}},
		"idle_timeout 0: never idle": {bounded(0, 0, false),
			[]op{assign(0, 0), assign(1, 0), event(0, 50*s, 0), event(1, 40*s, 0), caughtUp(1, true, 0), tick(1000 * s)},
			[]int64{minusInf, minusInf, minusInf, 40*s - 1, 40*s - 1, 40*s - 1}},
		"all idle: W stays": {bounded(0, 10*time.Second, false),
			[]op{event(0, 50*s, 0), caughtUp(0, true, 0), tick(10 * s), tick(1000 * s)},
			[]int64{50*s - 1, 50*s - 1, 50*s - 1, 50*s - 1}},
		"idle_advance after all stop": {bounded(2*time.Second, 10*time.Second, true),
			[]op{event(0, 50*s, 0), caughtUp(0, true, 0), event(1, 50*s, 1*s), caughtUp(1, true, 1*s), tick(10 * s), tick(11 * s), tick(100 * s), event(0, 61*s, 101*s)},
			[]int64{48*s - 1, 48*s - 1, 48*s - 1, 48*s - 1, 48*s - 1, 48*s - 1, 88 * s, 88 * s}},
		"idle_advance never moves W back": {bounded(0, 10*time.Second, true),
			[]op{event(0, 500*s, 0), caughtUp(0, true, 0), tick(20 * s)},
			[]int64{500*s - 1, 500*s - 1, 500*s - 1}},
		"idle_advance with nothing assigned": {bounded(0, 10*time.Second, true),
			[]op{tick(100 * s)},
			[]int64{90 * s}},
		"idle_advance waits for the slowest": {bounded(0, 10*time.Second, true),
			[]op{event(0, 50*s, 0), caughtUp(0, true, 0), event(1, 50*s, 0), tick(100 * s)},
			[]int64{50*s - 1, 50*s - 1, 50*s - 1, 50*s - 1}},
		"punctuated markers": {punctuated,
			[]op{assign(0, 0), event(0, 100*s, 0), marker(0, 10*s, 0), marker(0, 5*s, 0), marker(0, 20*s, 0)},
			[]int64{minusInf, minusInf, 10 * s, 10 * s, 20 * s}},
		"punctuated minimum and idleness": {punctuated,
			[]op{assign(0, 0), assign(1, 0), marker(0, 30*s, 0), marker(1, 20*s, 0), caughtUp(1, true, 0), tick(10 * s), marker(1, 25*s, 11*s)},
			[]int64{minusInf, minusInf, minusInf, 20 * s, 20 * s, 30 * s, 30 * s}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMerged(tt.cfg)
			got := make([]int64, 0, len(tt.ops))
			for _, apply := range tt.ops {
				apply(m)
				got = append(got, m.Current())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("NewMerged(%+v): Current() after each op = %v, want %v", tt.cfg, got, tt.want)
			}
		})
	}
}

func TestMergedPartitions(t *testing.T) {
	const s = int64(time.Second / time.Millisecond)
	m := NewMerged(bounded(0, 10*time.Second, false))
	for _, apply := range []op{
		assign(2, 0), event(0, 50*s, 0), event(1, 40*s, 0), caughtUp(1, true, 0), caughtUp(2, true, 0), tick(10 * s),
	} {
		apply(m)
	}
	tests := map[int32]struct {
		wm   int64
		idle bool
	}{
		0: {50*s - 1, false},
		1: {40*s - 1, true},
		2: {minusInf, true},
		9: {minusInf, false}, // not assigned
	}
	for p, tt := range tests {
		if wm, idle := m.Partition(p); wm != tt.wm || idle != tt.idle {
			t.Errorf("Partition(%d) = %d, %v; want %d, %v", p, wm, idle, tt.wm, tt.idle)
		}
	}
	if got, want := m.Partitions(), []int32{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("Partitions() = %v, want %v", got, want)
	}
	if got := m.IdleCount(); got != 2 {
		t.Errorf("IdleCount() = %d, want 2", got)
	}
	m.Revoke(1)
	if got, want := m.Partitions(), []int32{0, 2}; !slices.Equal(got, want) || m.IdleCount() != 1 {
		t.Errorf("after Revoke(1): Partitions() = %v, IdleCount() = %d; want %v, 1", got, m.IdleCount(), want)
	}
}

func TestSnapshotRestore(t *testing.T) {
	const s = int64(time.Second / time.Millisecond)
	tests := map[string]struct {
		from, to config.Watermark
		ops      []op
		want     State
		wantWM   int64 // the partition watermark after Restore into a Merged with cfg to
	}{
		"bounded": {bounded(time.Second, 0, false), bounded(time.Second, 0, false),
			[]op{event(0, 50*s, 0), event(0, 40*s, 0)},
			State{MaxTimestamp: 50 * s, Watermark: 49*s - 1}, 49*s - 1},
		"fresh partition": {bounded(0, 0, false), bounded(0, 0, false),
			[]op{assign(0, 0)},
			State{MaxTimestamp: minusInf, Watermark: minusInf}, minusInf},
		"unassigned partition": {bounded(0, 0, false), bounded(0, 0, false),
			nil,
			State{MaxTimestamp: minusInf, Watermark: minusInf}, minusInf},
		"out-of-orderness grown: watermark kept": {bounded(0, 0, false), bounded(10*time.Second, 0, false),
			[]op{event(0, 50*s, 0)},
			State{MaxTimestamp: 50 * s, Watermark: 50*s - 1}, 50*s - 1},
		"out-of-orderness shrunk: watermark rises": {bounded(10*time.Second, 0, false), bounded(0, 0, false),
			[]op{event(0, 50*s, 0)},
			State{MaxTimestamp: 50 * s, Watermark: 40*s - 1}, 50*s - 1},
		"punctuated": {config.Watermark{Strategy: "punctuated"}, config.Watermark{Strategy: "punctuated"},
			[]op{marker(0, 30*s, 0), marker(0, 20*s, 0)},
			State{MaxTimestamp: minusInf, Watermark: 30 * s}, 30 * s},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMerged(tt.from)
			for _, apply := range tt.ops {
				apply(m)
			}
			got := m.Snapshot(0)
			restored := NewMerged(tt.to)
			restored.Restore(0, got, 100*s)
			wm, idle := restored.Partition(0)
			if got != tt.want || wm != tt.wantWM || idle || restored.Current() != tt.wantWM {
				t.Errorf("Snapshot(0) = %+v, want %+v; restored Partition(0) = %d, %v, Current() = %d; want %d",
					got, tt.want, wm, idle, restored.Current(), tt.wantWM)
			}
		})
	}
}

func TestRestoreKeepsLaterEvents(t *testing.T) {
	m := NewMerged(bounded(0, 0, false))
	m.Restore(0, State{MaxTimestamp: 10_000, Watermark: 9_999}, 0)
	m.OnEvent(0, 5_000, 1)
	m.OnEvent(0, 12_000, 2)
	if got := m.Current(); got != 11_999 {
		t.Errorf("Current() after Restore and events = %d, want 11999", got)
	}
}

// FuzzMerged checks the invariants under any sequence of calls: W and every
// partition watermark never go down, and W is never below the minimum over
// the partitions that are not idle.
func FuzzMerged(f *testing.F) {
	f.Add([]byte{0, 1, 10, 1, 2, 20, 3, 1, 4, 50, 2, 1, 30, 5, 1})
	f.Add([]byte{1, 0, 200, 3, 0, 1, 4, 255, 4, 255, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, cfg := range []config.Watermark{
			bounded(2*time.Millisecond, 5*time.Millisecond, false),
			bounded(0, 5*time.Millisecond, true),
			{Strategy: "punctuated", IdleTimeout: 3 * time.Millisecond},
		} {
			checkInvariants(t, cfg, data)
		}
	})
}

func checkInvariants(t *testing.T, cfg config.Watermark, data []byte) {
	m := NewMerged(cfg)
	partWM := map[int32]int64{}
	now := int64(0)
	for i := 0; i+2 < len(data); i += 3 {
		p, v := int32(data[i+1]%4), int64(data[i+2])-100
		now += int64(data[i+2] % 4)
		before := m.Current()
		ops := []op{assign(p, now), event(p, v, now), marker(p, v, now), caughtUp(p, v%2 == 0, now), tick(now), revoke(p)}
		ops[int(data[i])%len(ops)](m)
		if m.Current() < before {
			t.Fatalf("%+v: W went down from %d to %d at op %d of %v", cfg, before, m.Current(), i/3, data)
		}
		low := int64(math.MaxInt64)
		for _, q := range m.Partitions() {
			wm, idle := m.Partition(q)
			if prev, ok := partWM[q]; ok && wm < prev {
				t.Fatalf("%+v: partition %d watermark went down from %d to %d", cfg, q, prev, wm)
			}
			partWM[q] = wm
			low = min(low, activeWM(wm, idle))
		}
		if low != math.MaxInt64 && m.Current() < low {
			t.Fatalf("%+v: W = %d is below the minimum %d of the active partitions", cfg, m.Current(), low)
		}
		if int(data[i])%len(ops) == 5 {
			delete(partWM, p)
		}
	}
}

// activeWM is wm for a partition that counts in the minimum, else +inf.
func activeWM(wm int64, idle bool) int64 {
	if idle {
		return math.MaxInt64
	}
	return wm
}

func BenchmarkMergedOnEvent(b *testing.B) {
	m := NewMerged(bounded(time.Second, 10*time.Second, false))
	for p := range int32(16) {
		m.Assign(p, 0)
	}
	b.ReportAllocs()
	ts := int64(0)
	for b.Loop() {
		ts++
		m.OnEvent(int32(ts%16), ts, ts)
	}
}

func BenchmarkMergedOnEventOutOfOrder(b *testing.B) {
	m := NewMerged(bounded(time.Second, 10*time.Second, false))
	for p := range int32(16) {
		m.OnEvent(p, 1<<40, 0)
	}
	b.ReportAllocs()
	ts := int64(0)
	for b.Loop() {
		ts++
		m.OnEvent(int32(ts%16), ts, ts) // older than every maximum: W cannot move
	}
}
