package placement_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/placement"
)

// node is a member's side of the balancer: what it owns and the lags of
// its copies, as its joins say them.
type node struct {
	id    string
	b     *placement.Balancer
	owned map[string][]int32
	gen   int32
	lags  map[placement.Partition]int64
}

func newNode(id string, standbys int) *node {
	n := &node{id: id, owned: map[string][]int32{}, lags: map[placement.Partition]int64{}}
	n.b = placement.NewBalancer([]string{"in"}, standbys, func() map[placement.Partition]int64 { return n.lags }, time.Now, zerolog.Nop())
	return n
}

// rebalance runs one rebalance of nodes through kgo's balancer
// interfaces, nodes[0] the leader: each joins with its metadata, the
// leader balances, each parses its assignment and owns what it got (a
// cooperative member gives up at once what it lost). It returns each
// node's copies.
func rebalance(t *testing.T, nodes []*node, topics map[string]int32) map[string][]placement.Copy {
	t.Helper()
	var members []kmsg.JoinGroupResponseMember
	for _, n := range nodes {
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID = n.id
		m.ProtocolMetadata = n.b.JoinGroupMetadata([]string{"in"}, n.owned, n.gen)
		members = append(members, m)
	}
	mb, _, err := nodes[0].b.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	copies := map[string][]placement.Copy{}
	for _, a := range into.IntoSyncAssignment() {
		i := slices.IndexFunc(nodes, func(n *node) bool { return n.id == a.MemberID })
		n := nodes[i]
		got, err := n.b.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		n.owned, n.gen = got, n.gen+1
		a, _ := n.b.Assignment()
		copies[n.id] = a.Copies
	}
	return copies
}

func (n *node) String() string { return fmt.Sprintf("%s%v", n.id, n.owned["in"]) }

// A partition that moves goes in two rebalances (revoked, then
// assigned), and the member it goes to keeps a copy of it in between,
// so that it takes it over warm.
func TestBalancerCooperativeMoveKeepsCopy(t *testing.T) {
	a, b := newNode("a", 0), newNode("b", 0)
	a.owned["in"] = []int32{0, 1, 2, 3}
	topics := map[string]int32{"in": 4}
	copies := rebalance(t, []*node{a, b}, topics)
	if got, want := fmt.Sprint(a, b), "a[0 1] b[]"; got != want {
		t.Fatalf("first rebalance: %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(copies["b"]), "[{{in 2} false} {{in 3} false}]"; got != want {
		t.Errorf("first rebalance: b's copies %s, want %s (the partitions it gets next)", got, want)
	}
	copies = rebalance(t, []*node{a, b}, topics)
	if got, want := fmt.Sprint(a, b), "a[0 1] b[2 3]"; got != want {
		t.Errorf("second rebalance: %s, want %s", got, want)
	}
	if len(copies["b"]) != 0 {
		t.Errorf("second rebalance: b's copies %v, want none (no standbys)", copies["b"])
	}
}

// A member's copies and their lags reach the leader through its join:
// a member that dies leaves its partitions to the copies, and a member
// that joins warms up before a partition moves to it.
func TestBalancerStandbys(t *testing.T) {
	a, b, c := newNode("a", 1), newNode("b", 1), newNode("c", 1)
	topics := map[string]int32{"in": 4}
	for range 2 {
		copies := rebalance(t, []*node{a, b, c}, topics)
		for _, n := range []*node{a, b, c} {
			clear(n.lags)
			for _, cp := range copies[n.id] {
				n.lags[cp.Partition] = 0
			}
		}
	}
	if got, want := fmt.Sprint(a, b, c, a.lags, b.lags, c.lags), "a[0 1] b[2] c[3] map[{in 2}:0 {in 3}:0] map[{in 0}:0] map[{in 1}:0]"; got != want {
		t.Fatalf("settled: %s, want %s", got, want)
	}
	// a dies: in[0] goes to b's copy, in[1] to c's.
	rebalance(t, []*node{b, c}, topics)
	if got, want := fmt.Sprint(b, c), "b[0 2] c[1 3]"; got != want {
		t.Errorf("a dead: %s, want %s", got, want)
	}
	// d joins: it warms up one partition, then takes it.
	d := newNode("d", 1)
	copies := rebalance(t, []*node{b, c, d}, topics)
	if got, want := fmt.Sprint(b, c, d), "b[0 2] c[1 3] d[]"; got != want {
		t.Errorf("d joined: %s, want %s (nothing moves before d is warm)", got, want)
	}
	var warm []placement.Partition
	for _, cp := range copies["d"] {
		if cp.WarmUp {
			warm = append(warm, cp.Partition)
			d.lags[cp.Partition] = 0
		}
	}
	if len(warm) != 1 {
		t.Fatalf("d joined: d warms up %v, want one partition", copies["d"])
	}
	rebalance(t, []*node{b, c, d}, topics) // the owner gives it up
	rebalance(t, []*node{b, c, d}, topics) // d takes it
	if got := d.owned["in"]; !slices.Equal(got, []int32{warm[0].Partition}) {
		t.Errorf("d caught up: d owns %v, want %v", got, warm)
	}
}

func TestBalancerJoining(t *testing.T) {
	n := newNode("a", 0)
	if _, ok := n.b.Joining(); ok {
		t.Fatal("Joining before any join = true")
	}
	before := time.Now()
	n.b.JoinGroupMetadata([]string{"in"}, nil, -1)
	n.b.JoinGroupMetadata([]string{"in"}, nil, -1) // MemberIDRequired: the same join goes on
	since, ok := n.b.Joining()
	if !ok || since.Before(before) {
		t.Fatalf("Joining after a join = %v, %v; want since %v", since, ok, before)
	}
	n.b.Assigned()
	if _, ok := n.b.Joining(); ok {
		t.Error("Joining after Assigned = true")
	}
}

// A join that ends in another protocol's sync (cooperative-sticky, while
// members of a release without this balancer are in the group) leaves
// the member no copies.
func TestBalancerOtherProtocolDropsCopies(t *testing.T) {
	a, b := newNode("a", 1), newNode("b", 1)
	rebalance(t, []*node{a, b}, map[string]int32{"in": 2})
	if got, _ := a.b.Assignment(); len(got.Copies) != 1 {
		t.Fatalf("after a sync of this protocol: copies %v, want one", got.Copies)
	}
	_, gen := a.b.Assignment()
	a.b.JoinGroupMetadata([]string{"in"}, a.owned, a.gen) // the next join...
	a.b.Assigned()                                        // ...synced by cooperative-sticky: no ParseSyncAssignment of ours
	if got, g := a.b.Assignment(); len(got.Copies) != 0 || g == gen {
		t.Errorf("after another protocol's sync: copies %v (sync %d, was %d), want none and a new sync", got.Copies, g, gen)
	}
}
