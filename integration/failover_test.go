package integration

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
	"aggregator/internal/placement"
)

// A severable is a kgo.Dialer whose connections all close at once when
// it is cut, and which dials nothing after: to the brokers the client is
// a process killed without leaving the group (SIGKILL, a node lost); its
// member stays in the group until its session expires.
type severable struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (s *severable) dial(ctx context.Context, network, host string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil, errors.New("severed")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err == nil {
		s.conns = append(s.conns, c)
	}
	return c, err
}

// sever closes every connection and refuses new ones.
func (s *severable) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	for _, c := range s.conns {
		c.Close()
	}
}

// logLines returns the JSON lines of log whose message contains msg,
// parsed.
func logLines(log *durBuffer, msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(log.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && strings.Contains(m["message"].(string), msg) {
			out = append(out, m)
		}
	}
	return out
}

// killable is a service whose client can be killed without leaving the
// group, and whose info log is kept.
type killable struct {
	*service
	dial *severable
	log  *durBuffer
	reg  *prometheus.Registry
}

// startKillable starts a service on cfg whose connections go through a
// severable, logging at info into a buffer.
func startKillable(t testing.TB, cfg config.Config, opts ...kgo.Opt) *killable {
	t.Helper()
	k := &killable{dial: &severable{}, log: &durBuffer{}, reg: prometheus.NewRegistry()}
	log := zerolog.New(k.log).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	c, err := consumer.NewWithClock(cfg, log, k.reg, time.Now,
		append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.Dialer(k.dial.dial)}, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.service = &service{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { k.done <- c.Run(ctx) }()
	t.Cleanup(func() { k.crash() })
	return k
}

// kill ends the service as SIGKILL would: its connections drop, nothing
// more reaches the brokers (no commit, no leave), and its member stays
// in the group until its session expires. The client's close (its leave
// fails meanwhile) goes on in the background; the test's cleanup waits
// for it.
func (k *killable) kill(t testing.TB) {
	k.dial.sever()
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.crash()
	}()
	t.Cleanup(func() { <-done })
}

// A member that joins a group holding a member killed without leaving
// waits for that member's session to expire, and says so at info: what
// it waits for, until when at the latest, and who is in the group; then
// that it joined, and how long it waited.
func TestJoinSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel() // its own broker
	const session = 6 * time.Second
	kc := faultCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	cfg.Source.SessionTimeout = session
	a := startKillable(t, cfg)
	waitPlacement(t, brokers, cfg.Source.Group, 1, map[string]int{inTopic: 4})
	a.kill(t)
	killed := time.Now()
	b := startKillable(t, cfg)
	waitForf(t, waitTimeout, pollEvery, func() bool { return len(logLines(b.log, "waiting for the group")) > 0 }, func() string {
		return "the new member saying what it waits for; its log:\n" + b.log.String()
	})
	if b.c.Serving() {
		t.Error("the new member is ready (/readyz 200) before the group answered its join")
	}
	waitForf(t, waitTimeout, pollEvery, func() bool { return len(logLines(b.log, "joined the group")) > 0 }, func() string {
		return "the new member saying it joined; its log:\n" + b.log.String()
	})
	waited := logLines(b.log, "waiting for the group")
	if len(waited) != 1 {
		t.Fatalf("%d lines say what the join waits for, want 1; log:\n%s", len(waited), b.log.String())
	}
	w := waited[0]
	expires, err := time.Parse(time.RFC3339Nano, w["expires_by"].(string))
	if err != nil || expires.Before(killed) || expires.After(killed.Add(session+5*time.Second)) {
		t.Errorf("expires_by = %v (%v), want within the session timeout of the kill at %v", w["expires_by"], err, killed)
	}
	if members, _ := w["members"].([]any); len(members) != 1 || !strings.HasPrefix(members[0].(string), "aggregator@") {
		t.Errorf("members = %v, want the killed member, named by client ID and host", w["members"])
	}
	if w["session_timeout"] != session.String() || w["level"] != "info" {
		t.Errorf("session_timeout = %v, level = %v; want %v at info", w["session_timeout"], w["level"], session)
	}
	waitPlacement(t, brokers, cfg.Source.Group, 1, map[string]int{inTopic: 4})
	if took := time.Since(killed); took > session+3*time.Second {
		t.Errorf("the new member owned the partitions %v after the kill, want within the session timeout (%v) and a little", took, session)
	}
	b.stop(t)
}

