package placement

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// A Partition is a partition of a topic the group consumes.
type Partition struct {
	Topic     string
	Partition int32
}

func (p Partition) compare(q Partition) int {
	return cmp.Or(cmp.Compare(p.Topic, q.Topic), cmp.Compare(p.Partition, q.Partition))
}

// CaughtUp is how many changelog records a copy may be behind its
// changelog's end and still take its partition over at once (Kafka
// Streams' acceptable.recovery.lag): applying that tail takes
// milliseconds.
const CaughtUp = 10_000

// Unknown is the lag of a copy that has not learned its changelog's end
// yet: warmer than no copy, colder than any known lag.
const Unknown = math.MaxInt64 - 1

// noCopy is the lag of a member that holds no copy.
const noCopy = math.MaxInt64

// A Member is a group member as the leader sees it at a rebalance.
type Member struct {
	ID     string
	Topics []string // the topics it consumes
	// Owned are the partitions it owns, as of Generation (the
	// cooperative protocol's claims: a claim of an older generation than
	// another member's claim of the same partition is stale).
	Owned      []Partition
	Generation int32
	// Lags are its standby copies: how many changelog records each is
	// behind its changelog's end (Unknown if it does not know yet).
	Lags map[Partition]int64
}

// A Group is what a plan is made of.
type Group struct {
	// Members in a fixed order (kgo's: by instance ID, then member ID),
	// so that equal groups get equal plans.
	Members []Member
	// Partitions are the partition counts of the topics to assign.
	Partitions map[string]int32
	// Stateful are the topics whose partitions hold window state (a
	// changelog partition each): the input topics with
	// source.partitioning by_key, the repartition topic with repartition.
	Stateful map[string]bool
	// Standbys is state.standby_replicas: how many members besides its
	// owner keep a copy of each stateful partition. With none, a
	// partition moves at once, as balance wants, and restores there.
	Standbys int
}

// An Assignment is one member's part of a plan.
type Assignment struct {
	Active []Partition // the partitions it owns, in order
	Copies []Copy      // the copies it keeps warm, in order
}

// A Copy is a standby copy of a stateful partition to keep warm.
type Copy struct {
	Partition
	// WarmUp: the partition is meant to move to this member, and does
	// at a rebalance after the copy is caught up; until then it stays
	// with its owner.
	WarmUp bool
}

// Plan returns the assignment of each of g's members, by index:
//
//   - each topic's partitions are spread over the members that consume
//     it on their own, each member getting n/m or one more; the members
//     with the fewest partitions of the topics before (in name order)
//     get the ones more, so the totals are balanced too;
//   - a partition stays with its owner while the owner has room; one an
//     owner must give up is the one with the warmest copy elsewhere; a
//     partition without an owner (a new one, a departed owner's, one
//     given up) goes to the member with room whose copy is warmest;
//   - with standbys (g.Standbys > 0), a stateful partition goes only to
//     a member that is caught up (its owner, or a copy at most CaughtUp
//     behind): where the member balance picks is not, the partition
//     stays with its owner, or goes to the warmest copy if its owner is
//     gone, and the picked member gets a warm-up copy;
//   - each stateful partition gets g.Standbys copies on other members
//     (as many as there are), kept where they are while that stays
//     balanced, else on the members with the fewest copies, spread over
//     members so that one member's partitions are not all copied to one
//     other.
func Plan(g Group) []Assignment {
	pl := &planner{g: g, load: make([]int, len(g.Members)), copies: make([]int, len(g.Members)), out: make([]Assignment, len(g.Members))}
	for _, t := range slices.Sorted(maps.Keys(g.Partitions)) {
		pl.topic(t)
	}
	pl.placeCopies()
	for i := range pl.out {
		slices.SortFunc(pl.out[i].Active, Partition.compare)
		slices.SortFunc(pl.out[i].Copies, func(a, b Copy) int { return a.Partition.compare(b.Partition) })
	}
	return pl.out
}

type planner struct {
	g      Group
	load   []int // partitions owned in the plan so far, by member
	copies []int // copies placed so far, by member
	out    []Assignment
	// placed are the stateful partitions, for their copies.
	placed []placed
}

// placed is a stateful partition's owner in the plan, and the member it
// is warming up on (-1: none), among the members subs.
type placed struct {
	p      Partition
	active int
	warm   int
	subs   []int
}

// topicPlan is the plan of one topic's partitions.
type topicPlan struct {
	g      *Group
	topic  string
	subs   []int // the members that consume it, in order
	owner  []int // by partition: its owner (-1: none that is a member)
	quota  []int // by member
	count  []int // partitions in the plan, by member
	assign []int // by partition: member (-1: not yet)
	warm   []int // by partition: the member warming up to take it (-1: none)
}

