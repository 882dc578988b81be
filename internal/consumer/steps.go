package consumer

import (
	"math"

	"aggregator/internal/config"
)

// boundaries tells when a change of the merged watermark can matter to a
// partition's windows: only when it crosses some window's maxTimestamp or
// cleanupTime. Between two crossings every record is judged the same.
type boundaries struct {
	slide, fire, clean int64 // fire/clean: one maxTimestamp/cleanupTime, modulo slide
}

func newBoundaries(w config.Window) boundaries {
	size, slide := w.Size.Milliseconds(), w.Slide.Milliseconds()
	if w.Type != "sliding" || slide <= 0 {
		slide = size
	}
	slide = max(slide, 1)
	fire := w.Offset.Milliseconds() + size - 1 // window ends are offset + size + k*slide
	return boundaries{slide: slide, fire: fire, clean: fire + w.AllowedLateness.Milliseconds()}
}

// bucket identifies the interval between crossings that w lies in.
type bucket struct{ fired, cleaned int64 }

func (b boundaries) bucket(w int64) bucket {
	if w < math.MinInt64/2 || w > math.MaxInt64/2 {
		return bucket{w, w} // no watermark yet, or the end of time
	}
	return bucket{floorDiv(w-b.fire, b.slide), floorDiv(w-b.clean, b.slide)}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// history records the merged watermark's steps for one partition: the
// watermark each record was judged against, one entry per bucket change.
type history struct {
	steps []Step
	last  bucket
	w     int64 // the watermark of the last observe, when seen is set
	seen  bool
}

// observe notes that the record at offset is judged against w. Most
// records see the watermark the previous one saw: that costs a compare.
func (h *history) observe(b boundaries, offset, w int64) {
	if h.seen && w == h.w && len(h.steps) > 0 {
		return
	}
	h.w, h.seen = w, true
	k := b.bucket(w)
	if len(h.steps) > 0 && k == h.last {
		return
	}
	h.steps = append(h.steps, Step{Offset: offset, W: w})
	h.last = k
}

// since returns the steps a rebuild from offset needs: the one in effect at
// offset and every later one. It also forgets the older steps.
func (h *history) since(offset int64) []Step {
	i := 0
	for i+1 < len(h.steps) && h.steps[i+1].Offset <= offset {
		i++
	}
	h.steps = h.steps[i:]
	return h.steps
}
