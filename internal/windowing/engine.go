package windowing

import (
	"fmt"
	"math"
	"slices"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

// smallInts is how many integer result values (0, 1, 2, ...) have their
// record.Value made once, so that typical counts and sums do not allocate
// per firing.
const smallInts = 1024

// Engine holds the window state of every partition and fires windows as the
// merged watermark advances. It is not safe for concurrent use.
type Engine struct {
	sink     Sink
	size     int64
	slide    int64 // = size for tumbling windows
	paneLen  int64 // gcd(size, slide)
	offset   int64
	lateness int64
	onClose  bool
	fifo     bool // windows merge through per-key fifoAggs
	agg      layout

	wm  int64
	seq uint64 // arrival number of the last record, for first/last ties

	parts    map[int32]*partState
	lastPart *partState

	// buckets are the live window starts, sorted; in emit mode
	// on_watermark buckets[:fired] have had their on-time firing.
	buckets    []*bucket
	fired      int
	byStart    map[int64]*bucket
	lastBucket *bucket
	open       int

	idle []*keyState // keys whose windows are all dropped, oldest first

	// reused memory
	freeBuckets []*bucket
	freeKeys    []*keyState
	freeNums    [][]float64
	freeExts    []*paneExt
	sortKey     []byte
	acc         pane
	res         Result
	ints        []record.Value
}

// NewEngine builds the engine from the validated config (window, aggregates;
// durations become ms here). sink gets results in emission order.
func NewEngine(cfg config.Config, sink Sink) (*Engine, error) {
	w := cfg.Window
	e := &Engine{
		sink:     sink,
		size:     w.Size.Milliseconds(),
		offset:   w.Offset.Milliseconds(),
		lateness: w.AllowedLateness.Milliseconds(),
		wm:       math.MinInt64,
		parts:    map[int32]*partState{},
		byStart:  map[int64]*bucket{},
	}
	switch w.Type {
	case "tumbling":
		e.slide = e.size
	case "sliding":
		e.slide = w.Slide.Milliseconds()
	default:
		return nil, fmt.Errorf("window.type %q: want tumbling or sliding", w.Type)
	}
	switch w.Emit {
	case "on_watermark", "":
	case "on_close":
		e.onClose = true
	default:
		return nil, fmt.Errorf("window.emit %q: want on_watermark or on_close", w.Emit)
	}
	if err := e.checkWindow(); err != nil {
		return nil, err
	}
	e.paneLen = gcd(e.size, e.slide)
	var err error
	if e.agg, err = newLayout(cfg.Aggregates); err != nil {
		return nil, err
	}
	e.acc = e.newPane(0)
	e.fifo = e.usesFifo()
	e.res.Aggregates = make([]record.Value, len(e.agg.specs))
	e.ints = make([]record.Value, smallInts)
	for i := range e.ints {
		e.ints[i] = record.Number(float64(i))
	}
	return e, nil
}

func (e *Engine) checkWindow() error {
	switch {
	case e.size <= 0:
		return fmt.Errorf("window.size %dms: must be positive", e.size)
	case e.slide <= 0:
		return fmt.Errorf("window.slide %dms: must be positive", e.slide)
	case e.slide > e.size:
		// Flink would silently drop records in the gaps between windows;
		// no outcome of ours describes that.
		return fmt.Errorf("window.slide %dms: must not exceed window.size %dms", e.slide, e.size)
	case e.lateness < 0:
		return fmt.Errorf("window.allowed_lateness %dms: must not be negative", e.lateness)
	}
	return nil
}

// Watermark returns the watermark given to the last Advance (math.MinInt64
// before the first).
func (e *Engine) Watermark() int64 { return e.wm }

// OpenWindows returns the number of open (key, window) pairs.
func (e *Engine) OpenWindows() int { return e.open }

// MinOpenOffset returns the smallest offset of partition p that a window
// not yet dropped still holds, and reports whether there is one. Offsets
// below it are safe to commit.
func (e *Engine) MinOpenOffset(p int32) (int64, bool) {
	ps, ok := e.parts[p]
	if !ok || ps.held.len() == 0 {
		return 0, false
	}
	lowest := int64(math.MaxInt64)
	for _, h := range ps.held.live() {
		lowest = min(lowest, h.offset)
	}
	return lowest, true
}

// RemovePartition drops a revoked partition's state without firing.
func (e *Engine) RemovePartition(p int32) {
	ps, ok := e.parts[p]
	if !ok {
		return
	}
	for _, k := range ps.keys {
		k.removed = true
	}
	delete(e.parts, p)
	e.lastPart = nil
	kept := e.buckets[:0]
	fired := 0
	for i, b := range e.buckets {
		n := len(b.keys)
		b.keys = slices.DeleteFunc(b.keys, func(k *keyState) bool { return k.part == p })
		e.open -= n - len(b.keys)
		if len(b.keys) == 0 {
			e.freeBucket(b)
			continue
		}
		if i < e.fired {
			fired++
		}
		kept = append(kept, b)
	}
	clear(e.buckets[len(kept):])
	e.buckets, e.fired = kept, fired
}

// window returns the window that starts at start.
func (e *Engine) window(start int64) Window {
	return Window{Start: start, End: addSat(start, e.size)}
}

func (e *Engine) maxTimestamp(start int64) int64 { return e.window(start).MaxTimestamp() }

func (e *Engine) cleanupTime(start int64) int64 { return e.window(start).CleanupTime(e.lateness) }

// number returns f as a result value.
func (e *Engine) number(f float64) record.Value {
	if f >= 0 && f < smallInts && f == math.Trunc(f) {
		return e.ints[int(f)]
	}
	return record.Number(f)
}

// newPane returns an empty pane starting at start, reusing freed memory.
func (e *Engine) newPane(start int64) pane {
	p := pane{start: start}
	if n := len(e.freeNums); n > 0 {
		p.nums, e.freeNums = e.freeNums[n-1], e.freeNums[:n-1]
	} else {
		p.nums = make([]float64, e.agg.nums)
	}
	if n := len(e.freeExts); n > 0 {
		p.ext, e.freeExts = e.freeExts[n-1], e.freeExts[:n-1]
	} else {
		p.ext = e.agg.newExt()
	}
	e.agg.reset(p.nums, p.ext)
	return p
}

// resetPane empties p, keeping its memory.
func (e *Engine) resetPane(p *pane) {
	p.count = 0
	e.agg.reset(p.nums, p.ext)
}

func (e *Engine) freePane(p *pane) {
	e.freeNums = append(e.freeNums, p.nums)
	if p.ext != nil {
		e.freeExts = append(e.freeExts, p.ext)
	}
	*p = pane{}
}

func (e *Engine) freeBucket(b *bucket) {
	delete(e.byStart, b.start)
	if e.lastBucket == b {
		e.lastBucket = nil
	}
	clear(b.keys)
	b.keys = b.keys[:0]
	e.freeBuckets = append(e.freeBuckets, b)
}

// partition returns p's state, creating it for a partition not seen before.
func (e *Engine) partition(p int32) *partState {
	if e.lastPart != nil && e.lastPart.id == p {
		return e.lastPart
	}
	ps, ok := e.parts[p]
	if !ok {
		ps = &partState{id: p, keys: map[string]*keyState{}}
		e.parts[p] = ps
	}
	e.lastPart = ps
	return ps
}

// keyOf returns the state of rec's key in ps, creating it if needed.
func (e *Engine) keyOf(ps *partState, rec *record.Record) *keyState {
	if k, ok := ps.keys[rec.Key]; ok {
		return k
	}
	var k *keyState
	if n := len(e.freeKeys); n > 0 {
		k, e.freeKeys = e.freeKeys[n-1], e.freeKeys[:n-1]
	} else {
		k = &keyState{}
	}
	e.sortKey = appendSortKey(e.sortKey[:0], rec.KeyFields)
	// One allocation holds both the sort key and a copy of rec.Key (the
	// decoder may reuse the bytes behind rec.Key).
	n := len(e.sortKey)
	e.sortKey = append(e.sortKey, rec.Key...)
	id := string(e.sortKey)
	k.id, k.split = id, uint32(n)
	k.part = ps.id
	ps.keys[k.key()] = k
	return k
}
