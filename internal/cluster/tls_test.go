package cluster_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
)

// pki is a throwaway CA with one server and one client certificate, as PEM
// files in a temp dir.
type pki struct {
	caFile, certFile, keyFile string // the client's
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newPKI(t *testing.T) pki { return newPKIFor(t, "test CA") }

// newPKIFor makes a pki whose CA is named caName.
func newPKIFor(t *testing.T, caName string) pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: caName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create CA: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("parse CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p := pki{pool: pool, caFile: filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "client.pem"), keyFile: filepath.Join(dir, "client-key.pem")}
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	clientDER, clientKey := leaf(t, ca, caKey, 2, x509.ExtKeyUsageClientAuth)
	writePEM(t, p.certFile, "CERTIFICATE", clientDER)
	writePEM(t, p.keyFile, "PRIVATE KEY", marshalKey(t, clientKey))

	serverDER, serverKey := leaf(t, ca, caKey, 3, x509.ExtKeyUsageServerAuth)
	p.server = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}
	return p
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create leaf: %v", err)
	}
	return der, key
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

func marshalKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	return der
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func TestCertsConfig(t *testing.T) {
	p := newPKI(t)
	tests := map[string]struct {
		tls                    config.TLS
		clientCert, verifyConn bool
	}{
		"CA and client cert": {config.TLS{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}, true, true},
		"system roots":       {config.TLS{Enabled: true}, false, false},
		"insecure":           {config.TLS{Enabled: true, CAFile: p.caFile, InsecureSkipVerify: true}, false, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			certs, err := cluster.NewCerts("source.tls", tt.tls, zerolog.Nop(), cluster.ReloadFailures(nil))
			if err != nil {
				t.Fatalf("NewCerts() = %v", err)
			}
			tc := certs.Config()
			if got := tc.GetClientCertificate != nil; got != tt.clientCert {
				t.Errorf("Config().GetClientCertificate set = %v, want %v", got, tt.clientCert)
			}
			if got := tc.VerifyConnection != nil; got != tt.verifyConn {
				t.Errorf("Config().VerifyConnection set = %v, want %v", got, tt.verifyConn)
			}
			if tc.MinVersion != tls.VersionTLS12 {
				t.Errorf("Config().MinVersion = %x, want TLS 1.2", tc.MinVersion)
			}
		})
	}
}

func TestCertsErrorsNameTheKey(t *testing.T) {
	p := newPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		tls  config.TLS
		want string
	}{
		"missing CA file": {config.TLS{CAFile: "/nonexistent/ca.pem"}, "source.tls"},
		"CA not PEM":      {config.TLS{CAFile: notPEM}, `source.tls.ca_file "` + notPEM + `": no PEM certificate found`},
		"key missing":     {config.TLS{CertFile: p.certFile}, "source.tls"},
		"key not PEM":     {config.TLS{CertFile: p.certFile, KeyFile: notPEM}, "source.tls.cert_file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := cluster.NewCerts("source.tls", tt.tls, zerolog.Nop(), cluster.ReloadFailures(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewCerts(%+v) = %v, want an error containing %q", tt.tls, err, tt.want)
			}
		})
	}
}

