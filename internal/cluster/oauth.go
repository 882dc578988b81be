package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"aggregator/internal/config"
)

// ErrCredentialsUnavailable is wrapped by the error of a connection that
// could not authenticate because the service has no valid credentials
// now: the OAuth token endpoint fails and the last token expired, the
// token file cannot be read, or the AWS credential chain fails. It heals
// by itself when they come back (Transient reports true): the service is
// not ready meanwhile.
var ErrCredentialsUnavailable = errors.New("credentials unavailable")

// refreshAt is the share of a token's lifetime after which it is fetched
// again: early enough that a slow or briefly failing endpoint leaves time
// to retry before the token expires.
const refreshAt = 0.8

// unknownLifetime is how long a token without expires_in is used before
// it is fetched again.
const unknownLifetime = time.Minute

// oauthMechanism is OAUTHBEARER with o's token source and extensions. The
// callback is called for every new connection and re-authentication
// (KIP-368): it reads the token file, or hands back the endpoint's cached
// token, refreshed when due.
func oauthMechanism(o config.OAuth, endpoint *TokenEndpoint) sasl.Mechanism {
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		var tok string
		var err error
		if endpoint != nil {
			tok, err = endpoint.Token(ctx)
		} else {
			tok, err = readToken(o.TokenFile)
		}
		return oauth.Auth{Token: tok, Extensions: o.Extensions}, err
	})
}

// readToken reads a token file (a projected service-account token, a
// sidecar's output) as it is now, without surrounding white space.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: source.sasl.oauth.token_file: %w", ErrCredentialsUnavailable, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: source.sasl.oauth.token_file %q is empty", ErrCredentialsUnavailable, path)
	}
	return tok, nil
}

// A TokenEndpoint gets OAUTHBEARER tokens with the OAuth 2.0
// client-credentials grant (golang.org/x/oauth2/clientcredentials) and
// caches them: a token is fetched again after refreshAt of its lifetime.
// While the endpoint fails, the last token is used until it expires, and
// the endpoint is tried again with capped exponential backoff (never
// slower than a quarter of the token's lifetime). Once the token expired
// with the endpoint failing, Unavailable says why (/readyz answers 503)
// and an error line names the endpoint and its HTTP status; the next
// token fetched ends it. Safe for concurrent use.
type TokenEndpoint struct {
	grant      clientcredentials.Config // its ClientSecret is set under fetching
	secretFile string
	client     *http.Client
	now        func() time.Time
	log        zerolog.Logger

	// fetching is held across a request to the endpoint, and only there:
	// callers that need a new token at once wait for one request. It is
	// taken before mu, never the other way.
	fetching sync.Mutex

	mu       sync.Mutex // the token and the endpoint's state; never held across I/O
	token    string
	obtained time.Time
	expires  time.Time
	failures int       // fetches failed in a row
	retryAt  time.Time // no fetch before this after a failure
	err      error     // the last fetch's error, nil after a success
	down     bool      // no valid token and the endpoint fails: logged at error
}

// NewTokenEndpoint returns the token source of o (token_endpoint set); it
// does no I/O. now is the clock that ages tokens.
func NewTokenEndpoint(o config.OAuth, log zerolog.Logger, now func() time.Time) (*TokenEndpoint, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("source.sasl.oauth.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("source.sasl.oauth.ca_file %q: no PEM certificate found", o.CAFile)
		}
	}
	return &TokenEndpoint{
		grant: clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, TokenURL: o.TokenEndpoint,
			Scopes: strings.Fields(o.Scope)},
		secretFile: o.ClientSecretFile,
		client: &http.Client{Timeout: AttemptTimeout,
			Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}},
		now: now,
		log: log.With().Str("component", "oauth").Str("token_endpoint", o.TokenEndpoint).Logger(),
	}, nil
}

