package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/config"
	"aggregator/internal/state"
)

// Changing the config of a running service (docs/changing-config.md) with the binary as
// processes: a SIGKILL in the commit that carries the new generation's
// record, and a rollout in which a partition that has cut over moves
// back to a pod of the old config. Judged as TestConfigChangeRestart
// judges (checkPhases, checkAccounted): every result is a window of its
// own generation's replay, none twice, and every input record is in a
// window, late or a dead letter.

const (
	rollMs1 = "{type: tumbling, size: 1s, allowed_lateness: 2s}"
	rollMs5 = "{type: tumbling, size: 5s, allowed_lateness: 2s}"
	rollOne = "[{name: calls, fn: count}]"
	rollTwo = "[{name: calls, fn: count}, {name: longest, fn: max, field: d}]"
)

// rollGroup is the group of the binary's configs (writeConfig's).
const rollGroup = "aggregator-bin"

// rollConfigs writes the binary's config file of each phase, with
// delivery, and parses each for its replay: the files' paths, the
// configs, and each replay's windows (without the firing watermark).
func rollConfigs(t *testing.T, brokers []string, partitioning, delivery string, phases []genPhase, parts int32, input []keyedInput) ([]string, []config.Config, [][]string) {
	t.Helper()
	paths, cfgs, wants := make([]string, len(phases)), make([]config.Config, len(phases)), make([][]string, len(phases))
	for i, ph := range phases {
		y := genYAML(partitioning, ph.window, ph.aggregates, ph.version) + "delivery: " + delivery + "\n"
		if delivery == "exactly_once" {
			// A killed instance's open transaction: aborted by the restart
			// that fences it, or after this at the latest.
			y = strings.Replace(y, "state: {", "state: {transaction_timeout: "+durTxnTimeout+", ", 1)
		}
		paths[i] = writeConfig(t, y, brokers)
		cfgs[i] = parseConfig(t, y, brokers)
		wants[i] = contents(replayKcatN(t, cfgs[i], parts, input, nil).results)
	}
	return paths, cfgs, wants
}

// term is SIGTERM once the run handles it (it logs "starting" once it
// does), and a clean exit.
func (b *binaryRun) term(t testing.TB) {
	t.Helper()
	waitFor(t, waitTimeout, "the run handling SIGTERM", func() bool { return strings.Contains(b.out.String(), `"message":"starting"`) })
	if code, _ := b.sigterm(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; log:\n%s", code, (&durProc{out: b.out}).logTail(40))
	}
}

// kill is SIGKILL, and waits for the exit.
func (b *binaryRun) kill() {
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	err := <-b.exited
	b.exited <- err
}

// lines counts the run's log lines with message msg.
func (b *binaryRun) lines(msg string) int {
	return strings.Count(b.out.String(), `"message":"`+msg)
}

// cutovers are the cut-over times the run reports
// (aggregator_cutover_timestamp_seconds), in ms, by changelog partition;
// none if it does not answer.
func (b *binaryRun) cutovers() map[string]int64 {
	out := map[string]int64{}
	resp, err := http.Get(b.probes + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	const name = `aggregator_cutover_timestamp_seconds{partition="`
	for line := range strings.Lines(string(body)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		p, v, _ := strings.Cut(rest, `"} `)
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[p] = int64(math.Round(f * 1000))
		}
	}
	return out
}

// span is the earliest and latest of cut-over times.
func span(cs map[string]int64) (lo, hi int64) {
	lo, hi = math.MaxInt64, math.MinInt64
	for _, c := range cs {
		lo, hi = min(lo, c), max(hi, c)
	}
	return lo, hi
}

// generationRecords are the changelog's records of generation version
// (their values: nil for a tombstone) below the offsets ends (by
// "topic[partition]"; nil: the end offsets now) that a reader sees,
// read_committed or not, by changelog partition.
func generationRecords(t testing.TB, brokers []string, topic string, parts int32, version int64, committed bool, ends map[string]int64) map[int32][]byte {
	t.Helper()
	keys := map[string]int32{}
	for p := range parts {
		keys[string(state.GenerationKey(nil, p, version))] = p
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl := client(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	defer cl.Close()
	if ends == nil {
		ends = endOffsets(t, brokers, topic)
	}
	out := map[int32][]byte{}
	left := 0
	for _, e := range ends {
		if e > 0 {
			left++
		}
	}
	done := map[int32]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: not read to the offsets %v after %v (an open transaction?)", topic, ends, waitTimeout)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[fmt.Sprintf("%s[%d]", topic, r.Partition)]
			if p, ok := keys[string(r.Key)]; ok && !r.Attrs.IsControl() && r.Offset < end {
				out[p] = r.Value
			}
			if r.Offset+1 >= end && !done[r.Partition] { // past an aborted transaction: its marker
				done[r.Partition] = true
				left--
			}
		})
	}
	return out
}

