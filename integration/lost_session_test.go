package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lostSessionPhases are n phases of 400 records over 4 partitions, key
// sid_k in partition k%4, with partition 0's event time 10s behind the
// others': it holds the merged watermark back, so once it is dropped the
// others' windows are due.
func lostSessionPhases(n int) []faultPhase {
	ps := make([]faultPhase, n)
	for ph := range ps {
		for i := ph * 400; i < (ph+1)*400; i++ {
			key := i % 8
			t := base + int64(i)*100
			if key%4 == 0 {
				t -= 10_000
			}
			ps[ph].add(int32(key%4), fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, key, t, i%10))
		}
	}
	return ps
}

// An instance that hangs mid-transaction for longer than its session
// loses its partitions: the transaction aborts and the state goes back to
// the last commit. Dropping the lost partitions lets the windows that
// partition 0 held back fire; nothing fired from the aborted state may
// reach the next transaction, where the restored state fires the same
// windows again (a read_committed reader would see them twice).
func TestLostSessionRepeatsNoResult(t *testing.T) {
	t.Parallel() // its own broker
	kc := faultCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	ps := lostSessionPhases(3)
	inputs, ends := phaseInputs(ps)
	want := replay(t, cfg, inputs, noWallClock)

	var fz freezer
	defer fz.thaw()
	a := startOpts(t, cfg, prometheus.NewRegistry(), append(slices.Clone(faultOpts), kgo.Dialer(fz.dial))...)
	ps[0].produce(t, brokers)
	waitCommitted(t, brokers, ends[0], a)

	frozen := make(chan struct{}, 1)
	toChangelog := changelogProduce(t, kc)
	kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if toChangelog(req) {
			kc.DropControl()
			fz.freeze()
			frozen <- struct{}{}
		}
		return nil, nil, false
	})
	ps[1].produce(t, brokers)
	select {
	case <-frozen:
	case <-time.After(waitTimeout):
		t.Fatal("the service produced nothing to the changelog")
	}
	waitGroupEmpty(t, brokers, faultGroup)
	fz.thaw()

	waitCommitted(t, brokers, ends[1], a)
	ps[2].produce(t, brokers)
	waitCommitted(t, brokers, ends[2], a)
	a.stop(t)
	checkOutputs(t, brokers, want)
}

// Two instances share the partitions, partition 0's event time lagging,
// and the broker stops and starts again from its data while each phase is
// processed: transactions abort, sessions are lost and partitions move.
// Each result reaches a read_committed reader once, and every window that
// replay fires is fired, once the instances have read each other's last
// watermarks. (Only that is checked, not the contents: the broker
// restarts at moments the test does not control.)
func TestBrokerRestartsTwoInstancesRepeatNoResult(t *testing.T) {
	t.Parallel() // its own broker, on ports below the ephemeral range (freePort)
	rc := newRestartable(t, 1)
	brokers := rc.kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	ps := lostSessionPhases(5)
	inputs, ends := phaseInputs(ps)
	want := replay(t, cfg, inputs, noWallClock)

	a := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
	b := startOpts(t, cfg, prometheus.NewRegistry(), faultOpts...)
	ps[0].produce(t, brokers)
	waitCommitted(t, brokers, ends[0], a, b)
	for i := 1; i < len(ps); i++ {
		ps[i].produce(t, brokers)
		rc.restart(t, make(chan struct{}))
		waitCommitted(t, brokers, ends[i], a, b)
	}
	// The last windows fire once each instance has read the other's last
	// watermarks from the watermark topic: after the input's commit.
	var unfired []string
	pollUntil(waitTimeout, func() bool {
		fired := map[string]bool{}
		for _, r := range readAll(t, brokers, resultsTopic) {
			fired[string(r.Key)] = true
		}
		unfired = unfired[:0]
		for _, v := range want.results {
			if key := v[:strings.Index(v, `,"start"`)] + "}"; !fired[key] {
				unfired = append(unfired, key)
			}
		}
		return len(unfired) == 0
	})
	for _, key := range unfired {
		t.Errorf("window %s: no result", key)
	}
	a.stop(t)
	b.stop(t)
	checkOnce(t, readAll(t, brokers, resultsTopic))
}

// waitGroupEmpty waits until group has no member: the session of the one
// it had expired.
func waitGroupEmpty(t testing.TB, brokers []string, group string) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	var err error
	waitForf(t, waitTimeout, pollEvery, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, derr := adm.DescribeGroups(ctx, group)
		cancel()
		err = derr
		g, ok := gs[group]
		return err == nil && ok && g.Err == nil && len(g.Members) == 0
	}, func() string { return fmt.Sprintf("group %s without members (%v)", group, err) })
}
