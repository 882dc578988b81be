package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestIdleCommitsNothing: a service that has caught up and is given
// nothing more commits nothing (before, the local walk-through's
// service, 2 partitions and so the repartition stage, committed a
// transaction every commit interval), and the stage-1 heartbeat markers
// (every 10 s, docs/scaling.md#the-repartition-stage) are still committed; by key, with no stage 1, a
// service idle for 10 s commits nothing either. The wall clock is the
// test's: it moves 1 ms at a time, and each move is seen once
// aggregator_watermark_lag_seconds (wall clock minus watermark, set at
// every poll) shows it, so every step is a poll at least; with
// state.commit_interval 10 ms and an idle poll waiting 100 ms for records,
// each poll is a commit the service could make.
func TestIdleCommitsNothing(t *testing.T) {
	t.Parallel() // its own broker; each step waits for a poll
	for _, tt := range []struct{ partitioning, delivery string }{
		{"repartition", "exactly_once"}, {"repartition", "at_least_once"}, {"by_key", "exactly_once"},
	} {
		t.Run(tt.partitioning+" "+tt.delivery, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 2)
			brokers := c.ListenAddrs()
			// examples/local.yaml's pipeline.
			cfg := parseConfig(t, `
source:
  partitioning: `+tt.partitioning+`
  format: csv
  csv:
    columns: [sid, callType, callTime, duration]
  key: [sid]
  timestamp: {field: callTime, layout: "2006-01-02 15:04:05", timezone: UTC}
  filter:
    - {field: callType, equals: success}
window: {type: tumbling, size: 5s, allowed_lateness: 2s}
aggregates:
  - {name: total_duration, fn: sum, field: duration}
state: {commit_interval: 10ms}
delivery: `+tt.delivery+`
`, brokers)
			clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC)}
			reg := prometheus.NewRegistry()
			s := startWith(t, cfg, clock.Now, reg)
			defer s.stop(t)
			produce(t, brokers, []string{
				"sid_1,success,2030-01-01 00:00:01,10", "sid_2,success,2030-01-01 00:00:02,20",
				"sid_1,success,2030-01-01 00:00:09,30", "sid_2,success,2030-01-01 00:00:09,40",
			}, func(i int) int32 { return int32(i % 2) })
			waitFor(t, waitTimeout, "4 records aggregated", func() bool {
				return gathered(t, reg, "aggregator_records_total", "outcome", "aggregated") == 4
			})
			waitFor(t, waitTimeout, "a watermark", func() bool { return gauge(t, reg, "aggregator_watermark_lag_seconds") > 0 })

			idle := func(what string) {
				t.Helper()
				// Settled: two polls in a row without a commit (what
				// processing left is committed within a few).
				settled := false
				for range 50 {
					before := idleStep(t, clock, reg)
					if idleStep(t, clock, reg) == before {
						settled = true
						break
					}
				}
				if !settled {
					t.Fatalf("%s: a commit at every poll for 100 polls (%v committed)", what, idleCommits(t, reg))
				}
				before := idleCommits(t, reg)
				for range 20 {
					idleStep(t, clock, reg)
				}
				if got := idleCommits(t, reg); got != before {
					t.Errorf("%s: %v commits in 20 idle polls, want none", what, got-before)
				}
			}
			idle("caught up")
			before := idleCommits(t, reg)
			clock.Set(clock.Now().Add(10 * time.Second))
			if tt.partitioning == "repartition" { // stage 1's heartbeat markers are due
				waitFor(t, waitTimeout, "a commit after 10 s", func() bool { return idleCommits(t, reg) > before })
			}
			idle("after 10 s")
		})
	}
}

// idleStep moves the clock 1 ms on and waits for a poll to see it (the
// commit that poll may make is done once the next step's poll is seen);
// it returns the commits so far.
func idleStep(t *testing.T, clock *fakeClock, reg *prometheus.Registry) float64 {
	t.Helper()
	lag := gauge(t, reg, "aggregator_watermark_lag_seconds")
	clock.Set(clock.Now().Add(time.Millisecond))
	waitFor(t, waitTimeout, fmt.Sprintf("a poll past watermark lag %v", lag), func() bool {
		return gauge(t, reg, "aggregator_watermark_lag_seconds") > lag+0.0005
	})
	return idleCommits(t, reg)
}

func idleCommits(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return gathered(t, reg, "aggregator_commits_total", "result", "committed")
}

// gauge reads the unlabelled gauge name.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}
