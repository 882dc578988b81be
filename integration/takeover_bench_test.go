package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	takeoverWindows = flag.Int("takeover.windows", 3_000_000, "BenchmarkTakeover: open windows in all, over 6 partitions")
	takeoverSession = flag.Duration("takeover.session", 10*time.Second, "BenchmarkTakeover: source.session_timeout")
)

// takeoverYAML is BenchmarkTakeover's config: by_key, an hour's tumbling
// windows (nothing fires), static members.
const takeoverYAML = `source:
  brokers: [%q]
  topics: [%s]
  group: %s
  instance_id: %s
  session_timeout: %v
  format: json
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {strategy: bounded, max_out_of_orderness: 1s}
window: {type: tumbling, size: 1h}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
delivery: %s
state: {changelog_topic: %s, standby_replicas: %d}
sink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s}
shutdown_timeout: 10s
`

// BenchmarkTakeover measures a failover as an operator meets it:
// `aggregator broker` in its own process, three instances of the binary
// with static member IDs, -takeover.session, six input partitions and
// -takeover.windows open windows in all (one record per key, an hour's
// tumbling windows), with state.standby_replicas 0 and 1. Once the input
// is committed and the instances are idle (every copy caught up), one
// instance is SIGKILLed for good and a record is produced to each of its
// partitions; the time is from the kill until the group has committed
// those records (the survivors own the partitions, restored, and
// committed fresh input). It reports that time (kill-to-commit-s), the
// CPU time the survivors used meanwhile (survivors-cpu-s: on a shared
// machine it swings much less than the wall time), the survivors' RSS
// before the kill and their peak after it.
// TAKEOVER_BENCH_LOG=dir writes the instances' logs there.
//
//	go test ./integration -run X -bench Takeover -benchtime 1x [-takeover.windows 3000000]
func BenchmarkTakeover(b *testing.B) {
	for _, delivery := range deliveries() {
		for _, standbys := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/standby_replicas=%d", delivery, standbys), func(b *testing.B) {
				for b.Loop() {
					benchTakeover(b, delivery, standbys)
				}
			})
		}
	}
}

