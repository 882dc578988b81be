package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	chaosSeeds    = flag.Int("chaos.seeds", 1, "TestChaos: seeds per delivery mode (1..N)")
	chaosFaults   = flag.Int("chaos.faults", 3, "TestChaos: faults per seed (one per chunk of input)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos: run this seed only (0: 1..chaos.seeds)")
	chaosLogs     = flag.String("chaos.logs", "", "TestChaos: on a failure, write every run's whole log (instances and broker) to this directory, one directory per seed")
	chaosDebug    = flag.Bool("chaos.debug", false, "TestChaos: instances log at debug level (with -chaos.logs: partitions restored, offsets)")
	chaosStandbys = flag.Int("chaos.standbys", 0, "TestChaos: the instances' state.standby_replicas")
)

// chaosSession is source.session_timeout of the chaos instances:
// `aggregator broker`'s minimum (kfake's, as Kafka's default
// group.min.session.timeout.ms). A stop lasts longer than it.
const chaosSession = 6 * time.Second

// Jepsen's nemesis, on the repartition stage: three instances of the
// binary (static members, session_timeout 6s) in one group over four
// input partitions whose keys are spread over every partition, the local
// broker `aggregator broker --data-dir` as a process of its own, and a
// seeded schedule of one fault per chunk of input while the chunk is
// produced: an instance SIGKILLed and started again, an instance stopped
// (SIGSTOP) past its session and continued, an instance SIGTERMed and
// started again, the broker SIGKILLed and started again from its data
// directory 1.5 s later, an instance away (3 → 2 → 3 members). Judged as
// the crash harness judges (durCheck): the latest result per window, the
// late events and dead letters are replay's, every record is accounted
// for, exactly_once has no repeat (each revision once, in order),
// at_least_once repeats are identical, no window's result goes
// backwards. (Not each intermediate revision's value: a window's late
// records from two input partitions reach stage 2 in the order the
// instances interleaved them; see durStream.interleaved.) No instance exits on its own (no
// crash loop). At the end a fresh instance (a new instance ID, alone in
// the group) restores every partition, becomes ready and fires nothing
// again. CI runs one short seed per mode; -chaos.seeds 20 -chaos.faults 8
// for a long run, -chaos.seed 7 for one.
func TestChaos(t *testing.T) {
	t.Parallel()
	seeds := durSeeds(*chaosSeeds)
	if *chaosSeed != 0 {
		seeds = []uint64{*chaosSeed}
	}
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
					t.Parallel()
					chaos(t, delivery, seed, *chaosFaults)
				})
			}
		})
	}
}

// chaosBroker is `aggregator broker --data-dir` run as a process.
type chaosBroker struct {
	port int
	dir  string
	run  *binaryRun
	outs []*durBuffer // of every run
}

// recovered is the crash-recovery lines of every run: the transactions a
// restart aborted.
func (b *chaosBroker) recovered() []string {
	var out []string
	for _, o := range b.outs {
		for l := range strings.Lines(o.String()) {
			if strings.Contains(l, "crash recovery:") {
				out = append(out, strings.TrimSpace(l))
			}
		}
	}
	return out
}

