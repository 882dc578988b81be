package cluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"aggregator/internal/config"
)

// Certs is a TLS client's PEM files (CA, certificate and key), read again
// at every handshake: a new connection uses the certificate and CA the
// files hold now, so a renewal (cert-manager, a rotated Secret) needs no
// restart. Files that become unreadable or invalid (a half-written
// renewal) keep the last good ones in use; the first such read logs an
// error and counts in aggregator_tls_reload_failures_total. Safe for
// concurrent use.
type Certs struct {
	key                       string // the config key of the files, for messages
	caFile, certFile, keyFile string
	insecure                  bool
	log                       zerolog.Logger
	failures                  prometheus.Counter

	mu     sync.Mutex
	pem    [3][]byte // the contents in use: CA, certificate, key
	pool   *x509.CertPool
	cert   *tls.Certificate
	failed string // the last failed read's error, logged once; "" after a good one
}

// NewCerts reads c's files (key names them in errors: source.tls or
// source.schema_registry.tls); a file that cannot be read or parsed now
// is an error. failures counts the failed reads that come later
// (ReloadFailures makes it).
func NewCerts(key string, c config.TLS, log zerolog.Logger, failures prometheus.Counter) (*Certs, error) {
	cs := &Certs{key: key, caFile: c.CAFile, certFile: c.CertFile, keyFile: c.KeyFile, insecure: c.InsecureSkipVerify,
		log: log, failures: failures}
	pem, err := cs.readFiles()
	if err != nil {
		return nil, err
	}
	if cs.pool, cs.cert, err = cs.parse(pem); err != nil {
		return nil, err
	}
	cs.pem = pem
	return cs, nil
}

// ReloadFailures returns the counter of failed certificate reloads
// registered on reg, or the one already there: the brokers' and the
// schema registry's certificates count in one.
func ReloadFailures(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aggregator_tls_reload_failures_total",
		Help: "Reads of changed TLS files (source.tls.*, source.schema_registry.tls.*) that failed: unreadable or invalid; the last good certificate and CA stay in use.",
	})
	if reg == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); errors.As(err, &are) {
		return are.ExistingCollector.(prometheus.Counter)
	}
	return c
}

// Config returns a client TLS config that takes the certificate and the
// CA from the files at each handshake. With a CA file, the brokers'
// chain is verified against it (for the name dialed) in VerifyConnection,
// as crypto/tls would against RootCAs; without one, against the system
// roots.
func (c *Certs) Config() *tls.Config {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.certFile != "" {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			_, cert := c.current()
			return cert, nil
		}
	}
	switch {
	case c.insecure:
		tc.InsecureSkipVerify = true //nolint:gosec // opt-in by config, for test clusters
	case c.caFile != "":
		tc.InsecureSkipVerify = true //nolint:gosec // verified in VerifyConnection, against the CA file read now
		tc.VerifyConnection = c.verify
	}
	return tc
}

// verify checks the peer's chain against the current CA for the server
// name, with the same errors crypto/tls returns.
func (c *Certs) verify(cs tls.ConnectionState) error {
	pool, _ := c.current()
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: pool, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
	for _, inter := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(inter)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// current reads the files again and returns the CA pool and certificate
// to use: the files' if they changed and are valid, else the last good.
// The files are read without the lock.
func (c *Certs) current() (*x509.CertPool, *tls.Certificate) {
	pem, readErr := c.readFiles()
	c.mu.Lock()
	defer c.mu.Unlock()
	if readErr == nil && equal(pem, c.pem) {
		c.failed = ""
		return c.pool, c.cert
	}
	err := readErr
	var pool *x509.CertPool
	var cert *tls.Certificate
	if err == nil {
		pool, cert, err = c.parse(pem)
	}
	if err != nil {
		if msg := err.Error(); msg != c.failed {
			c.failed = msg
			c.failures.Inc()
			c.log.Error().Err(err).Str("config", c.key).Msg("cannot reload the TLS files; the last good certificate and CA stay in use")
		}
		return c.pool, c.cert
	}
	c.pem, c.pool, c.cert, c.failed = pem, pool, cert, ""
	c.log.Info().Str("config", c.key).Msg("TLS files changed: new connections use the new certificate and CA")
	return c.pool, c.cert
}

// readFiles reads the files: the CA, the certificate and the key.
func (c *Certs) readFiles() (pem [3][]byte, err error) {
	for i, path := range []string{c.caFile, c.certFile, c.keyFile} {
		if path == "" {
			continue
		}
		if pem[i], err = os.ReadFile(path); err != nil {
			return pem, fmt.Errorf("%s: %w", c.key, err)
		}
	}
	return pem, nil
}

// parse makes the CA pool and the certificate of the files' contents.
func (c *Certs) parse(pem [3][]byte) (pool *x509.CertPool, cert *tls.Certificate, err error) {
	if c.caFile != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem[0]) {
			return nil, nil, fmt.Errorf("%s.ca_file %q: no PEM certificate found", c.key, c.caFile)
		}
	}
	if c.certFile != "" {
		kp, err := tls.X509KeyPair(pem[1], pem[2])
		if err != nil {
			return nil, nil, fmt.Errorf("%s.cert_file %q, key_file %q: %w", c.key, c.certFile, c.keyFile, err)
		}
		cert = &kp
	}
	return pool, cert, nil
}

// equal reports whether two sets of file contents are the same.
func equal(a, b [3][]byte) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}