func (pl *planner) topic(t string) {
	tp := &topicPlan{g: &pl.g, topic: t}
	for i, m := range pl.g.Members {
		if slices.Contains(m.Topics, t) {
			tp.subs = append(tp.subs, i)
		}
	}
	n := int(pl.g.Partitions[t])
	if len(tp.subs) == 0 || n <= 0 {
		return
	}
	tp.owners(n)
	tp.quotas(n, pl.load)
	tp.keep(n)
	tp.place(n)
	stateful := pl.g.Stateful[t]
	if stateful && pl.g.Standbys > 0 {
		tp.guard()
	}
	for p, i := range tp.assign {
		part := Partition{t, int32(p)}
		pl.out[i].Active = append(pl.out[i].Active, part)
		pl.load[i]++
		if stateful {
			pl.placed = append(pl.placed, placed{p: part, active: i, warm: tp.warm[p], subs: tp.subs})
		}
	}
}

// lag is how far behind member i's copy of partition p is.
func (tp *topicPlan) lag(i, p int) int64 { return tp.g.lag(i, Partition{tp.topic, int32(p)}) }

// caught reports whether member i can own partition p at once: it owns
// it, or its copy is caught up.
func (tp *topicPlan) caught(i, p int) bool { return tp.owner[p] == i || tp.lag(i, p) <= CaughtUp }

// owners finds each partition's owner: the member that claims it at the
// latest generation (an older claim is a member that missed rebalances).
func (tp *topicPlan) owners(n int) {
	tp.owner = make([]int, n)
	gen := make([]int32, n)
	for p := range tp.owner {
		tp.owner[p] = -1
	}
	for _, i := range tp.subs {
		m := &tp.g.Members[i]
		for _, o := range m.Owned {
			if o.Topic != tp.topic || o.Partition < 0 || int(o.Partition) >= n {
				continue
			}
			if p := o.Partition; tp.owner[p] < 0 || m.Generation > gen[p] {
				tp.owner[p], gen[p] = i, m.Generation
			}
		}
	}
}

// quotas gives each member n/m partitions, and one more to n%m of them:
// those with the fewest partitions of the topics before, then those that
// own more than n/m already, then in order.
func (tp *topicPlan) quotas(n int, load []int) {
	members := len(tp.g.Members)
	tp.quota, tp.count = make([]int, members), make([]int, members)
	base, extra := n/len(tp.subs), n%len(tp.subs)
	owns := make([]int, members)
	for _, o := range tp.owner {
		if o >= 0 {
			owns[o]++
		}
	}
	order := slices.Clone(tp.subs)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(load[a], load[b]), -cmp.Compare(min(owns[a], base+1), min(owns[b], base+1)))
	})
	for k, i := range order {
		tp.quota[i] = base
		if k < extra {
			tp.quota[i]++
		}
	}
}

// keep leaves each partition with its owner while the owner has room;
// an owner over its quota keeps the partitions with no warm copy
// elsewhere first.
func (tp *topicPlan) keep(n int) {
	tp.assign, tp.warm = make([]int, n), make([]int, n)
	for p := range n {
		tp.assign[p], tp.warm[p] = -1, -1
	}
	for _, i := range tp.subs {
		var mine []int
		for p, o := range tp.owner {
			if o == i {
				mine = append(mine, p)
			}
		}
		slices.SortStableFunc(mine, func(a, b int) int {
			return -cmp.Compare(tp.warmestElsewhere(a, i), tp.warmestElsewhere(b, i))
		})
		for _, p := range mine[:min(len(mine), tp.quota[i])] {
			tp.assign[p] = i
			tp.count[i]++
		}
	}
}

// warmestElsewhere is the lag of the warmest copy of p on a member other
// than i.
func (tp *topicPlan) warmestElsewhere(p, i int) int64 {
	best := int64(noCopy)
	for _, j := range tp.subs {
		if j != i {
			best = min(best, tp.lag(j, p))
		}
	}
	return best
}

// place gives each partition without a member one with room, the member
// whose copy is warmest first, then the one with the most room; the
// partitions with the warmest copies choose first.
func (tp *topicPlan) place(n int) {
	var free []int
	for p := range n {
		if tp.assign[p] < 0 {
			free = append(free, p)
		}
	}
	slices.SortStableFunc(free, func(a, b int) int { return cmp.Compare(tp.warmestElsewhere(a, -1), tp.warmestElsewhere(b, -1)) })
	for _, p := range free {
		best := -1
		for _, i := range tp.subs {
			if tp.count[i] >= tp.quota[i] {
				continue
			}
			if best < 0 || cmp.Or(cmp.Compare(tp.lag(i, p), tp.lag(best, p)), cmp.Compare(tp.count[i]-tp.quota[i], tp.count[best]-tp.quota[best])) < 0 {
				best = i
			}
		}
		tp.assign[p] = best
		tp.count[best]++
	}
}

