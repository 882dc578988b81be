package pipeline_test

import (
	"errors"
	"math"
	"testing"

	"aggregator/internal/config"
	"aggregator/internal/pipeline"
	"aggregator/internal/ready"
	"aggregator/internal/record"
	"aggregator/internal/state"
	"aggregator/internal/windowing"
)

// tape records what the pipeline emits.
type tape struct {
	results []windowing.Result
	late    []int64 // offsets
	dead    []string
}

func (t *tape) Result(r *windowing.Result) {
	c := *r
	c.Aggregates = append([]record.Value(nil), r.Aggregates...)
	t.results = append(t.results, c)
}
func (t *tape) Late(in *ready.Input, _, _ int64, _ windowing.Window) {
	t.late = append(t.late, in.Offset)
}
func (t *tape) DeadLetter(_ *ready.Input, err error) {
	var de *record.DecodeError
	if !errors.As(err, &de) {
		panic("dead letter without a *record.DecodeError")
	}
	t.dead = append(t.dead, de.Reason)
}

// outputs is what a shell writes a Ready's outputs to.
type outputs interface {
	Result(r *windowing.Result)
	Late(in *ready.Input, eventTime, watermark int64, missed windowing.Window)
	DeadLetter(in *ready.Input, err error)
}

// core is a Processor whose outputs are taken after every call that may
// emit and written to out in order, as the shell does.
type core struct {
	*pipeline.Processor
	out outputs
}

func (c core) drain() {
	rd := c.Step()
	for i := range rd.Outputs {
		o := &rd.Outputs[i]
		switch o.Kind {
		case ready.Result:
			c.out.Result(&o.Result)
		case ready.Late:
			c.out.Late(&o.Event.In, o.Event.EventTime, o.Event.Watermark, o.Event.Missed)
		case ready.DeadLetter:
			c.out.DeadLetter(&o.Event.In, o.Event.Err)
		}
	}
}

func (c core) Process(in *ready.Input, now int64) pipeline.Outcome {
	defer c.drain()
	return c.Processor.Process(in, now)
}

func (c core) Revoke(partition int32) {
	defer c.drain()
	c.Processor.Revoke(partition)
}

func (c core) Tick(now int64) {
	defer c.drain()
	c.Processor.Tick(now)
}

func (c core) Flush() {
	defer c.drain()
	c.Processor.Flush()
}

func (c core) SetCaughtUp(partition int32, caughtUp bool, now int64) {
	defer c.drain()
	c.Processor.SetCaughtUp(partition, caughtUp, now)
}

func (c core) Restore(partition int32, r *state.Restorer, now int64) (state.Result, error) {
	defer c.drain()
	return c.Processor.Restore(partition, r, now)
}

func newCore(t testing.TB, yaml string, out outputs) core {
	t.Helper()
	return newCoreMode(t, yaml, out, pipeline.Mode{})
}

func newCoreMode(t testing.TB, yaml string, out outputs, mode pipeline.Mode) core {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	p, err := pipeline.New(cfg, mode)
	if err != nil {
		t.Fatalf("pipeline.New: %v", err)
	}
	return core{p, out}
}

func newProcessor(t testing.TB, yaml string) (core, *tape) {
	t.Helper()
	out := &tape{}
	return newCoreMode(t, yaml, out, pipeline.Mode{Checkpointed: true}), out
}

const slidingJSON = `
source: {key: [k], timestamp: {field: t, layout: unix_ms}, filter: [{field: kind, equals: call}]}
watermark: {max_future_skew: 1s}
window: {type: sliding, size: 4s, slide: 2s}
aggregates: [{name: n, fn: count}]
`

