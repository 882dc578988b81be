package placement

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Protocol is the Balancer's protocol name. A member offers it first and
// kgo's cooperative-sticky second, so that during a rolling upgrade from
// a release without it the group stays on cooperative-sticky (no copies)
// until every member offers it; both are cooperative, so the switch
// revokes nothing.
const Protocol = "aggregator-1"

// A Balancer is the group's kgo.GroupBalancer: the leader plans with
// Plan, and every member says in its join which copies it holds and how
// far behind they are (Lags), and learns from its sync which copies it is
// to keep (Copies). Safe for concurrent use.
type Balancer struct {
	stateful map[string]bool
	standbys int
	lags     func() map[Partition]int64
	clock    func() time.Time
	log      zerolog.Logger

	mu       sync.Mutex
	assigned Assignment // the last sync's
	gen      uint64     // counts syncs: assigned changed
	joined   time.Time  // when the join under way began (zero: none)
}

// NewBalancer returns the Balancer of a member whose stateful topics
// are stateful, with standbys copies of each stateful partition
// (state.standby_replicas). lags returns the member's copies and how far
// behind their changelogs they are, for its joins; it is called from
// the Kafka client's goroutines. clock gives the time a join began.
func NewBalancer(stateful []string, standbys int, lags func() map[Partition]int64, clock func() time.Time, log zerolog.Logger) *Balancer {
	b := &Balancer{stateful: map[string]bool{}, standbys: standbys, lags: lags, clock: clock, log: log}
	for _, t := range stateful {
		b.stateful[t] = true
	}
	return b
}

// ProtocolName implements kgo.GroupBalancer.
func (*Balancer) ProtocolName() string { return Protocol }

// IsCooperative implements kgo.GroupBalancer: a partition moves in two
// rebalances, revoked from its owner in the first, assigned in the
// second, and nothing else stops.
func (*Balancer) IsCooperative() bool { return true }

// JoinGroupMetadata implements kgo.GroupBalancer: the consumer protocol's
// metadata with the owned partitions (as cooperative-sticky sends them),
// and the member's copies in the user data.
func (b *Balancer) JoinGroupMetadata(topics []string, owned map[string][]int32, generation int32) []byte {
	b.mu.Lock()
	if b.joined.IsZero() {
		b.joined = b.clock()
	}
	b.mu.Unlock()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topics
	meta.Generation = generation
	for _, t := range slices.Sorted(maps.Keys(owned)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t, slices.Sorted(slices.Values(owned[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	meta.UserData = appendLags(nil, b.lags())
	return meta.AppendTo(nil)
}

// ParseSyncAssignment implements kgo.GroupBalancer: it returns the
// partitions the member owns and keeps the copies it is to hold.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var a kmsg.ConsumerMemberAssignment
	if err := a.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("sync assignment: %w", err)
	}
	copies, err := parseCopies(a.UserData)
	if err != nil {
		return nil, fmt.Errorf("sync assignment: %w", err)
	}
	out := make(map[string][]int32, len(a.Topics))
	var active []Partition
	for _, t := range a.Topics {
		out[t.Topic] = t.Partitions
		for _, p := range t.Partitions {
			active = append(active, Partition{t.Topic, p})
		}
	}
	b.mu.Lock()
	b.assigned, b.joined = Assignment{Active: active, Copies: copies}, time.Time{}
	b.gen++
	b.mu.Unlock()
	return out, nil
}

// Assignment returns what the member's last sync gave it, and a number
// that changes with each sync. A copy of a partition that the same sync
// makes the member's own is the partition's standby copy still: it is
// promoted, not dropped.
func (b *Balancer) Assignment() (Assignment, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.assigned, b.gen
}

// Assigned tells that the member's join ended with an assignment (the
// consumer's assigned callback: with the cooperative-sticky protocol,
// during a rolling upgrade, ParseSyncAssignment is kgo's).
func (b *Balancer) Assigned() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.joined.IsZero() {
		// The join ended in another protocol's sync (cooperative-sticky,
		// during a rolling upgrade): it gave no copies.
		b.assigned = Assignment{}
		b.gen++
	}
	b.joined = time.Time{}
}

// Joining returns when the member's join under way began, and false if
// none is: a join the coordinator has not answered with an assignment.
func (b *Balancer) Joining() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.joined, !b.joined.IsZero()
}