func (b *chaosBroker) start(t *testing.T) {
	t.Helper()
	needBinary(t)
	cmd := exec.Command(binary, "broker", "--port", fmt.Sprint(b.port), "--data-dir", b.dir, "--topics", inTopic, "--partitions", "4")
	r := &binaryRun{cmd: cmd, out: &durBuffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	b.run, b.outs = r, append(b.outs, r.out)
	waitFor(t, waitTimeout, "the broker listening", func() bool { return strings.Contains(r.out.String(), "broker: Kafka (kfake) at") })
}

// kill SIGKILLs the broker and waits for it to exit.
func (b *chaosBroker) kill() {
	_ = b.run.cmd.Process.Signal(syscall.SIGKILL)
	<-b.run.exited
}

func chaos(t *testing.T, delivery string, seed uint64, faults int) {
	data := rand.New(rand.NewPCG(seed, 5))
	sched := rand.New(rand.NewPCG(seed, 6))
	s, yaml, lateness := newDurKindStream(t, "repartition", seed, delivery)
	s.interleaved = true
	rounds := faults + 1
	for r := range rounds {
		s.chunk(data, 300+data.IntN(600), r > 0, r == rounds-1)
	}
	broker := &chaosBroker{port: freePort(t), dir: filepath.Join(t.TempDir(), "broker")}
	broker.start(t)
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", broker.port)}
	const group = "aggregator-bin" // writeConfig's
	want, emitted := s.reference(t, yaml, brokers)
	paths := map[string]string{}
	instanceConfig := func(id string) string {
		if paths[id] == "" {
			paths[id] = writeConfig(t, strings.Replace(yaml, "source:\n",
				fmt.Sprintf("source:\n  instance_id: %s\n  session_timeout: %v\n", id, chaosSession), 1), brokers)
		}
		return paths[id]
	}

	var log []string
	began := time.Now()
	step := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%6.2fs ", time.Since(began).Seconds())+fmt.Sprintf(format, args...))
	}
	ids := []string{"i0", "i1", "i2"}
	runs := map[string][]*binaryRun{}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("seed %d (%s, allowed_lateness %dms): reproduce with\n  go test ./integration -run 'TestChaos/%s/seed_%d$' -chaos.seed %d -chaos.faults %d\nschedule:\n  %s",
			seed, delivery, lateness, delivery, seed, seed, faults, strings.Join(log, "\n  "))
		for _, id := range append(ids, "fresh") {
			for i, r := range runs[id] {
				t.Logf("%s run %d, service log:\n%s", id, i, (&durProc{out: r.out}).logTail(40))
			}
		}
		for i, o := range broker.outs {
			t.Logf("broker run %d log:\n%s", i, o.String())
		}
		if *chaosLogs != "" {
			dir := filepath.Join(*chaosLogs, fmt.Sprintf("%s_seed_%d", delivery, seed))
			if err := chaosWriteLogs(dir, runs, broker.outs); err != nil {
				t.Errorf("write the logs: %v", err)
			} else {
				t.Logf("every run's whole log is in %s", dir)
			}
		}
	})
	var env []string
	if *chaosDebug {
		env = append(env, "AGGREGATOR_LOG_LEVEL=debug")
	}
	if *chaosStandbys > 0 {
		env = append(env, fmt.Sprintf("AGGREGATOR_STATE_STANDBY_REPLICAS=%d", *chaosStandbys))
	}
	start := func(id string) {
		runs[id] = append(runs[id], startBinary(t, instanceConfig(id), env...))
		step("%s starts", id)
	}
	current := func(id string) *binaryRun { return runs[id][len(runs[id])-1] }
	// alive fails the test if an instance exited on its own.
	alive := func() {
		t.Helper()
		for _, id := range ids {
			r := current(id)
			select {
			case err := <-r.exited:
				r.exited <- err
				t.Fatalf("%s exited on its own: %v", id, err)
			default:
			}
		}
	}
	signal := func(id string, sig syscall.Signal) {
		if err := current(id).cmd.Process.Signal(sig); err != nil {
			t.Fatalf("%s: signal %v: %v", id, sig, err)
		}
	}
	// sigterm waits until the run handles SIGTERM (it logs "starting"
	// once it does: before, SIGTERM ends it as SIGKILL would), sends it,
	// and returns the exit status and how long the exit took.
	sigterm := func(r *binaryRun) (int, time.Duration) {
		t.Helper()
		waitFor(t, waitTimeout, "the run handling SIGTERM", func() bool { return strings.Contains(r.out.String(), `"message":"starting"`) })
		return r.sigterm(t)
	}
	for _, id := range ids {
		start(id)
	}

	pcl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for r := range rounds {
		alive()
		pauses := make([]time.Duration, 1+sched.IntN(4))
		for i := range pauses {
			pauses[i] = time.Duration(50+sched.IntN(200)) * time.Millisecond
		}
		produced := s.produceSlices(pcl, r, pauses)
		lines, _ := s.chunkLines(r)
		step("produce chunk %d: %d records in %d slices, pauses %v", r, len(lines), len(pauses)+1, pauses)
		if r > 0 { // the first chunk runs without a fault: every instance joins
			prev := emitted[r-1]
			n := prev + sched.IntN(emitted[r]-prev+1)
			durProgress(t, brokers, resultsTopic, int64(n), waitTimeout)
			step("waited for %d results", n)
			id := ids[sched.IntN(len(ids))]
			fault := sched.IntN(5)
			if fault == 2 || fault == 4 {
				// SIGTERM once every instance joined: one stopped while its
				// join is under way (a restart just now) joins after it left,
				// and the group waits for it up to the rebalance timeout
				// (Drain does not wait for a join under way; not what this
				// test is about).
				chaosWaitMembers(t, brokers, group, len(ids), 8)
			}
			switch fault {
			case 0:
				signal(id, syscall.SIGKILL)
				<-current(id).exited
				step("%s SIGKILLed", id)
				start(id)
			case 1:
				signal(id, syscall.SIGSTOP)
				stop := chaosSession + time.Duration(2000+sched.IntN(4000))*time.Millisecond
				step("%s SIGSTOPped for %v", id, stop)
				time.Sleep(stop) // the fault itself: a stop past the session
				signal(id, syscall.SIGCONT)
				step("%s SIGCONT", id)
			case 2:
				code, took := sigterm(current(id))
				step("%s SIGTERMed: exit %d after %v", id, code, took.Round(time.Millisecond))
				if code != 0 {
					t.Errorf("%s: exit %d after SIGTERM, want 0", id, code)
				}
				start(id)
			case 3:
				broker.kill()
				step("broker SIGKILLed")
				time.Sleep(1500 * time.Millisecond) // the fault: the broker down
				broker.start(t)
				step("broker started again from its data directory")
			case 4:
				code, _ := sigterm(current(id))
				step("%s away (SIGTERM: exit %d): 2 members", id, code)
				if code != 0 {
					t.Errorf("%s: exit %d after SIGTERM, want 0", id, code)
				}
				chaosWaitMembers(t, brokers, group, 2, 8)
				step("2 members")
				start(id)
			}
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		durWaitCommitted(t, brokers, group, s.ends(r))
		durWaitDrained(t, brokers, group, group+"-repartition", delivery == "exactly_once")
		step("chunks 0..%d committed", r)
	}
	alive()
	// Every instance joined (one started just now may still be joining:
	// stopped then, it would join after it left, and the group would wait
	// for it up to the rebalance timeout).
	chaosWaitMembers(t, brokers, group, len(ids), 8)
	for _, id := range ids {
		if code, _ := sigterm(current(id)); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM, want 0", id, code)
		}
	}
	step("every instance SIGTERMed")
	durCheck(t, brokers, s, want, delivery)

	// A fresh instance restores every partition (the four input
	// partitions of stage 1 hold no state; the four repartition
	// partitions do) and fires nothing again.
	start("fresh")
	fresh := current("fresh")
	waitFor(t, waitTimeout, "the fresh instance ready (every partition restored)", func() bool {
		select {
		case err := <-fresh.exited:
			fresh.exited <- err
			t.Fatalf("the fresh instance exited: %v", err)
		default:
		}
		return fresh.status("/readyz") == 200 && fresh.sum("aggregator_restored_records_total") > 0
	})
	step("the fresh instance is ready")
	if code, _ := sigterm(fresh); code != 0 {
		t.Errorf("the fresh instance: exit %d after SIGTERM, want 0", code)
	}
	durCheck(t, brokers, s, want, delivery)
	t.Logf("seed %d (%s): %d records, %d results, %d late events, %d dead letters in %v; results topic: %d records uncommitted or repeated\n  %s\nbroker crash recovery:\n  %s",
		seed, delivery, len(s.lines), len(want.results), s.late, s.dead, time.Since(began).Round(time.Millisecond),
		durUncommitted(t, brokers, resultsTopic)-len(want.results), strings.Join(log, "\n  "), strings.Join(broker.recovered(), "\n  "))
}

