package cluster_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/cluster"
)

func TestBackoff(t *testing.T) {
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 15 * time.Second, 15 * time.Second}
	for n, w := range want {
		if got := cluster.Backoff(n); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, w)
		}
	}
	if got := cluster.Backoff(1000); got != 15*time.Second {
		t.Errorf("Backoff(1000) = %v, want 15s", got)
	}
}

func TestPermanentAndTransient(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := map[string]struct {
		err       error
		permanent string // "" = not permanent
		transient bool
	}{
		"connection refused":    {fmt.Errorf("unable to dial: %w", refused), "", true},
		"timed out":             {fmt.Errorf("check input topics: %w", context.DeadlineExceeded), "", true},
		"retriable kafka":       {kerr.NotCoordinator, "", true},
		"sasl":                  {fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), "authentication failed (SASL)", false},
		"group acl":             {fmt.Errorf("group g: %w", kerr.GroupAuthorizationFailed), "not authorized (ACL): group g: GROUP_AUTHORIZATION_FAILED", false},
		"txn id acl":            {kerr.TransactionalIDAuthorizationFailed, "not authorized (ACL)", false},
		"tls unknown CA":        {fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), "TLS verification failed", false},
		"topics missing":        {fmt.Errorf("source.topics: %w: calls", cluster.ErrTopicsMissing), "topics missing", false},
		"fenced, not retriable": {kerr.ProducerFenced, "", false},
		"closed at first read":  {fmt.Errorf("end offsets of c: %w", &kgo.ErrFirstReadEOF{}), "", true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := cluster.Permanent(tt.err)
			if (p == nil) != (tt.permanent == "") || p != nil && !strings.Contains(p.Error(), tt.permanent) {
				t.Errorf("Permanent(%v) = %v, want %q", tt.err, p, tt.permanent)
			}
			if got := cluster.Transient(tt.err); got != tt.transient {
				t.Errorf("Transient(%v) = %v, want %v", tt.err, got, tt.transient)
			}
		})
	}
	if !errors.Is(cluster.Permanent(kerr.SaslAuthenticationFailed), cluster.ErrAuthentication) {
		t.Error("Permanent(SASL_AUTHENTICATION_FAILED) does not wrap ErrAuthentication")
	}
}

// Retry retries what may heal, with a warn line each time, and stops at
// once on what cannot, or when its context ends.
func TestRetry(t *testing.T) {
	var n int
	err := cluster.Retry(t.Context(), zerolog.Nop(), "connect", nil, func(context.Context) error {
		if n++; n < 3 {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Errorf("Retry(refused twice, then ok) = %v after %d attempts, want nil after 3", err, n)
	}
	n = 0
	err = cluster.Retry(t.Context(), zerolog.Nop(), "connect", nil, func(context.Context) error {
		n++
		return kerr.GroupAuthorizationFailed
	})
	if !errors.Is(err, cluster.ErrAuthorization) || n != 1 {
		t.Errorf("Retry(GROUP_AUTHORIZATION_FAILED) = %v after %d attempts, want ErrAuthorization after 1", err, n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	err = cluster.Retry(ctx, zerolog.Nop(), "connect", nil, func(context.Context) error {
		cancel()
		return context.DeadlineExceeded
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Retry(canceled) = %v, want context.Canceled", err)
	}
}
