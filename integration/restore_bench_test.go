package integration

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	restoreWindows = flag.String("restore.windows", "100000,1000000,3000000",
		"BenchmarkRestore: the numbers of open windows to restore, comma-separated")
	restoreLog     = flag.Bool("restore.log", false, "BenchmarkRestore: log the restarted binary's output")
	restoreBase    = flag.String("restore.base", "", "BenchmarkRestore: another build of the binary to restart too, in turn with this tree's")
	restoreSliding = flag.Bool("restore.sliding", false, "BenchmarkRestore: sliding windows (1h every 10m) instead of tumbling (1h)")
	restoreOpenTxn = flag.Bool("restore.open-txn", false,
		"BenchmarkRestore: SIGKILL while records arrive, so that exactly_once leaves a transaction open for the restart to wait out")
)

// restoreChangelog is the changelog topic of restoreBenchYAML.
const restoreChangelog = "restore-bench-state"

// restoreBenchYAML is the config BenchmarkRestore runs: by_key, windows
// of an hour (tumbling, or sliding by 10 minutes: nothing fires while the
// input stays in one hour), count and sum, a static member id (a restart
// rejoins at once).
const restoreBenchYAML = `source:
  brokers: [%q]
  topics: [%s]
  group: %s
  instance_id: restore-bench-0
  format: json
  key: [sid]
  partitioning: by_key
  timestamp: {field: t, layout: unix_ms}
watermark: {strategy: bounded, max_out_of_orderness: 1s}
window: %s
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
delivery: %s
state: {changelog_topic: %s}
sink: {results_topic: %s, late_topic: %s, dead_letter_topic: %s}
shutdown_timeout: 10s
`

// BenchmarkRestore measures what a restart costs with a large state, as
// an operator meets it: `aggregator broker` in its own process, the
// binary (`aggregator run`) as a child process, by_key, 4 partitions,
// tumbling windows of an hour, one record per key (so every record is an
// open window), a static member id. Once the binary has committed the
// whole input it is SIGKILLed; a record of a new key is produced; the
// binary starts again with the same instance id. The time is from the
// restart to the moment that record's window is in the changelog
// (read_committed): the partitions restored and producing again. It
// reports the restored windows per second of that time, the CPU time the
// restarted process used until then (restart-cpu-s: on a shared machine,
// the figure that swings least), the RSS after the ingest
// (steady-state-rss-MiB), the peak RSS of the restarted process up to
// then (restore-peak-rss-MiB, VmHWM) and their ratio, and its RSS 3 s
// later (after-rss-MiB). With exactly_once the SIGKILL comes while the
// service is idle, so no transaction is left open (one left open holds
// the restore up to state.transaction_timeout: see docs/benchmarks.md).
//
// With -restore.base BINARY (another tree's build), each iteration
// restarts that binary too, then this tree's, on the same state (killed
// and restarted again, a new record each time), and reports its figures
// as base-*: the two measured in one run.
//
// go test ./integration -run X -bench Restore -benchtime 1x [-restore.windows 100000,1000000,3000000] [-restore.base BINARY]
func BenchmarkRestore(b *testing.B) {
	for _, w := range strings.Split(*restoreWindows, ",") {
		windows, err := strconv.Atoi(w)
		if err != nil {
			b.Fatalf("-restore.windows: %v", err)
		}
		for _, delivery := range deliveries() {
			b.Run(fmt.Sprintf("windows=%d/%s", windows, delivery), func(b *testing.B) { benchRestore(b, windows, delivery) })
		}
	}
}

func benchRestore(b *testing.B, windows int, delivery string) {
	brokers := brokerProcess(b, 4, inTopic, resultsTopic, lateTopic, dlqTopic)
	k := killWithOpenWindows(b, brokers, windows, delivery)
	var head, base restartSum
	for b.Loop() {
		if *restoreBase != "" {
			base.add(k.restartKill(b, *restoreBase))
		}
		head.add(k.restartKill(b, binary))
	}
	head.report(b, "", windows, k.steady)
	if *restoreBase != "" {
		base.report(b, "base-", windows, k.steady)
		b.ReportMetric(head.took.Seconds()/base.took.Seconds(), "time/base")
		b.ReportMetric(head.cpu.Seconds()/base.cpu.Seconds(), "cpu/base")
	}
}

// restartSum adds up restarts.
type restartSum struct {
	n           int
	took, cpu   time.Duration
	peak, after float64
}

func (s *restartSum) add(r restarted) {
	s.n++
	s.took, s.cpu, s.peak, s.after = s.took+r.took, s.cpu+r.cpu, s.peak+r.peak, s.after+r.after
}

// report reports the means, each metric's name after prefix.
func (s *restartSum) report(b *testing.B, prefix string, windows int, steady float64) {
	n := float64(s.n)
	took := s.took.Seconds() / n
	b.ReportMetric(took, prefix+"restart-to-producing-s")
	b.ReportMetric(float64(windows)/took, prefix+"windows/s")
	b.ReportMetric(s.cpu.Seconds()/n, prefix+"restart-cpu-s")
	b.ReportMetric(steady/(1<<20), "steady-state-rss-MiB")
	b.ReportMetric(s.peak/n/(1<<20), prefix+"restore-peak-rss-MiB")
	b.ReportMetric(s.peak/n/steady, prefix+"peak/steady")
	b.ReportMetric(s.after/n/(1<<20), prefix+"after-rss-MiB")
}