// MemberBalancer implements kgo.GroupBalancer.
func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	return cb, cb.MemberTopics(), err
}

// Balance implements kgo.ConsumerBalancerBalance: the leader's plan.
func (b *Balancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	g := Group{Partitions: topics, Stateful: b.stateful, Standbys: b.standbys}
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		gm := Member{ID: m.MemberID, Topics: meta.Topics, Generation: meta.Generation}
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				gm.Owned = append(gm.Owned, Partition{o.Topic, p})
			}
		}
		lags, err := parseLags(meta.UserData)
		if err != nil {
			// A member of another release: its copies are not known,
			// and it gets none.
			b.log.Warn().Err(err).Str("member_id", m.MemberID).Msg("a member's join says its standby copies in a form this release does not read: they are not used")
		}
		gm.Lags = lags
		g.Members = append(g.Members, gm)
	})
	planned := Plan(g)
	kp := cb.NewPlan()
	for i, a := range planned {
		for _, p := range a.Active {
			kp.AddPartition(&cb.Members()[i], p.Topic, p.Partition)
		}
	}
	kp.AdjustCooperative(cb)
	out := syncPlan{members: make([]string, len(g.Members)), active: kp.AsMemberIDMap(), copies: make([][]Copy, len(g.Members))}
	var warm, pending []string
	for i, a := range planned {
		id := g.Members[i].ID
		out.members[i] = id
		out.copies[i] = a.Copies
		// A partition the cooperative step held back (its owner gives it
		// up in this rebalance, this member gets it in the next) is a
		// copy meanwhile: kept warm, not restored from the start.
		for _, p := range a.Active {
			if !slices.Contains(out.active[id][p.Topic], p.Partition) {
				out.copies[i] = append(out.copies[i], Copy{Partition: p})
				pending = append(pending, fmt.Sprintf("%s[%d]→%s", p.Topic, p.Partition, id))
			}
		}
		for _, c := range a.Copies {
			if c.WarmUp {
				warm = append(warm, fmt.Sprintf("%s[%d]→%s", c.Topic, c.Partition.Partition, id))
			}
		}
	}
	if len(warm) > 0 {
		b.log.Info().Strs("warm_ups", warm).
			Msg("partitions stay with their owners while the members they move to warm a copy up; they move at the rebalance the member asks for once caught up")
	}
	b.log.Debug().Str("plan", out.String()).Strs("moving", pending).Msg("balanced the group")
	return out
}

// syncPlan is the leader's plan as the SyncGroup request carries it:
// each member's partitions and, in the user data, its copies.
type syncPlan struct {
	members []string
	active  map[string]map[string][]int32 // by member ID
	copies  [][]Copy                      // by member, as members
}

// IntoSyncAssignment implements kgo.IntoSyncAssignment.
func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, 0, len(p.members))
	for i, id := range p.members {
		var a kmsg.ConsumerMemberAssignment
		for _, t := range slices.Sorted(maps.Keys(p.active[id])) {
			at := kmsg.NewConsumerMemberAssignmentTopic()
			at.Topic, at.Partitions = t, slices.Sorted(slices.Values(p.active[id][t]))
			a.Topics = append(a.Topics, at)
		}
		a.UserData = appendCopies(nil, p.copies[i])
		s := kmsg.NewSyncGroupRequestGroupAssignment()
		s.MemberID, s.MemberAssignment = id, a.AppendTo(nil)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MemberID < out[j].MemberID })
	return out
}

// String is the plan as one line: member{topic[partitions] copies topic[partitions]}.
func (p syncPlan) String() string {
	s := ""
	for i, id := range p.members {
		if i > 0 {
			s += ", "
		}
		s += id + "{"
		for k, t := range slices.Sorted(maps.Keys(p.active[id])) {
			if k > 0 {
				s += " "
			}
			s += fmt.Sprintf("%s%v", t, slices.Sorted(slices.Values(p.active[id][t])))
		}
		if len(p.copies[i]) > 0 {
			s += fmt.Sprintf(" copies %v", p.copies[i])
		}
		s += "}"
	}
	return s
}
