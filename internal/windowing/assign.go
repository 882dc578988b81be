package windowing

import "math"

// Tumbling assigns each timestamp to one window of Size ms; Offset shifts
// the window starts (for time zones).
type Tumbling struct{ Size, Offset int64 }

// Assign returns the window that holds ts.
func (t Tumbling) Assign(ts int64) Window {
	start := ts - floorMod(ts-t.Offset, t.Size)
	return Window{Start: start, End: addSat(start, t.Size)}
}

// Sliding assigns each timestamp to the windows of Size ms that start every
// Slide ms, shifted by Offset. Size need not be a multiple of Slide.
type Sliding struct{ Size, Slide, Offset int64 }

// Last returns the latest-starting window that holds ts. The others start
// Slide, 2*Slide, ... earlier, while they still hold ts (see Contains).
func (s Sliding) Last(ts int64) Window {
	start := ts - floorMod(ts-s.Offset, s.Slide)
	return Window{Start: start, End: addSat(start, s.Size)}
}

// AssignTo appends the windows that hold ts to dst, latest start first, and
// returns the extended slice; it allocates only when dst is too small.
func (s Sliding) AssignTo(ts int64, dst []Window) []Window {
	for start := s.Last(ts).Start; ts-start < s.Size; start -= s.Slide {
		dst = append(dst, Window{Start: start, End: addSat(start, s.Size)})
	}
	return dst
}

// floorMod is x mod m with the sign of m (m > 0), so that timestamps before
// the epoch land in the window that holds them.
func floorMod(x, m int64) int64 {
	r := x % m
	if r < 0 {
		r += m
	}
	return r
}

// addSat returns a+b (b >= 0), saturating at math.MaxInt64 so that a window
// at the end of time keeps a sane End.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
