package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The service at start-up and under broker outages, run as a user runs
// it: the binary, its exit status, its log and its probes.

// freePort returns a TCP port of 127.0.0.1 that nothing listens on, for
// a listener started later, or again after an outage (in between,
// connections to it are refused). It is drawn from below Linux's
// ephemeral range (32768 up), where every listener on port 0 and every
// outgoing connection gets its port, so that no test running meanwhile
// takes it in the gap.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20_000 + rand.IntN(32_768-20_000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		ln.Close()
		return port
	}
	t.Fatal("no free port of 127.0.0.1 below 32768 in 100 tries")
	return 0
}

// binaryRun is `aggregator run` with its output and probes at hand.
type binaryRun struct {
	cmd     *exec.Cmd
	out     *durBuffer
	probes  string // http://host:port
	exited  chan error
	started time.Time
}

// startBinary runs `aggregator run --config path` with the environment
// overrides env (KEY=value) and its probes on a port of its own.
func startBinary(t testing.TB, path string, env ...string) *binaryRun {
	t.Helper()
	return startBinaryOf(t, binary, path, env...)
}

// startBinaryOf is startBinary of the build bin.
func startBinaryOf(t testing.TB, bin, path string, env ...string) *binaryRun {
	t.Helper()
	needBinary(t)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "run", "--config", path)
	cmd.Env = append(append(os.Environ(), "AGGREGATOR_HTTP_LISTEN="+listen), env...)
	b := &binaryRun{cmd: cmd, out: &durBuffer{}, probes: "http://" + listen, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.started = time.Now()
	go func() { b.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return b
}

// status returns the HTTP status of a probe, or 0 if it does not answer.
func (b *binaryRun) status(probe string) int {
	resp, err := http.Get(b.probes + probe)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// wait returns the exit status and how long the process took to exit, or
// fails if it still runs after d.
func (b *binaryRun) wait(t testing.TB, d time.Duration) (int, time.Duration) {
	t.Helper()
	began := time.Now()
	select {
	case err := <-b.exited:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return code, time.Since(began)
	case <-time.After(d):
		t.Fatalf("still running %v later\n%s", d, b.out)
		return 0, 0
	}
}

// sum is the sum over the series of metric name on /metrics (0 if it
// does not answer).
func (b *binaryRun) sum(name string) float64 {
	resp, err := http.Get(b.probes + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	total := 0.0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64); err == nil {
			total += v
		}
	}
	return total
}

// sigterm sends SIGTERM and returns the exit status and how long after it
// the process exited.
func (b *binaryRun) sigterm(t testing.TB) (int, time.Duration) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return b.wait(t, 30*time.Second)
}

// Brokers down at start: the service retries (a warn line per attempt,
// /readyz 503, /healthz 200) and does not exit; once they are up for good
// it joins and processes everything. SIGTERM while they are down: exit 0
// within a second.
func TestBrokersDownAtStart(t *testing.T) {
	port := freePort(t)
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", port)}
	path := writeConfig(t, callsConfig(tumbling), brokers)

	t.Run("SIGTERM while down", func(t *testing.T) {
		b := startBinary(t, path)
		waitFor(t, 10*time.Second, "a retry warning", func() bool { return strings.Contains(b.out.String(), "connect to Kafka failed; retrying") })
		if got := b.status("/readyz"); got != http.StatusServiceUnavailable {
			t.Errorf("/readyz while the brokers are down = %d, want 503", got)
		}
		if got := b.status("/healthz"); got != http.StatusOK {
			t.Errorf("/healthz while the brokers are down = %d, want 200", got)
		}
		code, took := b.sigterm(t)
		t.Logf("SIGTERM while the brokers are down: exit %d after %v", code, took.Round(time.Millisecond))
		if code != 0 || took > time.Second {
			t.Errorf("SIGTERM while the brokers are down: exit %d after %v, want 0 within 1s\n%s", code, took, b.out)
		}
	})

	t.Run("down, then up", func(t *testing.T) {
		cfg := parseConfig(t, callsConfig(tumbling), brokers)
		lines := calls(600, 4, 5)
		want := replay(t, cfg, onePartition(lines), noWallClock)
		b := startBinary(t, path)
		// The outage: nothing listens on the port until the service has
		// retried twice, its log giving the cause.
		waitForf(t, waitTimeout, pollEvery, func() bool {
			out := b.out.String()
			return strings.Count(out, "connect to Kafka failed; retrying") >= 2 && strings.Contains(out, "connection refused")
		}, func() string {
			return "two retries and the cause (connection refused) in the log:\n" + b.out.String()
		})
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, inTopic),
			kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic))
		if err != nil {
			t.Fatalf("kfake on port %d: %v", port, err)
		}
		t.Cleanup(kc.Close)
		produce(t, brokers, lines, func(int) int32 { return 0 })
		waitValue(t, brokers, resultsTopic, want.results[len(want.results)-1])
		waitFor(t, 10*time.Second, "/readyz 200", func() bool { return b.status("/readyz") == http.StatusOK })
		if code, took := b.sigterm(t); code != 0 {
			t.Errorf("SIGTERM: exit %d after %v, want 0\n%s", code, took, b.out)
		}
		if got := dedupe(values(readAll(t, brokers, resultsTopic))); !slices.Equal(got, want.results) {
			t.Errorf("results after the outage differ from replay's:\n%s", diff(got, want.results))
		}
	})
}

