package watermark

import (
	"errors"
	"testing"
	"time"

	"aggregator/internal/config"
)

// peerStep is one thing that happens to a Merged that shares peers: a
// record of an assigned partition, a published value of a partition, an
// assignment, a revocation, or a tick (with every assigned partition
// caught up).
type peerStep struct {
	kind      byte // 'e' event, 'p' published, 'a' assign, 'r' revoke, 't' tick
	part      int32
	v         int64 // event time, published watermark, or the tick's now
	idle      bool  // published idle
	wantAfter int64 // checked after the step unless it is 0
}

func ev(p int32, ts int64) peerStep { return peerStep{kind: 'e', part: p, v: ts} }
func pub(p int32, wm int64, idle bool) peerStep {
	return peerStep{kind: 'p', part: p, v: wm, idle: idle}
}

func TestMergedPeers(t *testing.T) {
	cfg := config.Watermark{IdleTimeout: 5 * time.Second}
	advance := cfg
	advance.IdleAdvance = true
	tests := map[string]struct {
		cfg   config.Watermark
		group int32
		own   []int32
		steps []peerStep
		want  int64
	}{
		"an unreported partition holds W": {cfg, 3, []int32{0, 1},
			[]peerStep{ev(0, 1_000), ev(1, 2_000)}, minusInf},
		"every partition reported": {cfg, 3, []int32{0, 1},
			[]peerStep{ev(0, 1_000), ev(1, 2_000), pub(2, 1_500, false)}, 999},
		"a peer below the own partitions": {cfg, 3, []int32{0, 1},
			[]peerStep{ev(0, 1_000), ev(1, 2_000), pub(2, 300, false)}, 300},
		"the latest published value counts": {cfg, 2, []int32{0},
			[]peerStep{ev(0, 10_000), pub(1, 300, false), pub(1, 700, false)}, 700},
		"a lower published value never lowers W": {cfg, 2, []int32{0},
			[]peerStep{ev(0, 10_000), pub(1, 700, false), pub(1, 300, false)}, 700},
		"an owned partition's published value is ignored": {cfg, 2, []int32{0, 1},
			[]peerStep{ev(0, 10_000), ev(1, 5_000), pub(1, 100, false), pub(0, 100, false)}, 4_999},
		"an idle peer is left out": {cfg, 2, []int32{0},
			[]peerStep{ev(0, 10_000), pub(1, 100, true)}, 9_999},
		"a peer that is idle no more": {cfg, 2, []int32{0},
			[]peerStep{pub(1, 100, true), ev(0, 10_000), pub(1, 12_000, false), ev(0, 20_000)}, 12_000},
		"a peer back from idle below W does not lower it": {cfg, 2, []int32{0},
			[]peerStep{pub(1, 100, true), ev(0, 10_000), pub(1, 5_000, false), ev(0, 20_000)}, 9_999},
		"revoked: the partition's published value counts": {cfg, 2, []int32{0, 1},
			[]peerStep{ev(0, 10_000), ev(1, 20_000), pub(1, 15_000, false), {kind: 'r', part: 0, wantAfter: 9_999}, pub(0, 12_000, false), ev(1, 30_000)}, 12_000},
		"revoked and never published holds W where it is": {cfg, 2, []int32{0, 1},
			[]peerStep{ev(0, 10_000), ev(1, 20_000), {kind: 'r', part: 0}, ev(1, 30_000)}, 9_999},
		"assigned: the live generator replaces the published value": {cfg, 2, []int32{0},
			[]peerStep{pub(1, 100, false), ev(0, 10_000), {kind: 'a', part: 1, wantAfter: 100}, ev(1, 5_000), pub(1, 50_000, false)}, 4_999},
		"ids outside the group are ignored": {cfg, 2, []int32{0},
			[]peerStep{ev(0, 10_000), pub(1, 100, false), pub(2, 50, false), pub(-1, 50, false)}, 100},
		"idle_advance waits for every partition of the group": {advance, 2, []int32{0},
			[]peerStep{ev(0, 1_000), {kind: 't', v: 60_000}, pub(1, 500, false), {kind: 't', v: 70_000}}, 500},
		"idle_advance once the peers are idle too": {advance, 2, []int32{0},
			[]peerStep{ev(0, 1_000), pub(1, 500, true), {kind: 't', v: 60_000}}, 60_000 - 5_000},
		"idle_advance waits for an unreported partition": {advance, 2, []int32{0},
			[]peerStep{ev(0, 1_000), {kind: 't', v: 60_000}}, minusInf},
		"an all-idle group without idle_advance stays": {cfg, 2, []int32{0},
			[]peerStep{ev(0, 1_000), pub(1, 500, true), {kind: 't', v: 60_000}}, 999},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMerged(tt.cfg)
			for _, p := range tt.own {
				m.Assign(p, 0)
				m.SetCaughtUp(p, true, 0)
			}
			m.SharePeers(tt.group)
			for i, s := range tt.steps {
				switch s.kind {
				case 'e':
					m.OnEvent(s.part, s.v, 0)
				case 'p':
					m.Peer(s.part, s.v, s.idle)
				case 'a':
					m.Assign(s.part, 0)
				case 'r':
					m.Revoke(s.part)
				case 't':
					m.Tick(s.v)
				}
				if s.wantAfter != 0 && m.Current() != s.wantAfter {
					t.Errorf("after step %d: Current() = %d, want %d", i, m.Current(), s.wantAfter)
				}
			}
			if got := m.Current(); got != tt.want {
				t.Errorf("Current() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMergedTakePeers(t *testing.T) {
	old := NewMerged(config.Watermark{})
	old.Assign(0, 0)
	old.SharePeers(2)
	old.Peer(1, 700, false)
	m := NewMerged(config.Watermark{}) // after an aborted commit
	m.Assign(0, 0)
	m.TakePeers(old)
	m.OnEvent(0, 10_000, 0)
	if got := m.Current(); got != 700 {
		t.Errorf("after TakePeers: Current() = %d, want 700 (the peer's value)", got)
	}
	if got := m.Group(); got != 2 {
		t.Errorf("after TakePeers: Group() = %d, want 2", got)
	}
	if wm, idle, reported := m.GroupPartition(1); wm != 700 || idle || !reported {
		t.Errorf("GroupPartition(1) = %d, %v, %v, want 700, false, true", wm, idle, reported)
	}
	if wm, _, reported := m.GroupPartition(0); wm != 9_999 || !reported {
		t.Errorf("GroupPartition(0) (owned) = %d, %v, want 9999, true", wm, reported)
	}
	if _, _, reported := NewMerged(config.Watermark{}).GroupPartition(1); reported {
		t.Error("GroupPartition of a Merged that does not share: reported, want not")
	}
}

func TestChangeAnnouncer(t *testing.T) {
	m := NewMerged(config.Watermark{})
	m.Assign(0, 0)
	a := NewChangeAnnouncer()
	due := func(now int64) []Mark { return a.Due(nil, m, m.Partitions(), 1, now) }
	if got := due(0); len(got) != 1 {
		t.Fatalf("first commit: Due = %+v, want partition 0", got)
	}
	if got := due(10 * Heartbeat); len(got) != 0 {
		t.Errorf("nothing changed, long after: Due = %+v, want none (no heartbeat)", got)
	}
	m.OnEvent(0, 5_000, 0)
	if got := due(10*Heartbeat + 1); len(got) != 1 || got[0].Watermark != 4_999 {
		t.Errorf("partition 0 moved: Due = %+v, want it at 4999", got)
	}
}

func TestPublishedCodec(t *testing.T) {
	tests := map[string]struct {
		wm    int64
		idle  bool
		value string
	}{
		"a watermark":       {1_700_000_012_345, false, `{"version":1,"watermark":1700000012345,"idle":false}`},
		"idle":              {5, true, `{"version":1,"watermark":5,"idle":true}`},
		"before any record": {minusInf, false, `{"version":1,"watermark":null,"idle":false}`},
		"before the epoch":  {-3, false, `{"version":1,"watermark":-3,"idle":false}`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			key := AppendPublishedKey(nil, "calls.v2", 12)
			value := AppendPublished(nil, tt.wm, tt.idle)
			if string(key) != "calls.v2/12" || string(value) != tt.value {
				t.Fatalf("AppendPublishedKey, AppendPublished = %s, %s; want calls.v2/12, %s", key, value, tt.value)
			}
			topic, p, wm, idle, err := ParsePublished(key, value)
			if err != nil || topic != "calls.v2" || p != 12 || wm != tt.wm || idle != tt.idle {
				t.Errorf("ParsePublished = %q, %d, %d, %v, %v; want calls.v2, 12, %d, %v, nil", topic, p, wm, idle, err, tt.wm, tt.idle)
			}
		})
	}
	for name, rec := range map[string][2]string{
		"no slash":      {"calls", `{"version":1,"watermark":1,"idle":false}`},
		"no topic":      {"/1", `{"version":1,"watermark":1,"idle":false}`},
		"bad partition": {"calls/x", `{"version":1,"watermark":1,"idle":false}`},
		"later version": {"calls/1", `{"version":2,"watermark":1,"idle":false}`},
		"not json":      {"calls/1", `wm=1`},
		"a tombstone":   {"calls/1", ``},
	} {
		if _, _, _, _, err := ParsePublished([]byte(rec[0]), []byte(rec[1])); !errors.Is(err, ErrPublished) {
			t.Errorf("%s: ParsePublished(%q, %q) = %v, want ErrPublished", name, rec[0], rec[1], err)
		}
	}
}