func TestProcessOutcomes(t *testing.T) {
	p, out := newProcessor(t, slidingJSON)
	const now = 100_000
	steps := []struct {
		value string
		want  pipeline.Outcome
	}{
		{`{"k":"a","kind":"call","t":10000}`, pipeline.Aggregated},    // windows [8,12) and [10,14); W = 9999
		{`{"k":"a","kind":"sms","t":10000}`, pipeline.Filtered},       // ignored
		{`{"k":"a","kind":"call","t":200000}`, pipeline.DeadLetter},   // 100s ahead of now, skew 1s
		{`{"k":"a","kind":"call"`, pipeline.DeadLetter},               // bad JSON
		{`{"k":"a","kind":"call","t":13000}`, pipeline.Aggregated},    // W = 12999: [8,12) fires, is dropped
		{`{"k":"a","kind":"call","t":11000}`, pipeline.PartiallyLate}, // [8,12) gone, [10,14) open
		{`{"k":"a","kind":"call","t":9000}`, pipeline.LateEvent},      // [6,10) and [8,12) both gone
		{`{"k":"a","kind":"call","t":100500}`, pipeline.Aggregated},   // within the skew
		{`{"k":"a","kind":"call","t":"soon"}`, pipeline.DeadLetter},   // bad timestamp
		{`{"kind":"call","t":100600}`, pipeline.DeadLetter},           // no key
	}
	for i, s := range steps {
		in := &ready.Input{Offset: int64(i), Value: []byte(s.value)}
		if got := p.Process(in, now); got != s.want {
			t.Errorf("Process(%s) = %v, want %v", s.value, got, s.want)
		}
	}
	if want := []int64{6}; len(out.late) != 1 || out.late[0] != want[0] {
		t.Errorf("late offsets = %v, want %v", out.late, want)
	}
	wantDead := []string{"future_timestamp", "bad_json", "bad_timestamp", "missing_key"}
	if len(out.dead) != len(wantDead) {
		t.Fatalf("dead letters = %v, want %v", out.dead, wantDead)
	}
	for i := range wantDead {
		if out.dead[i] != wantDead[i] {
			t.Errorf("dead letter %d = %s, want %s", i, out.dead[i], wantDead[i])
		}
	}
}

func TestFlushFiresEverything(t *testing.T) {
	p, out := newProcessor(t, slidingJSON)
	p.Process(&ready.Input{Value: []byte(`{"k":"a","kind":"call","t":10000}`)}, math.MaxInt64)
	p.Flush()
	if len(out.results) != 2 {
		t.Fatalf("results after Flush = %d, want 2 (both sliding windows)", len(out.results))
	}
	for _, r := range out.results {
		if r.Watermark != math.MaxInt64 || r.Count != 1 {
			t.Errorf("flushed result = %+v, want count 1 at watermark MaxInt64", r)
		}
	}
	if p.OpenWindows() != 0 {
		t.Errorf("OpenWindows() after Flush = %d, want 0", p.OpenWindows())
	}
}

func TestPunctuatedMarker(t *testing.T) {
	p, out := newProcessor(t, `
source: {timestamp: {field: t, layout: unix_ms}}
watermark: {strategy: punctuated, marker_field: wm}
window: {size: 5s}
aggregates: [{name: n, fn: count}]
`)
	if got := p.Process(&ready.Input{Value: []byte(`{"t":1000}`)}, 0); got != pipeline.Aggregated {
		t.Fatalf("Process(event) = %v, want aggregated", got)
	}
	if len(out.results) != 0 {
		t.Fatalf("an event moved a punctuated watermark: %d results", len(out.results))
	}
	if got := p.Process(&ready.Input{Offset: 1, Value: []byte(`{"wm":4999}`)}, 0); got != pipeline.Marker {
		t.Fatalf("Process(marker) = %v, want marker", got)
	}
	if len(out.results) != 1 || out.results[0].Watermark != 4999 {
		t.Errorf("results after the marker = %+v, want one firing at watermark 4999", out.results)
	}
}

func TestRevokeLetsTheWatermarkGo(t *testing.T) {
	p, out := newProcessor(t, `
source: {timestamp: {field: t, layout: unix_ms}}
window: {size: 5s}
aggregates: [{name: n, fn: count}]
`)
	p.Assign(0, 0)
	p.Assign(1, 0) // partition 1 never gets a record: W stays at minus infinity
	p.Process(&ready.Input{Partition: 0, Value: []byte(`{"t":1000}`)}, 0)
	p.Process(&ready.Input{Partition: 0, Offset: 1, Value: []byte(`{"t":9000}`)}, 0)
	if len(out.results) != 0 {
		t.Fatalf("fired while partition 1 holds the watermark: %+v", out.results)
	}
	p.Revoke(1)
	if len(out.results) != 1 || out.results[0].Window.Start != 0 {
		t.Errorf("results after revoking partition 1 = %+v, want [0,5000) fired", out.results)
	}
}
