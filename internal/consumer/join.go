package consumer

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// joinQuiet is how long a join goes unremarked (less with a short
// session timeout: a third of it): a rebalance of members that are all
// alive ends within a heartbeat or two, and Kafka holds a new group's
// first join for group.initial.rebalance.delay.ms (3 s).
const joinQuiet = 5 * time.Second

// joinWatch is what the engine goroutine said of the join under way.
type joinWatch struct {
	logged time.Time // the start of the join it logged (zero: none)
}

// watchJoin says, once per join and at info, what a join the
// coordinator holds for longer than joinQuiet waits for: the coordinator
// answers it once every member it knows has rejoined or had its session
// expire, and a member that stopped without leaving (a replaced pod
// under a new member ID, a SIGKILL) expires source.session_timeout after
// its last heartbeat, before this join began: so by the join's start
// plus the session timeout at the latest. Then, when it ended, how long
// it took. Engine goroutine.
func (c *Consumer) watchJoin(ctx context.Context) {
	since, joining := c.balancer.Joining()
	w := &c.join
	if !joining {
		if !w.logged.IsZero() {
			c.log.Info().Str("group", c.cfg.Source.Group).Str("waited", time.Since(w.logged).Round(time.Millisecond).String()).
				Msg("joined the group")
			w.logged = time.Time{}
		}
		return
	}
	st := c.cfg.Source.SessionTimeout
	if since.Equal(w.logged) || time.Since(since) < min(joinQuiet, st/3) {
		return
	}
	w.logged = since
	ev := c.log.Info().Str("group", c.cfg.Source.Group).Str("join_began", since.UTC().Format(time.RFC3339Nano)).
		Str("session_timeout", st.String()).Str("expires_by", since.Add(st).UTC().Format(time.RFC3339Nano))
	if members, state, err := c.describeGroup(ctx); err == nil {
		ev = ev.Str("group_state", state).Strs("members", members)
	}
	ev.Msg("waiting for the group: the coordinator holds this join until every member it knows has rejoined or its session has expired; " +
		"a member that stopped without leaving (a pod replaced under a new member ID, a SIGKILL) expires by expires_by at the latest " +
		"(source.session_timeout after its last heartbeat)")
}

// describeGroup returns the group's other members as the coordinator
// knows them (client ID, host, instance ID) and its state.
func (c *Consumer) describeGroup(ctx context.Context) ([]string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(c.kafka.cl).DescribeGroups(ctx, c.cfg.Source.Group)
	if err != nil {
		return nil, "", err
	}
	g, ok := gs[c.cfg.Source.Group]
	if !ok || g.Err != nil {
		return nil, "", fmt.Errorf("describe group %s: %v", c.cfg.Source.Group, g.Err)
	}
	me, _ := c.kafka.cl.GroupMetadata()
	var members []string
	for _, m := range g.Members {
		if m.MemberID == me {
			continue
		}
		s := m.ClientID + "@" + m.ClientHost
		if m.InstanceID != nil {
			s += " (instance " + *m.InstanceID + ")"
		}
		members = append(members, s)
	}
	slices.Sort(members)
	return members, g.State, nil
}
