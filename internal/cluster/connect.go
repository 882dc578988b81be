package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"aggregator/internal/config"
)

// ErrAuthentication is wrapped by the error of a connection that the
// brokers refused for its SASL credentials. Retrying cannot fix it: main
// exits 1 with the message.
var ErrAuthentication = errors.New("authentication failed")

// ErrAuthorization is wrapped by the error of a request that the brokers'
// ACLs deny; the error names the topic, group or transactional ID.
// Retrying cannot fix it: main exits 1 with the message.
var ErrAuthorization = errors.New("not authorized")

// ErrTLSVerification is wrapped by the error of a connection whose TLS
// handshake failed to verify the brokers' certificate. Retrying cannot fix
// it: main exits 1 with the message.
var ErrTLSVerification = errors.New("TLS verification failed")

// Backoff bounds: the first retry waits firstBackoff, each next one twice
// as long, up to maxBackoff.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 15 * time.Second
)

// Backoff is the wait before retry n (from 0): capped exponential.
func Backoff(n int) time.Duration {
	if n >= 16 {
		return maxBackoff
	}
	return min(firstBackoff<<n, maxBackoff)
}

// AttemptTimeout bounds one attempt of Retry: a broker that accepts
// connections but never answers costs this much per attempt.
const AttemptTimeout = 10 * time.Second

// Retry calls attempt until it returns nil, an error that retrying cannot
// fix (see Permanent), or ctx ends (then it returns ctx's error). Each
// attempt gets AttemptTimeout and, if watch is not nil, ends at once when
// watch sees the brokers refuse the credentials. Between attempts it
// waits Backoff and logs one warn line with the cause. what names the
// step in the log ("connect").
func Retry(ctx context.Context, log zerolog.Logger, what string, watch *AuthWatch, attempt func(context.Context) error) error {
	for n := 0; ; n++ {
		err := try(ctx, watch, attempt)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if perm := Permanent(err); perm != nil {
			return perm
		}
		wait := Backoff(n)
		log.Warn().Err(err).Int("attempt", n+1).Str("retry_in", wait.String()).Msg(what + " failed; retrying")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func try(ctx context.Context, watch *AuthWatch, attempt func(context.Context) error) error {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if watch != nil {
		watch.arm(cancel)
		defer watch.arm(nil)
		if err := watch.Err(); err != nil {
			return err
		}
	}
	tctx, tcancel := context.WithTimeout(actx, AttemptTimeout)
	defer tcancel()
	err := attempt(tctx)
	if cause := context.Cause(actx); errors.Is(cause, ErrAuthentication) {
		return cause
	}
	return err
}

// Permanent returns err, said plainly, if retrying cannot fix it: the
// brokers refused the credentials (SASL) or the certificate (TLS), an ACL
// denies a request, or the topics are not what the config needs (missing,
// not permitted, a changelog that cannot hold the state). It returns nil
// for everything else: brokers unreachable, not answering, moving.
func Permanent(err error) error {
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrAuthentication), errors.Is(err, ErrAuthorization), errors.Is(err, ErrTLSVerification),
		errors.Is(err, ErrTopicsMissing), errors.Is(err, ErrTopicsNotPermitted), errors.Is(err, ErrChangelogMismatch),
		errors.Is(err, ErrUnsupported), errors.Is(err, config.ErrInvalid):
		return err
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism),
		errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("%w (SASL): check source.sasl.mechanism and its credentials (username and password, the OAuth token and extensions, or the AWS role): %w", ErrAuthentication, err)
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return fmt.Errorf("%w: the brokers' certificate does not verify against source.tls.ca_file (or the system roots) for the names in source.brokers: %w", ErrTLSVerification, err)
	case errors.Is(err, kerr.GroupAuthorizationFailed), errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("%w (ACL): %w", ErrAuthorization, err)
	}
	return nil
}

