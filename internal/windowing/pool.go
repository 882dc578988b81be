package windowing

// paneHdr is the fixed part of a pane: the state of one key's records in
// one slice of time [start, start+gcd(size, slide)). Windows are merges of
// panes.
type paneHdr struct {
	start int64
	count int64
	rev   int32 // tumbling: firings so far of the window that is this pane
	next  int32 // the key's next pane, or noPane; the next free pane when free
	prev  int32 // the key's previous pane, or noPane
	flags uint8 // changelog flags (see flagDirty); fits in the padding
}

const (
	poolBits  = 10
	poolChunk = 1 << poolBits
	poolMask  = poolChunk - 1
)

// panePool holds every key's panes, in chunks that never move, so that a
// pane costs its 32-byte header and its numeric slots, with no allocation
// of its own. Numeric slots (sum, min, max, avg) are stored pane-major in
// one []float64 per chunk; the other aggregates' state, if configured, in
// a *paneExt per pane.
type panePool struct {
	stride int // numeric slots per pane
	hdrs   []*[poolChunk]paneHdr
	nums   [][]float64
	exts   [][]*paneExt // nil unless the layout has ext state
	free   int32        // head of the free list, linked through next
	n      int32        // panes ever made
}

func (p *panePool) hdr(i int32) *paneHdr { return &p.hdrs[i>>poolBits][i&poolMask] }

func (p *panePool) numsOf(i int32) []float64 {
	o := int(i&poolMask) * p.stride
	return p.nums[i>>poolBits][o : o+p.stride : o+p.stride]
}

// view returns pane i's state for the aggregate functions.
func (p *panePool) view(i int32) pane {
	v := pane{count: &p.hdr(i).count, nums: p.numsOf(i)}
	if p.exts != nil {
		v.ext = p.exts[i>>poolBits][i&poolMask]
	}
	return v
}

// allocPane returns an empty pane at start with no neighbours.
func (e *Engine) allocPane(start int64) int32 { return e.pool.alloc(&e.agg, start) }

// alloc returns an empty pane of layout l at start with no neighbours.
func (p *panePool) alloc(l *layout, start int64) int32 {
	i := p.free
	if i != noPane {
		p.free = p.hdr(i).next
	} else {
		if p.n&poolMask == 0 {
			p.hdrs = append(p.hdrs, new([poolChunk]paneHdr))
			p.nums = append(p.nums, make([]float64, poolChunk*p.stride))
			if l.hasExt() {
				p.exts = append(p.exts, make([]*paneExt, poolChunk))
			}
		}
		i = p.n
		p.n++
		if p.exts != nil {
			p.exts[i>>poolBits][i&poolMask] = l.newExt()
		}
	}
	*p.hdr(i) = paneHdr{start: start, next: noPane, prev: noPane}
	v := p.view(i)
	l.reset(v.nums, v.ext)
	return i
}

// freePane returns pane i to the pool; its ext state is kept for reuse.
func (p *panePool) freePane(i int32) {
	p.hdr(i).flags = 0
	p.hdr(i).next = p.free
	p.free = i
}