// holdCommits holds the end of every commit of the cluster's clients in
// the broker (exactly_once: EndTxn; at_least_once: the OffsetCommit that
// follows the outputs and the changelog) and hands each to the test on
// the channel returned: the test answers false to let it go on, true to
// fail it (its connection closes: a process killed then never sent it),
// which also ends the holding.
func holdCommits(kc *kfake.Cluster, delivery string) <-chan chan bool {
	key := kmsg.EndTxn
	if delivery == "at_least_once" {
		key = kmsg.OffsetCommit
	}
	held := make(chan chan bool)
	kc.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		answer, drop := make(chan bool, 1), false
		kc.SleepControl(func() { held <- answer; drop = <-answer })
		if drop {
			kc.DropControl()
			return nil, errors.New("the process was killed in this commit"), true
		}
		return nil, nil, false
	})
	return held
}

// TestConfigChangeKilledAtCutover: an instance of the old config reads
// the first half of the stream and stops; one of the new config (other
// state settings, a higher state.config_version) restores the
// partitions, cuts them over, and is SIGKILLed in a commit whose end the
// broker holds (holdCommits): "in", the first commit whose records hold
// a generation record of the new config (the cut-over's commit, its
// records written, not committed); "next", the commit after the one by
// which every partition's generation record was written. A
// restart of the new config finds the cut-overs the SIGKILL left
// committed, cuts over again at the same T the partitions whose
// generation record it did not, and reads the rest. A reader
// (read_committed) sees each generation's replay, every record accounted
// for, in both delivery modes and both partitionings.
func TestConfigChangeKilledAtCutover(t *testing.T) {
	t.Parallel()
	for _, partitioning := range []string{"by_key", "repartition"} {
		for _, delivery := range []string{"exactly_once", "at_least_once"} {
			for _, at := range []string{"in", "next"} {
				t.Run(partitioning+"_"+delivery+"_"+at, func(t *testing.T) {
					t.Parallel() // its own broker
					killedAtCutover(t, partitioning, delivery, at == "next")
				})
			}
		}
	}
}

func killedAtCutover(t *testing.T, partitioning, delivery string, next bool) {
	const parts = 4
	n := 1200
	if raceEnabled {
		n = 600
	}
	input := genInput(parts, n)
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	phases := []genPhase{{window: rollMs1, aggregates: rollOne, version: 1}, {window: rollMs5, aggregates: rollTwo, version: 2}}
	paths, _, wants := rollConfigs(t, brokers, partitioning, delivery, phases, parts, input)
	changelog := rollGroup + "-changelog" // the default, of writeConfig's group
	var runs []*binaryRun
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range runs {
				t.Logf("run %d, service log:\n%s", i, (&durProc{out: r.out}).logTail(40))
			}
		}
	})
	run := func(i int) *binaryRun {
		r := startBinary(t, paths[i])
		runs = append(runs, r)
		return r
	}
	half, quarter := len(input)/2, len(input)/4
	old := run(0)
	produceSliced(t, brokers, rollGroup, input[:half])
	old.term(t)

	// Records for the new config's first commits to carry with the
	// cut-over, then the new config, its commits held.
	produceKeyed(t, brokers, input[half:half+quarter])
	held := holdCommits(kc, delivery)
	killed := run(1)
	var cut map[string]int64
	// cutAt: the first commit that carries a generation record; allAt:
	// the first by which every partition's was written.
	commits, cutAt, allAt := 0, -1, -1
	for {
		var answer chan bool
		select {
		case answer = <-held:
		case <-time.After(waitTimeout):
			t.Fatalf("no commit of the new config's instance held after %v (%d before)", waitTimeout, commits)
		}
		commits++
		if allAt < 0 {
			written := len(generationRecords(t, brokers, changelog, parts, 2, false, nil))
			if written > 0 && cutAt < 0 {
				cutAt = commits
			}
			if written == parts {
				allAt = commits
			}
		}
		if !next && cutAt > 0 || next && allAt > 0 && commits > allAt {
			cut = killed.cutovers()
			killed.kill()
			answer <- true
			break
		}
		answer <- false
		if commits == allAt {
			// Records for a commit after the cut-over's.
			produceKeyed(t, brokers, input[half+quarter:half+quarter+quarter/2])
		}
	}
	durEvict(t, brokers, rollGroup)
	killedAt := endOffsets(t, brokers, changelog)
	if len(cut) == 0 {
		t.Fatalf("no partition reported a cut-over by commit %d, which carries a generation record", commits)
	}

	rest := input[half+quarter:]
	if next {
		rest = input[half+quarter+quarter/2:]
	}
	produceKeyed(t, brokers, rest)
	again := run(1)
	var cut2 map[string]int64
	waitFor(t, waitTimeout, "every state partition restored", func() bool { cut2 = again.cutovers(); return len(cut2) == parts })
	for p, c := range cut {
		if cut2[p] != c {
			t.Errorf("partition %s cut over at %d before the SIGKILL, at %d after it: want the same T (the same committed state)", p, c, cut2[p])
		}
	}
	// A partition whose generation record was committed restores its two
	// generations; one whose record was not cuts over again.
	committed := generationRecords(t, brokers, changelog, parts, 2, true, killedAt) // the killed instance's, not the restart's
	if delivery == "exactly_once" && (next && len(committed) != parts || !next && len(committed) == parts) {
		t.Errorf("SIGKILLed in commit %d (generation records from commit %d, every partition's by %d): %d of %d partitions' generation records committed", commits, cutAt, allAt, len(committed), parts)
	}
	if got, want := again.lines("cut over to a new generation of windows"), parts-len(committed); got != want {
		t.Errorf("the restart cut over %d partitions, want %d: those whose generation record the SIGKILL left uncommitted", got, want)
	}
	t.Logf("SIGKILLed in commit %d (generation records from commit %d, every partition's by %d): %d of %d partitions' generation records committed", commits, cutAt, allAt, len(committed), parts)
	lo, hi := []int64{math.MinInt64, 0}, []int64{math.MinInt64, 0}
	lo[1], hi[1] = span(cut2)
	checkPhases(t, brokers, phases, wants, lo, hi, delivery, func() { again.term(t) })
	checkAccounted(t, brokers, input, delivery, nil)
}