// TestCertsRotate renews the client certificate and the CA under a
// running process (the same Access): each new connection presents the
// certificate in the files and verifies the brokers with the CA in the
// files; a file broken mid-renewal keeps the last good ones, with one
// error line and one count.
func TestCertsRotate(t *testing.T) {
	old, renewed := newPKIFor(t, "CA 1"), newPKIFor(t, "CA 2")
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(readFile(t, old.caFile))
	clientCAs.AppendCertsFromPEM(readFile(t, renewed.caFile))
	var server atomic.Pointer[tls.Certificate]
	server.Store(&old.server)
	var presented atomic.Value // the issuer of the client certificate the broker saw last
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return server.Load(), nil },
		ClientCAs:      clientCAs,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		MinVersion:     tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			presented.Store(cs.PeerCertificates[0].Issuer.CommonName)
			return nil
		},
	}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer kc.Close()
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	access, err := cluster.NewAccess(config.Source{Brokers: kc.ListenAddrs(),
		TLS: config.TLS{Enabled: true, CAFile: old.caFile, CertFile: old.certFile, KeyFile: old.keyFile}}, zerolog.New(&logs), reg)
	if err != nil {
		t.Fatalf("NewAccess() = %v", err)
	}
	connect := func(step, wantIssuer string) {
		t.Helper()
		if err := pingOpts(t, access.ClientOpts(zerolog.Nop(), "test")); err != nil {
			t.Fatalf("%s: ping = %v, want nil", step, err)
		}
		if got := presented.Load(); got != wantIssuer {
			t.Errorf("%s: the broker saw a client certificate of %v, want %s", step, got, wantIssuer)
		}
	}
	connect("before the renewal", "CA 1")

	// The renewal: the brokers' certificate is now of CA 2, which the old
	// CA file does not know; the files get CA 2's.
	server.Store(&renewed.server)
	for _, f := range [][2]string{{renewed.caFile, old.caFile}, {renewed.certFile, old.certFile}, {renewed.keyFile, old.keyFile}} {
		writeFile(t, f[1], readFile(t, f[0]))
	}
	connect("after the renewal", "CA 2")

	writeFile(t, old.certFile, []byte("-----BEGIN CERTIFICATE-----\nhalf written"))
	connect("with a broken certificate file", "CA 2")
	connect("again with it", "CA 2")
	if got := testutil.ToFloat64(cluster.ReloadFailures(reg)); got != 1 {
		t.Errorf("aggregator_tls_reload_failures_total = %v, want 1", got)
	}
	if n := strings.Count(logs.String(), `"level":"error"`); n != 1 || !strings.Contains(logs.String(), "source.tls.cert_file") {
		t.Errorf("logs = %s, want one error line naming source.tls.cert_file", logs.String())
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClientOptsMutualTLS connects to a kfake broker that demands a client
// certificate signed by the CA.
func TestClientOptsMutualTLS(t *testing.T) {
	p := newPKI(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer kc.Close()

	tests := map[string]struct {
		tls    config.TLS
		wantOK bool
	}{
		"CA and client cert": {config.TLS{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}, true},
		"no client cert":     {config.TLS{Enabled: true, CAFile: p.caFile}, false},
		"system roots":       {config.TLS{Enabled: true, CertFile: p.certFile, KeyFile: p.keyFile}, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := ping(t, config.Source{Brokers: kc.ListenAddrs(), TLS: tt.tls})
			if (err == nil) != tt.wantOK {
				t.Errorf("Ping with %s = %v, want success %v", name, err, tt.wantOK)
			}
		})
	}
}

// ping connects a client built from src and pings the cluster, with a
// bounded wait so a failing handshake does not retry for long.
func ping(t *testing.T, src config.Source, extra ...kgo.Opt) error {
	t.Helper()
	opts, err := cluster.ClientOpts(src, zerolog.Nop(), "test")
	if err != nil {
		t.Fatalf("ClientOpts() = %v", err)
	}
	return pingOpts(t, opts, extra...)
}

// pingOpts pings with a new client of opts (a new connection).
func pingOpts(t *testing.T, opts []kgo.Opt, extra ...kgo.Opt) error {
	t.Helper()
	cl, err := kgo.NewClient(append(opts, append([]kgo.Opt{kgo.RequestRetries(0), kgo.RetryTimeout(2 * time.Second)}, extra...)...)...)
	if err != nil {
		t.Fatalf("NewClient() = %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

// A broker certificate that does not verify is an error that retrying
// cannot fix, said as such.
func TestTLSVerificationIsPermanent(t *testing.T) {
	p := newPKI(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{p.server},
		MinVersion:   tls.VersionTLS12,
	}))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer kc.Close()
	err = ping(t, config.Source{Brokers: kc.ListenAddrs(), TLS: config.TLS{Enabled: true}}) // system roots: not the test CA
	if perm := cluster.Permanent(err); !errors.Is(perm, cluster.ErrTLSVerification) {
		t.Errorf("Permanent(%v) = %v, want ErrTLSVerification", err, perm)
	}
	if err := ping(t, config.Source{Brokers: kc.ListenAddrs(), TLS: config.TLS{Enabled: true, CAFile: p.caFile}}); err != nil {
		t.Errorf("ping with the CA = %v, want nil", err)
	}
}
