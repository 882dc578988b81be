// Package consumer is the Kafka shell of the service: a franz-go consumer
// group on source.topics feeding the pure core (package pipeline), whose
// Readies it writes with a producer.Writer and the changelog topic
// (docs/delivery.md). It fetches, handles rebalances, reads changelog partitions
// for a restore, and commits or aborts; each partition's progress
// (position, restored or not) is the core's.
//
// A newly assigned partition is restored from its changelog partition
// before any of its input records is applied; input resumes at the offset
// the restored state reflects. After each poll the core's outputs are
// handed to the writer; every commit writes the core's commit Ready: its
// outputs, what changed in the state since the last one, the positions,
// and the offsets. With exactly_once all of it is one Kafka transaction;
// once it commits the core accepts it, and when it aborts the core goes
// back to the last commit (Abort: its partitions are restored again) before
// the revocations that came with the abort are applied. With
// at_least_once, outputs and state changes are acknowledged, then the
// positions, then the offsets are committed.
//
// The core numbers the partitions (pipeline.Layout): the shell names a
// partition by topic and Kafka partition when it is assigned, and by the
// core's id from then on; a partition that keeps window state has its
// changelog partition's number as its id. The shell never asks which
// stage of source.partitioning repartition a partition belongs to.
//
// A Consumer's Run, Drain and Close are called from one goroutine; Serving
// is safe for concurrent use.
package consumer
