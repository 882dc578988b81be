package consumer

import (
	"testing"
	"time"
)

// waitEvery is how often waitFor looks at what it waits for.
const waitEvery = 20 * time.Millisecond

// waitFor waits until cond holds, looking every waitEvery, or fails after
// d with what (called then, so that it can say what it saw): the wait for
// an event of the broker or of the service's own goroutines, which no
// channel announces (integration's waitForf, for this package).
func waitFor(t testing.TB, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	if cond() {
		return
	}
	tick := time.NewTicker(waitEvery)
	defer tick.Stop()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return
			}
		case <-deadline.C:
			if cond() {
				return
			}
			t.Fatalf("%s: not after %v", what(), d)
		}
	}
}
