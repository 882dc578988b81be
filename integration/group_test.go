package integration

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Two instances in one group split the partitions, and the union of their
// results is one instance's.
func TestTwoInstancesSplitPartitions(t *testing.T) {
	t.Parallel() // its own broker
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	lines, parts := ordered(2000, base)
	want := replay(t, cfg, byPartition(lines, parts), noWallClock)
	a := start(t, cfg, nil)
	b := start(t, cfg, nil)
	waitSplit(t, brokers, cfg.Source.Group)
	produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	a.stop(t)
	b.stop(t)
	if got := contents(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, contents(want.results)) {
		t.Errorf("results of two instances differ from one's:\n%s", diff(got, contents(want.results)))
	}
}

// A second instance joining while the first is busy (its fetcher polls
// ahead of the engine goroutine) takes over half the partitions: the
// revocation waits until every polled record is applied, commits, and the
// union of the results is one instance's, with none missing or repeated.
func TestRebalanceUnderLoad(t *testing.T) {
	t.Parallel() // its own broker
	kc := newCluster(t, 4)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	// Under the race detector 30,000 records keep the first instance busy
	// long past the split (it is a few times slower there).
	n := 100_000
	if raceEnabled {
		n = 30_000
	}
	lines, parts := ordered(n, base)
	want := replay(t, cfg, byPartition(lines, parts), noWallClock)
	produce(t, brokers, lines, func(i int) int32 { return parts[i] })
	a := start(t, cfg, nil)
	b := start(t, cfg, nil)
	waitSplit(t, brokers, cfg.Source.Group)
	t.Logf("split with %d of %d results written", len(values(readAll(t, brokers, resultsTopic))), len(want.results))
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	a.stop(t)
	b.stop(t)
	if got := contents(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, contents(want.results)) {
		t.Errorf("results of two instances differ from one's:\n%s", diff(got, contents(want.results)))
	}
}

// waitSplit waits until the group has two members with two partitions each.
func waitSplit(t testing.TB, brokers []string, group string) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	waitFor(t, waitTimeout, "group "+group+" splitting 4 partitions over 2 members", func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok || g.State != "Stable" || len(g.Members) != 2 {
			return false
		}
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			n := 0
			for _, tp := range c.Topics {
				n += len(tp.Partitions)
			}
			if n != 2 {
				return false
			}
		}
		return true
	})
}
