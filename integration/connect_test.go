package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// Connecting to clusters that authenticate as managed ones do
// (docs/connecting.md): tokens that expire and refresh, an endpoint that
// goes down, AWS_MSK_IAM, certificates that rotate, and a cluster that
// cannot do what the config asks. Each in both delivery modes, on its own
// broker.

// authCluster starts a one-broker cluster with the calls topics and a's
// authentication (plus opts).
func authCluster(t testing.TB, a auth, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(slices.Concat([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic),
		kfake.SeedTopics(1, resultsTopic, lateTopic, dlqTopic)}, a.broker, opts)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kc.Close)
	return kc
}

// authConfig is the calls config for delivery, authenticating with a.
func authConfig(t testing.TB, a auth, brokers []string, delivery string) config.Config {
	t.Helper()
	cfg := parseConfig(t, callsConfig(tumbling)+"delivery: "+delivery+"\n", brokers)
	a.source(&cfg.Source)
	return cfg
}

// committed is the group's committed offset of the input partition.
func committed(t testing.TB, brokers []string, as []kgo.Opt) int64 {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers, as...))
	offs, err := adm.FetchOffsets(context.Background(), "aggregator-test")
	if err != nil {
		return -1
	}
	o, ok := offs.Lookup(inTopic, 0)
	if !ok {
		return -1
	}
	return o.At
}

// feedInSteps produces lines in steps batches, waiting after each until
// the group committed past it, and pausing between batches so that the
// run spans span of wall time.
func feedInSteps(t testing.TB, brokers []string, as []kgo.Opt, lines []string, steps int, span time.Duration) {
	t.Helper()
	began := time.Now()
	per := len(lines) / steps
	for i := range steps {
		batch := lines[i*per : (i+1)*per]
		if i == steps-1 {
			batch = lines[i*per:]
		}
		produceAs(t, brokers, as, batch, func(int) int32 { return 0 })
		end := int64(i*per + len(batch))
		waitFor(t, waitTimeout, fmt.Sprintf("the group to commit offset %d (step %d of %d)", end, i+1, steps), func() bool {
			return committed(t, brokers, as) >= end
		})
		if rest := time.Until(began.Add(span * time.Duration(i+1) / time.Duration(steps))); rest > 0 {
			time.Sleep(rest) // the tokens' lifetime passes: what the test is about
		}
	}
}

// checkResults compares the results topic with a replay of lines.
func checkResults(t testing.TB, cfg config.Config, brokers []string, as []kgo.Opt, lines []string, delivery string) {
	t.Helper()
	want := replay(t, cfg, onePartition(lines), noWallClock)
	waitValueAs(t, brokers, as, resultsTopic, want.results[len(want.results)-1])
	recs := readAllAs(t, brokers, as, resultsTopic)
	got := values(recs)
	checkRepeats(t, recs)
	if delivery == "at_least_once" {
		got = dedupe(got)
	}
	if !slices.Equal(got, want.results) {
		t.Errorf("results differ from a replay of the input:\n%s", diff(got, want.results))
	}
}

// TestOAuthTokenRefresh consumes and commits across several expiries of
// short-lived OAuth tokens: the service fetches new ones from the
// endpoint before they expire and re-authenticates its connections with
// them (the broker closes a connection whose token expired).
func TestOAuthTokenRefresh(t *testing.T) {
	t.Parallel()
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			a := authSetup(t, authOAuth)
			a.idp.SetLifetime(2 * time.Second)
			kc := authCluster(t, a)
			brokers := kc.ListenAddrs()
			cfg := authConfig(t, a, brokers, delivery)
			lines := calls(600, 4, 11)
			s := start(t, cfg, nil)
			feedInSteps(t, brokers, a.client, lines, 4, 5*time.Second) // past two expiries
			checkResults(t, cfg, brokers, a.client, lines, delivery)
			if n := a.idp.Requests.Load(); n < 3 {
				t.Errorf("token endpoint requests = %d, want at least 3 (two refreshes)", n)
			}
			if !s.c.Serving() {
				t.Error("not ready at the end")
			}
			s.stop(t)
		})
	}
}

