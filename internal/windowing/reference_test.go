package windowing_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// reference is the naive engine the real one must match: per-window
// assignment, every window keeps its records, aggregates are computed from
// scratch at each firing, and Advance scans every window.
type reference struct {
	p      params
	cal    func(ts int64) windowing.Window // calendar windows: tumbling, by this assigner
	early  windowing.EarlySpec
	procAt int64 // the last processing-time tick index; math.MinInt64: none yet
	aggs   []windowing.Aggregate
	wm     int64
	seq    uint64
	wins   map[refID]*refWin
	out    []windowing.Result
}

type refID struct {
	part  int32
	key   string
	start int64
}

type refWin struct {
	id      refID
	fields  []record.Value
	recs    []refRec
	rev     int64
	fired   bool // fired other than early
	changed bool // took a record since its last firing
}

type refRec struct {
	t      int64
	seq    uint64
	values []record.Value
}

func newReference(p params, aggs []windowing.Aggregate) *reference {
	return &reference{p: p, aggs: aggs, wm: math.MinInt64, wins: map[refID]*refWin{}, procAt: math.MinInt64}
}

func (r *reference) windows(ts int64) []windowing.Window {
	if r.cal != nil {
		return []windowing.Window{r.cal(ts)}
	}
	if r.p.typ == "tumbling" {
		return []windowing.Window{windowing.Tumbling{Size: r.p.size, Offset: r.p.offset}.Assign(ts)}
	}
	return windowing.Sliding{Size: r.p.size, Slide: r.p.slide, Offset: r.p.offset}.AssignTo(ts, nil)
}

func (r *reference) Add(rec *record.Record) windowing.AddResult {
	r.seq++
	ws := r.windows(rec.Time)
	added := 0
	for _, w := range ws { // latest start first
		if w.CleanupTime(r.p.lateness) <= r.wm {
			continue
		}
		added++
		id := refID{rec.Partition, rec.Key, w.Start}
		rw := r.wins[id]
		if rw == nil {
			rw = &refWin{id: id, fields: slices.Clone(rec.KeyFields)}
			r.wins[id] = rw
		}
		rw.recs = append(rw.recs, refRec{rec.Time, r.seq, slices.Clone(rec.Values)})
		rw.changed = true
		if r.p.emit != "on_close" && w.MaxTimestamp() <= r.wm {
			r.fire(rw, windowing.Late)
		}
	}
	switch added {
	case 0:
		return windowing.AddResult{Kind: windowing.LateEvent, Missed: ws[0]}
	case len(ws):
		return windowing.AddResult{Kind: windowing.Aggregated}
	}
	return windowing.AddResult{Kind: windowing.PartiallyLate}
}

func (r *reference) Advance(wm int64) {
	if wm <= r.wm {
		return
	}
	prev := r.wm
	r.wm = wm
	onClose := r.p.emit == "on_close"
	// Every firing due at wm, with its due time: the on-time (or final)
	// ones at their maxTimestamp (cleanup time), the early ones at the
	// first tick that wm crossed, (floor((prev+1)/every)+1)*every - 1.
	type firing struct {
		w   *refWin
		at  int64
		how windowing.Firing
	}
	var due []firing
	tick, ticked := int64(0), false
	if e := r.early; e.Event && e.Every > 0 && prev != math.MinInt64 && wm != math.MaxInt64 {
		a := int64(math.Floor(float64(prev+1) / float64(e.Every)))
		b := int64(math.Floor(float64(wm+1) / float64(e.Every)))
		tick, ticked = (a+1)*e.Every-1, b > a
	}
	for _, w := range r.wins {
		win := r.window(w)
		switch {
		case !onClose && win.MaxTimestamp() <= wm && !r.hasFired(w):
			due = append(due, firing{w, win.MaxTimestamp(), windowing.OnTime})
		case onClose && win.CleanupTime(r.p.lateness) <= wm:
			due = append(due, firing{w, win.CleanupTime(r.p.lateness), windowing.Final})
		case ticked && win.MaxTimestamp() > wm && w.changed:
			due = append(due, firing{w, tick, windowing.Early})
		}
	}
	slices.SortFunc(due, func(x, y firing) int {
		a, b := x.w, y.w
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		if c := cmp.Compare(r.window(a).End, r.window(b).End); c != 0 {
			return c
		}
		for i := range a.fields {
			if c := record.Compare(a.fields[i], b.fields[i]); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.id.part, b.id.part); c != 0 {
			return c
		}
		return cmp.Compare(a.id.key, b.id.key)
	})
	for _, f := range due {
		r.fire(f.w, f.how)
	}
	for id, w := range r.wins {
		if r.window(w).CleanupTime(r.p.lateness) <= wm {
			delete(r.wins, id)
		}
	}
}

// hasFired reports whether w fired on time already: every window that was
// due at the previous watermark did (on time, or late when it was created).
func (r *reference) hasFired(w *refWin) bool { return w.fired }