// An AuthWatch is a kgo hook that notices brokers refusing the SASL
// credentials by closing the connection in answer to SaslAuthenticate,
// which is how a broker without KIP-152 error codes (and kfake) says it:
// the client sees only EOF and would retry for ever. Twice in a row with
// no success between is a refusal; one could be a broker going down. Safe
// for concurrent use.
type AuthWatch struct {
	mu      sync.Mutex
	closed  int // SaslAuthenticate answered by a closed connection, in a row
	err     error
	cancel  context.CancelCauseFunc // of the attempt under way, if any
	mechSet bool
}

var _ kgo.HookBrokerE2E = (*AuthWatch)(nil)

// NewAuthWatch returns a watch for clients that authenticate with src's
// SASL settings; it never fires without them.
func NewAuthWatch(src config.Source) *AuthWatch {
	return &AuthWatch{mechSet: src.SASL.Mechanism != ""}
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (w *AuthWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if !w.mechSet || key != kmsg.SASLAuthenticate.Int16() || e2e.WriteErr != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch err := e2e.ReadErr; {
	case err == nil:
		w.closed = 0
		return
	case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		return
	}
	w.closed++
	if w.closed < 2 || w.err != nil {
		return
	}
	w.err = fmt.Errorf("%w (SASL): the brokers closed the connection in answer to the credentials: check source.sasl.mechanism and its credentials (username and password, the OAuth token and extensions, or the AWS role)", ErrAuthentication)
	if w.cancel != nil {
		w.cancel(w.err)
	}
}

// Err returns the refusal the watch saw, or nil.
func (w *AuthWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// arm makes a refusal cancel the attempt under way (nil: none).
func (w *AuthWatch) arm(cancel context.CancelCauseFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel = cancel
}

// A Reachability is a kgo hook that tells whether the brokers answer: it
// is Down once every request and dial for downFor has failed since the
// last answer. Requests that time out on the client (a broker that
// accepts connections and never answers) count as failed. Safe for
// concurrent use.
type Reachability struct {
	mu         sync.Mutex
	now        func() time.Time
	lastAnswer time.Time
	failing    bool // a request or dial failed since lastAnswer
}

var (
	_ kgo.HookBrokerE2E     = (*Reachability)(nil)
	_ kgo.HookBrokerConnect = (*Reachability)(nil)
)

// downFor is how long the brokers must fail every request before they
// count as lost: longer than a fetch waits for records (kgo's FetchMaxWait
// is 5s), so that a quiet topic never looks like an outage.
const downFor = 10 * time.Second

// NewReachability returns a Reachability reading the clock now; the
// brokers count as answering until the first failure.
func NewReachability(now func() time.Time) *Reachability {
	return &Reachability{now: now, lastAnswer: now()}
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (r *Reachability) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	r.note(e2e.Err())
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (r *Reachability) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		r.note(err)
	}
}

func (r *Reachability) note(err error) {
	if errors.Is(err, context.Canceled) {
		return // our own doing
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.lastAnswer, r.failing = r.now(), false
		return
	}
	r.failing = true
}

// Down reports whether the brokers have not answered for downFor, with
// failures since.
func (r *Reachability) Down() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failing && r.now().Sub(r.lastAnswer) >= downFor
}

// Transient reports whether err says the brokers could not be reached or
// did not answer in time (or answered with a retriable error), or that
// the service's credentials are unavailable for now
// (ErrCredentialsUnavailable): trying again later may succeed.
//
// A connection the broker closed at its first read (kgo's
// ErrFirstReadEOF, which guesses a TLS or SASL mismatch) is transient
// too: the service asks this only once it has connected with the same
// settings (a mismatch fails the start, and AuthWatch notices refused
// credentials), so it is a broker going down mid-handshake (as in
// TestChaos at_least_once seed 16: a restore's end offsets asked as the
// broker was killed ended the process).
func Transient(err error) bool {
	var op *net.OpError
	var firstRead *kgo.ErrFirstReadEOF
	switch {
	case err == nil || Permanent(err) != nil:
		return false
	case errors.As(err, &op), errors.Is(err, context.DeadlineExceeded), kgo.IsRetryableBrokerErr(err),
		kerr.IsRetriable(err), errors.As(err, &firstRead), errors.Is(err, ErrCredentialsUnavailable):
		return true
	}
	return false
}