func benchTakeover(b *testing.B, delivery string, standbys int) {
	const changelog = "takeover-bench-state"
	brokers := brokerProcess(b, 6, inTopic, resultsTopic, lateTopic, dlqTopic)
	group := benchGroup("takeover")
	var runs []*binaryRun
	for i := range 3 {
		path := filepath.Join(b.TempDir(), fmt.Sprintf("i%d.yaml", i))
		yaml := fmt.Sprintf(takeoverYAML, brokers[0], inTopic, group, fmt.Sprintf("takeover-%d", i), *takeoverSession,
			delivery, changelog, standbys, resultsTopic, lateTopic, dlqTopic)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			b.Fatal(err)
		}
		runs = append(runs, startBinary(b, path, "AGGREGATOR_LOG_LEVEL="+cmpOr(os.Getenv("TAKEOVER_BENCH_LOG_LEVEL"), "info")))
	}
	cl := client(b, brokers, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1_000_000), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	waitForf(b, 5*time.Minute, 100*time.Millisecond, func() bool { return membersOwning(adm, group, 3, 2) }, func() string {
		return "three members, two partitions each"
	})
	for i := 0; i < *takeoverWindows; i += 50_000 {
		var recs []*kgo.Record
		for k := i; k < min(i+50_000, *takeoverWindows); k++ {
			r := keyRecord(k)
			r.Partition = int32(k % 6)
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	waitForf(b, 20*time.Minute, 200*time.Millisecond, func() bool { return committedAll(b, adm, group) }, func() string {
		return "the whole input committed\n" + runs[0].out.String()
	})
	if standbys > 0 {
		waitForf(b, 10*time.Minute, 200*time.Millisecond, func() bool {
			lag := 0.0
			for _, r := range runs {
				lag += r.sum("aggregator_standby_lag_records")
			}
			return lag == 0 && membersOwning(adm, group, 3, 2)
		}, func() string { return "every standby copy caught up" })
	}
	time.Sleep(2 * time.Second) // idle: no transaction open
	var before float64
	for _, r := range runs[:2] {
		before += procStatus(b, r.cmd.Process.Pid, "VmRSS")
	}
	victim := runs[2]
	parts := ownedBy(b, adm, group, "takeover-2")
	var cpuBefore time.Duration
	for _, r := range runs[:2] {
		cpuBefore += processCPU(b, r.cmd.Process.Pid)
	}
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	ends := map[int32]int64{}
	for _, p := range parts {
		r := keyRecord(*takeoverWindows + int(p))
		r.Partition = p
		res := cl.ProduceSync(context.Background(), r)
		if err := res.FirstErr(); err != nil {
			b.Fatal(err)
		}
		ends[p] = res[0].Record.Offset + 1
	}
	waitForf(b, 5*time.Minute, 20*time.Millisecond, func() bool { return committedPast(adm, group, ends) }, func() string {
		return fmt.Sprintf("the fresh records of partitions %v committed\n%s\n%s", parts, runs[0].out, runs[1].out)
	})
	took := time.Since(killed)
	cpu := -cpuBefore
	for _, r := range runs[:2] {
		cpu += processCPU(b, r.cmd.Process.Pid)
	}
	var peak float64
	for _, r := range runs[:2] {
		peak += procStatus(b, r.cmd.Process.Pid, "VmHWM")
	}
	if dir := os.Getenv("TAKEOVER_BENCH_LOG"); dir != "" {
		for i, r := range runs {
			name := filepath.Join(dir, fmt.Sprintf("%s-standby%d-i%d.log", delivery, standbys, i))
			if err := os.WriteFile(name, []byte(fmt.Sprintf("killed i2 at %s\n%s", killed.UTC().Format(time.RFC3339Nano), r.out)), 0o644); err != nil {
				b.Error(err)
			}
		}
	}
	b.ReportMetric(took.Seconds(), "kill-to-commit-s")
	b.ReportMetric(cpu.Seconds(), "survivors-cpu-s")
	b.ReportMetric(before/(1<<20), "survivors-rss-MiB")
	b.ReportMetric(peak/(1<<20), "survivors-peak-rss-MiB")
	for _, r := range runs[:2] {
		_, _ = r.sigterm(b)
	}
}

// membersOwning reports whether group is stable with n members owning
// each partitions apiece.
func membersOwning(adm *kadm.Client, group string, n, each int) bool {
	gs, err := adm.DescribeGroups(context.Background(), group)
	g, ok := gs[group]
	if err != nil || !ok || g.State != "Stable" || len(g.Members) != n {
		return false
	}
	for _, m := range g.Members {
		c, _ := m.Assigned.AsConsumer()
		k := 0
		for _, t := range c.Topics {
			k += len(t.Partitions)
		}
		if k != each {
			return false
		}
	}
	return true
}

// ownedBy returns the input partitions group's member of instance ID id owns.
func ownedBy(b *testing.B, adm *kadm.Client, group, id string) []int32 {
	gs, err := adm.DescribeGroups(context.Background(), group)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range gs[group].Members {
		if m.InstanceID != nil && *m.InstanceID == id {
			c, _ := m.Assigned.AsConsumer()
			for _, t := range c.Topics {
				if t.Topic == inTopic {
					return t.Partitions
				}
			}
		}
	}
	b.Fatalf("no member %s owning partitions of %s", id, inTopic)
	return nil
}

// committedPast reports whether group has committed each partition p of
// the input topic to ends[p] at least.
func committedPast(adm *kadm.Client, group string, ends map[int32]int64) bool {
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return false
	}
	for p, end := range ends {
		if o, ok := offs.Lookup(inTopic, p); !ok || o.At < end {
			return false
		}
	}
	return true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
