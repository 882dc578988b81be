package integration

import (
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"testing"
)

var restoreLimitWindows = flag.Int("restore.limit-windows", 200_000,
	"TestRestoreWithinMemoryLimit: the open windows to restore (the long run: 3000000)")

// TestRestoreWithinMemoryLimit: the binary, SIGKILLed with open windows
// in its state (one per key, restoreBenchYAML), restarts under
// GOMEMLIMIT at 1.2 times the RSS it had once it had committed them (a
// pod sized for its steady state), restores every window and produces
// again, and its RSS never passed the limit on the way: a restore needs
// no more memory than the state it restores. In CI 200,000 windows, both
// delivery modes at once, the broker in the test's process; the long
// run: -restore.limit-windows 3000000 (docs/development.md).
func TestRestoreWithinMemoryLimit(t *testing.T) {
	t.Parallel() // its own brokers
	windows := *restoreLimitWindows
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			if windows < 1_000_000 {
				t.Parallel() // two large ones at once would measure each other
			}
			kc := newCluster(t, 4)
			k := killWithOpenWindows(t, kc.ListenAddrs(), windows, delivery)
			limit := int64(1.2 * k.steady)
			r := k.restart(t, binary, fmt.Sprintf("GOMEMLIMIT=%d", limit))
			_, _ = r.run.sigterm(t)
			if !regexp.MustCompile(`"changelog_records":\d+.*"message":"restore started: reading the changelog"`).MatchString(r.run.out.String()) {
				t.Errorf("the restart logged no restore start:\n%s", r.run.out)
			}
			m := regexp.MustCompile(`"entries":(\d+).*"message":"restore finished"`).FindStringSubmatch(r.run.out.String())
			if m == nil {
				t.Fatalf("the restart logged no restore:\n%s", r.run.out)
			}
			if n, _ := strconv.Atoi(m[1]); n != windows {
				t.Errorf("the restore restored %d entries, want %d (a window each)", n, windows)
			}
			t.Logf("%d windows: steady-state RSS %.0f MiB, restore's peak %.0f MiB (%.2fx), after it %.0f MiB, GOMEMLIMIT %d MiB; producing again %v after the restart",
				windows, k.steady/(1<<20), r.peak/(1<<20), r.peak/k.steady, r.after/(1<<20), limit>>20, r.took)
			if r.peak > float64(limit) {
				t.Errorf("peak RSS of the restore %.0f MiB, above GOMEMLIMIT %d MiB (1.2 × the steady state's %.0f MiB)",
					r.peak/(1<<20), limit>>20, k.steady/(1<<20))
			}
		})
	}
}
