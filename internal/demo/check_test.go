package demo_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/demo"
)

// checkRecord is a results-topic record of key sid for the 5s window at
// start (s), with count n, and the watermark (ms) it was written at.
func checkRecord(sid string, start, n, watermark int64) (key, value []byte) {
	win := fmt.Sprintf(`"window_start":%d,"window_end":%d`, start*1000, start*1000+5000)
	key = []byte(`{"key":{"sid":"` + sid + `"},` + win + `}`)
	value = fmt.Appendf(nil, `{"key":{"sid":"%s"},%s,"count":%d,"aggregates":{"calls":%d},"firing":"on_time","revision":0,"watermark":%d}`,
		sid, win, n, n, watermark)
	return key, value
}

func observe(t *testing.T, c *demo.Check, side demo.Side, sid string, start, n, watermark int64) {
	t.Helper()
	k, v := checkRecord(sid, start, n, watermark)
	if err := c.Observe(side, k, v); err != nil {
		t.Fatal(err)
	}
}

// TestCheckComparesSettledWindows: a window is compared once both sides
// have a result of its key at or past its cleanup (end - 1 + lateness),
// by its latest result; a window missing on one side differs.
func TestCheckComparesSettledWindows(t *testing.T) {
	c := demo.NewCheck(2000, 1)
	observe(t, c, demo.Service, "sid_1", 0, 3, 4999)
	observe(t, c, demo.Reference, "sid_1", 0, 3, 4999)
	observe(t, c, demo.Reference, "sid_1", 0, 4, 5500) // a late firing on one side only, so far
	if got := c.Tally(); got.Compared != 0 || got.Pending != 1 {
		t.Fatalf("Tally() before either side settled = %+v, want nothing compared, 1 pending", got)
	}
	observe(t, c, demo.Service, "sid_1", 0, 4, 5500)
	observe(t, c, demo.Service, "sid_1", 5, 2, 9999) // settles [0,5) on the service's side (cleanup 6999)
	if got := c.Tally(); got.Compared != 0 {
		t.Fatalf("Tally() settled on one side = %+v, want nothing compared", got)
	}
	observe(t, c, demo.Reference, "sid_1", 5, 2, 9999)
	if got := c.Tally(); got.Compared != 1 || got.Differ != 0 || got.Pending != 1 {
		t.Fatalf("Tally() = %+v, want [0,5) compared equal, [5,10) pending", got)
	}

	observe(t, c, demo.Service, "sid_2", 0, 5, 4999)
	observe(t, c, demo.Service, "sid_2", 10, 1, 14999)
	observe(t, c, demo.Reference, "sid_2", 0, 6, 4999)
	observe(t, c, demo.Reference, "sid_3", 0, 1, 4999) // the service has none: it settles sid_3 later
	observe(t, c, demo.Reference, "sid_2", 10, 1, 14999)
	observe(t, c, demo.Reference, "sid_3", 10, 1, 14999)
	observe(t, c, demo.Service, "sid_3", 10, 1, 14999)
	got := c.Tally()
	if got.Compared != 3 || got.Differ != 2 || !strings.Contains(got.FirstDiff, "count 5, calls 5") || !strings.Contains(got.FirstDiff, "count 6, calls 6") {
		t.Errorf("Tally() = %+v, want 3 compared, 2 differ, the first of sid_2 (5 against 6)", got)
	}
}

// TestCheckRetraction: a tombstone withdraws a window's result on its
// side; global and count windows are not compared.
func TestCheckRetraction(t *testing.T) {
	c := demo.NewCheck(0, 1)
	k, _ := checkRecord("sid_1", 0, 1, 4999)
	observe(t, c, demo.Service, "sid_1", 0, 1, 4999)
	if err := c.Observe(demo.Service, k, nil); err != nil {
		t.Fatal(err)
	}
	global := `{"key":{"sid":"sid_1"},"window_start":null,"window_end":null,"count":1,"aggregates":{},"firing":"early","revision":0,"watermark":99999}`
	if err := c.Observe(demo.Service, []byte(`{"key":{"sid":"sid_1"}}`), []byte(global)); err != nil {
		t.Fatal(err)
	}
	if err := c.Observe(demo.Reference, []byte(`{"key":{"sid":"sid_1"}}`), []byte(global)); err != nil {
		t.Fatal(err)
	}
	if got := c.Tally(); got.Compared != 0 || got.Pending != 0 {
		t.Errorf("Tally() = %+v, want nothing compared or pending", got)
	}
	if err := c.Observe(demo.Service, []byte("nope"), nil); err == nil {
		t.Error("Observe(a key that is not JSON) = nil, want an error")
	}
}

// TestCheckPartitions: the service writes each window's results to the
// partition of its record key, and a reader may read one partition ahead
// of another; so only a later result of the key in the same partition
// settles a window on the service's side.
func TestCheckPartitions(t *testing.T) {
	const partitions = 3
	part := kgo.StickyKeyPartitioner(nil).ForTopic("")
	partitionOf := func(start int64) int {
		k, _ := checkRecord("sid_1", start, 1, 0)
		return part.Partition(&kgo.Record{Key: k}, partitions)
	}
	// Windows after the first: one in another partition, one in the same.
	other, same := int64(-1), int64(-1)
	for s := int64(5); other < 0 || same < 0; s += 5 {
		switch p := partitionOf(s); {
		case p != partitionOf(0) && other < 0:
			other = s
		case p == partitionOf(0) && same < 0:
			same = s
		}
	}
	c := demo.NewCheck(2000, partitions)
	for _, w := range [][3]int64{{0, 3, 4999}, {0, 4, 5500}, {other, 1, other*1000 + 4999}, {same, 1, same*1000 + 4999}, {100, 1, 104999}} {
		observe(t, c, demo.Reference, "sid_1", w[0], w[1], w[2])
	}
	observe(t, c, demo.Service, "sid_1", 0, 3, 4999) // its late firing (count 4) not read yet
	observe(t, c, demo.Service, "sid_1", other, 1, other*1000+4999)
	if got := c.Tally(); got.Compared != 0 {
		t.Fatalf("Tally() = %+v: a result in partition %d settled window 0 of partition %d", got, partitionOf(other), partitionOf(0))
	}
	observe(t, c, demo.Service, "sid_1", 0, 4, 5500)
	observe(t, c, demo.Service, "sid_1", same, 1, same*1000+4999)
	if got := c.Tally(); got.Compared != 1 || got.Differ != 0 {
		t.Errorf("Tally() = %+v, want window 0 compared equal once a later result of its partition was read", got)
	}
}