// TestConfigChangeRollingOldPod is a rollout that goes back and forth,
// as a Deployment's can: two instances of the old config read the first
// third of the stream; one is replaced by an instance of the new config,
// which cuts over the partitions it takes; then that one stops, and the
// old pod takes every partition, those cut over too (a lower
// state.config_version: it runs their newest stored generation, the new
// config's, warns once a partition, and never cuts back); then the old
// pod is upgraded too, one pod at a time. A reader sees each
// generation's replay, as in TestConfigChangeRestart.
func TestConfigChangeRollingOldPod(t *testing.T) {
	t.Parallel()
	for _, partitioning := range []string{"by_key", "repartition"} {
		t.Run(partitioning, func(t *testing.T) {
			t.Parallel() // its own broker
			rollingOldPod(t, partitioning)
		})
	}
}

func rollingOldPod(t *testing.T, partitioning string) {
	const parts = 4
	n := 1200
	if raceEnabled {
		n = 600
	}
	input := genInput(parts, n)
	kc := newCluster(t, parts)
	brokers := kc.ListenAddrs()
	phases := []genPhase{{window: rollMs1, aggregates: rollOne, version: 1}, {window: rollMs5, aggregates: rollTwo, version: 2}}
	paths, _, wants := rollConfigs(t, brokers, partitioning, "exactly_once", phases, parts, input)
	each := 2
	if partitioning == "repartition" {
		each = 4 // the input's partitions and the repartition topic's
	}
	var runs []*binaryRun
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range runs {
				t.Logf("run %d, service log:\n%s", i, (&durProc{out: r.out}).logTail(40))
			}
		}
	})
	run := func(i int) *binaryRun {
		r := startBinary(t, paths[i])
		runs = append(runs, r)
		return r
	}
	sixth := len(input) / 6
	a, b := run(0), run(0)
	waitEven(t, brokers, rollGroup, 2, each)
	produceSliced(t, brokers, rollGroup, input[:2*sixth])

	a.term(t)
	a2 := run(1)
	waitEven(t, brokers, rollGroup, 2, each)
	var first map[string]int64
	waitFor(t, waitTimeout, "the new pod's cut-over of its partitions", func() bool { first = a2.cutovers(); return len(first) == parts/2 })
	produceSliced(t, brokers, rollGroup, input[2*sixth:3*sixth])

	// The new pod goes (a failed rollout step, a node drained): the old
	// pod takes every partition, the two cut over among them.
	a2.term(t)
	waitEven(t, brokers, rollGroup, 1, 2*each)
	const older = "state.config_version is lower than the partition's newest stored generation"
	waitFor(t, waitTimeout, "the old pod's warnings for the partitions cut over", func() bool { return b.lines(older) >= parts/2 })
	produceSliced(t, brokers, rollGroup, input[3*sixth:4*sixth])
	if got := b.lines(older); got != parts/2 {
		t.Errorf("the old pod warned %d times that it runs a newer stored generation, want %d: once for each partition cut over", got, parts/2)
	}
	if b.lines("cut over to a new generation of windows") != 0 {
		t.Errorf("the old pod cut over a partition: a partition never goes back to an older generation")
	}

	// The rollout again, one pod at a time: the old pod is replaced.
	a3 := run(1)
	waitEven(t, brokers, rollGroup, 2, each)
	b.term(t)
	b2 := run(1)
	waitEven(t, brokers, rollGroup, 2, each)
	produceSliced(t, brokers, rollGroup, input[4*sixth:])
	all := map[string]int64{}
	waitFor(t, waitTimeout, "every partition's cut-over on the new pods", func() bool {
		for _, r := range []*binaryRun{a3, b2} {
			for p, c := range r.cutovers() {
				all[p] = c
			}
		}
		return len(all) == parts
	})
	for p, c := range first {
		if all[p] != c {
			t.Errorf("partition %s cut over at %d, and at %d after it went to the old pod and back: want one cut-over", p, c, all[p])
		}
	}
	lo, hi := []int64{math.MinInt64, 0}, []int64{math.MinInt64, 0}
	lo[1], hi[1] = span(all)
	checkPhases(t, brokers, phases, wants, lo, hi, "exactly_once", func() { a3.term(t); b2.term(t) })
	checkAccounted(t, brokers, input, "exactly_once", nil)
}

