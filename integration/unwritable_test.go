package integration

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/producer"
)

// outputLimit is the max.message.bytes of the output topics here: far
// below the input topic's (the broker default, 1 MiB).
const outputLimit = 16 << 10

// Records of 0 and 1 bytes, larger than the output topics take, deeply
// nested, and invalid UTF-8: the partition keeps flowing, each bad record
// is in the dead-letter topic (whole, or as a stub when too large) with
// its reason, a late event too large for the late topic is a stub there,
// Run never ends, and the results are replay's (no honest record late).
func TestBadRecordsKeepThePartitionFlowing(t *testing.T) {
	t.Parallel() // its own broker
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel() // its own broker
			kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kc.Close)
			for _, topic := range []string{resultsTopic, lateTopic, dlqTopic} {
				if err := kc.CreateTopic(topic, 1, map[string]string{"max.message.bytes": fmt.Sprint(outputLimit)}); err != nil {
					t.Fatal(err)
				}
			}
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, callsConfig(tumbling)+"delivery: "+delivery+"\n", brokers)

			lines := calls(900, 4, 13)
			pad := strings.Repeat("p", 40<<10)
			bad := map[string]string{
				"empty":             "",
				"one byte":          "x",
				"too large":         `{"sid":"sid_1","t":1900000010000,"d":1,` + pad, // not JSON either
				"too large, late":   `{"sid":"sid_1","t":1800000000000,"d":1,"pad":"` + pad + `"}`,
				"deeply nested":     `{"sid":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `,"t":1900000010000,"d":1}`,
				"invalid UTF-8":     "{\"sid\":\"\xff\xfe\",\"t\":1900000010000,\"d\":\"\xc3\x28\"}",
				"invalid UTF-8 key": "\xff{\"sid\":\"sid_2\",\"t\":1900000010000,\"d\":1}",
			}
			at := 50
			for _, name := range slices.Sorted(maps.Keys(bad)) {
				lines = slices.Insert(lines, at, bad[name])
				at += 100
			}
			want := replay(t, cfg, onePartition(lines), noWallClock)
			if len(want.dead) < len(bad)-1 || len(want.late) == 0 {
				t.Fatalf("reference run: %d dead letters and %d late events, want %d and some", len(want.dead), len(want.late), len(bad)-1)
			}
			produce(t, brokers, lines, func(int) int32 { return 0 })
			reg := prometheus.NewRegistry()
			s := startWith(t, cfg, nil, reg)
			waitCommitted(t, brokers, map[int32]int64{0: int64(len(lines))}, s)
			s.stop(t) // Run returned nil: it never stopped

			if got := contents(dedupe(values(readAll(t, brokers, resultsTopic)))); !slices.Equal(got, contents(want.results)) {
				t.Errorf("results differ from replay:\n%s", diff(got, contents(want.results)))
			}
			stubs := checkWholeOrStub(t, "dead letters", readAll(t, brokers, dlqTopic), want.dead)
			stubs += checkWholeOrStub(t, "late events", readAll(t, brokers, lateTopic), want.late)
			if stubs != 3 {
				t.Errorf("%d stubs, want 3 (the records too large and deeply nested, and the late one)", stubs)
			}
			if n := gathered(t, reg, "aggregator_unwritable_outputs_total", "topic", dlqTopic) +
				gathered(t, reg, "aggregator_unwritable_outputs_total", "topic", lateTopic); n != 3 {
				t.Errorf("aggregator_unwritable_outputs_total = %v, want 3", n)
			}
		})
	}
}

// checkWholeOrStub checks that got holds want's events in order (an
// output topic of one partition, fed by one input partition), each whole,
// or, if larger than outputLimit, as a stub: the same headers plus
// aggregator.truncated, the value's start. It returns how many are stubs.
func checkWholeOrStub(t *testing.T, what string, got []*kgo.Record, want []lateEvent) int {
	t.Helper()
	got = dedupeRecords(got)
	if len(got) != len(want) {
		t.Errorf("%d %s, want %d", len(got), what, len(want))
		return 0
	}
	stubs := 0
	for i, r := range got {
		w := want[i]
		if len(w.value) <= outputLimit/2 {
			if e := (lateEvent{string(r.Value), headerString(r.Headers)}); e != w {
				t.Errorf("%s %d = %.200q, want %.200q", what, i, e, w)
			}
			continue
		}
		stubs++
		extra := fmt.Sprintf("%s=true;%s=%d;", producer.HeaderTruncated, producer.HeaderOriginalBytes, len(w.value)+len(r.Key))
		if h := headerString(r.Headers); h != w.headers+extra || !strings.HasPrefix(w.value, string(r.Value)) || len(r.Value) < outputLimit/2 {
			t.Errorf("%s %d: headers %q, %d bytes of value; want a stub: headers %q, the start of the value", what, i, h, len(r.Value), w.headers+extra)
		}
	}
	return stubs
}

// dedupeRecords drops the repeats of at_least_once (same provenance).
func dedupeRecords(recs []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	seen := map[string]bool{}
	for _, r := range recs {
		var id bytes.Buffer
		for _, h := range r.Headers {
			if h.Key == producer.HeaderSourceOffset {
				id.Write(h.Value)
			}
		}
		if !seen[id.String()] {
			seen[id.String()] = true
			out = append(out, r)
		}
	}
	return out
}
