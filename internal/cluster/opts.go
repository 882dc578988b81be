package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"aggregator/internal/config"
)

// ClientID is what the brokers see in their request logs and quotas.
const ClientID = "aggregator"

// ClientOpts returns the kgo options every client of the service shares:
// seed brokers, client ID, TLS and SASL from src, and a Logger tagged with
// component (kafka_consumer, kafka_producer, ...). Callers append their
// own options (group, topics, transactions) and then any extra ones.
func ClientOpts(src config.Source, log zerolog.Logger, component string) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(src.Brokers...),
		kgo.ClientID(ClientID),
		kgo.WithLogger(NewLogger(log, component)),
	}
	if src.TLS.Enabled {
		tc, err := TLSConfig(src.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if src.SASL.Mechanism != "" {
		mech, err := SASLMechanism(src.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// TLSConfig builds a client TLS config from PEM files: CAFile replaces the
// system roots when set, and CertFile with KeyFile enable mutual TLS.
func TLSConfig(c config.TLS) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // opt-in by config, for test clusters
	}
	if c.CAFile != "" {
		pool, err := loadCAs(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("source.tls.cert_file %q, key_file %q: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func loadCAs(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("source.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("source.tls.ca_file %q: no PEM certificate found", path)
	}
	return pool, nil
}

// SASLMechanism returns the SASL mechanism c names. The password is read
// from c.Password, or else from c.PasswordFile on every new connection, so
// a rotated Kubernetes Secret is picked up without a restart. The file is
// also read once here, so a missing file fails at start.
func SASLMechanism(c config.SASL) (sasl.Mechanism, error) {
	password := func() (string, error) { return c.Password, nil }
	if c.Password == "" && c.PasswordFile != "" {
		password = func() (string, error) { return readPassword(c.PasswordFile) }
	}
	if _, err := password(); err != nil {
		return nil, err
	}
	switch strings.ToUpper(c.Mechanism) {
	case "PLAIN":
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := password()
			return plain.Auth{User: c.Username, Pass: pass}, err
		}), nil
	case "SCRAM-SHA-256":
		return scram.Sha256(scramAuth(c.Username, password)), nil
	case "SCRAM-SHA-512":
		return scram.Sha512(scramAuth(c.Username, password)), nil
	}
	// config.Load rejects other values; this guards callers that build a Config in code.
	return nil, fmt.Errorf("source.sasl.mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Mechanism)
}

func scramAuth(user string, password func() (string, error)) func(context.Context) (scram.Auth, error) {
	return func(context.Context) (scram.Auth, error) {
		pass, err := password()
		return scram.Auth{User: user, Pass: pass}, err
	}
}

// readPassword reads a password file, dropping the trailing newline that
// editors and `echo` add. Errors name the file, never its content.
func readPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("source.sasl.password_file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
