package cluster_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/cluster"
	"aggregator/internal/cluster/oauthtest"
	"aggregator/internal/config"
)

// clock is a clock tests move.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// TestTokenEndpoint walks a token's life: cached until 80% of its
// lifetime, fetched again then; the endpoint down, the old token until it
// expires, then unavailable with an error line naming the endpoint and
// the HTTP status; the endpoint back, a new token.
func TestTokenEndpoint(t *testing.T) {
	p := oauthtest.New(t, 100*time.Second)
	clk := &clock{now: time.Now()}
	var logs bytes.Buffer
	e, err := cluster.NewTokenEndpoint(p.OAuth(), zerolog.New(&logs), clk.Now)
	if err != nil {
		t.Fatalf("NewTokenEndpoint() = %v", err)
	}
	token := func(step, want string) {
		t.Helper()
		got, err := e.Token(t.Context())
		if err != nil || got != want {
			t.Fatalf("%s: Token() = %q, %v; want %q", step, got, err, want)
		}
	}
	token("first", "tok-1")
	clk.Add(79 * time.Second)
	token("at 79% of its lifetime", "tok-1")
	clk.Add(2 * time.Second)
	token("at 81%", "tok-2")
	if n := p.Requests.Load(); n != 2 {
		t.Errorf("endpoint requests = %d, want 2", n)
	}

	p.Down.Store(true)
	clk.Add(81 * time.Second)
	token("endpoint down, token still valid", "tok-2")
	if err := e.Unavailable(); err != nil {
		t.Errorf("Unavailable() with a valid token = %v, want nil", err)
	}
	clk.Add(20 * time.Second) // tok-2 expired
	if _, err := e.Token(t.Context()); !errors.Is(err, cluster.ErrCredentialsUnavailable) || !cluster.Transient(err) {
		t.Errorf("Token() expired, endpoint down = %v, want a transient ErrCredentialsUnavailable", err)
	}
	if err := e.Unavailable(); err == nil || !strings.Contains(err.Error(), "HTTP 503") || !strings.Contains(err.Error(), p.Server.URL) {
		t.Errorf("Unavailable() = %v, want the endpoint and HTTP 503", err)
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), `"http_status":503`) ||
		!strings.Contains(logs.String(), `"token_endpoint":"`+p.Server.URL) {
		t.Errorf("logs = %s, want an error line with the endpoint and http_status 503", logs.String())
	}

	p.Down.Store(false)
	clk.Add(time.Minute) // past the backoff
	token("endpoint back", "tok-3")
	if err := e.Unavailable(); err != nil {
		t.Errorf("Unavailable() after recovery = %v, want nil", err)
	}
}

