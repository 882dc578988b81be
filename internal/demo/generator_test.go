package demo_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"aggregator/internal/demo"
)

var start = time.Date(2030, 12, 1, 10, 10, 0, 0, time.UTC)

func testConfig() demo.GeneratorConfig {
	return demo.GeneratorConfig{
		Keys: 5, LateFraction: 0.05, StragglerFraction: 0.05, MalformedFraction: 0.05, FilteredFraction: 0.05,
		Speed: 1, MaxDisorder: 800 * time.Millisecond,
		OutOfOrderness: time.Second, Lateness: 2 * time.Second, WindowSize: 5 * time.Second, Seed: 42,
	}
}

// generate makes n records, one every 10ms of wall clock.
func generate(cfg demo.GeneratorConfig, n int) []demo.Record {
	g := demo.NewGenerator(cfg, start)
	recs := make([]demo.Record, n)
	for i := range recs {
		recs[i] = g.Next(start.Add(time.Duration(i) * 10 * time.Millisecond))
	}
	return recs
}

func TestGeneratorIsDeterministic(t *testing.T) {
	a, b := generate(testConfig(), 500), generate(testConfig(), 500)
	for i := range a {
		if !bytes.Equal(a[i].Value, b[i].Value) || !bytes.Equal(a[i].Key, b[i].Key) {
			t.Fatalf("record %d differs between runs with one seed: %s vs %s", i, a[i].Value, b[i].Value)
		}
	}
	other := testConfig()
	other.Seed = 7
	if c := generate(other, 500); bytes.Equal(a[0].Value, c[0].Value) && bytes.Equal(a[1].Value, c[1].Value) {
		t.Errorf("seeds 42 and 7 start with the same records %s, %s", a[0].Value, a[1].Value)
	}
}

func TestGeneratorFirstRecords(t *testing.T) {
	want := []string{
		`{"sid":"sid_2","callType":"success","callTime":"2030-12-01 10:09:47.000","duration":432}`, // too late: 1s+2s+2×5s back
		`{"sid":"sid_1","callType":"success","callTime":"2030-12-01 10:09:59.255","duration":158}`,
		`{"sid":"sid_1","callType":"success","callTime":"2030-12-01 10:09:59.320","duration":391}`,
		`{"sid":"sid_3","callType":"fail","callTime":"2030-12-01 10:09:59.556","duration":534}`,
	}
	for i, r := range generate(testConfig(), len(want)) {
		if got := string(r.Value); got != want[i] {
			t.Errorf("record %d with seed 42 = %s, want %s", i, got, want[i])
		}
	}
}

func TestGeneratorClassMix(t *testing.T) {
	const n = 20_000
	counts := map[demo.Class]int{}
	for _, r := range generate(testConfig(), n) {
		counts[r.Class]++
	}
	want := map[demo.Class]float64{demo.OnTime: 0.8, demo.Straggler: 0.05, demo.TooLate: 0.05, demo.Malformed: 0.05, demo.Filtered: 0.05}
	for class, p := range want {
		if got := float64(counts[class]) / n; math.Abs(got-p) > p/5 {
			t.Errorf("share of %v = %.3f, want %.3f ± 20%%", class, got, p)
		}
	}
}

// TestGeneratorClassesMeetThePipeline checks each record against the
// watermark the pipeline would have: the event clock minus the
// out-of-orderness, less 1ms.
func TestGeneratorClassesMeetThePipeline(t *testing.T) {
	cfg := testConfig()
	g := demo.NewGenerator(cfg, start)
	size, lateness := cfg.WindowSize.Milliseconds(), cfg.Lateness.Milliseconds()
	var stragglers, lateFirings int
	for i := range 5000 {
		now := start.Add(time.Duration(i) * 10 * time.Millisecond)
		r := g.Next(now)
		clock := g.EventClock(now)
		wm := clock.UnixMilli() - cfg.OutOfOrderness.Milliseconds() - 1
		ts := r.EventTime.UnixMilli()
		end := ts - ts%size + size
		cleanup := end - 1 + lateness
		switch r.Class {
		case demo.OnTime, demo.Filtered, demo.Malformed:
			if lag := clock.Sub(r.EventTime); lag < 0 || lag >= cfg.MaxDisorder {
				t.Fatalf("%v record %s lags the event clock by %v, want [0, %v)", r.Class, r.Value, lag, cfg.MaxDisorder)
			}
		case demo.Straggler:
			if ts > wm || cleanup <= wm {
				t.Fatalf("straggler at %d with watermark %d: want behind it and cleanup %d after it", ts, wm, cleanup)
			}
			stragglers++
			if end-1 <= wm {
				lateFirings++
			}
		case demo.TooLate:
			if cleanup > wm {
				t.Fatalf("too-late record at %d: cleanup %d is not past watermark %d", ts, cleanup, wm)
			}
		}
	}
	// A fired window stays within its lateness for lateness/size of the time.
	if share := float64(lateFirings) / float64(stragglers); share < 0.3 {
		t.Errorf("stragglers in a fired window = %d of %d, want about %d%%", lateFirings, stragglers, 100*lateness/size)
	}
}

type call struct {
	Sid      *string `json:"sid"`
	CallType *string `json:"callType"`
	CallTime *string `json:"callTime"`
	Duration any     `json:"duration"`
}

