package windowing_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"aggregator/internal/record"
	"aggregator/internal/windowing"
)

// params is a window configuration in ms.
type params struct {
	typ                           string
	size, slide, offset, lateness int64
	emit                          string
}

func (p params) spec(aggs ...windowing.Aggregate) windowing.Spec {
	kinds := map[string]windowing.Kind{"tumbling": windowing.KindTumbling, "sliding": windowing.KindSliding, "session": windowing.KindSession}
	kind, ok := kinds[p.typ]
	if !ok {
		panic("unknown window type " + p.typ)
	}
	return windowing.Spec{Kind: kind, Size: p.size, Slide: p.slide, Offset: p.offset, Gap: p.size,
		Lateness: p.lateness, OnClose: p.emit == "on_close", Aggregates: aggs}
}

// collector is a Sink that keeps copies of the results.
type collector struct{ got []windowing.Result }

func (c *collector) Emit(r *windowing.Result) {
	cp := *r
	cp.Aggregates = slices.Clone(r.Aggregates)
	c.got = append(c.got, cp)
}

func newEngine(t testing.TB, cfg windowing.Spec) (*windowing.Engine, *collector) {
	t.Helper()
	c := &collector{}
	e, err := windowing.NewEngine(cfg, c)
	if err != nil {
		t.Fatalf("NewEngine(%+v) = %v", cfg, err)
	}
	e.TrackChanges()
	return e, c
}

// textKey builds a one-field string key {"k":"s"}.
func textKey(s string) (string, []record.Value) {
	v := record.Text(s)
	return `{"k":` + v.Raw + `}`, []record.Value{v}
}

// numKey builds a one-field number key {"k":n}.
func numKey(n float64) (string, []record.Value) {
	v := record.Number(n)
	return `{"k":` + v.Raw + `}`, []record.Value{v}
}

// brief is the part of a result most tests check.
type brief struct {
	Key      string
	Start    int64
	Count    int64
	Sum      float64
	Firing   windowing.Firing
	Revision int64
	WM       int64
}

func (b brief) String() string {
	return fmt.Sprintf("%s [%d,+) n=%d sum=%v %v rev=%d wm=%d", b.Key, b.Start, b.Count, b.Sum, b.Firing, b.Revision, b.WM)
}

// briefs reduces results whose first aggregate is a sum.
func briefs(rs []windowing.Result) []brief {
	out := make([]brief, len(rs))
	for i, r := range rs {
		out[i] = brief{r.Key, r.Window.Start, r.Count, r.Aggregates[0].Num, r.Firing, r.Revision, r.Watermark}
	}
	return out
}

var sumCount = []windowing.Aggregate{{Fn: windowing.FnSum}, {Fn: windowing.FnCount}}

// rec builds a record with one sum input and a count slot.
func rec(part int32, off int64, key string, fields []record.Value, ts int64, v float64) *record.Record {
	return &record.Record{Partition: part, Offset: off, Time: ts, Key: key, KeyFields: fields,
		Values: []record.Value{record.Number(v), {}}}
}

const endOfTime = math.MaxInt64

// discard is a Sink that drops results, for measuring the engine alone.
type discard struct{}

func (discard) Emit(*windowing.Result) {}