// A broker that accepts connections and never answers: SIGTERM during
// start-up ends the process at once, exit 0.
func TestSigtermWhileBrokerSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	path := writeConfig(t, callsConfig(tumbling), []string{ln.Addr().String()})
	b := startBinary(t, path)
	waitFor(t, waitTimeout, "a connection to the silent broker, and the probes up", func() bool {
		mu.Lock()
		n := len(conns)
		mu.Unlock()
		return n > 0 && b.status("/healthz") == http.StatusOK
	})
	if got := b.status("/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the broker is silent = %d, want 503", got)
	}
	code, took := b.sigterm(t)
	t.Logf("SIGTERM during start-up against a silent broker: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 || took > time.Second {
		t.Errorf("SIGTERM during start-up: exit %d after %v, want 0 within 1s\n%s", code, took, b.out)
	}
}

// A wrong SASL password: exit 1 at once (retrying cannot fix it), and the
// message says authentication failed.
func TestWrongSASLPassword(t *testing.T) {
	out := runAsUser(t, "wrong SASL password", "admin", "not-the-password", kfake.Superuser("PLAIN", "admin", "admin-pw"))
	if !strings.Contains(out, "aggregator: authentication failed (SASL)") || strings.Contains(out, "not-the-password") {
		t.Errorf("wrong SASL password: want \"authentication failed (SASL)\" and no password:\n%s", out)
	}
}

