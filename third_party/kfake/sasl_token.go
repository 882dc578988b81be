package kfake

// aggregator patch: OAUTHBEARER (RFC 7628) and AWS_MSK_IAM (Amazon MSK's
// IAM access control), with the session lifetime of KIP-368 enforced.
// See PATCHES.md.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	saslOAuthBearer = "OAUTHBEARER"
	saslMSKIAM      = "AWS_MSK_IAM"
)

// OAuthValidator checks an OAUTHBEARER token and the SASL extensions sent
// with it, as a broker's validator callback does: it returns the
// principal and when the token expires, or why it is refused.
type OAuthValidator func(token string, extensions map[string]string) (principal string, expires time.Time, err error)

// OAuthBearer enables SASL with the OAUTHBEARER mechanism, validating
// tokens with validate. A refused token is answered with RFC 7628's error
// challenge, then SASL_AUTHENTICATION_FAILED with validate's error as the
// message. A session lives until its token expires (capped by
// connections.max.reauth.ms when that is positive): the client must
// re-authenticate before (KIP-368), or its connection is closed at its
// next request, as a broker does.
func OAuthBearer(validate OAuthValidator) Opt {
	return opt{func(cfg *cfg) {
		cfg.enableSASL = true
		cfg.oauth = validate
	}}
}

// MSKIAM enables SASL with Amazon MSK's AWS_MSK_IAM mechanism for the
// brokers of region: a client signs a kafka-cluster:Connect request with
// SigV4, and kfake recomputes the signature with the secret key of the
// access key it names (credentials: access key => secret key). A session
// token, when sent, must be sessionToken (when not empty).
func MSKIAM(region string, credentials map[string]string, sessionToken string) Opt {
	return opt{func(cfg *cfg) {
		cfg.enableSASL = true
		cfg.mskRegion, cfg.mskCredentials, cfg.mskToken = region, credentials, sessionToken
	}}
}

// parseOAuthBearer reads a client's initial response (RFC 7628 §3.1):
// gs2-header, then kvsep-separated auth=Bearer <token> and extensions.
func parseOAuthBearer(msg []byte) (token string, ext map[string]string, err error) {
	gs2, rest, ok := strings.Cut(string(msg), "\x01")
	if !ok || !strings.HasPrefix(gs2, "n,") && !strings.HasPrefix(gs2, "y,") {
		return "", nil, errors.New("invalid OAUTHBEARER message: no gs2 header")
	}
	rest, ok = strings.CutSuffix(rest, "\x01\x01")
	if !ok {
		return "", nil, errors.New("invalid OAUTHBEARER message: not terminated")
	}
	ext = map[string]string{}
	for kv := range strings.SplitSeq(rest, "\x01") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", nil, fmt.Errorf("invalid OAUTHBEARER message: %q is not key=value", kv)
		}
		if k == "auth" {
			if token, ok = strings.CutPrefix(v, "Bearer "); !ok || token == "" {
				return "", nil, errors.New("invalid OAUTHBEARER message: auth is not a Bearer token")
			}
			continue
		}
		ext[k] = v
	}
	if token == "" {
		return "", nil, errors.New("invalid OAUTHBEARER message: no auth")
	}
	return token, ext, nil
}

// authOAuth handles the SaslAuthenticate requests of OAUTHBEARER.
func (c *Cluster) authOAuth(creq *clientReq, req *kmsg.SASLAuthenticateRequest, resp *kmsg.SASLAuthenticateResponse) {
	cc := creq.cc
	if cc.saslStage == saslStageAuthOAuthFailed {
		// The client's %x01 after our error challenge (RFC 7628
		// §3.2.3): the authentication fails with the reason.
		msg := "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER: " + cc.saslErr
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, &msg
		cc.saslStage, cc.saslErr, cc.user = saslStageBegin, "", ""
		return
	}
	token, ext, err := parseOAuthBearer(req.SASLAuthBytes)
	var principal string
	var expires time.Time
	if err == nil {
		principal, expires, err = c.cfg.oauth(token, ext)
	}
	if err == nil && cc.user != "" && cc.user != principal {
		err = errors.New("re-authentication changed the principal")
	}
	if err == nil && !time.Now().Before(expires) {
		err = errors.New("the token expired")
	}
	if err != nil {
		challenge, _ := json.Marshal(map[string]string{"status": "invalid_token"}) // RFC 7628 §3.2.2
		resp.SASLAuthBytes = challenge
		cc.saslStage, cc.saslErr = saslStageAuthOAuthFailed, err.Error()
		return
	}
	cc.saslStage, cc.user = saslStageComplete, principal
	c.fillSessionLifetime(cc, resp, time.Until(expires))
}

// authMSKIAM handles the SaslAuthenticate request of AWS_MSK_IAM.
func (c *Cluster) authMSKIAM(creq *clientReq, req *kmsg.SASLAuthenticateRequest, resp *kmsg.SASLAuthenticateResponse) {
	cc := creq.cc
	host, _ := cc.b.hostport()
	principal, err := c.verifyMSKIAM(req.SASLAuthBytes, host, time.Now())
	if err == nil && cc.user != "" && cc.user != principal {
		err = errors.New("re-authentication changed the principal")
	}
	if err != nil {
		msg := "[kfake] Access denied: " + err.Error()
		resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, &msg
		cc.saslStage, cc.user = saslStageBegin, ""
		return
	}
	resp.SASLAuthBytes, _ = json.Marshal(map[string]string{"version": "2020_10_22", "request-id": strconv.FormatInt(time.Now().UnixNano(), 36)})
	cc.saslStage, cc.user = saslStageComplete, principal
	c.maybeFillSessionLifetime(cc, resp)
}

