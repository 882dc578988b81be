package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	pressureTimeouts = flag.String("pressure.timeouts", "6s,8s,10s,15s",
		"BenchmarkSessionUnderPressure: the source.session_timeout values to try, comma-separated")
	pressureDuration = flag.Duration("pressure.duration", 3*time.Minute,
		"BenchmarkSessionUnderPressure: how long the instances run under pressure at each session timeout")
	pressureCPU = flag.Float64("pressure.cpu", 0.2,
		"BenchmarkSessionUnderPressure: each instance's CPU quota, in CPUs (a cgroup's cpu.max or cfs_quota_us)")
	pressureKeys = flag.Int("pressure.keys", 1_000_000,
		"BenchmarkSessionUnderPressure: open windows in all, before the pressure starts")
	pressureGOGC = flag.String("pressure.gogc", "10",
		"BenchmarkSessionUnderPressure: the instances' GOGC (lower: the garbage collector runs more)")
	pressureMemLimit = flag.String("pressure.memlimit", "",
		"BenchmarkSessionUnderPressure: the instances' GOMEMLIMIT (just above their heap: the garbage collector runs all the time); empty: none")
)

// pressureYAML is BenchmarkSessionUnderPressure's config: by_key, an
// hour's tumbling windows (nothing fires), a static member.
const pressureYAML = `source:
  format: json
  key: [sid]
  timestamp: {field: t, layout: unix_ms}
  instance_id: %s
  session_timeout: %s
watermark: {max_out_of_orderness: 1s}
window: {type: tumbling, size: 1h}
aggregates:
  - {name: total, fn: sum, field: d}
  - {name: calls, fn: count}
`

// BenchmarkSessionUnderPressure measures, for each session timeout of
// -pressure.timeouts, whether an instance under CPU throttling and
// garbage-collector pressure keeps its group membership: two instances
// of the binary, each in a CPU cgroup of its own, fill -pressure.keys
// open windows (half each), then run for -pressure.duration with a
// quota of -pressure.cpu CPUs, GOGC=-pressure.gogc (and GOMEMLIMIT
// -pressure.memlimit), and more input than
// they can keep up with (a tenth of it new keys: the heap grows). It
// reports the rebalances in that time (rebalances: 'partitions
// rebalanced' lines of either instance; 0 is what the chart's
// session timeout must give) and how long the kernel throttled the
// instances (throttled-s). It needs root and a CPU cgroup controller
// (cgroup v1 or v2); docs/deploy.md has the figures that chose the Helm
// chart's source.session_timeout.
//
//	go test ./integration -run X -bench SessionUnderPressure -benchtime 1x [-pressure.timeouts 6s,10s] [-pressure.cpu 0.2]
func BenchmarkSessionUnderPressure(b *testing.B) {
	for _, st := range strings.Split(*pressureTimeouts, ",") {
		b.Run("session="+st, func(b *testing.B) {
			for b.Loop() {
				rebalances, throttled := pressureRun(b, st)
				b.ReportMetric(float64(rebalances), "rebalances")
				b.ReportMetric(throttled.Seconds(), "throttled-s")
			}
		})
	}
}