// ProcessingTime is the processing-time tick: when floor(now/every) grew
// since the last call (not counting the first), every changed window not
// due fires early, in order of end, key and partition.
func (r *reference) ProcessingTime(now int64) {
	e := r.early
	if e.Event || e.Every == 0 {
		return
	}
	i := int64(math.Floor(float64(now) / float64(e.Every)))
	crossed := r.procAt != math.MinInt64 && i > r.procAt
	r.procAt = max(r.procAt, i)
	if !crossed {
		return
	}
	var due []*refWin
	for _, w := range r.wins {
		if w.changed && r.window(w).MaxTimestamp() > r.wm {
			due = append(due, w)
		}
	}
	slices.SortFunc(due, func(a, b *refWin) int {
		if c := cmp.Compare(r.window(a).End, r.window(b).End); c != 0 {
			return c
		}
		for i := range a.fields {
			if c := record.Compare(a.fields[i], b.fields[i]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.id.part, b.id.part), cmp.Compare(a.id.key, b.id.key))
	})
	for _, w := range due {
		r.fire(w, windowing.Early)
	}
}

func (r *reference) RemovePartition(p int32) {
	for id := range r.wins {
		if id.part == p {
			delete(r.wins, id)
		}
	}
}

func (r *reference) window(w *refWin) windowing.Window {
	if r.cal != nil {
		return r.cal(w.id.start)
	}
	end := w.id.start + r.p.size
	if w.id.start > math.MaxInt64-r.p.size {
		end = math.MaxInt64
	}
	return windowing.Window{Start: w.id.start, End: end}
}

func (r *reference) fire(w *refWin, f windowing.Firing) {
	res := windowing.Result{Partition: w.id.part, Key: w.id.key, Window: r.window(w), Count: int64(len(w.recs)),
		Firing: f, Revision: w.rev, Watermark: r.wm}
	for i, a := range r.aggs {
		res.Aggregates = append(res.Aggregates, aggregate(a, i, w.recs))
	}
	w.rev++
	w.changed = false
	if f != windowing.Early {
		w.fired = true
	}
	r.out = append(r.out, res)
}

// aggregate computes aggregate a (the i-th) over recs in one pass, in
// arrival order, as SQL does: a record whose value is null is skipped (but
// count counts it); over no values, count(field) and count_distinct are
// 0, top_k [], the others null. For quantile it returns the exact value at
// nearest rank.
func aggregate(a windowing.Aggregate, i int, recs []refRec) record.Value {
	all := recs
	recs = slices.DeleteFunc(slices.Clone(recs), func(rc refRec) bool { return rc.values[i].Null })
	nums := make([]float64, len(recs))
	for j, rc := range recs {
		nums[j] = rc.values[i].Num
	}
	if len(recs) == 0 {
		switch a.Fn {
		case windowing.FnCount:
			return record.Number(float64(len(all)))
		case windowing.FnCountField, windowing.FnCountDistinct:
			return record.Number(0)
		case windowing.FnTopK:
			return record.Value{Raw: "[]"}
		}
		return record.NullValue
	}
	switch a.Fn {
	case windowing.FnCount:
		return record.Number(float64(len(all)))
	case windowing.FnCountField:
		return record.Number(float64(len(recs)))
	case windowing.FnSum, windowing.FnAvg:
		s := 0.0
		for _, n := range nums {
			s += n
		}
		if a.Fn == windowing.FnAvg {
			s /= float64(len(recs))
		}
		return record.Number(s)
	case windowing.FnMin:
		return record.Number(slices.Min(nums))
	case windowing.FnMax:
		return record.Number(slices.Max(nums))
	case windowing.FnFirst, windowing.FnLast:
		best := recs[0]
		for _, rc := range recs[1:] {
			earlier := rc.t < best.t || rc.t == best.t && rc.seq < best.seq
			if earlier == (a.Fn == windowing.FnFirst) {
				best = rc
			}
		}
		return best.values[i]
	case windowing.FnCountDistinct:
		set := map[string]bool{}
		for _, rc := range recs {
			set[rc.values[i].Raw] = true
		}
		return record.Number(float64(len(set)))
	case windowing.FnQuantile:
		return record.Number(exactNearestRank(a.Q, nums))
	case windowing.FnTopK:
		return refTopK(a.K, recs, i)
	}
	panic(fmt.Sprintf("unknown fn %d", a.Fn))
}

// refTopK is top_k the slow way: count every value (numbers by their
// number, so 1 and 1.0 are one), sort all of them by count descending then
// value (record.Compare: numbers numerically before strings by code
// point), and write the first k.
func refTopK(k int, recs []refRec, i int) record.Value {
	type counted struct {
		v record.Value
		n int
	}
	var all []counted
	for _, rc := range recs {
		v := rc.values[i]
		j := slices.IndexFunc(all, func(c counted) bool { return c.v.IsNum == v.IsNum && record.Compare(c.v, v) == 0 })
		if j < 0 {
			all = append(all, counted{v, 0})
			j = len(all) - 1
		}
		all[j].n++
	}
	slices.SortFunc(all, func(a, b counted) int { return cmp.Or(cmp.Compare(b.n, a.n), record.Compare(a.v, b.v)) })
	var sb strings.Builder
	sb.WriteByte('[')
	for j, c := range all[:min(k, len(all))] {
		if j > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"value":%s,"count":%d}`, c.v.Raw, c.n)
	}
	sb.WriteByte(']')
	return record.Value{Raw: sb.String()}
}

// exactNearestRank is the value at rank ceil(q*n) of nums sorted, 1-based.
func exactNearestRank(q float64, nums []float64) float64 {
	s := slices.Sorted(slices.Values(nums))
	r := int(math.Ceil(math.Round(q*float64(len(s))*1e9) / 1e9))
	return s[min(max(r, 1), len(s))-1]
}
