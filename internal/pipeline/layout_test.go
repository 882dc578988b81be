package pipeline

import (
	"testing"

	"aggregator/internal/config"
)

// TestWatermarkTopicPartitions: the watermark topic names input
// partitions by topic and partition; with two input topics (3 and 2
// partitions) they map to the dense ids 0–4 and back, and a partition
// past a topic's count, or of another topic, maps to none.
func TestWatermarkTopicPartitions(t *testing.T) {
	c := newLayout(config.Config{Source: config.Source{Topics: []string{"calls", "sms"}, Partitioning: "by_key"}}, []int32{3, 2})
	tests := []struct {
		topic string
		n, id int32
		ok    bool
	}{
		{"calls", 0, 0, true}, {"calls", 2, 2, true}, {"sms", 0, 3, true}, {"sms", 1, 4, true},
		{"calls", 3, 0, false}, {"sms", 2, 0, false}, {"calls", -1, 0, false}, {"other", 0, 0, false},
	}
	for _, tt := range tests {
		id, ok := c.Source(tt.topic, tt.n)
		if ok != tt.ok || ok && id != tt.id {
			t.Errorf("Source(%s, %d) = %d, %v; want %d, %v", tt.topic, tt.n, id, ok, tt.id, tt.ok)
		}
		if !tt.ok {
			continue
		}
		if topic, n, ok := c.SourcePartition(tt.id); !ok || topic != tt.topic || n != tt.n {
			t.Errorf("SourcePartition(%d) = %s, %d, %v; want %s, %d, true", tt.id, topic, n, ok, tt.topic, tt.n)
		}
	}
	if _, _, ok := c.SourcePartition(5); ok {
		t.Error("SourcePartition(5), past the group: ok, want none")
	}
}