func TestGeneratorRecordShapes(t *testing.T) {
	for _, r := range generate(testConfig(), 3000) {
		var c call
		err := json.Unmarshal(r.Value, &c)
		_, numeric := c.Duration.(float64)
		valid := err == nil && c.Sid != nil && c.CallTime != nil && numeric
		if valid == (r.Class == demo.Malformed) {
			t.Fatalf("%v record %s: decodes as a valid call = %v", r.Class, r.Value, valid)
		}
		if !strings.HasPrefix(string(r.Key), "sid_") || !bytes.Contains(r.Value, r.Key) {
			t.Fatalf("record %s has key %q, want its sid", r.Value, r.Key)
		}
		if wantFail := r.Class == demo.Filtered; valid && (*c.CallType == "fail") != wantFail {
			t.Fatalf("%v record %s: callType %s", r.Class, r.Value, *c.CallType)
		}
		if valid && *c.CallTime != r.EventTime.UTC().Format(demo.TimeLayout) {
			t.Fatalf("record %s: callTime is not its EventTime %v", r.Value, r.EventTime)
		}
	}
}

func TestGeneratorKeys(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range generate(testConfig(), 1000) {
		seen[string(r.Key)] = true
	}
	if len(seen) != 5 {
		t.Errorf("keys of 1000 records with Keys 5 = %v, want sid_0..sid_4", seen)
	}
}

func TestEventClock(t *testing.T) {
	tests := map[string]struct {
		speed float64
		after time.Duration
		want  time.Duration
	}{
		"real time": {1, 10 * time.Second, 10 * time.Second},
		"fast":      {60, time.Second, time.Minute},
		"at start":  {60, 0, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Speed = tt.speed
			got := demo.NewGenerator(cfg, start).EventClock(start.Add(tt.after))
			if want := start.Add(tt.want); !got.Equal(want) {
				t.Errorf("EventClock(start+%v) at speed %v = %v, want %v", tt.after, tt.speed, got, want)
			}
		})
	}
}

// With an Origin the event clock starts there and runs at Speed from it.
func TestEventClockOrigin(t *testing.T) {
	cfg := testConfig()
	cfg.Speed, cfg.Origin = 3600, time.Date(2030, 3, 30, 20, 0, 0, 0, time.UTC)
	g := demo.NewGenerator(cfg, start)
	if got := g.EventClock(start); !got.Equal(cfg.Origin) {
		t.Errorf("EventClock(start) = %v, want the origin %v", got, cfg.Origin)
	}
	if got, want := g.EventClock(start.Add(1500*time.Millisecond)), cfg.Origin.Add(90*time.Minute); !got.Equal(want) {
		t.Errorf("EventClock(start+1.5s) at speed 3600 = %v, want %v", got, want)
	}
}

func TestDue(t *testing.T) {
	tests := map[string]struct {
		elapsed time.Duration
		rate    float64
		want    int64
	}{
		"start":           {0, 50, 0},
		"one second":      {time.Second, 50, 50},
		"partial":         {1500 * time.Millisecond, 3, 4},
		"fractional rate": {10 * time.Second, 0.5, 5},
		"zero rate":       {time.Minute, 0, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := demo.Due(tt.elapsed, tt.rate); got != tt.want {
				t.Errorf("Due(%v, %v) = %d, want %d", tt.elapsed, tt.rate, got, tt.want)
			}
		})
	}
}

func BenchmarkGeneratorNext(b *testing.B) {
	g := demo.NewGenerator(testConfig(), start)
	now := start
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		g.Next(now)
	}
}

// TestGeneratorLateMargin: with LateAfter no record is TooLate before the
// event clock has run that long, and with LateMargin each is that much
// further back than a lateness and two windows.
func TestGeneratorLateMargin(t *testing.T) {
	cfg := testConfig()
	cfg.LateAfter, cfg.LateMargin = 3*time.Second, 40*time.Second
	g := demo.NewGenerator(cfg, start)
	back := cfg.OutOfOrderness + cfg.Lateness + 2*cfg.WindowSize + cfg.LateMargin
	late := 0
	for i := range 2000 {
		now := start.Add(time.Duration(i) * 10 * time.Millisecond)
		r := g.Next(now)
		if r.Class != demo.TooLate {
			continue
		}
		late++
		if elapsed := now.Sub(start); elapsed < cfg.LateAfter {
			t.Fatalf("too-late record %s %v after the start, want none before %v", r.Value, elapsed, cfg.LateAfter)
		}
		if lag := g.EventClock(now).Truncate(time.Millisecond).Sub(r.EventTime); lag != back {
			t.Fatalf("too-late record %s is %v behind the event clock, want %v", r.Value, lag, back)
		}
	}
	if late == 0 {
		t.Error("no too-late record in 20s, want about 5%")
	}
}

// TestGeneratorKeyByCall: with KeyByCall each record's Kafka key is its
// own call id, and the values are those of the sid-keyed stream.
func TestGeneratorKeyByCall(t *testing.T) {
	cfg := testConfig()
	bySid := generate(cfg, 100)
	cfg.KeyByCall = true
	for i, r := range generate(cfg, 100) {
		if want := fmt.Sprintf("call_%d", i); string(r.Key) != want || !bytes.Equal(r.Value, bySid[i].Value) {
			t.Fatalf("record %d = key %s, value %s; want key %s, value %s", i, r.Key, r.Value, want, bySid[i].Value)
		}
	}
}

// TestGeneratorLateGate: no record is TooLate while the gate is shut.
func TestGeneratorLateGate(t *testing.T) {
	cfg := testConfig()
	open := false
	cfg.LateGate = func() bool { return open }
	g := demo.NewGenerator(cfg, start)
	late := 0
	for i := range 2000 {
		if i == 1000 {
			open = true
		}
		if r := g.Next(start.Add(time.Duration(i) * 10 * time.Millisecond)); r.Class == demo.TooLate {
			if !open {
				t.Fatalf("record %d (%s) is too late with the gate shut", i, r.Value)
			}
			late++
		}
	}
	if late == 0 {
		t.Error("no too-late record once the gate opened, want about 5%")
	}
}