// chaosWaitMembers waits until group is stable with n members that have
// every one of its parts partitions between them.
func chaosWaitMembers(t testing.TB, brokers []string, group string, n, parts int) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers))
	var last string
	waitForf(t, waitTimeout, pollEvery, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), group)
		g, ok := gs[group]
		if err != nil || !ok {
			return false
		}
		total := 0
		var counts []int
		for _, m := range g.Members {
			c, _ := m.Assigned.AsConsumer()
			k := 0
			for _, tp := range c.Topics {
				k += len(tp.Partitions)
			}
			counts, total = append(counts, k), total+k
		}
		last = fmt.Sprintf("%s, partitions per member %v", g.State, counts)
		return g.State == "Stable" && len(g.Members) == n && total == parts
	}, func() string {
		return fmt.Sprintf("group %s stable with %d members holding its %d partitions; last %s", group, n, parts, last)
	})
}

// chaosWriteLogs writes the whole log of every instance run and broker
// run into dir: <id>.<run>.log, broker.<run>.log.
func chaosWriteLogs(dir string, runs map[string][]*binaryRun, brokers []*durBuffer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	for id, rs := range runs {
		for i, r := range rs {
			errs = append(errs, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.log", id, i)), []byte(r.out.String()), 0o644))
		}
	}
	for i, o := range brokers {
		errs = append(errs, os.WriteFile(filepath.Join(dir, fmt.Sprintf("broker.%d.log", i)), []byte(o.String()), 0o644))
	}
	return errors.Join(errs...)
}