func pressureRun(b *testing.B, session string) (int, time.Duration) {
	kc := newCluster(b, 6)
	brokers := kc.ListenAddrs()
	const group = "aggregator-bin" // writeConfig's
	var runs []*binaryRun
	var groups []*cpuGroup
	for i := range 2 {
		path := writeConfig(b, fmt.Sprintf(pressureYAML, fmt.Sprintf("p%d", i), session), brokers)
		env := []string{"GOGC=" + *pressureGOGC}
		if *pressureMemLimit != "" {
			env = append(env, "GOMEMLIMIT="+*pressureMemLimit)
		}
		r := startBinary(b, path, env...)
		g := newCPUGroup(b, fmt.Sprintf("aggregator-pressure-%d-%d", os.Getpid(), i))
		g.add(b, r.cmd.Process.Pid)
		runs, groups = append(runs, r), append(groups, g)
	}
	cl := client(b, brokers, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1_000_000))
	adm := kadm.NewClient(cl)
	produceKeys(b, cl, 0, *pressureKeys)
	waitForf(b, 10*time.Minute, 100*time.Millisecond, func() bool { return committedAll(b, adm, group) }, func() string {
		return "the fill committed\n" + runs[0].out.String()
	})
	before := 0
	for _, r := range runs {
		before += strings.Count(r.out.String(), `"message":"partitions rebalanced"`)
	}
	for _, g := range groups {
		g.limit(b, *pressureCPU)
	}
	// More input than the throttled instances keep up with, for the
	// whole time: records of the keys there are, and a tenth new ones.
	ctx, cancel := context.WithTimeout(context.Background(), *pressureDuration)
	defer cancel()
	rng := rand.New(rand.NewPCG(1, 2))
	next := *pressureKeys
	for ctx.Err() == nil {
		batch := make([]*kgo.Record, 0, 2000)
		for range 2000 {
			k := rng.IntN(*pressureKeys)
			if rng.IntN(10) == 0 {
				k, next = next, next+1
			}
			batch = append(batch, keyRecord(k))
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			b.Fatal(err)
		}
		for _, r := range runs {
			select {
			case err := <-r.exited:
				b.Fatalf("an instance exited under pressure: %v\n%s", err, r.out)
			default:
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	rebalances := -before
	for _, r := range runs {
		rebalances += strings.Count(r.out.String(), `"message":"partitions rebalanced"`)
	}
	var throttled time.Duration
	for _, g := range groups {
		throttled += g.throttled(b)
	}
	for i, r := range runs {
		b.Logf("instance %d: RSS %.0f MiB at the end", i, procStatus(b, r.cmd.Process.Pid, "VmRSS")/(1<<20))
		_ = r.cmd.Process.Kill()
	}
	return rebalances, throttled
}

// keyRecord is a record of key sid_k, in the hour every window is in.
func keyRecord(k int) *kgo.Record {
	return &kgo.Record{Topic: inTopic, Value: fmt.Appendf(nil, `{"sid":"sid_%d","t":%d,"d":%d}`, k, base+int64(k%1000), k%10)}
}

// produceKeys writes one record of each key from lo to hi.
func produceKeys(b *testing.B, cl *kgo.Client, lo, hi int) {
	const chunk = 50_000
	for i := lo; i < hi; i += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for k := i; k < min(i+chunk, hi); k++ {
			recs = append(recs, keyRecord(k))
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
}

// A cpuGroup is a CPU cgroup of its own (v2: a directory of the unified
// hierarchy with the cpu controller; v1: of the cpu hierarchy), removed
// at the end of the test.
type cpuGroup struct {
	dir string
	v2  bool
}

func newCPUGroup(b *testing.B, name string) *cpuGroup {
	g := &cpuGroup{}
	switch {
	case fileExists("/sys/fs/cgroup/cgroup.controllers") && strings.Contains(readFile(b, "/sys/fs/cgroup/cgroup.controllers"), "cpu"):
		g.dir, g.v2 = filepath.Join("/sys/fs/cgroup", name), true
		_ = os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0)
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		g.dir = filepath.Join("/sys/fs/cgroup/cpu", name)
	default:
		b.Fatal("no CPU cgroup controller at /sys/fs/cgroup (cgroup v2 with cpu, or v1's cpu hierarchy): run as root on a machine that has one")
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		b.Fatalf("make a CPU cgroup (needs root): %v", err)
	}
	b.Cleanup(func() {
		// Its processes are killed by then; the kernel takes a moment to
		// let an emptied cgroup go.
		for range 50 {
			if os.Remove(g.dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return g
}

func (g *cpuGroup) add(b *testing.B, pid int) {
	if err := os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		b.Fatalf("move pid %d into %s: %v", pid, g.dir, err)
	}
}

// limit sets the group's quota to cpus CPUs a 100 ms period.
func (g *cpuGroup) limit(b *testing.B, cpus float64) {
	quota := int(cpus * 100_000)
	var err error
	if g.v2 {
		err = os.WriteFile(filepath.Join(g.dir, "cpu.max"), fmt.Appendf(nil, "%d 100000", quota), 0)
	} else {
		err = os.WriteFile(filepath.Join(g.dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0)
	}
	if err != nil {
		b.Fatalf("set the CPU quota of %s: %v", g.dir, err)
	}
}

// throttled is how long the kernel held the group's processes back.
func (g *cpuGroup) throttled(b *testing.B) time.Duration {
	key, unit := "throttled_time", time.Nanosecond
	if g.v2 {
		key, unit = "throttled_usec", time.Microsecond
	}
	for line := range strings.Lines(readFile(b, filepath.Join(g.dir, "cpu.stat"))) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return time.Duration(n) * unit
		}
	}
	return 0
}

func fileExists(path string) bool { _, err := os.Stat(path); return err == nil }

func readFile(b *testing.B, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return string(data)
}
