// Package placement decides which group member owns each partition the
// group consumes and which members keep standby copies of the partitions
// that hold window state (docs/design.md, "Placement").
//
// Plan is pure: the group's leader hands it what the members said in
// their join (the partitions each owns, the standby copies each holds
// and how far behind their changelog each copy is) and gets every
// member's assignment. It balances each topic's partitions across the
// members on their own (the input topics, the repartition topic), keeps
// a partition where it is unless balance needs it elsewhere, and with
// standby copies moves a state partition only to a member whose copy is
// caught up: where none is, the partition stays and the member it is
// meant for warms a copy up first (Kafka Streams' KIP-441).
//
// Balancer is the kgo.GroupBalancer around Plan: the members' join
// metadata carries their copies, the leader's plan carries each member's
// copies to keep. A Balancer is safe for concurrent use.
package placement
