package repartition_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/repartition"
)

// TestPartitionOfIsKafkas: stage 1 picks the partition Kafka's default
// partitioner would, for keys of every length mod 4.
func TestPartitionOfIsKafkas(t *testing.T) {
	kafka := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 200 {
		key := fmt.Sprintf(`{"k":"%0*d"}`, i%9, i)
		for _, n := range []int32{1, 3, 64, 1000} {
			want := int32(kafka.Partition(&kgo.Record{Key: []byte(key)}, int(n)))
			if got := repartition.PartitionOf(key, n); got != want {
				t.Fatalf("PartitionOf(%q, %d) = %d, want %d (Kafka's murmur2)", key, n, got, want)
			}
		}
	}
}

// TestPartitionOfJava: a group key lands in the partition Java's
// DefaultPartitioner (and so Kafka Streams) picks for that record key:
// toPositive(murmur2(key)) % n, with the murmur2 values of Kafka's own
// UtilsTest.testMurmur2.
func TestPartitionOfJava(t *testing.T) {
	javaMurmur2 := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, h := range javaMurmur2 {
		for _, n := range []int32{1, 3, 4, 7, 64, 1000} {
			want := int32(uint32(h)&0x7fffffff) % n
			if got := repartition.PartitionOf(key, n); got != want {
				t.Errorf("PartitionOf(%q, %d) = %d, want %d (Java's DefaultPartitioner)", key, n, got, want)
			}
		}
	}
}
