package placement_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"aggregator/internal/placement"
)

// parts is the partitions of topic.
func parts(topic string, ns ...int32) []placement.Partition {
	out := make([]placement.Partition, len(ns))
	for i, n := range ns {
		out[i] = placement.Partition{Topic: topic, Partition: n}
	}
	return out
}

// member is a member consuming topics that owns owned at generation 1.
func member(id string, topics []string, owned ...placement.Partition) placement.Member {
	return placement.Member{ID: id, Topics: topics, Owned: owned, Generation: 1}
}

// show is a plan as one line per member: "a: in[0 1] rep[2] copies in[3] warm in[4]".
func show(g placement.Group, plan []placement.Assignment) string {
	var b strings.Builder
	for i, a := range plan {
		fmt.Fprintf(&b, "%s:%s", g.Members[i].ID, group(a.Active))
		var copies, warm []placement.Partition
		for _, c := range a.Copies {
			if c.WarmUp {
				warm = append(warm, c.Partition)
			} else {
				copies = append(copies, c.Partition)
			}
		}
		if len(copies) > 0 {
			fmt.Fprintf(&b, " copies%s", group(copies))
		}
		if len(warm) > 0 {
			fmt.Fprintf(&b, " warm%s", group(warm))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func group(ps []placement.Partition) string {
	var b strings.Builder
	last := ""
	for _, p := range ps {
		if p.Topic != last {
			if last != "" {
				b.WriteString("]")
			}
			fmt.Fprintf(&b, " %s[%d", p.Topic, p.Partition)
			last = p.Topic
			continue
		}
		fmt.Fprintf(&b, " %d", p.Partition)
	}
	if last != "" {
		b.WriteString("]")
	}
	return b.String()
}

var inRep = []string{"in", "rep"}

func TestPlan(t *testing.T) {
	repState := map[string]bool{"rep": true}
	tests := map[string]struct {
		g    placement.Group
		want string
	}{
		"a new group: each topic on its own": {
			g: placement.Group{Members: []placement.Member{member("a", inRep), member("b", inRep), member("c", inRep)},
				Partitions: map[string]int32{"in": 6, "rep": 6}, Stateful: repState},
			want: "a: in[0 3] rep[0 3]\nb: in[1 4] rep[1 4]\nc: in[2 5] rep[2 5]\n",
		},
		"one member has every stage-1 partition, another every stage-2 one": {
			g: placement.Group{Members: []placement.Member{
				member("a", inRep, parts("in", 0, 1, 2, 3, 4, 5)...),
				member("b", inRep, parts("rep", 0, 1, 2, 3, 4, 5)...),
				member("c", inRep)},
				Partitions: map[string]int32{"in": 6, "rep": 6}, Stateful: repState},
			want: "a: in[0 1] rep[2 4]\nb: in[2 4] rep[0 1]\nc: in[3 5] rep[3 5]\n",
		},
		"the ones more go to the members with fewer before": {
			g: placement.Group{Members: []placement.Member{member("a", inRep), member("b", inRep)},
				Partitions: map[string]int32{"in": 3, "rep": 3}, Stateful: repState},
			want: "a: in[0 1] rep[1]\nb: in[2] rep[0 2]\n",
		},
		"a member leaves: only its partitions move": {
			g: placement.Group{Members: []placement.Member{
				member("a", []string{"in"}, parts("in", 0, 1, 2)...),
				member("b", []string{"in"}, parts("in", 3, 4, 5)...)},
				Partitions: map[string]int32{"in": 9}},
			want: "a: in[0 1 2 6 7]\nb: in[3 4 5 8]\n",
		},
		"a member joins, no standbys: it takes from each what balance needs, at once": {
			g: placement.Group{Members: []placement.Member{
				member("a", []string{"in"}, parts("in", 0, 1, 2, 3, 4, 5)...),
				member("b", []string{"in"}, parts("in", 6, 7, 8, 9, 10, 11)...),
				member("c", []string{"in"})},
				Partitions: map[string]int32{"in": 12}, Stateful: map[string]bool{"in": true}},
			want: "a: in[0 1 2 3]\nb: in[6 7 8 9]\nc: in[4 5 10 11]\n",
		},
		"a stale claim (an older generation) is not ownership": {
			g: placement.Group{Members: []placement.Member{
				{ID: "a", Topics: []string{"in"}, Owned: parts("in", 0, 1), Generation: 3},
				{ID: "b", Topics: []string{"in"}, Owned: parts("in", 0), Generation: 5}},
				Partitions: map[string]int32{"in": 4}},
			want: "a: in[1 2]\nb: in[0 3]\n",
		},
		"standbys: one copy of each state partition, spread": {
			g: placement.Group{Members: []placement.Member{member("a", inRep), member("b", inRep), member("c", inRep)},
				Partitions: map[string]int32{"in": 6, "rep": 6}, Stateful: repState, Standbys: 1},
			want: "a: in[0 3] rep[0 3] copies rep[1 2]\nb: in[1 4] rep[1 4] copies rep[0 5]\nc: in[2 5] rep[2 5] copies rep[3 4]\n",
		},
		"standbys: two copies, as many as there are other members": {
			g: placement.Group{Members: []placement.Member{member("a", []string{"in"}), member("b", []string{"in"})},
				Partitions: map[string]int32{"in": 2}, Stateful: map[string]bool{"in": true}, Standbys: 2},
			want: "a: in[0] copies in[1]\nb: in[1] copies in[0]\n",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := show(tt.g, placement.Plan(tt.g)); got != tt.want {
				t.Errorf("Plan =\n%swant\n%s", got, tt.want)
			}
		})
	}
}

// balanced is a group of three members that each own two of six
// partitions of "in" and keep the copies Plan gave them, caught up.
func balanced(t *testing.T) placement.Group {
	t.Helper()
	g := placement.Group{Members: []placement.Member{member("a", []string{"in"}), member("b", []string{"in"}), member("c", []string{"in"})},
		Partitions: map[string]int32{"in": 6}, Stateful: map[string]bool{"in": true}, Standbys: 1}
	g = next(g, placement.Plan(g), 0)
	if got, want := show(g, placement.Plan(g)), "a: in[0 3] copies in[1 2]\nb: in[1 4] copies in[0 5]\nc: in[2 5] copies in[3 4]\n"; got != want {
		t.Fatalf("Plan =\n%swant\n%s", got, want)
	}
	return g
}

// next is g after its members took plan: each owns its Active (one
// generation later) and holds its copies, lag behind.
func next(g placement.Group, plan []placement.Assignment, lag int64) placement.Group {
	g.Members = slices.Clone(g.Members)
	for i, a := range plan {
		m := &g.Members[i]
		m.Owned, m.Generation, m.Lags = slices.Clone(a.Active), m.Generation+1, map[placement.Partition]int64{}
		for _, c := range a.Copies {
			m.Lags[c.Partition] = lag
		}
	}
	return g
}

// A member that dies leaves its partitions to the members whose copies
// are caught up, and its copies to others: nothing restores from the
// changelog's start.
func TestPlanFailoverToCopies(t *testing.T) {
	g := balanced(t)
	g.Members = g.Members[:2] // c is gone: its in[2 5] are copied to a and b
	want := "a: in[0 2 3] copies in[1 4 5]\nb: in[1 4 5] copies in[0 2 3]\n"
	if got := show(g, placement.Plan(g)); got != want {
		t.Errorf("after c died: Plan =\n%swant\n%s", got, want)
	}
	// A copy that is behind is still the warmest there is.
	g.Members[0].Lags[placement.Partition{Topic: "in", Partition: 2}] = 50 * placement.CaughtUp
	if got := show(g, placement.Plan(g)); got != want {
		t.Errorf("after c died, a's copy of in[2] behind: Plan =\n%swant\n%s", got, want)
	}
}

// A member that joins gets warm-up copies first; the partitions move to
// it at the rebalance after they are caught up.
func TestPlanWarmsUpBeforeMoving(t *testing.T) {
	g := placement.Group{Members: []placement.Member{member("a", []string{"in"}), member("b", []string{"in"})},
		Partitions: map[string]int32{"in": 6}, Stateful: map[string]bool{"in": true}, Standbys: 1}
	g = next(g, placement.Plan(g), 0)
	g.Members = append(g.Members, member("c", []string{"in"}))
	plan := placement.Plan(g)
	want := "a: in[0 2 4] copies in[1 3 5]\nb: in[1 3 5] copies in[0 2 4]\nc: warm in[4 5]\n"
	if got := show(g, plan); got != want {
		t.Fatalf("c joined: Plan =\n%swant\n%s", got, want)
	}
	// Not caught up yet: nothing moves.
	behind := next(g, plan, placement.CaughtUp+1)
	if got := show(behind, placement.Plan(behind)); got != want {
		t.Errorf("c's copies behind: Plan =\n%swant\n%s", got, want)
	}
	caught := next(g, plan, placement.CaughtUp)
	want = "a: in[0 2] copies in[3 4]\nb: in[1 3] copies in[2 5]\nc: in[4 5] copies in[0 1]\n"
	if got := show(caught, placement.Plan(caught)); got != want {
		t.Errorf("c's copies caught up: Plan =\n%swant\n%s", got, want)
	}
}

// Without standbys, a partition moves at once (and restores from its
// changelog): no warm-up copies.
func TestPlanNoStandbysNoWarmUp(t *testing.T) {
	g := placement.Group{Members: []placement.Member{
		member("a", []string{"in"}, parts("in", 0, 1, 2)...),
		member("b", []string{"in"}, parts("in", 3, 4, 5)...),
		member("c", []string{"in"})},
		Partitions: map[string]int32{"in": 6}, Stateful: map[string]bool{"in": true}}
	want := "a: in[0 1]\nb: in[3 4]\nc: in[2 5]\n"
	if got := show(g, placement.Plan(g)); got != want {
		t.Errorf("Plan =\n%swant\n%s", got, want)
	}
}

// Random groups: every partition once, to a member that consumes its
// topic; each topic balanced (once warm-ups are done); copies never on
// the owner, as many as asked; the same plan for the same group; and a
// group that takes its plan, copies caught up, reaches a plan that no
// longer changes within three rebalances.
func TestPlanProperties(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := randomGroup(r)
		plan := placement.Plan(g)
		if again := placement.Plan(g); !equalPlans(plan, again) {
			t.Fatalf("seed %d: Plan differs on the same group:\n%s\n%s", seed, show(g, plan), show(g, again))
		}
		checkPlan(t, seed, g, plan, false)
		// The members take their plans, copies caught up at once, a few
		// times: warm-ups finish, the plan settles.
		for range 3 {
			g = next(g, plan, 0)
			plan = placement.Plan(g)
		}
		checkPlan(t, seed, g, plan, true)
		if settled := placement.Plan(next(g, plan, 0)); !equalPlans(plan, settled) {
			t.Errorf("seed %d: the plan still changes after three rebalances:\n%s\nthen\n%s", seed, show(g, plan), show(g, settled))
		}
	}
}

func randomGroup(r *rand.Rand) placement.Group {
	g := placement.Group{Partitions: map[string]int32{}, Stateful: map[string]bool{}, Standbys: r.IntN(3)}
	topics := []string{"a", "b", "c"}[:1+r.IntN(3)]
	for _, t := range topics {
		g.Partitions[t] = int32(r.IntN(13))
		g.Stateful[t] = r.IntN(2) == 0
	}
	for i := range 1 + r.IntN(5) {
		m := placement.Member{ID: fmt.Sprint(i), Topics: topics, Generation: int32(r.IntN(3)), Lags: map[placement.Partition]int64{}}
		if r.IntN(6) == 0 && len(topics) > 1 {
			m.Topics = topics[:1]
		}
		for _, t := range topics {
			for p := range g.Partitions[t] {
				part := placement.Partition{Topic: t, Partition: p}
				switch r.IntN(5) {
				case 0:
					m.Owned = append(m.Owned, part)
				case 1:
					m.Lags[part] = []int64{0, placement.CaughtUp, placement.CaughtUp + 1, placement.Unknown}[r.IntN(4)]
				}
			}
		}
		g.Members = append(g.Members, m)
	}
	return g
}

func checkPlan(t *testing.T, seed uint64, g placement.Group, plan []placement.Assignment, settled bool) {
	t.Helper()
	owner := map[placement.Partition]int{}
	perTopic := map[string][]int{}
	for i, a := range plan {
		for _, p := range a.Active {
			if _, dup := owner[p]; dup {
				t.Fatalf("seed %d: %v assigned twice:\n%s", seed, p, show(g, plan))
			}
			if !slices.Contains(g.Members[i].Topics, p.Topic) {
				t.Fatalf("seed %d: %v assigned to %s, which does not consume it:\n%s", seed, p, g.Members[i].ID, show(g, plan))
			}
			owner[p] = i
			if perTopic[p.Topic] == nil {
				perTopic[p.Topic] = make([]int, len(g.Members))
			}
			perTopic[p.Topic][i]++
		}
	}
	for topic, n := range g.Partitions {
		subs := 0
		for _, m := range g.Members {
			if slices.Contains(m.Topics, topic) {
				subs++
			}
		}
		for p := range n {
			if _, ok := owner[placement.Partition{Topic: topic, Partition: p}]; !ok && subs > 0 {
				t.Fatalf("seed %d: %s[%d] assigned to no one:\n%s", seed, topic, p, show(g, plan))
			}
		}
		if !settled || subs == 0 {
			continue
		}
		lo, hi := int(n)/subs, (int(n)+subs-1)/subs
		for i, m := range g.Members {
			got := 0
			if c := perTopic[topic]; c != nil {
				got = c[i]
			}
			if slices.Contains(m.Topics, topic) && (got < lo || got > hi) {
				t.Fatalf("seed %d: topic %s not balanced (%d to %d each):\n%s", seed, topic, lo, hi, show(g, plan))
			}
		}
	}
	copies, warm := map[placement.Partition]int{}, map[placement.Partition]int{}
	for i, a := range plan {
		for _, c := range a.Copies {
			if owner[c.Partition] == i {
				t.Fatalf("seed %d: %s keeps a copy of %v, which it owns:\n%s", seed, g.Members[i].ID, c.Partition, show(g, plan))
			}
			if !g.Stateful[c.Topic] {
				t.Fatalf("seed %d: a copy of %v, which holds no state:\n%s", seed, c.Partition, show(g, plan))
			}
			if settled && c.WarmUp {
				t.Fatalf("seed %d: a warm-up left after three rebalances with copies caught up:\n%s", seed, show(g, plan))
			}
			if c.WarmUp {
				warm[c.Partition]++
			} else {
				copies[c.Partition]++
			}
		}
	}
	if settled && uniform(g) {
		lo, hi := len(plan[0].Copies), len(plan[0].Copies)
		for _, a := range plan {
			lo, hi = min(lo, len(a.Copies)), max(hi, len(a.Copies))
		}
		if hi-lo > 1 {
			t.Fatalf("seed %d: copies not balanced (%d to %d a member):\n%s", seed, lo, hi, show(g, plan))
		}
	}
	for p, i := range owner {
		if !g.Stateful[p.Topic] {
			continue
		}
		subs := 0
		for _, m := range g.Members {
			if slices.Contains(m.Topics, p.Topic) {
				subs++
			}
		}
		if want := min(g.Standbys, subs-1-warm[p]); copies[p] != want || warm[p] > 1 {
			t.Fatalf("seed %d: %v (owned by %s) has %d standby copies and %d warming up, want %d and at most 1:\n%s", seed, p, g.Members[i].ID, copies[p], warm[p], want, show(g, plan))
		}
	}
}

func equalPlans(a, b []placement.Assignment) bool {
	return slices.EqualFunc(a, b, func(x, y placement.Assignment) bool {
		return slices.Equal(x.Active, y.Active) && slices.Equal(x.Copies, y.Copies)
	})
}

// uniform reports whether every member of g consumes every topic.
func uniform(g placement.Group) bool {
	for _, m := range g.Members {
		if len(m.Topics) != len(g.Partitions) {
			return false
		}
	}
	return true
}
