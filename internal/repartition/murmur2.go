package repartition

// PartitionOf is the repartition partition of a group key, of n: the one
// Kafka's default partitioner picks for that record key (murmur2, as a
// Java producer, Kafka Streams or kgo's StickyKeyPartitioner would), so
// that a key's records and partials meet in one partition whoever sends
// them.
func PartitionOf(key string, n int32) int32 {
	return int32(murmur2(key)&0x7fffffff) % n
}

// murmur2 is Kafka's murmur2 hash (org.apache.kafka.common.utils.Utils).
func murmur2(b string) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