// guard keeps a stateful partition off a member that is not caught up:
// it stays with its owner, or, its owner gone, goes to the warmest copy;
// the member balance picked warms a copy up meanwhile. A partition that
// no member holds a copy of goes where balance picked.
func (tp *topicPlan) guard() {
	for p, t := range tp.assign {
		if tp.caught(t, p) {
			continue
		}
		h := tp.owner[p]
		if h < 0 {
			for _, i := range tp.subs {
				if l := tp.lag(i, p); l < noCopy && (h < 0 || l < tp.lag(h, p)) {
					h = i
				}
			}
		}
		if h < 0 || h == t {
			continue
		}
		tp.assign[p], tp.warm[p] = h, t
		tp.count[t]--
		tp.count[h]++
	}
}

// placeCopies places each stateful partition's standby copies, and its
// warm-up copy: a copy stays where it is while its member has no more
// than its share, the others go to the members with the fewest (and,
// among those, with the fewest of the same owner's partitions); then
// copies move from members with two more than another to it, the
// coldest first, until no move is left.
func (pl *planner) placeCopies() {
	n := pl.g.Standbys
	if n <= 0 || len(pl.g.Members) == 0 {
		return
	}
	total := 0
	for _, s := range pl.placed {
		total += min(n, len(s.subs)-1)
		if s.warm >= 0 {
			pl.copies[s.warm]++
		}
	}
	share := (total + len(pl.g.Members) - 1) / len(pl.g.Members)
	spread := map[[2]int]int{} // (owner, member) → copies of the owner's partitions on the member
	chosen := make([][]int, len(pl.placed))
	for k := range pl.placed {
		s := &pl.placed[k]
		want := min(n, len(s.subs)-1)
		var holders []int
		for _, i := range s.subs {
			if s.other(i) && pl.g.lag(i, s.p) < noCopy {
				holders = append(holders, i)
			}
		}
		slices.SortStableFunc(holders, func(a, b int) int { return cmp.Compare(pl.g.lag(a, s.p), pl.g.lag(b, s.p)) })
		for _, i := range holders {
			if len(chosen[k]) < want && pl.copies[i] < share {
				chosen[k] = append(chosen[k], i)
				pl.copies[i]++
				spread[[2]int{s.active, i}]++
			}
		}
		for len(chosen[k]) < want {
			best := -1
			for _, i := range s.subs {
				if !s.other(i) || slices.Contains(chosen[k], i) {
					continue
				}
				if best < 0 || cmp.Or(cmp.Compare(pl.copies[i], pl.copies[best]), cmp.Compare(spread[[2]int{s.active, i}], spread[[2]int{s.active, best}])) < 0 {
					best = i
				}
			}
			if best < 0 {
				break // the only other member warms a copy up: that is its copy
			}
			chosen[k] = append(chosen[k], best)
			pl.copies[best]++
			spread[[2]int{s.active, best}]++
		}
	}
	for pl.evenCopies(chosen) {
	}
	for k, s := range pl.placed {
		for _, i := range chosen[k] {
			pl.out[i].Copies = append(pl.out[i].Copies, Copy{Partition: s.p})
		}
		if s.warm >= 0 {
			pl.out[s.warm].Copies = append(pl.out[s.warm].Copies, Copy{Partition: s.p, WarmUp: true})
		}
	}
}

// evenCopies moves one copy from a member to one with at least two
// fewer that may hold it (the coldest copy it can move), and reports
// whether it did.
func (pl *planner) evenCopies(chosen [][]int) bool {
	from, to, at, slot := -1, -1, -1, -1
	for k := range pl.placed {
		s := &pl.placed[k]
		for x, i := range chosen[k] {
			for _, j := range s.subs {
				if pl.copies[i]-pl.copies[j] < 2 || !s.other(j) || slices.Contains(chosen[k], j) {
					continue
				}
				better := from < 0 || cmp.Or(
					-cmp.Compare(pl.copies[i]-pl.copies[j], pl.copies[from]-pl.copies[to]),
					-cmp.Compare(pl.g.lag(i, s.p), pl.g.lag(from, pl.placed[at].p))) < 0
				if better {
					from, to, at, slot = i, j, k, x
				}
			}
		}
	}
	if from < 0 {
		return false
	}
	chosen[at][slot] = to
	pl.copies[from]--
	pl.copies[to]++
	return true
}

// other reports whether member i may keep a standby copy of s: it
// neither owns it nor warms a copy up.
func (s *placed) other(i int) bool { return i != s.active && i != s.warm }

// lag is how far behind member i's copy of p is (noCopy: it has none).
func (g *Group) lag(i int, p Partition) int64 {
	if l, ok := g.Members[i].Lags[p]; ok {
		return min(l, Unknown)
	}
	return noCopy
}