// Token returns a valid token: the cached one until it is due for
// refresh, else a new one from the endpoint, else (the endpoint failing)
// the cached one until it expires. Its error wraps
// ErrCredentialsUnavailable, or ErrAuthentication when the endpoint
// refuses the client's credentials before any token was had (a wrong
// client_id or secret: retrying cannot fix it).
func (e *TokenEndpoint) Token(ctx context.Context) (string, error) {
	if tok, done, err := e.cached(); done {
		return tok, err
	}
	e.fetching.Lock()
	defer e.fetching.Unlock()
	if tok, done, err := e.cached(); done { // another caller fetched meanwhile
		return tok, err
	}
	tok, err := e.fetch(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if err == nil {
		if e.down || e.err != nil {
			e.log.Info().Msg("the token endpoint answers again")
		}
		e.token, e.obtained, e.expires = tok.AccessToken, now, now.Add(lifetime(tok))
		e.failures, e.retryAt, e.err, e.down = 0, time.Time{}, nil, false
		return e.token, nil
	}
	wait := Backoff(e.failures)
	if e.token != "" {
		wait = min(wait, max(e.expires.Sub(e.obtained)/4, firstBackoff))
	}
	e.failures++
	e.retryAt, e.err = now.Add(wait), err
	switch {
	case e.token != "" && now.Before(e.expires):
		e.log.Warn().Err(err).Int("http_status", httpStatus(err)).Time("token_expires", e.expires).
			Msg("the token endpoint failed; the current token is used until it expires")
		return e.token, nil
	case e.token == "" && refused(err):
		return "", fmt.Errorf("%w (OAuth): the token endpoint %s refused source.sasl.oauth.client_id and the secret (HTTP %d): %w",
			ErrAuthentication, e.grant.TokenURL, httpStatus(err), err)
	}
	if !e.down {
		e.down = true
		e.log.Error().Err(err).Int("http_status", httpStatus(err)).
			Msg("no valid OAuth token: the token endpoint fails and the last token expired; not ready (/readyz 503) until it answers")
	}
	return "", e.unavailable()
}

// cached returns the token to use without asking the endpoint (done):
// the current one until it is due for refresh, or while a failed
// endpoint waits out its backoff (then, once it expired, the reason
// there is none).
func (e *TokenEndpoint) cached() (tok string, done bool, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	valid := e.token != "" && now.Before(e.expires)
	due := e.obtained.Add(time.Duration(float64(e.expires.Sub(e.obtained)) * refreshAt))
	switch {
	case valid && now.Before(due):
		return e.token, true, nil
	case now.Before(e.retryAt) && valid:
		return e.token, true, nil
	case now.Before(e.retryAt):
		return "", true, e.unavailable()
	}
	return "", false, nil
}

// fetch asks the endpoint for a new token; e.fetching is held.
func (e *TokenEndpoint) fetch(ctx context.Context) (*oauth2.Token, error) {
	if e.secretFile != "" { // read for every request: a rotated Secret is used at once
		b, err := os.ReadFile(e.secretFile)
		if err != nil {
			return nil, fmt.Errorf("source.sasl.oauth.client_secret_file: %w", err)
		}
		e.grant.ClientSecret = strings.TrimRight(string(b), "\r\n")
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, e.client), AttemptTimeout)
	defer cancel()
	return e.grant.Token(ctx)
}

// lifetime is how long tok is valid from now: expires_in, or
// unknownLifetime without it.
func lifetime(tok *oauth2.Token) time.Duration {
	switch {
	case tok.ExpiresIn > 0:
		return time.Duration(tok.ExpiresIn) * time.Second
	case !tok.Expiry.IsZero():
		return time.Until(tok.Expiry)
	}
	return unknownLifetime
}

func (e *TokenEndpoint) unavailable() error {
	return fmt.Errorf("%w: no valid OAuth token from %s (HTTP %d): %w", ErrCredentialsUnavailable, e.grant.TokenURL, httpStatus(e.err), e.err)
}

// Unavailable returns why there is no valid token now (the last one
// expired and the endpoint failed since), or nil.
func (e *TokenEndpoint) Unavailable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil || e.token != "" && e.now().Before(e.expires) {
		return nil
	}
	return e.unavailable()
}

// httpStatus is the HTTP status of a failed token request, 0 if it got no
// answer.
func httpStatus(err error) int {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		return re.Response.StatusCode
	}
	return 0
}

// refused reports whether the endpoint refused the client (RFC 6749
// section 5.2: 400 invalid_client, unauthorized_client, invalid_scope, or 401).
func refused(err error) bool {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return false
	}
	switch re.ErrorCode {
	case "invalid_client", "unauthorized_client", "invalid_scope", "invalid_grant":
		return true
	}
	return httpStatus(err) == http.StatusUnauthorized
}