var (
	failoverSeeds  = flag.Int("failover.seeds", 1, "TestFailoverToStandby: seeds per delivery mode (1..N)")
	failoverSeed   = flag.Uint64("failover.seed", 0, "TestFailoverToStandby: run this seed only (0: 1..failover.seeds)")
	failoverFaults = flag.Int("failover.faults", 1, "TestFailoverToStandby: faults per seed, one per chunk of input: "+
		"an instance killed mid-stream; with more than one, also one killed while a new member warms its copies up, "+
		"and two killed one after the other, the second during the first's takeover")
)

// failoverSession is the instances' source.session_timeout: a killed
// member's partitions move once it expires.
const failoverSession = 3 * time.Second

// Three in-process instances with state.standby_replicas 1 over six
// input partitions; one is killed mid-stream (its connections drop: it
// never leaves the group), its partitions go to the survivors holding
// their copies, which read only the changelog's tail
// (aggregator_restores_total{from="standby"}), and a replacement joins
// under a new member ID. The results, late events and dead letters are
// replay's, none lost, none repeated (exactly_once) or repeated identical
// (at_least_once), in both delivery modes. -failover.seeds and
// -failover.faults make it a long run: more seeds, and per seed more
// faults, among them a kill while a new member warms its copies up and
// a second kill during the takeover of the first.
func TestFailoverToStandby(t *testing.T) {
	t.Parallel()
	seeds := durSeeds(*failoverSeeds)
	if *failoverSeed != 0 {
		seeds = []uint64{*failoverSeed}
	}
	for _, delivery := range []string{"exactly_once", "at_least_once"} {
		t.Run(delivery, func(t *testing.T) {
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
					t.Parallel()
					failover(t, delivery, seed, *failoverFaults)
				})
			}
		})
	}
}