// syncBuffer is a log buffer safe for the service's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOAuthEndpointDown takes the token endpoint down: the service goes
// on with its token until the token expires, then is not ready and says
// at error which endpoint fails with which HTTP status; with the endpoint
// back it recovers by itself, and no record is lost or counted twice.
func TestOAuthEndpointDown(t *testing.T) {
	t.Parallel()
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			a := authSetup(t, authOAuth)
			a.idp.SetLifetime(3 * time.Second)
			kc := authCluster(t, a)
			brokers := kc.ListenAddrs()
			cfg := authConfig(t, a, brokers, delivery)
			lines := calls(600, 4, 12)
			var logs syncBuffer
			s := startLogged(t, cfg, nil, prometheus.NewRegistry(), zerolog.New(&logs))
			produceAs(t, brokers, a.client, lines[:200], func(int) int32 { return 0 })
			waitFor(t, waitTimeout, "the first records committed", func() bool { return committed(t, brokers, a.client) >= 200 })
			waitFor(t, waitTimeout, "ready", s.c.Serving)

			a.idp.Down.Store(true)
			// The token the service holds is the last issued; the records
			// are consumed with it, or after the recovery.
			expires := a.idp.LastExpiry()
			produceAs(t, brokers, a.client, lines[200:400], func(int) int32 { return 0 })
			waitFor(t, waitTimeout, "not ready once the token expired", func() bool { return !s.c.Serving() })
			if early := time.Until(expires); early > 100*time.Millisecond {
				t.Errorf("not ready %v before the token in hand expired, want it used until it expires", early)
			}
			waitFor(t, waitTimeout, "an error line naming the endpoint and HTTP 503", func() bool {
				l := logs.String()
				return strings.Contains(l, `"level":"error"`) && strings.Contains(l, `"http_status":503`) && strings.Contains(l, a.idp.Server.URL)
			})

			a.idp.Down.Store(false)
			waitFor(t, waitTimeout, "ready again", s.c.Serving)
			produceAs(t, brokers, a.client, lines[400:], func(int) int32 { return 0 })
			checkResults(t, cfg, brokers, a.client, lines, delivery)
			s.stop(t)
		})
	}
}

// A token the brokers refuse for its extension ends the start with the
// brokers' reason; nothing is written.
func TestOAuthWrongExtensionRefused(t *testing.T) {
	t.Parallel()
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			a := authSetup(t, authOAuth)
			kc := authCluster(t, a)
			brokers := kc.ListenAddrs()
			cfg := authConfig(t, a, brokers, delivery)
			cfg.Source.SASL.OAuth.Extensions = map[string]string{"logicalCluster": "lkc-9"}
			err := runToEnd(t, cfg)
			for _, want := range []string{"authentication failed (SASL)", `extension logicalCluster = "lkc-9": not this cluster`} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Run = %v, want an error saying %q", err, want)
				}
			}
			checkNothingWritten(t, brokers, a.client)
		})
	}
}

// runToEnd runs a service until Run returns, within waitTimeout.
func runToEnd(t testing.TB, cfg config.Config) error {
	t.Helper()
	c, err := consumer.New(cfg, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = c.Run(ctx)
	c.Close()
	if ctx.Err() != nil {
		t.Fatalf("Run did not end in %v", waitTimeout)
	}
	return err
}

// checkNothingWritten fails if the outputs hold a record or the group
// committed an offset.
func checkNothingWritten(t testing.TB, brokers []string, as []kgo.Opt) {
	t.Helper()
	adm := kadm.NewClient(client(t, brokers, as...))
	ends, err := adm.ListEndOffsets(context.Background(), resultsTopic, lateTopic, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("%s[%d] holds %d records, want none", o.Topic, o.Partition, o.Offset)
		}
	})
	if at := committed(t, brokers, as); at >= 0 {
		t.Errorf("the group committed offset %d, want none", at)
	}
	topics, err := adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("aggregator-test-changelog") {
		t.Error("the changelog topic was created, want nothing created before the refusal")
	}
}

// TestMSKIAM authenticates with AWS_MSK_IAM, the credentials from the
// environment (as the AWS SDK's chain reads them), signed for
// source.sasl.aws.region; the broker recomputes the signature with the
// test secret. Not parallel: it sets the process environment.
func TestMSKIAM(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_SESSION_TOKEN", "session-token")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			a := authSetup(t, authSCRAM) // the test clients' user
			kc := authCluster(t, a, kfake.MSKIAM("eu-west-1", map[string]string{"AKIDTEST": "test-secret"}, "session-token"))
			brokers := kc.ListenAddrs()
			cfg := parseConfig(t, callsConfig(tumbling)+"delivery: "+delivery+"\n", brokers)
			cfg.Source.SASL = config.SASL{Mechanism: config.MechanismAWSMSKIAM, AWS: config.AWS{Region: "eu-west-1"}}
			lines := calls(300, 4, 13)
			produceAs(t, brokers, a.client, lines, func(int) int32 { return 0 })
			s := start(t, cfg, nil)
			checkResults(t, cfg, brokers, a.client, lines, delivery)
			s.stop(t)

			cfg.Source.SASL.AWS.Region = "us-east-1" // not the cluster's: the signature's scope is refused
			if err := runToEnd(t, cfg); err == nil || !strings.Contains(err.Error(), "authentication failed (SASL)") || !strings.Contains(err.Error(), "eu-west-1") {
				t.Errorf("Run signed for another region = %v, want the brokers' refusal", err)
			}
		})
	}
}

// connFailures counts the connections of the service that failed to open
// (dial, TLS handshake).
type connFailures struct {
	n   atomic.Int32
	err atomic.Value
}

func (f *connFailures) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		f.n.Add(1)
		f.err.Store(err.Error())
	}
}

