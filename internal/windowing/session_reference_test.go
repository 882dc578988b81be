package windowing_test

import (
	"cmp"
	"math"
	"slices"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// sessionRef is the naive session engine the real one must match: it keeps
// every accepted record per key and recomputes the key's sessions from
// scratch (sort the records' windows by start, merge while they
// intersect) after each record. Revisions are kept by session bounds.
type sessionRef struct {
	gap, lateness int64
	onClose       bool
	aggs          []windowing.Aggregate
	early         windowing.EarlySpec
	procAt        int64 // the last processing-time tick index; math.MinInt64: none yet
	wm            int64
	seq           uint64
	keys          map[refKey]*refSessKey
	out           []windowing.Result
}

type refKey struct {
	part int32
	key  string
}

type refSessKey struct {
	fields []record.Value
	recs   []refSessRec
	revs   map[windowing.Window]int64 // of the sessions that exist now
	fired  map[windowing.Window]bool  // fired other than early
	change map[windowing.Window]bool  // took a record since its last firing
}

type refSessRec struct {
	refRec
	w windowing.Window
}

func newSessionRef(gap, lateness int64, onClose bool, aggs []windowing.Aggregate) *sessionRef {
	return &sessionRef{gap: gap, lateness: lateness, onClose: onClose, aggs: aggs, wm: math.MinInt64, keys: map[refKey]*refSessKey{}, procAt: math.MinInt64}
}

// sessions returns the sessions that recs make, sorted by start.
func sessionsOf(recs []refSessRec) []windowing.Window {
	ws := make([]windowing.Window, len(recs))
	for i, r := range recs {
		ws[i] = r.w
	}
	slices.SortFunc(ws, func(a, b windowing.Window) int { return cmp.Compare(a.Start, b.Start) })
	var out []windowing.Window
	for _, w := range ws {
		if n := len(out); n > 0 && w.Start <= out[n-1].End {
			out[n-1].End = max(out[n-1].End, w.End)
			continue
		}
		out = append(out, w)
	}
	return out
}

func (r *sessionRef) Add(rec *record.Record) windowing.AddResult {
	r.seq++
	gap := rec.Gap
	if gap <= 0 {
		gap = r.gap
	}
	end := rec.Time + gap
	if rec.Time > math.MaxInt64-gap {
		end = math.MaxInt64
	}
	nr := refSessRec{refRec{rec.Time, r.seq, slices.Clone(rec.Values)}, windowing.Window{Start: rec.Time, End: end}}
	id := refKey{rec.Partition, rec.Key}
	k := r.keys[id]
	if k == nil {
		k = &refSessKey{fields: slices.Clone(rec.KeyFields), revs: map[windowing.Window]int64{}, fired: map[windowing.Window]bool{}, change: map[windowing.Window]bool{}}
	}
	recs := append(slices.Clone(k.recs), nr)
	after := sessionsOf(recs)
	merged := after[slices.IndexFunc(after, func(w windowing.Window) bool { return w.Start <= nr.w.Start && nr.w.End <= w.End })]
	if merged.CleanupTime(r.lateness) <= r.wm {
		return windowing.AddResult{Kind: windowing.LateEvent, Missed: merged}
	}
	r.keys[id] = k
	before := sessionsOf(k.recs)
	k.recs = recs
	for _, w := range before { // in order of start
		if slices.Contains(after, w) {
			continue
		}
		if k.revs[w] > 0 { // on_close: only early firings make it > 0
			r.out = append(r.out, windowing.Result{Partition: id.part, Key: id.key, Window: w, Firing: windowing.Retract,
				Watermark: r.wm, Aggregates: make([]record.Value, len(r.aggs))})
		}
		delete(k.revs, w)
		delete(k.fired, w)
		delete(k.change, w)
	}
	k.change[merged] = true
	if !r.onClose && (merged.MaxTimestamp() <= r.wm || k.fired[merged]) {
		r.fire(id, k, merged, windowing.Late)
	}
	return windowing.AddResult{Kind: windowing.Aggregated}
}

func (r *sessionRef) fire(id refKey, k *refSessKey, w windowing.Window, f windowing.Firing) {
	var recs []refRec
	for _, rc := range k.recs {
		if w.Start <= rc.w.Start && rc.w.End <= w.End {
			recs = append(recs, rc.refRec)
		}
	}
	res := windowing.Result{Partition: id.part, Key: id.key, Window: w, Count: int64(len(recs)),
		Firing: f, Revision: k.revs[w], Watermark: r.wm}
	for i, a := range r.aggs {
		res.Aggregates = append(res.Aggregates, aggregate(a, i, recs))
	}
	k.revs[w]++
	k.change[w] = false
	if f != windowing.Early {
		k.fired[w] = true
	}
	r.out = append(r.out, res)
}

type refDue struct {
	id  refKey
	k   *refSessKey
	w   windowing.Window
	at  int64 // due time
	how windowing.Firing
}

func (r *sessionRef) Advance(wm int64) {
	if wm <= r.wm {
		return
	}
	prev := r.wm
	r.wm = wm
	tick, ticked := int64(0), false
	if e := r.early; e.Event && e.Every > 0 && prev != math.MinInt64 && wm != math.MaxInt64 {
		a := int64(math.Floor(float64(prev+1) / float64(e.Every)))
		b := int64(math.Floor(float64(wm+1) / float64(e.Every)))
		tick, ticked = (a+1)*e.Every-1, b > a
	}
	var due []refDue
	for id, k := range r.keys {
		for _, w := range sessionsOf(k.recs) {
			switch {
			case !r.onClose && w.MaxTimestamp() <= wm && !k.fired[w]:
				due = append(due, refDue{id, k, w, w.MaxTimestamp(), windowing.OnTime})
			case r.onClose && w.CleanupTime(r.lateness) <= wm:
				due = append(due, refDue{id, k, w, w.CleanupTime(r.lateness), windowing.Final})
			case ticked && w.MaxTimestamp() > wm && k.change[w]:
				due = append(due, refDue{id, k, w, tick, windowing.Early})
			}
		}
	}
	r.fireAll(due)
	for id, k := range r.keys {
		for _, w := range sessionsOf(k.recs) {
			if w.CleanupTime(r.lateness) <= wm {
				k.recs = slices.DeleteFunc(k.recs, func(rc refSessRec) bool { return w.Start <= rc.w.Start && rc.w.End <= w.End })
				delete(k.revs, w)
				delete(k.fired, w)
				delete(k.change, w)
			}
		}
		if len(k.recs) == 0 {
			delete(r.keys, id)
		}
	}
}

// ProcessingTime is reference.ProcessingTime for sessions.
func (r *sessionRef) ProcessingTime(now int64) {
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
	var due []refDue
	for id, k := range r.keys {
		for _, w := range sessionsOf(k.recs) {
			if k.change[w] && w.MaxTimestamp() > r.wm {
				due = append(due, refDue{id, k, w, 0, windowing.Early})
			}
		}
	}
	r.fireAll(due)
}

// fireAll fires due in order of due time, end, key and partition.
func (r *sessionRef) fireAll(due []refDue) {
	slices.SortFunc(due, func(a, b refDue) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		if c := cmp.Compare(a.w.End, b.w.End); c != 0 {
			return c
		}
		for i := range a.k.fields {
			if c := record.Compare(a.k.fields[i], b.k.fields[i]); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.id.part, b.id.part), cmp.Compare(a.id.key, b.id.key))
	})
	for _, d := range due {
		r.fire(d.id, d.k, d.w, d.how)
	}
}

func (r *sessionRef) RemovePartition(p int32) {
	for id := range r.keys {
		if id.part == p {
			delete(r.keys, id)
		}
	}
}

func (r *sessionRef) open() int {
	n := 0
	for _, k := range r.keys {
		n += len(sessionsOf(k.recs))
	}
	return n
}