func failover(t *testing.T, delivery string, seed uint64, faults int) {
	data := rand.New(rand.NewPCG(seed, 11))
	sched := rand.New(rand.NewPCG(seed, 12))
	s := newDurStream(6, 12, 30_000)
	rounds := faults + 2
	for r := range rounds {
		// Late records only in chunks produced once the earlier ones are
		// committed: the odd ones, and the last.
		s.chunk(data, 300+data.IntN(600), r%2 == 1 || r == rounds-1, r == rounds-1)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(s.parts, inTopic),
		kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	brokers := kc.ListenAddrs()
	yaml := durConfig(30_000, delivery)
	cfg := parseConfig(t, yaml, brokers)
	cfg.Source.SessionTimeout = failoverSession
	cfg.State.StandbyReplicas = 1
	group := cfg.Source.Group
	want, emitted := s.reference(t, yaml, brokers)

	var log []string
	began := time.Now()
	step := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%6.2fs ", time.Since(began).Seconds())+fmt.Sprintf(format, args...))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (%s): reproduce with\n  go test ./integration -run '%s$' -failover.seed %d -failover.faults %d\nschedule:\n  %s",
				seed, delivery, t.Name(), seed, faults, strings.Join(log, "\n  "))
		}
	})
	var all []*killable
	live := map[string]*killable{}
	n := 0
	startOne := func() {
		name := fmt.Sprintf("i%d", n)
		n++
		live[name] = startKillable(t, cfg)
		all = append(all, live[name])
		step("%s starts", name)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, k := range all {
				t.Logf("i%d's log:\n%s", i, k.log.String())
			}
		}
	})
	kill := func() string {
		names := slices.Sorted(maps.Keys(live))
		name := names[sched.IntN(len(names))]
		live[name].kill(t)
		delete(live, name)
		step("%s killed", name)
		return name
	}
	pcl := client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(r int) <-chan error {
		pauses := make([]time.Duration, 1+sched.IntN(4))
		for i := range pauses {
			pauses[i] = time.Duration(50+sched.IntN(150)) * time.Millisecond
		}
		lines, _ := s.chunkLines(r)
		step("produce chunk %d: %d records in %d slices", r, len(lines), len(pauses)+1)
		return s.produceSlices(pcl, r, pauses)
	}
	produced := func(ch <-chan error) {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	// warm waits until the group has three members, two partitions each,
	// and every partition has a caught-up copy on another member.
	warm := func() {
		durWaitMembers(t, brokers, group, 3, int(s.parts))
		waitForf(t, waitTimeout, pollEvery, func() bool {
			copies := 0
			for _, k := range live {
				copies += caughtUpCopies(t, k.reg)
			}
			return copies == int(s.parts)
		}, func() string { return "a caught-up copy of every partition" })
		step("3 members, every partition copied")
	}

	for range 3 {
		startOne()
	}
	produced(produce(0))
	warm()
	durWaitCommitted(t, brokers, group, s.ends(0))
	step("chunk 0 committed")
	for r := 1; r < rounds-1; r++ {
		ch := produce(r)
		prev := emitted[r-1]
		durProgress(t, brokers, resultsTopic, int64(prev+sched.IntN(emitted[r]-prev+1)), waitTimeout)
		killed := time.Now()
		switch fault := (r - 1) % 3; fault {
		case 0: // a kill mid-stream
			kill()
			durWaitMembers(t, brokers, group, 2, int(s.parts))
			step("2 members, %v after the kill", time.Since(killed).Round(time.Millisecond))
			startOne()
		case 1: // a kill while a replacement warms its copies up
			startOne()
			waitForf(t, waitTimeout, pollEvery, func() bool { return memberCount(t, brokers, group) == 4 }, func() string { return "the new member joining" })
			kill()
		case 2: // a second kill during the first's takeover
			kill()
			waitForf(t, waitTimeout, pollEvery, func() bool { return memberCount(t, brokers, group) == 2 }, func() string { return "the group rebalancing without it" })
			kill()
			step("second kill during the takeover")
			startOne()
			startOne()
		}
		produced(ch)
		warm()
		durWaitCommitted(t, brokers, group, s.ends(r))
		step("chunks 0..%d committed", r)
	}
	produced(produce(rounds - 1))
	durWaitCommitted(t, brokers, group, s.ends(rounds-1))
	// The last windows fire once every instance has heard of the others'
	// watermarks (the watermark topic), after their commits.
	durProgress(t, brokers, resultsTopic, int64(emitted[rounds-1]), waitTimeout)
	standby, prebuilt, tail := 0.0, 0.0, 0.0
	for _, k := range all {
		standby += counterValue(t, k.reg, "aggregator_restores_total", "from", "standby")
		prebuilt += counterValue(t, k.reg, "aggregator_standby_takeover_entries_total", "at", "copy")
		tail += counterValue(t, k.reg, "aggregator_standby_takeover_entries_total", "at", "takeover")
	}
	for _, k := range live {
		k.stop(t)
	}
	step("every instance stopped")
	durCheck(t, brokers, s, want, delivery)
	if standby == 0 {
		t.Errorf("no partition was restored from a standby copy")
	}
	// A copy is built window state: a takeover builds only the entries
	// of the changelog's tail, the rest were built as they committed.
	if prebuilt == 0 {
		t.Errorf("the takeovers from copies built every entry (%v) at the takeover: none was built by the copies before", tail)
	}
	t.Logf("seed %d (%s): %d records, %d results, %d late events, %d dead letters; %v partitions restored from a copy (entries built by the copies %v, at the takeovers %v); results topic: %d records uncommitted or repeated\n  %s",
		seed, delivery, len(s.lines), len(want.results), s.late, s.dead, standby, prebuilt, tail,
		durUncommitted(t, brokers, resultsTopic)-len(want.results), strings.Join(log, "\n  "))
}

// caughtUpCopies counts the standby copies of the instance with registry
// reg that are caught up.
func caughtUpCopies(t testing.TB, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "aggregator_standby_lag_records" {
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() <= placement.CaughtUp {
					n++
				}
			}
		}
	}
	return n
}

// counterValue is the value of the counter name{label=value} in reg (0
// if it has none); with label "", the sum of all its series.
func counterValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				sum += m.GetCounter().GetValue()
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// memberCount is how many members group has (-1 if it cannot be told).
func memberCount(t testing.TB, brokers []string, group string) int {
	gs, err := kadm.NewClient(client(t, brokers)).DescribeGroups(context.Background(), group)
	if err != nil {
		return -1
	}
	return len(gs[group].Members)
}