// killed is the binary SIGKILLed with open windows in its state.
type killed struct {
	brokers []string
	path    string  // its config
	steady  float64 // its RSS once it had committed the whole input, in bytes
	fresh   int     // the records of new keys written since
}

// killWithOpenWindows runs the binary (restoreBenchYAML, delivery) over
// windows records of as many keys, waits until it has committed them all,
// notes its RSS and SIGKILLs it.
func killWithOpenWindows(t testing.TB, brokers []string, windows int, delivery string) *killed {
	group := benchGroup("restore")
	path := fmt.Sprintf("%s/restore.yaml", t.TempDir())
	window := map[bool]string{false: "{type: tumbling, size: 1h}", true: "{type: sliding, size: 1h, slide: 10m}"}[*restoreSliding]
	yaml := fmt.Sprintf(restoreBenchYAML, brokers[0], inTopic, group, window, delivery, restoreChangelog, resultsTopic, lateTopic, dlqTopic)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	produceOpenWindows(t, brokers, windows)
	run := startBinary(t, path)
	adm := kadm.NewClient(client(t, brokers))
	waitForf(t, 10*time.Minute, 100*time.Millisecond, func() bool { return committedAll(t, adm, group) }, func() string {
		return "the whole input committed\n" + run.out.String()
	})
	time.Sleep(2 * time.Second) // settled: no commit after the last one
	k := &killed{brokers: brokers, path: path, steady: procStatus(t, run.cmd.Process.Pid, "VmRSS")}
	if *restoreOpenTxn {
		k.trickle(t, time.Second)
	}
	_ = run.cmd.Process.Signal(syscall.SIGKILL)
	_, _ = run.wait(t, 30*time.Second)
	return k
}

// trickle writes a record of a new key every 10 ms for d: a SIGKILL right
// after finds a transaction open (exactly_once: records arrive faster
// than state.commit_interval).
func (k *killed) trickle(t testing.TB, d time.Duration) {
	prod := client(t, k.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for n, end := 0, time.Now().Add(d); time.Now().Before(end); n++ {
		v := fmt.Sprintf(`{"sid":"trickle_%d","t":%d,"d":1}`, n, base+2000)
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: inTopic, Partition: int32(n % 4), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restarted is the killed binary started again, once it produced again.
type restarted struct {
	run   *binaryRun
	took  time.Duration // from the start to the fresh record's changelog record
	cpu   time.Duration // the CPU time it used until then
	peak  float64       // its peak RSS until then (VmHWM), in bytes
	after float64       // its RSS 3 s later, in bytes
}

// restart writes a record of a new key, starts bin again (with the
// environment overrides env) and waits until that record's window is in
// the changelog (read_committed).
func (k *killed) restart(t testing.TB, bin string, env ...string) restarted {
	adm := kadm.NewClient(client(t, k.brokers))
	ends, err := adm.ListEndOffsets(context.Background(), restoreChangelog)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", restoreChangelog, err, ends.Error())
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	reader := client(t, k.brokers, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{restoreChangelog: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	k.fresh++
	key := fmt.Sprintf("fresh_%d", k.fresh)
	value := fmt.Sprintf(`{"sid":%q,"t":%d,"d":1}`, key, base+1000)
	prod := client(t, k.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: inTopic, Partition: 0, Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	r := restarted{run: startBinaryOf(t, bin, k.path, env...)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for found := false; !found; {
		fs := reader.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no changelog record of the fresh input 5 minutes after the restart\n%s", r.run.out)
		}
		fs.EachRecord(func(rec *kgo.Record) { found = found || bytes.Contains(rec.Key, []byte(`"`+key+`"`)) })
	}
	r.took = time.Since(began)
	r.cpu = processCPU(t, r.run.cmd.Process.Pid)
	r.peak = procStatus(t, r.run.cmd.Process.Pid, "VmHWM")
	time.Sleep(3 * time.Second)
	r.after = procStatus(t, r.run.cmd.Process.Pid, "VmRSS")
	return r
}

// restartKill is restart, then a SIGKILL again (while idle: with
// exactly_once no transaction is open), for the next restart.
func (k *killed) restartKill(t testing.TB, bin string) restarted {
	r := k.restart(t, bin)
	_ = r.run.cmd.Process.Signal(syscall.SIGKILL)
	_, _ = r.run.wait(t, 30*time.Second)
	if *restoreLog {
		t.Logf("%s:\n%s", bin, r.run.out)
	}
	return r
}

// produceOpenWindows writes n records, one per key (sid_0, sid_1, ...),
// all in one hour of event time, key k to partition k%4.
func produceOpenWindows(b testing.TB, brokers []string, n int) {
	cl := client(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(1_000_000))
	const chunk = 50_000
	for i := 0; i < n; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for k := i; k < min(i+chunk, n); k++ {
			v := fmt.Sprintf(`{"sid":"sid_%d","t":%d,"d":%d}`, k, base+int64(k%1000), k%10)
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: int32(k % 4), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// committedAll reports whether group has committed every partition of
// the input topic to its end.
func committedAll(b testing.TB, adm *kadm.Client, group string) bool {
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, inTopic)
	if err != nil {
		return false
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false
	}
	all := true
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := offs.Lookup(inTopic, o.Partition)
		all = all && ok && c.At >= o.Offset
	})
	return all
}

// procStatus returns a size field of /proc/pid/status (VmRSS, VmHWM), in
// bytes.
func procStatus(b testing.TB, pid int, field string) float64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatalf("/proc/%d/status: %q", pid, line)
			}
			return kb * 1024
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}
