package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A record ten years in the future is a dead letter (future_timestamp) and
// makes no honest record late.
func TestFutureRecordIsDeadLetter(t *testing.T) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, strings.Replace(callsConfig(tumbling), "max_out_of_orderness: 1s",
		"max_out_of_orderness: 1s\n  max_future_skew: 1h", 1), brokers)
	now := time.Now().UnixMilli()
	var lines []string
	for i := range 400 {
		if i == 100 {
			lines = append(lines, fmt.Sprintf(`{"sid":"sid_0","t":%d,"d":1}`, now+10*365*24*3600*1000))
		}
		lines = append(lines, fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":1}`, i%3, now-100_000+int64(i)*100))
	}
	want := replay(t, cfg, onePartition(lines), now)
	if len(want.dead) != 1 || len(want.late) != 0 {
		t.Fatalf("reference run: %d dead letters and %d late events, want 1 and 0", len(want.dead), len(want.late))
	}
	produce(t, brokers, lines, func(int) int32 { return 0 })
	s := start(t, cfg, nil)
	waitCount(t, brokers, dlqTopic, 1)
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	s.stop(t)
	dead := readAll(t, brokers, dlqTopic)
	if len(dead) != 1 || !strings.Contains(headerString(dead[0].Headers), "aggregator.reason=future_timestamp") {
		t.Errorf("dead letters = %q, want one with reason future_timestamp", events(dead))
	}
	if late := readAll(t, brokers, lateTopic); len(late) != 0 {
		t.Errorf("late topic holds %d records, want none", len(late))
	}
	if got := values(readAll(t, brokers, resultsTopic)); !slices.Equal(got, want.results) {
		t.Errorf("results:\n%s", diff(got, want.results))
	}
}

// Malformed records go to the dead-letter topic with their reason, and the
// partition keeps flowing.
func TestMalformedRecordsAreDeadLetters(t *testing.T) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := parseConfig(t, callsConfig(tumbling), brokers)
	lines := calls(600, 3, 11)
	bad := []string{`not json`, `{"sid":"sid_1","d":1}`, `{"sid":"sid_1","t":1900000010000,"d":"many"}`, `{"t":1900000010000,"d":1}`}
	for i, b := range bad {
		at := 100 + 100*i
		lines = slices.Insert(lines, at, b)
	}
	want := replay(t, cfg, onePartition(lines), noWallClock)
	if len(want.dead) != len(bad) {
		t.Fatalf("reference run: %d dead letters, want %d", len(want.dead), len(bad))
	}
	produce(t, brokers, lines, func(int) int32 { return 0 })
	s := start(t, cfg, nil)
	waitCount(t, brokers, dlqTopic, int64(len(bad)))
	waitCount(t, brokers, resultsTopic, int64(len(want.results)))
	s.stop(t)
	if got := events(readAll(t, brokers, dlqTopic)); !slices.Equal(got, want.dead) {
		t.Errorf("dead letters =\n%q\nwant\n%q", got, want.dead)
	}
	if got := values(readAll(t, brokers, resultsTopic)); !slices.Equal(got, want.results) {
		t.Errorf("results:\n%s", diff(got, want.results))
	}
}
