package windowing_test

import (
	"math"
	"slices"
	"testing"

	"aggregator/internal/windowing"
)

func TestTumblingAssign(t *testing.T) {
	tests := map[string]struct{ size, offset, ts, start int64 }{
		"first ms of window":       {5000, 0, 10_000, 10_000},
		"last ms of window":        {5000, 0, 14_999, 10_000},
		"epoch":                    {5000, 0, 0, 0},
		"before the epoch":         {5000, 0, -1, -5_000},
		"window start before 0":    {5000, 0, -5_000, -5_000},
		"just before a negative":   {5000, 0, -5_001, -10_000},
		"with offset":              {5000, 1000, 10_500, 6_000},
		"at offset boundary":       {5000, 1000, 11_000, 11_000},
		"negative offset":          {5000, -1000, 10_500, 9_000},
		"negative offset and time": {5000, -1000, -1_001, -6_000},
		"one ms windows":           {1, 0, -7, -7},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := windowing.Tumbling{Size: tt.size, Offset: tt.offset}.Assign(tt.ts)
			if want := (windowing.Window{Start: tt.start, End: tt.start + tt.size}); got != want {
				t.Errorf("Tumbling{%d, %d}.Assign(%d) = %v, want %v", tt.size, tt.offset, tt.ts, got, want)
			}
		})
	}
}

func TestTumblingAssignNearEndOfTime(t *testing.T) {
	got := windowing.Tumbling{Size: 5000}.Assign(math.MaxInt64 - 1)
	if got.End != math.MaxInt64 || got.Start > math.MaxInt64-1 || got.Start <= math.MaxInt64-5000 {
		t.Errorf("Tumbling{5000, 0}.Assign(MaxInt64-1) = %v, want a window ending at MaxInt64 (saturated)", got)
	}
}

func TestSlidingAssignTo(t *testing.T) {
	tests := map[string]struct {
		size, slide, offset, ts int64
		starts                  []int64
	}{
		"size multiple of slide":     {6, 2, 0, 7, []int64{6, 4, 2}},
		"on a slide boundary":        {6, 2, 0, 6, []int64{6, 4, 2}},
		"last ms of a slide":         {6, 2, 0, 5, []int64{4, 2, 0}},
		"size not multiple of slide": {7, 3, 0, 6, []int64{6, 3, 0}},
		"not multiple, fewer":        {7, 3, 0, 7, []int64{6, 3}},
		"negative time":              {6, 2, 0, -1, []int64{-2, -4, -6}},
		"offset":                     {6, 2, 1, 7, []int64{7, 5, 3}},
		"negative offset":            {6, 2, -1, 7, []int64{7, 5, 3}},
		"negative offset and time":   {10, 4, -1, -6, []int64{-9, -13}},
		"slide equals size":          {5, 5, 0, 12, []int64{10}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s := windowing.Sliding{Size: tt.size, Slide: tt.slide, Offset: tt.offset}
			var want []windowing.Window
			for _, st := range tt.starts {
				want = append(want, windowing.Window{Start: st, End: st + tt.size})
			}
			if got := s.AssignTo(tt.ts, nil); !slices.Equal(got, want) {
				t.Errorf("%+v.AssignTo(%d) = %v, want %v", s, tt.ts, got, want)
			}
			if got := s.Last(tt.ts); got != want[0] {
				t.Errorf("%+v.Last(%d) = %v, want %v", s, tt.ts, got, want[0])
			}
		})
	}
}

func TestSlidingAssignToDoesNotAllocate(t *testing.T) {
	s := windowing.Sliding{Size: 60_000, Slide: 1000}
	dst := make([]windowing.Window, 0, 60)
	allocs := testing.AllocsPerRun(100, func() { dst = s.AssignTo(123_456, dst[:0]) })
	if allocs != 0 || len(dst) != 60 {
		t.Errorf("AssignTo into a large enough slice: %v allocs, %d windows, want 0 and 60", allocs, len(dst))
	}
}