// connTracker is a listener that can close every connection it accepted
// (as a broker restart or a load balancer would), so that clients
// connect again.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connTracker) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// TestCertificateRotation renews the CA, the brokers' certificate and the
// service's client certificate mid-stream, as cert-manager does with
// short-lived certificates: the CA file is a bundle of both CAs during
// the rollover, then the new one alone, and the old certificates expire.
// Every connection opened after the renewal (the brokers drop them all,
// twice) presents the new client certificate and verifies the new
// broker certificate; none fails; the results are exact.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	for _, delivery := range deliveries() {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			const oldLifetime = 4 * time.Second
			a := authSetup(t, authMutual)
			p := newPKI(t, oldLifetime) // the old certificates: expire mid-test
			a.pki.server.Store(p.server.Load())
			a.source = func(s *config.Source) { s.TLS = p.sourceTLS() }
			p.trusted = a.pki.trusted
			p.trusted.AddCert(p.ca)
			var presented atomic.Value // the serial of the client certificate the service presented last
			brokerTLS := a.pki.brokerTLS()
			brokerTLS.VerifyConnection = func(cs tls.ConnectionState) error {
				if serial := cs.PeerCertificates[0].SerialNumber; serial.Cmp(a.pki.testClient.Leaf.SerialNumber) != 0 {
					presented.Store(serial.String())
				}
				return nil
			}
			a.broker = []kfake.Opt{kfake.TLS(brokerTLS)}
			var ln *connTracker
			kc := authCluster(t, a, kfake.ListenFn(func(network, addr string) (net.Listener, error) {
				l, err := net.Listen(network, addr)
				ln = &connTracker{Listener: l}
				return ln, err
			}))
			brokers := kc.ListenAddrs()
			cfg := authConfig(t, a, brokers, delivery)
			lines := calls(600, 4, 14)
			var failed connFailures
			s := startLogged(t, cfg, nil, prometheus.NewRegistry(), zerolog.Nop(), kgo.WithHooks(&failed))
			produceAs(t, brokers, a.client, lines[:200], func(int) int32 { return 0 })
			waitFor(t, waitTimeout, "the first records committed", func() bool { return committed(t, brokers, a.client) >= 200 })

			// The renewal: a new CA; the CA file a bundle of both; the
			// brokers' and the service's certificates of the new CA.
			next, nextKey := newCA(t, "CA 2", time.Hour)
			p.trusted.AddCert(next)
			writePEMFile(t, p.caFile, p.ca.Raw, next.Raw)
			client := leafCert(t, next, nextKey, x509.ExtKeyUsageClientAuth, time.Hour)
			writeKeyPair(t, p.certFile, p.keyFile, client)
			server := leafCert(t, next, nextKey, x509.ExtKeyUsageServerAuth, time.Hour)
			a.pki.server.Store(&server)
			ln.closeAll()
			produceAs(t, brokers, a.client, lines[200:400], func(int) int32 { return 0 })
			waitFor(t, waitTimeout, "records committed after the renewal", func() bool { return committed(t, brokers, a.client) >= 400 })

			// The old CA leaves the bundle, and the old certificates expire.
			writePEMFile(t, p.caFile, next.Raw)
			time.Sleep(time.Until(p.ca.NotAfter)) // the old certificates' real expiry passes
			ln.closeAll()
			produceAs(t, brokers, a.client, lines[400:], func(int) int32 { return 0 })
			checkResults(t, cfg, brokers, a.client, lines, delivery)
			if n := failed.n.Load(); n != 0 {
				t.Errorf("%d connections failed to open (last: %v), want none", n, failed.err.Load())
			}
			if got, want := presented.Load(), client.Leaf.SerialNumber.String(); got != want {
				t.Errorf("the service's last connection presented certificate %v, want the renewed one %s", got, want)
			}
			s.stop(t)
		})
	}
}

// TestClusterWithoutTransactions: exactly_once against a cluster without
// transactions (Azure Event Hubs' Standard tier) is refused at start with
// a message naming delivery: at_least_once, and nothing is written;
// at_least_once runs there.
func TestClusterWithoutTransactions(t *testing.T) {
	t.Parallel()
	a := authSetup(t, authNone)
	kc := authCluster(t, a, kfake.NoTransactions())
	brokers := kc.ListenAddrs()
	lines := calls(300, 4, 15)
	produce(t, brokers, lines, func(int) int32 { return 0 })

	err := runToEnd(t, authConfig(t, a, brokers, "exactly_once"))
	if err == nil || !strings.Contains(err.Error(), "set delivery: at_least_once") || !strings.Contains(err.Error(), "Event Hubs") {
		t.Errorf("Run(exactly_once) = %v, want a refusal naming delivery: at_least_once", err)
	}
	checkNothingWritten(t, brokers, nil)

	cfg := authConfig(t, a, brokers, "at_least_once")
	s := start(t, cfg, nil)
	checkResults(t, cfg, brokers, nil, lines, "at_least_once")
	s.stop(t)
}
