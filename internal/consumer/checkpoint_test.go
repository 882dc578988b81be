package consumer

import (
	"math"
	"slices"
	"testing"
	"time"

	"aggregator/internal/config"
	"aggregator/internal/watermark"
)

func TestCheckpointRoundTrip(t *testing.T) {
	tests := map[string]Checkpoint{
		"no steps":      {Emitted: 10, W: 4999, State: watermark.State{MaxTimestamp: 6000, Watermark: 4999}},
		"no watermark":  {Emitted: 1, W: math.MinInt64, State: watermark.State{MaxTimestamp: math.MinInt64, Watermark: math.MinInt64}},
		"steps":         {Emitted: 900, W: 19_999, Steps: []Step{{3, math.MinInt64}, {5, 4_999}, {80, 9_999}, {700, 14_999}}},
		"negative time": {Emitted: 2, W: -5001, Steps: []Step{{0, -10_001}, {1, -5001}}},
	}
	for name, cp := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCheckpoint(cp.Encode())
			if err != nil || got.Emitted != cp.Emitted || got.W != cp.W || got.State != cp.State || !slices.Equal(got.Steps, cp.Steps) {
				t.Errorf("ParseCheckpoint(%q) = %+v, %v, want %+v", cp.Encode(), got, err, cp)
			}
		})
	}
}

func TestParseCheckpointRejects(t *testing.T) {
	for _, s := range []string{"", "member-id-1", "a1 1 2 3", "a1 x 2 3 4", "a1 1 2 3 4 5", "a1 1 2 3 4 5:+x"} {
		if _, err := ParseCheckpoint(s); err == nil {
			t.Errorf("ParseCheckpoint(%q) = nil error, want one", s)
		}
	}
}

func TestCheckpointFit(t *testing.T) {
	cp := Checkpoint{Emitted: 1 << 40, W: 1 << 41}
	for i := range int64(1000) {
		cp.Steps = append(cp.Steps, Step{i * 1000, 1_900_000_000_000 + i*5000})
	}
	first := cp.Steps[0]
	s, dropped := cp.Fit(maxMetadata)
	if len(s) > maxMetadata || !dropped || cp.Steps[0] != first {
		t.Errorf("Fit: %d bytes, dropped %v, first step %v; want <= %d bytes, dropped, first step %v", len(s), dropped, cp.Steps[0], maxMetadata, first)
	}
	if got, err := ParseCheckpoint(s); err != nil || !slices.Equal(got.Steps, cp.Steps) {
		t.Errorf("ParseCheckpoint(Fit) = %v, %v", len(got.Steps), err)
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add("a1 900 19999 20000 19999 3:m 2:4999 75:+5000")
	f.Add("a1 m m m m")
	f.Fuzz(func(t *testing.T, s string) {
		cp, err := ParseCheckpoint(s)
		if err != nil {
			return
		}
		again, err := ParseCheckpoint(cp.Encode())
		if err != nil || again.Emitted != cp.Emitted || !slices.Equal(again.Steps, cp.Steps) {
			t.Fatalf("ParseCheckpoint(Encode(ParseCheckpoint(%q))) = %+v, %v, want %+v", s, again, err, cp)
		}
	})
}

func TestBucketChangesOnlyAtBoundaries(t *testing.T) {
	tumbling := newBoundaries(config.Window{Type: "tumbling", Size: 5 * time.Second, AllowedLateness: 2 * time.Second})
	sliding := newBoundaries(config.Window{Type: "sliding", Size: 10 * time.Second, Slide: 2 * time.Second, Offset: time.Second})
	tests := map[string]struct {
		b      boundaries
		w1, w2 int64
		same   bool
	}{
		"within a window":        {tumbling, 7000, 9998, true},
		"crosses maxTimestamp":   {tumbling, 9998, 9999, false},
		"crosses cleanupTime":    {tumbling, 11_998, 11_999, false},
		"between fire and clean": {tumbling, 9999, 11_998, true},
		"sliding within slide":   {sliding, 1000, 2999, false},
		"sliding same bucket":    {sliding, 999, 2998, true},
		"no watermark yet":       {tumbling, math.MinInt64, math.MinInt64, true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.b.bucket(tt.w1) == tt.b.bucket(tt.w2); got != tt.same {
				t.Errorf("bucket(%d) == bucket(%d) = %v, want %v", tt.w1, tt.w2, got, tt.same)
			}
		})
	}
}

func TestHistorySince(t *testing.T) {
	var h history
	b := newBoundaries(config.Window{Type: "tumbling", Size: 5 * time.Second})
	for off, w := range []int64{math.MinInt64, 1000, 4998, 4999, 6000, 9999} {
		h.observe(b, int64(off), w)
	}
	want := []Step{{3, 4999}, {5, 9999}}
	if got := h.since(4); !slices.Equal(got, want) {
		t.Errorf("since(4) = %v, want %v", got, want)
	}
	if s := (&partition{steps: want}).stepAt(4); s != 4999 {
		t.Errorf("stepAt(4) = %d, want 4999", s)
	}
}
