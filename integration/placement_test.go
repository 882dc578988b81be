package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Three instances of a repartition config share out each stage's
// partitions on their own: two input and two repartition partitions
// apiece, never one instance with every stage-1 partition and another
// with every stage-2 one (what balancing all topics' partitions together
// gave). The balance holds as one instance leaves (three of each on the
// two left) and comes back, with standby copies on.
func TestPlacementBalancesEachTopic(t *testing.T) {
	t.Parallel() // its own broker
	kc := newCluster(t, 6)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, repartitionYaml+"state: {standby_replicas: 1}\n", brokers)
	group, rep := cfg.Source.Group, cfg.State.RepartitionTopic
	a, b := start(t, cfg, nil), start(t, cfg, nil)
	c := start(t, cfg, nil)
	waitPlacement(t, brokers, group, 3, map[string]int{inTopic: 2, rep: 2})
	c.stop(t)
	waitPlacement(t, brokers, group, 2, map[string]int{inTopic: 3, rep: 3})
	c = start(t, cfg, nil)
	waitPlacement(t, brokers, group, 3, map[string]int{inTopic: 2, rep: 2})
	for _, s := range []*service{a, b, c} {
		s.stop(t)
	}
}

// waitPlacement waits until the group is stable with members members
// that each own each[topic] partitions of each topic.
func waitPlacement(t testing.TB, brokers []string, group string, members int, each map[string]int) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	last := ""
	waitForf(t, waitTimeout, pollEvery, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok {
			return false
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s:", g.State)
		ok = g.State == "Stable" && len(g.Members) == members
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			got := map[string]int{}
			for _, tp := range c.Topics {
				got[tp.Topic] += len(tp.Partitions)
				fmt.Fprintf(&b, " %s%v", tp.Topic, tp.Partitions)
			}
			b.WriteString(";")
			ok = ok && maps.Equal(got, each)
		}
		last = b.String()
		return ok
	}, func() string {
		return fmt.Sprintf("group %s: %d members owning %v apiece (last seen %s)", group, members, slices.Sorted(maps.Keys(each)), last)
	})
}
