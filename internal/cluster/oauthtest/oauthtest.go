// Package oauthtest is an OAuth 2.0 token endpoint for tests: the
// client-credentials grant over TLS (httptest), issuing tokens "tok-N"
// that a broker validates with Validate (kfake.OAuthBearer). It counts
// requests and can be taken down. Safe for concurrent use.
package oauthtest

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"aggregator/internal/config"
)

// The client the endpoint knows, and the Confluent-style extension its
// brokers want.
const (
	ClientID       = "aggregator"
	ClientSecret   = "s3cret"
	LogicalCluster = "lkc-1"
)

// An Endpoint issues tokens valid for Lifetime (whole seconds: expires_in).
type Endpoint struct {
	Server   *httptest.Server
	Requests atomic.Int32 // tokens issued
	Down     atomic.Bool  // answer 503
	CAFile   string       // the server's certificate, PEM

	mu       sync.Mutex
	lifetime time.Duration
	issued   map[string]time.Time // token => expiry
}

// New starts an endpoint, stopped at the end of the test.
func New(t testing.TB, lifetime time.Duration) *Endpoint {
	t.Helper()
	e := &Endpoint{lifetime: lifetime, issued: map[string]time.Time{}}
	e.Server = httptest.NewTLSServer(http.HandlerFunc(e.token))
	t.Cleanup(e.Server.Close)
	e.CAFile = filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(e.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.Server.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// SetLifetime sets the lifetime of the tokens issued from now on.
func (e *Endpoint) SetLifetime(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lifetime = d
}

func (e *Endpoint) token(w http.ResponseWriter, r *http.Request) {
	if e.Down.Load() {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	id, secret, ok := r.BasicAuth()
	if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "client_credentials" {
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	if !ok {
		id, secret = r.Form.Get("client_id"), r.Form.Get("client_secret")
	}
	w.Header().Set("Content-Type", "application/json")
	if id != ClientID || secret != ClientSecret {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"invalid_client"}`)
		return
	}
	tok := fmt.Sprintf("tok-%d", e.Requests.Add(1))
	e.mu.Lock()
	lifetime := e.lifetime
	e.issued[tok] = time.Now().Add(lifetime)
	e.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(lifetime / time.Second)})
}

// Validate is the brokers' check of a token and its extensions: one this
// endpoint issued, with logicalCluster LogicalCluster.
func (e *Endpoint) Validate(token string, ext map[string]string) (string, time.Time, error) {
	e.mu.Lock()
	expires, ok := e.issued[token]
	e.mu.Unlock()
	switch {
	case !ok:
		return "", time.Time{}, fmt.Errorf("unknown token")
	case ext["logicalCluster"] != LogicalCluster:
		return "", time.Time{}, fmt.Errorf("extension logicalCluster = %q: not this cluster (%s)", ext["logicalCluster"], LogicalCluster)
	}
	return ClientID, expires, nil
}

// LastExpiry is the expiry of the last token issued.
func (e *Endpoint) LastExpiry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var last time.Time
	for _, exp := range e.issued {
		if exp.After(last) {
			last = exp
		}
	}
	return last
}

// OAuth is a client's source.sasl.oauth for this endpoint.
func (e *Endpoint) OAuth() config.OAuth {
	return config.OAuth{TokenEndpoint: e.Server.URL + "/token", ClientID: ClientID, ClientSecret: ClientSecret, CAFile: e.CAFile,
		Extensions: map[string]string{"logicalCluster": LogicalCluster}}
}
