package integration

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

var takeoverBaseline = flag.Bool("takeover-baseline", false,
	"also measure the takeover after SIGKILL without static membership (waits for the session and transaction timeouts)")

// binGroup is the consumer group of the configs writeConfig writes.
const binGroup = "aggregator-bin"

// waitGroupCommitted waits until binGroup's committed offsets of the input
// partitions are ends and returns when that was; it fails after d.
func waitGroupCommitted(t testing.TB, brokers []string, ends map[int32]int64, d time.Duration) time.Time {
	t.Helper()
	return waitGroupCommittedWithin(t, d, brokers, binGroup, ends)
}

// partitionEnds is the end offset of each partition after records to
// parts, one record each.
func partitionEnds(parts []int32) map[int32]int64 {
	m := map[int32]int64{}
	for _, p := range parts {
		m[p]++
	}
	return m
}

// A SIGKILLed instance restarted with the same source.instance_id (as a
// container restarted in its pod, named after it by the chart) takes its
// partitions back at once: the group does not wait for the dead member's
// session to time out (static membership), and the restarted producer,
// whose transactional ID is the instance's, aborts the transaction the
// dead one left open instead of waiting for its timeout.
func TestStaticMembershipTakeover(t *testing.T) {
	cases := []struct {
		name, instanceID, session string
		within                    time.Duration
	}{
		{"static membership", "aggregator-0", "30s", 2 * time.Second},
	}
	if *takeoverBaseline {
		cases = append(cases, struct {
			name, instanceID, session string
			within                    time.Duration
		}{"without static membership", "", "10s", time.Minute})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := newCluster(t, 4)
			brokers := kc.ListenAddrs()
			path := writeConfig(t, callsConfig(tumbling)+"\n", brokers)
			env := []string{"AGGREGATOR_SOURCE_SESSION_TIMEOUT=" + tc.session}
			if tc.instanceID != "" {
				env = append(env, "AGGREGATOR_SOURCE_INSTANCE_ID="+tc.instanceID)
			}
			lines, parts := ordered(1200, base)
			part := func(i int) int32 { return parts[i] }
			ends := func(n int) map[int32]int64 { return partitionEnds(parts[:n]) }

			produce(t, brokers, lines[:600], part)
			a := startBinary(t, path, env...)
			waitGroupCommitted(t, brokers, ends(600), waitTimeout)
			// Records that A applies, in a transaction open when it dies;
			// the ones after, B alone consumes.
			produceParts(t, brokers, lines[:900], 600, part)
			waitFor(t, waitTimeout, "A applying the 900 records", func() bool { return a.sum("aggregator_records_total") >= 900 })
			if err := a.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			a.wait(t, 10*time.Second)

			killed := time.Now()
			b := startBinary(t, path, env...)
			produceParts(t, brokers, lines, 900, part)
			took := waitGroupCommitted(t, brokers, ends(len(lines)), waitTimeout).Sub(killed)
			t.Logf("%s (session timeout %s): every partition consumed and committed again %v after SIGKILL and restart",
				tc.name, tc.session, took.Round(time.Millisecond))
			if took > tc.within {
				t.Errorf("partitions consumed again %v after SIGKILL and restart, want within %v\n%s", took, tc.within, b.out)
			}
			code, took := b.sigterm(t)
			t.Logf("SIGTERM while consuming: exit %d after %v", code, took.Round(time.Millisecond))
			if code != 0 {
				t.Errorf("SIGTERM: exit %d after %v, want 0\n%s", code, took, b.out)
			}
			// A static member leaves on SIGTERM too: a pod stopped for
			// good does not hold its partitions for the session timeout.
			groups, err := kadm.NewClient(client(t, brokers)).DescribeGroups(context.Background(), binGroup)
			if g := groups[binGroup]; err != nil || g.Err != nil || len(g.Members) != 0 {
				t.Errorf("group after SIGTERM = %+v, %v; want no member", g, err)
			}
			checkRepeats(t, readAll(t, brokers, resultsTopic))
		})
	}
}

// produceParts produces lines[from:] with their partitions.
func produceParts(t testing.TB, brokers []string, lines []string, from int, part func(int) int32) {
	t.Helper()
	if from >= len(lines) {
		t.Fatalf("produceParts from %d of %d lines", from, len(lines))
	}
	produce(t, brokers, lines[from:], func(i int) int32 { return part(from + i) })
}
