package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"aggregator/internal/cluster/oauthtest"
	"aggregator/internal/config"
)

// The ways the service authenticates to the brokers, each set up on a
// kfake cluster: the dimension "auth" of the combination tests, and the
// connect tests.

// Authentication kinds of authSetup.
const (
	authNone   = "none"
	authSCRAM  = "scram"
	authOAuth  = "oauth" // OAUTHBEARER from a client-credentials token endpoint, with an extension
	authMutual = "mtls"
)

// authKinds are the kinds authSetup knows.
var authKinds = []string{authNone, authSCRAM, authOAuth, authMutual}

// An auth is one way to authenticate, set up: the cluster's options, the
// options of a test client (to produce and read: the same TLS, and the
// SCRAM superuser test/test), and what the service's config gets.
type auth struct {
	broker []kfake.Opt
	client []kgo.Opt
	source func(*config.Source) // sets source.tls and source.sasl
	idp    *oauthtest.Endpoint  // the token endpoint of authOAuth
	pki    *pki                 // the certificates of authMutual
}

// authSetup sets up kind on a cluster to be made with its broker options:
//
//	a := authSetup(t, kind)
//	kc, _ := kfake.NewCluster(append(opts, a.broker...)...)
//	a.source(&cfg.Source); produceAs(t, brokers, a.client, ...)
func authSetup(t testing.TB, kind string) auth {
	t.Helper()
	testUser := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "test", "test")}
	testClient := []kgo.Opt{kgo.SASL(scram.Auth{User: "test", Pass: "test"}.AsSha256Mechanism())}
	switch kind {
	case authNone:
		return auth{source: func(*config.Source) {}}
	case authSCRAM:
		return auth{
			broker: append(testUser, kfake.Superuser("SCRAM-SHA-512", "aggregator", "aggregator-pw")),
			client: testClient,
			source: func(s *config.Source) {
				s.SASL = config.SASL{Mechanism: config.MechanismScram512, Username: "aggregator", Password: "aggregator-pw"}
			},
		}
	case authOAuth:
		p := oauthtest.New(t, time.Hour)
		return auth{
			broker: append(testUser, kfake.OAuthBearer(p.Validate)),
			client: testClient,
			source: func(s *config.Source) {
				s.SASL = config.SASL{Mechanism: config.MechanismOAuthBearer, OAuth: p.OAuth()}
			},
			idp: p,
		}
	case authMutual:
		p := newPKI(t, time.Hour)
		return auth{
			broker: []kfake.Opt{kfake.TLS(p.brokerTLS())},
			client: []kgo.Opt{kgo.DialTLSConfig(p.clientTLS())},
			source: func(s *config.Source) { s.TLS = p.sourceTLS() },
			pki:    p,
		}
	}
	t.Fatalf("authSetup: unknown kind %q (want one of %v)", kind, authKinds)
	return auth{}
}

// pki is a CA with a broker certificate and a client certificate, all
// valid for lifetime, the client's as PEM files; the broker trusts the
// client certificates of every CA added to trusted.
type pki struct {
	dir                       string
	caFile, certFile, keyFile string
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	server                    atomic.Pointer[tls.Certificate]
	trusted                   *x509.CertPool
	testClient                tls.Certificate // the test clients': long-lived
}

func newPKI(t testing.TB, lifetime time.Duration) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), trusted: x509.NewCertPool()}
	p.caFile, p.certFile, p.keyFile = filepath.Join(p.dir, "ca.pem"), filepath.Join(p.dir, "client.pem"), filepath.Join(p.dir, "client-key.pem")
	p.ca, p.caKey = newCA(t, "CA 1", lifetime)
	writePEMFile(t, p.caFile, p.ca.Raw)
	p.trusted.AddCert(p.ca)
	server := leafCert(t, p.ca, p.caKey, x509.ExtKeyUsageServerAuth, lifetime)
	p.server.Store(&server)
	client := leafCert(t, p.ca, p.caKey, x509.ExtKeyUsageClientAuth, lifetime)
	writeKeyPair(t, p.certFile, p.keyFile, client)
	p.testClient = leafCert(t, p.ca, p.caKey, x509.ExtKeyUsageClientAuth, time.Hour)
	return p
}

// brokerTLS is the brokers' config: the current server certificate, and
// client certificates of the trusted CAs required.
func (p *pki) brokerTLS() *tls.Config {
	return &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.server.Load(), nil },
		ClientCAs:      p.trusted,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		MinVersion:     tls.VersionTLS12,
	}
}

// clientTLS is a test client's config (it does not check the brokers).
func (p *pki) clientTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.testClient}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // a test client
}

func (p *pki) sourceTLS() config.TLS {
	return config.TLS{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}
}

func newCA(t testing.TB, name string, lifetime time.Duration) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newECKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(lifetime),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

// leafCert is a certificate of ca for 127.0.0.1 and localhost.
func leafCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage, lifetime time.Duration) tls.Certificate {
	t.Helper()
	key := newECKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func newECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEMFile writes the certificates ders to path, as a bundle.
func writePEMFile(t testing.TB, path string, ders ...[]byte) {
	t.Helper()
	var out []byte
	for _, der := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	writeFileAtomic(t, path, out)
}

// writeKeyPair writes a certificate and its key as PEM files.
func writeKeyPair(t testing.TB, certFile, keyFile string, c tls.Certificate) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	writePEMFile(t, certFile, c.Certificate[0])
}

// writeFileAtomic replaces path by a renamed file, as Kubernetes updates
// a mounted Secret.
func writeFileAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