// A wrong client secret before any token is an error retrying cannot fix.
func TestTokenEndpointRefusesClient(t *testing.T) {
	p := oauthtest.New(t, time.Minute)
	o := p.OAuth()
	o.ClientSecret = "wrong"
	e, err := cluster.NewTokenEndpoint(o, zerolog.Nop(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Token(t.Context())
	if !errors.Is(cluster.Permanent(err), cluster.ErrAuthentication) || !strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("Token() with a wrong secret = %v, want a permanent ErrAuthentication naming HTTP 401, without the secret", err)
	}
}

// TestOAuthBearer authenticates against a kfake broker with tokens from
// the endpoint and from a file, with extensions; a token or an extension
// the broker refuses is an error retrying cannot fix, with the broker's
// reason.
func TestOAuthBearer(t *testing.T) {
	p := oauthtest.New(t, time.Hour)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.OAuthBearer(p.Validate))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	issue := func() string { // a token from the endpoint, for the file
		t.Helper()
		e, err := cluster.NewTokenEndpoint(p.OAuth(), zerolog.Nop(), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := e.Token(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	writeFile(t, tokenFile, []byte(issue()+"\n"))
	wrongExt := p.OAuth()
	wrongExt.Extensions = map[string]string{"logicalCluster": "lkc-9"}
	tests := map[string]struct {
		oauth config.OAuth
		want  string // "" = success
	}{
		"endpoint":        {p.OAuth(), ""},
		"file":            {config.OAuth{TokenFile: tokenFile, Extensions: map[string]string{"logicalCluster": "lkc-1"}}, ""},
		"wrong extension": {wrongExt, "extension logicalCluster = \"lkc-9\": not this cluster"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := ping(t, config.Source{Brokers: kc.ListenAddrs(), SASL: config.SASL{Mechanism: config.MechanismOAuthBearer, OAuth: tt.oauth}})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ping = %v, want nil", err)
			case tt.want != "" && (!errors.Is(cluster.Permanent(err), cluster.ErrAuthentication) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ping = %v, want a permanent ErrAuthentication containing %q", err, tt.want)
			}
		})
	}
	// The file is read at each connection: a new token is used at once.
	writeFile(t, tokenFile, []byte(issue()))
	if err := ping(t, config.Source{Brokers: kc.ListenAddrs(), SASL: config.SASL{Mechanism: config.MechanismOAuthBearer,
		OAuth: config.OAuth{TokenFile: tokenFile, Extensions: map[string]string{"logicalCluster": "lkc-1"}}}}); err != nil {
		t.Errorf("ping with the renewed token file = %v", err)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.NewAccess(config.Source{SASL: config.SASL{Mechanism: config.MechanismOAuthBearer,
		OAuth: config.OAuth{TokenFile: tokenFile}}}, zerolog.Nop(), nil); err == nil || !strings.Contains(err.Error(), "source.sasl.oauth.token_file") {
		t.Errorf("NewAccess(a missing token file) = %v, want an error naming source.sasl.oauth.token_file", err)
	}
}

// TestMSKIAM signs in to a kfake broker that recomputes the SigV4
// signature with the test secret.
func TestMSKIAM(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MSKIAM("eu-west-1", map[string]string{"AKIDTEST": "test-secret"}, "session-token"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	tests := map[string]struct {
		secret, region, token string
		want                  string // "" = success
	}{
		"signed":        {"test-secret", "eu-west-1", "session-token", ""},
		"wrong secret":  {"nope", "eu-west-1", "session-token", "the signature does not match"},
		"wrong region":  {"test-secret", "us-east-1", "session-token", "x-amz-credential"},
		"wrong session": {"test-secret", "eu-west-1", "other", "x-amz-security-token"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			creds := aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("AKIDTEST", tt.secret, tt.token))
			mech := cluster.NewMSKIAMWith(creds, tt.region, time.Now)
			err := pingOpts(t, []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.SASL(mech)})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ping = %v, want nil", err)
			case tt.want != "" && (!errors.Is(cluster.Permanent(err), cluster.ErrAuthentication) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ping = %v, want a permanent ErrAuthentication containing %q", err, tt.want)
			}
		})
	}
}

// The broker ends a session at its token's expiry (KIP-368): the
// service's clients re-authenticate with the token they have then; a
// client that does not has its connection closed at its first request
// after (a raw connection here: kgo always re-authenticates).
func TestOAuthSessionExpires(t *testing.T) {
	const lifetime = time.Second
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.OAuthBearer(func(string, map[string]string) (string, time.Time, error) {
		return "aggregator", time.Now().Add(lifetime), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	file := filepath.Join(t.TempDir(), "token")
	writeFile(t, file, []byte("tok"))
	access, err := cluster.NewAccess(config.Source{Brokers: kc.ListenAddrs(), SASL: config.SASL{Mechanism: config.MechanismOAuthBearer,
		OAuth: config.OAuth{TokenFile: file}}}, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(access.ClientOpts(zerolog.Nop(), "test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	conn, err := net.Dial("tcp", kc.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := rawConn{t: t, conn: conn}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "OAUTHBEARER"
	raw.request(hs)
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.Version, auth.SASLAuthBytes = 1, []byte("n,,\x01auth=Bearer tok\x01\x01")
	if resp := raw.request(auth).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != 0 || resp.SessionLifetimeMillis <= 0 {
		t.Fatalf("SaslAuthenticate = error %d, lifetime %dms; want success with a lifetime", resp.ErrorCode, resp.SessionLifetimeMillis)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	raw.request(md)
	broker := cl.Broker(0)
	if _, err := broker.Request(t.Context(), kmsg.NewPtrMetadataRequest()); err != nil {
		t.Fatalf("the client's metadata = %v", err)
	}

	time.Sleep(lifetime + 100*time.Millisecond) // the sessions' real deadline passes
	if _, err := broker.Request(t.Context(), kmsg.NewPtrMetadataRequest()); err != nil {
		t.Errorf("the client's metadata after the expiry = %v, want nil (re-authenticated)", err)
	}
	if err := raw.send(md); err == nil {
		if _, err := raw.read(md); err == nil {
			t.Errorf("metadata on the raw connection after the expiry was answered, want the connection closed")
		}
	}
}

// rawConn speaks the Kafka protocol on a connection, one request at a time.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	corr int32
}

func (r *rawConn) send(req kmsg.Request) error {
	r.corr++
	buf := binary.BigEndian.AppendUint32(nil, 0)
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.Key()))
	buf = binary.BigEndian.AppendUint16(buf, uint16(req.GetVersion()))
	buf = binary.BigEndian.AppendUint32(buf, uint32(r.corr))
	buf = binary.BigEndian.AppendUint16(buf, 4)
	buf = append(buf, "test"...)
	buf = req.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_, err := r.conn.Write(buf)
	return err
}

func (r *rawConn) read(req kmsg.Request) (kmsg.Response, error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(r.conn, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r.conn, body); err != nil {
		return nil, err
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	return resp, resp.ReadFrom(body[4:]) // after the correlation ID
}

func (r *rawConn) request(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	if err := r.send(req); err != nil {
		r.t.Fatalf("send %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	resp, err := r.read(req)
	if err != nil {
		r.t.Fatalf("read %s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// A request to the endpoint that hangs holds up neither Unavailable (the
// readiness probe asks it) nor a caller while a valid token is cached.
func TestTokenEndpointHangingRequestBlocksNothing(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 2 {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"tok","token_type":"Bearer","expires_in":100}`)
	}))
	defer srv.Close()
	defer close(release)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	writePEM(t, ca, "CERTIFICATE", srv.Certificate().Raw)
	clk := &clock{now: time.Now()}
	e, err := cluster.NewTokenEndpoint(config.OAuth{TokenEndpoint: srv.URL, ClientID: "c", ClientSecret: "s", CAFile: ca}, zerolog.Nop(), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Token(t.Context()); err != nil {
		t.Fatal(err)
	}
	clk.Add(90 * time.Second) // due for refresh
	go func() { _, _ = e.Token(t.Context()) }()
	<-entered
	if err := e.Unavailable(); err != nil {
		t.Errorf("Unavailable() during a refresh = %v, want nil", err)
	}
}
