package cluster_test

import (
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
	"testing"
	"time"

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

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
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

func TestTLSConfigLoadsFiles(t *testing.T) {
	p := newPKI(t)
	tc, err := cluster.TLSConfig(config.TLS{Enabled: true, CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatalf("TLSConfig() = %v", err)
	}
	if len(tc.Certificates) != 1 {
		t.Errorf("TLSConfig().Certificates = %d, want 1", len(tc.Certificates))
	}
	if tc.RootCAs == nil || !tc.RootCAs.Equal(p.pool) {
		t.Errorf("TLSConfig().RootCAs is not the CA from %s", p.caFile)
	}
	if tc.MinVersion != tls.VersionTLS12 || tc.InsecureSkipVerify {
		t.Errorf("TLSConfig() = MinVersion %x, InsecureSkipVerify %v; want TLS 1.2, false", tc.MinVersion, tc.InsecureSkipVerify)
	}
}

func TestTLSConfigErrorsNameTheKey(t *testing.T) {
	p := newPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		tls  config.TLS
		want string
	}{
		"missing CA file": {config.TLS{CAFile: "/nonexistent/ca.pem"}, "source.tls.ca_file"},
		"CA not PEM":      {config.TLS{CAFile: notPEM}, `source.tls.ca_file "` + notPEM + `": no PEM certificate found`},
		"key missing":     {config.TLS{CertFile: p.certFile}, "source.tls.cert_file"},
		"key not PEM":     {config.TLS{CertFile: p.certFile, KeyFile: notPEM}, "source.tls.cert_file"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := cluster.TLSConfig(tt.tls)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("TLSConfig(%+v) = %v, want an error containing %q", tt.tls, err, tt.want)
			}
		})
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