// runAsUser runs the binary against a kfake cluster with SASL and opts (its
// users), as user with password, and returns its output once it exited 1.
func runAsUser(t *testing.T, what, user, password string, opts ...kfake.Opt) string {
	t.Helper()
	kc, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.SeedTopics(1, inTopic, resultsTopic, lateTopic, dlqTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	path := writeConfig(t, callsConfig(tumbling)+"\n", kc.ListenAddrs())
	b := startBinary(t, path, "AGGREGATOR_SOURCE_SASL_MECHANISM=PLAIN", "AGGREGATOR_SOURCE_SASL_USERNAME="+user,
		"AGGREGATOR_SOURCE_SASL_PASSWORD="+password)
	code, _ := b.wait(t, 30*time.Second)
	t.Logf("%s: exit %d %v after start", what, code, time.Since(b.started).Round(time.Millisecond))
	if code != 1 {
		t.Errorf("%s: exit %d, want 1:\n%s", what, code, b.out)
	}
	return b.out.String()
}

// The brokers go away while the service runs and come back after /readyz
// said so and two more connection attempts (on the same ports, with their
// data): the service does not exit, /readyz is 503 while they are away
// (after 10s without an answer) and 200 again after, and it goes on with
// what was produced meanwhile.
func TestBrokersLostWhileRunning(t *testing.T) {
	t.Parallel() // its own broker, on ports below the ephemeral range (freePort)
	rc := newRestartable(t, 1)
	brokers := rc.kc.ListenAddrs()
	path := writeConfig(t, callsConfig(tumbling)+"\n", brokers)
	lines, parts := ordered(1200, base)
	part := func(i int) int32 { return parts[i] }
	ends := func(n int) map[int32]int64 { return partitionEnds(parts[:n]) }
	produce(t, brokers, lines[:600], part)
	b := startBinary(t, path)
	waitGroupCommitted(t, brokers, ends(600), waitTimeout)
	waitFor(t, 10*time.Second, "/readyz 200", func() bool { return b.status("/readyz") == http.StatusOK })

	rc.kc.Close()
	lost := time.Now()
	waitFor(t, 20*time.Second, "/readyz 503 with the brokers away", func() bool { return b.status("/readyz") == http.StatusServiceUnavailable })
	t.Logf("/readyz 503 %v after the brokers went away", time.Since(lost).Round(time.Millisecond))
	// The outage goes on while the service tries twice more (not 503 and
	// gone: it keeps retrying).
	const refused = "unable to open connection to broker"
	tries := strings.Count(b.out.String(), refused)
	waitFor(t, waitTimeout, "two more connection attempts", func() bool { return strings.Count(b.out.String(), refused) >= tries+2 })
	select {
	case err := <-b.exited:
		t.Fatalf("the service exited while the brokers were away: %v\n%s", err, b.out)
	default:
	}
	rc.restart(t, make(chan struct{}))
	back := time.Now()
	produceParts(t, brokers, lines, 600, part)
	waitGroupCommitted(t, brokers, ends(len(lines)), waitTimeout)
	waitFor(t, 20*time.Second, "/readyz 200 with the brokers back", func() bool { return b.status("/readyz") == http.StatusOK })
	t.Logf("everything produced meanwhile committed and /readyz 200 %v after the brokers came back", time.Since(back).Round(time.Millisecond))
	if code, took := b.sigterm(t); code != 0 {
		t.Errorf("SIGTERM: exit %d after %v, want 0\n%s", code, took, b.out)
	}
	checkRepeats(t, readAll(t, brokers, resultsTopic))
}

// SIGTERM while the brokers are away, after the group was joined: the
// service exits 0 within shutdown_timeout (10s here), having committed
// what it could (nothing); the next owner goes on from the last commit.
func TestSigtermWhileBrokersLost(t *testing.T) {
	kc := newCluster(t, 2)
	brokers := kc.ListenAddrs()
	path := writeConfig(t, callsConfig(tumbling)+"\n", brokers)
	lines, parts := ordered(400, base)
	produce(t, brokers, lines, func(i int) int32 { return parts[i] % 2 })
	b := startBinary(t, path)
	ends := map[int32]int64{}
	for _, p := range parts {
		ends[p%2]++
	}
	waitGroupCommitted(t, brokers, ends, waitTimeout)
	kc.Close()
	waitFor(t, waitTimeout, "the service meeting the brokers away", func() bool {
		return strings.Contains(b.out.String(), "unable to open connection to broker")
	})
	code, took := b.sigterm(t)
	t.Logf("SIGTERM with the brokers away: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 || took > 10*time.Second {
		t.Errorf("SIGTERM with the brokers away: exit %d after %v, want 0 within shutdown_timeout (10s)\n%s", code, took, b.out)
	}
}

// SIGTERM while a static member's join hangs, its previous run SIGKILLed
// (so the group still has the instance's member): the service leaves the
// group by its instance ID all the same, and the group is empty at once,
// not after source.session_timeout (30s here). Else the group's next
// rebalance waits for that member (TestChaos exactly_once seed
// 12: a fresh instance was not in the group after a minute).
func TestSigtermDuringStaticJoin(t *testing.T) {
	kc := newCluster(t, 1)
	brokers := kc.ListenAddrs()
	path := writeConfig(t, strings.Replace(callsConfig(tumbling), "source:\n", "source:\n  instance_id: i0\n  session_timeout: 30s\n", 1)+"\n", brokers)
	first := startBinary(t, path)
	waitFor(t, waitTimeout, "the first run ready (joined)", func() bool { return first.status("/readyz") == http.StatusOK })
	_ = first.cmd.Process.Kill()
	<-first.exited
	members := func() int {
		gs, err := kadm.NewClient(client(t, brokers)).DescribeGroups(context.Background(), binGroup)
		if err != nil {
			return -1
		}
		return len(gs[binGroup].Members)
	}
	if n := members(); n != 1 {
		t.Fatalf("the group has %d members after the first run's SIGKILL, want 1 (a static member stays)", n)
	}

	release := make(chan struct{})
	defer close(release)
	joining := make(chan struct{}, 1)
	kc.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		select {
		case joining <- struct{}{}:
		default:
		}
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	second := startBinary(t, path)
	select {
	case <-joining:
	case <-time.After(waitTimeout):
		t.Fatalf("no JoinGroup reached the broker\n%s", second.out)
	}
	if code, took := second.sigterm(t); code != 0 || took > 2*time.Second {
		t.Errorf("SIGTERM during the group join: exit %d after %v, want 0 within 2s\n%s", code, took, second.out)
	}
	left := time.Now()
	waitFor(t, 5*time.Second, "the group empty (the instance left it)", func() bool { return members() == 0 })
	t.Logf("the group was empty %v after the exit", time.Since(left).Round(time.Millisecond))
}

// A principal that may use the topics but not the consumer group: exit 1
// at once, the message names the group and the ACL error.
func TestGroupNotAuthorized(t *testing.T) {
	all := func(r kmsg.ACLResourceType) kfake.ACL {
		return kfake.ACL{Resource: r, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	out := runAsUser(t, "group not authorized", "app", "app-pw", kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "app", "app-pw", all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeTransactionalId), all(kmsg.ACLResourceTypeCluster)))
	if !strings.Contains(out, "group "+binGroup) || !strings.Contains(out, "not authorized (ACL)") || !strings.Contains(out, "GROUP_AUTHORIZATION_FAILED") {
		t.Errorf("group not authorized: want the group %s and GROUP_AUTHORIZATION_FAILED named:\n%s", binGroup, out)
	}
}

// SIGTERM while the group join hangs (the coordinator takes the JoinGroup
// and does not answer): exit 0 within a second.
func TestSigtermDuringJoin(t *testing.T) {
	kc := newCluster(t, 1)
	release := make(chan struct{})
	joining := make(chan struct{}, 1)
	kc.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		select {
		case joining <- struct{}{}:
		default:
		}
		kc.SleepControl(func() { <-release })
		return nil, nil, false
	})
	defer close(release)
	path := writeConfig(t, callsConfig(tumbling)+"\n", kc.ListenAddrs())
	b := startBinary(t, path)
	select {
	case <-joining:
	case <-time.After(waitTimeout):
		t.Fatalf("no JoinGroup reached the broker\n%s", b.out)
	}
	code, took := b.sigterm(t)
	t.Logf("SIGTERM during the group join: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 || took > time.Second {
		t.Errorf("SIGTERM during the group join: exit %d after %v, want 0 within 1s\n%s", code, took, b.out)
	}
}
