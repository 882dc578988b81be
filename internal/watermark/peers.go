package watermark

import "math"

// peers is what a Merged knows of the group's partitions it does not own
// (SharePeers): the latest value each one's owner published, by dense id.
// A partition no owner has published holds W at minus infinity.
type peers struct {
	table []peer
	// The minimum over the partitions of table not assigned to the Merged
	// and not idle, and whether there is any; recomputed when stale.
	low    int64
	active bool
	stale  bool
}

// peer is the latest published value of one partition.
type peer struct {
	reported, idle bool
	wm             int64
}

// SharePeers makes m one of the instances of a group of n partitions
// (dense ids 0 to n-1) that share their watermarks: W is the minimum over
// every partition of the group that is not idle, those m is assigned by
// their generators, the others by the latest value Peer gave for them
// (minus infinity until one did). n may change (the input topics grew);
// the values of the ids that remain are kept.
func (m *Merged) SharePeers(n int32) {
	if m.peers == nil {
		m.peers = &peers{}
	}
	for len(m.peers.table) < int(n) {
		m.peers.table = append(m.peers.table, peer{wm: math.MinInt64})
	}
	m.peers.table = m.peers.table[:max(n, 0)]
	m.peers.stale = true
	m.recompute()
}

// TakePeers gives m the group and the peer values of old (a fresh Merged
// after an aborted commit: what the other instances published stands).
func (m *Merged) TakePeers(old *Merged) {
	m.peers = old.peers
	if m.peers != nil {
		m.peers.stale = true
		m.recompute()
	}
}

// Group returns the number of partitions of the group (0 unless
// SharePeers was called).
func (m *Merged) Group() int32 {
	if m.peers == nil {
		return 0
	}
	return int32(len(m.peers.table))
}

// Peer records the latest published watermark and idleness of partition
// p of the group. It counts only while p is not assigned to m (an
// assigned partition's generator is live); an id outside the group, or a
// Merged that does not share, ignores it. W never goes down.
func (m *Merged) Peer(p int32, wm int64, idle bool) {
	if m.peers == nil || p < 0 || int(p) >= len(m.peers.table) {
		return
	}
	m.peers.table[p] = peer{reported: true, idle: idle, wm: wm}
	if _, own := m.find(p); !own {
		m.peers.stale = true
		m.recompute()
	}
}

// GroupPartition returns what m knows of partition p of the group: an
// assigned partition's live watermark and idleness, else the latest
// published value; reported is false for a partition neither assigned
// nor published (it holds W at minus infinity).
func (m *Merged) GroupPartition(p int32) (wm int64, idle, reported bool) {
	if i, ok := m.find(p); ok {
		return m.parts[i].gen.Current(), m.parts[i].idle, true
	}
	if m.peers == nil || p < 0 || int(p) >= len(m.peers.table) {
		return math.MinInt64, false, false
	}
	pr := m.peers.table[p]
	return pr.wm, pr.idle, pr.reported
}

// peerLow returns the minimum over the partitions of the group that m is
// not assigned and that are not idle, and whether there is any.
func (m *Merged) peerLow() (int64, bool) {
	ps := m.peers
	if !ps.stale {
		return ps.low, ps.active
	}
	low, active, j := int64(math.MaxInt64), false, 0
	for id, pr := range ps.table {
		for j < len(m.parts) && m.parts[j].id < int32(id) {
			j++
		}
		if j < len(m.parts) && m.parts[j].id == int32(id) || pr.reported && pr.idle {
			continue
		}
		active = true
		if pr.reported {
			low = min(low, pr.wm)
		} else {
			low = math.MinInt64
		}
	}
	ps.low, ps.active, ps.stale = low, active, false
	return low, active
}
