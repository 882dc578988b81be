package integration

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The service, with records of 8 keys spread over 4 partitions by key
// (times only going up within a partition), gives the results replay
// gives, for the window kinds whose results do not depend on how
// partitions interleave: count windows (sliding, slices of gcd 1 record)
// and calendar days in Europe/Berlin (the stream crosses the local
// midnight that begins 31 March 2030, a 23-hour day), with top_k.
func TestWindowKindsMatchReplay(t *testing.T) {
	t.Parallel() // its own broker

	const berlinMidnight = 1_901_142_000_000 // 2030-03-31T00:00:00+01:00
	for name, c := range map[string]struct {
		window string
		from   int64
	}{
		"count sliding": {"{type: count, size: 7, slide: 3}", base},
		"calendar day":  {"{calendar: day, timezone: Europe/Berlin}", berlinMidnight - 100_000},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, callsConfig(c.window)+"  - {name: top, fn: top_k, field: d, k: 3}\n", brokers)
			lines, parts := ordered(2000, c.from)
			want := replay(t, cfg, byPartition(lines, parts), noWallClock)
			if len(want.results) == 0 {
				t.Fatal("replay gives no result: the test proves nothing")
			}
			produce(t, brokers, lines, func(i int) int32 { return parts[i] })
			s := start(t, cfg, nil)
			waitCount(t, brokers, resultsTopic, int64(len(want.results)))
			s.stop(t)
			if got := contents(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, contents(want.results)) {
				t.Errorf("results differ from replay:\n%s", diff(got, contents(want.results)))
			}
		})
	}
}

// In `run`, processing-time early firings come with the service's clock
// (a test clock here, one minute a call): 1h windows fire early every
// 5m of it, with the next revision each time, counted by
// aggregator_firings_total{firing="early"}; none is due on time.
func TestProcessingTimeEarlyFirings(t *testing.T) {
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig("{type: tumbling, size: 1h, early_firings: {every: 5m, time: processing}}"), brokers)
	lines, parts := ordered(400, base) // 40s of event time: one window per key
	produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	var calls atomic.Int64
	clock := func() time.Time { return time.UnixMilli(base).Add(time.Duration(calls.Add(1)) * time.Minute) }
	reg := prometheus.NewRegistry()
	s := startWith(t, cfg, clock, reg)
	waitCount(t, brokers, resultsTopic, 8)
	s.stop(t)
	revs := map[string]int64{}
	for _, v := range values(readAll(t, brokers, resultsTopic)) {
		var r struct {
			Key      map[string]string `json:"key"`
			Firing   string            `json:"firing"`
			Revision int64             `json:"revision"`
			Count    int64             `json:"count"`
		}
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			t.Fatal(err)
		}
		if r.Firing != "early" || r.Revision != revs[r.Key["sid"]] || r.Count <= 0 {
			t.Fatalf("result %s: want early firings of one window per key, revisions 0, 1, …", v)
		}
		revs[r.Key["sid"]]++
	}
	if n := gathered(t, reg, "aggregator_firings_total", "firing", "early"); n < 8 {
		t.Errorf(`aggregator_firings_total{firing="early"} = %v, want at least 8`, n)
	}
}
