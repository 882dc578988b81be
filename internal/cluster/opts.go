package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"aggregator/internal/config"
)

// ClientID is what the brokers see in their request logs and quotas.
const ClientID = "aggregator"

// Access is how the service's clients reach and authenticate to the
// brokers: TLS with the files of source.tls read again when they change,
// SASL with credentials that refresh, and the client's rack. One per
// process, shared by its clients, so that they share one cached OAuth
// token. Safe for concurrent use.
type Access struct {
	src      config.Source
	certs    *Certs         // nil without TLS
	mech     sasl.Mechanism // nil without SASL
	endpoint *TokenEndpoint // OAUTHBEARER with a token endpoint, else nil
}

// NewAccess reads src's TLS files and prepares its SASL mechanism; a file
// that cannot be read is an error that names its key. It asks nothing of
// the network. reg (nil for none) gets aggregator_tls_reload_failures_total.
func NewAccess(src config.Source, log zerolog.Logger, reg prometheus.Registerer) (*Access, error) {
	a := &Access{src: src}
	var err error
	if src.TLS.Enabled {
		if a.certs, err = NewCerts("source.tls", src.TLS, log, ReloadFailures(reg)); err != nil {
			return nil, err
		}
	}
	switch src.SASL.Mechanism {
	case "":
	case config.MechanismOAuthBearer:
		if src.SASL.OAuth.TokenEndpoint != "" {
			if a.endpoint, err = NewTokenEndpoint(src.SASL.OAuth, log, time.Now); err != nil {
				return nil, err
			}
		} else if _, err := readToken(src.SASL.OAuth.TokenFile); err != nil {
			return nil, err
		}
		a.mech = oauthMechanism(src.SASL.OAuth, a.endpoint)
	case config.MechanismAWSMSKIAM:
		if a.mech, err = NewMSKIAM(src.SASL.AWS.Region); err != nil {
			return nil, err
		}
	default:
		if a.mech, err = SASLMechanism(src.SASL); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// ClientOpts returns the kgo options every client of the service shares:
// seed brokers, client ID, rack, TLS and SASL, and a Logger tagged with
// component (kafka_consumer, kafka_producer, ...). Callers append their
// own options (group, topics, transactions) and then any extra ones.
func (a *Access) ClientOpts(log zerolog.Logger, component string) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(a.src.Brokers...),
		kgo.ClientID(ClientID),
		kgo.WithLogger(NewLogger(log, component)),
	}
	if a.src.Rack != "" {
		opts = append(opts, kgo.Rack(a.src.Rack))
	}
	if a.certs != nil {
		opts = append(opts, kgo.DialTLSConfig(a.certs.Config()))
	}
	if a.mech != nil {
		opts = append(opts, kgo.SASL(a.mech))
	}
	return opts
}

// Unavailable returns why the service has no valid credentials now (the
// OAuth token expired and its endpoint fails), or nil: the service is not
// ready meanwhile.
func (a *Access) Unavailable() error {
	if a.endpoint == nil {
		return nil
	}
	return a.endpoint.Unavailable()
}

// ClientOpts is NewAccess(src, log, nil).ClientOpts(log, component), for
// the commands that make one client and exit.
func ClientOpts(src config.Source, log zerolog.Logger, component string) ([]kgo.Opt, error) {
	a, err := NewAccess(src, log, nil)
	if err != nil {
		return nil, err
	}
	return a.ClientOpts(log, component), nil
}

// SASLMechanism returns the PLAIN or SCRAM mechanism c names. The password
// is read from c.PasswordFile on every new connection when that is set
// (Password then holds its content at start), so a rotated Kubernetes
// Secret is picked up without a restart; else it is c.Password. The file
// is also read once here, so a missing file fails at start.
func SASLMechanism(c config.SASL) (sasl.Mechanism, error) {
	password := func() (string, error) { return c.Password, nil }
	if c.PasswordFile != "" { // config.Parse also put its content in Password, as it was at start
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
	return nil, fmt.Errorf("source.sasl.mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 here (OAUTHBEARER and AWS_MSK_IAM: NewAccess)", c.Mechanism)
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