// TestConfigChangeRefusedExits2: the binary, against the state of a
// config that ran, with another window at the same state.config_version,
// or another source.key at a higher one, exits 2 (a config error) with a
// message naming the key, and writes nothing: every topic (the changelog,
// the outputs, and the repartition or the watermark topic) ends where it
// did. By key (with watermark.scope global: the watermark topic) and
// through the repartition stage, whose stage 1 writes nothing, not even
// its watermark markers, before the restores of the instance's state
// partitions have accepted the config (docs/design.md#restore). By key
// with state in partition 1 only, partition 0's restore accepts the
// config (a first generation, to be written at the next commit) before
// partition 1's refuses it: the shutdown after the refusal commits
// nothing either.
func TestConfigChangeRefusedExits2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		partitioning string
		onlyPart1    bool // the first run's input, and so its state, in partition 1 only
	}{{"by_key_global", false}, {"repartition", false}, {"by_key_global", true}} {
		name := tc.partitioning
		if tc.onlyPart1 {
			name += "/state_in_partition_1_only"
		}
		partitioning := tc.partitioning
		t.Run(name, func(t *testing.T) {
			t.Parallel() // its own broker
			kc := newCluster(t, 2)
			brokers := kc.ListenAddrs()
			first := run1(t, brokers, genYAML(partitioning, rollMs1, rollOne, 1))
			input := genInput(2, 200)
			if tc.onlyPart1 {
				for i := range input {
					input[i].partition = 1
				}
			}
			produceSliced(t, brokers, rollGroup, input)
			first.term(t)
			topics := allTopics(t, brokers)
			if want := map[string]string{"by_key_global": rollGroup + "-watermarks", "repartition": rollGroup + "-repartition"}[partitioning]; !slices.Contains(topics, want) {
				t.Fatalf("topics %v: no %s", topics, want)
			}
			before := endOffsets(t, brokers, topics...)
			for _, c := range []struct{ name, yaml, key string }{
				{"equal version", genYAML(partitioning, rollMs5, rollOne, 1), "state.config_version"},
				{"another key", strings.Replace(genYAML(partitioning, rollMs1, rollOne, 2), "key: [sid]", "key: [d]", 1), "source.key"},
			} {
				r := run1(t, brokers, c.yaml)
				code, _ := r.wait(t, waitTimeout)
				if out := r.out.String(); code != 2 || !strings.Contains(out, c.key) {
					t.Errorf("%s: exit %d, want 2 with a message naming %s; log:\n%s", c.name, code, c.key, (&durProc{out: r.out}).logTail(10))
				}
				if after := endOffsets(t, brokers, topics...); !maps2Equal(after, before) {
					t.Errorf("%s: end offsets %v after the refusal, want %v: nothing written", c.name, after, before)
				}
			}
		})
	}
}

// allTopics are the cluster's topics.
func allTopics(t testing.TB, brokers []string) []string {
	t.Helper()
	topics, err := kadm.NewClient(client(t, brokers)).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return topics.Names()
}

// run1 runs the binary with the config yaml (writeConfig's).
func run1(t *testing.T, brokers []string, yaml string) *binaryRun {
	t.Helper()
	return startBinary(t, writeConfig(t, yaml, brokers))
}
