package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// lostSessionPhases are three phases over 4 partitions, key sid_k in
// partition k%4, with partition 0's event time 10s behind the others': it
// holds the merged watermark back, so once it is dropped the others'
// windows are due.
func lostSessionPhases() []faultPhase {
	ps := make([]faultPhase, 3)
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
	kc := faultCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	ps := lostSessionPhases()
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

// waitGroupEmpty waits until group has no member: the session of the one
// it had expired.
func waitGroupEmpty(t testing.TB, brokers []string, group string) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := adm.DescribeGroups(ctx, group)
		cancel()
		if err == nil {
			if g, ok := gs[group]; ok && g.Err == nil && len(g.Members) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still has members after %v: %v", group, waitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for an event
	}
}