// mskParams are the signed query parameters of MSK's payload, by their
// lower-cased payload key.
var mskParams = map[string]string{
	"action": "Action", "x-amz-algorithm": "X-Amz-Algorithm", "x-amz-credential": "X-Amz-Credential",
	"x-amz-date": "X-Amz-Date", "x-amz-expires": "X-Amz-Expires", "x-amz-security-token": "X-Amz-Security-Token",
	"x-amz-signedheaders": "X-Amz-SignedHeaders",
}

// verifyMSKIAM checks an AWS_MSK_IAM payload for the broker at host and
// returns its access key.
func (c *Cluster) verifyMSKIAM(payload []byte, host string, now time.Time) (string, error) {
	var p map[string]string
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", fmt.Errorf("payload is not a JSON object of strings: %v", err)
	}
	for k, want := range map[string]string{
		"version": "2020_10_22", "host": host, "action": "kafka-cluster:Connect",
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-signedheaders": "host",
	} {
		if p[k] != want {
			return "", fmt.Errorf("%s = %q, want %q", k, p[k], want)
		}
	}
	if p["user-agent"] == "" {
		return "", errors.New("user-agent missing")
	}
	cred := strings.Split(p["x-amz-credential"], "/")
	if len(cred) != 5 || cred[2] != c.cfg.mskRegion || cred[3] != "kafka-cluster" || cred[4] != "aws4_request" {
		return "", fmt.Errorf("x-amz-credential %q is not <access key>/<date>/%s/kafka-cluster/aws4_request", p["x-amz-credential"], c.cfg.mskRegion)
	}
	signedAt, err := time.Parse("20060102T150405Z", p["x-amz-date"])
	if err != nil || cred[1] != p["x-amz-date"][:8] {
		return "", fmt.Errorf("x-amz-date %q is not the credential's date", p["x-amz-date"])
	}
	expires, err := strconv.Atoi(p["x-amz-expires"])
	if err != nil || expires <= 0 || expires > 900 {
		return "", fmt.Errorf("x-amz-expires %q is not 1 to 900 seconds", p["x-amz-expires"])
	}
	if now.Before(signedAt.Add(-5*time.Minute)) || now.After(signedAt.Add(time.Duration(expires)*time.Second)) {
		return "", fmt.Errorf("signed at %s: expired or in the future", signedAt)
	}
	secret, ok := c.cfg.mskCredentials[cred[0]]
	if !ok {
		return "", fmt.Errorf("unknown access key %q", cred[0])
	}
	if c.cfg.mskToken != "" && p["x-amz-security-token"] != c.cfg.mskToken {
		return "", errors.New("x-amz-security-token is not the session's")
	}
	q := url.Values{}
	for k, v := range p {
		if name, ok := mskParams[k]; ok {
			q.Set(name, v)
		}
	}
	canonical := "GET\n/\n" + strings.ReplaceAll(q.Encode(), "+", "%20") + "\nhost:" + host + "\n\nhost\n" + hexSHA256("")
	scope := strings.Join(cred[1:], "/")
	toSign := "AWS4-HMAC-SHA256\n" + p["x-amz-date"] + "\n" + scope + "\n" + hexSHA256(canonical)
	key := []byte("AWS4" + secret)
	for _, part := range []string{cred[1], cred[2], cred[3], cred[4]} {
		key = hmacSHA256(key, part)
	}
	if want := hex.EncodeToString(hmacSHA256(key, toSign)); !hmac.Equal([]byte(want), []byte(p["x-amz-signature"])) {
		return "", errors.New("the signature does not match")
	}
	return cred[0], nil
}

func hexSHA256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func hmacSHA256(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// fillSessionLifetime sets the session of a successful authentication to
// end after lifetime, capped by connections.max.reauth.ms when positive.
func (c *Cluster) fillSessionLifetime(cc *clientConn, resp *kmsg.SASLAuthenticateResponse, lifetime time.Duration) {
	ms := max(lifetime.Milliseconds(), 1)
	if reauthMs := c.connectionsMaxReauthMs(); reauthMs > 0 {
		ms = min(ms, reauthMs)
	}
	resp.SessionLifetimeMillis = ms
	cc.hasSessionExpiry = true
	cc.sessionExpires = time.Now().Add(time.Duration(ms) * time.Millisecond)
}

// sessionExpired reports whether cc's session ended without a
// re-authentication: any request but the handshake that begins one closes
// it, as Kafka's SocketServer does.
func (cc *clientConn) sessionExpired(kreq kmsg.Request) bool {
	if cc.sessionExpires.IsZero() || time.Now().Before(cc.sessionExpires) {
		return false
	}
	_, handshake := kreq.(*kmsg.SASLHandshakeRequest)
	return !handshake
}

// NoTransactions makes a cluster without transactions, as Azure Event
// Hubs' Standard tier: ApiVersions does not list AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, WriteTxnMarkers or TxnOffsetCommit (their
// requests close the connection), and FindCoordinator for a
// transactional ID and InitProducerID with one answer INVALID_REQUEST.
// Idempotent producers (InitProducerID without a transactional ID) work.
func NoTransactions() Opt {
	return opt{func(cfg *cfg) { cfg.noTxns = true }}
}

// txnKeys are the requests of transactions only.
var txnKeys = map[int16]bool{24: true, 25: true, 26: true, 27: true, 28: true}

// noTxnsMessage is the error message of a transactional request to a
// cluster without transactions.
const noTxnsMessage = "transactions are not supported by this cluster (kfake NoTransactions)"
