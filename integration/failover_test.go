package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"aggregator/internal/config"
	"aggregator/internal/consumer"
)

// A severable is a kgo.Dialer whose connections all close at once when
// it is cut, and which dials nothing after: to the brokers the client is
// a process killed without leaving the group (SIGKILL, a node lost); its
// member stays in the group until its session expires.
type severable struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (s *severable) dial(ctx context.Context, network, host string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil, errors.New("severed")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err == nil {
		s.conns = append(s.conns, c)
	}
	return c, err
}

// sever closes every connection and refuses new ones.
func (s *severable) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	for _, c := range s.conns {
		c.Close()
	}
}

// logBuffer keeps a service's JSON log lines. Safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines whose message contains msg, parsed.
func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && strings.Contains(m["message"].(string), msg) {
			out = append(out, m)
		}
	}
	return out
}

// killable is a service whose client can be killed without leaving the
// group, and whose info log is kept.
type killable struct {
	*service
	dial *severable
	log  *logBuffer
	reg  *prometheus.Registry
}

// startKillable starts a service on cfg whose connections go through a
// severable, logging at info into a buffer.
func startKillable(t testing.TB, cfg config.Config, opts ...kgo.Opt) *killable {
	t.Helper()
	k := &killable{dial: &severable{}, log: &logBuffer{}, reg: prometheus.NewRegistry()}
	log := zerolog.New(k.log).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	c, err := consumer.NewWithClock(cfg, log, k.reg, time.Now,
		append([]kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.Dialer(k.dial.dial)}, opts...)...)
	if err != nil {
		t.Fatalf("consumer.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.service = &service{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { k.done <- c.Run(ctx) }()
	t.Cleanup(func() { k.crash() })
	return k
}

// kill ends the service as SIGKILL would: its connections drop, nothing
// more reaches the brokers (no commit, no leave), and its member stays
// in the group until its session expires.
func (k *killable) kill() {
	k.dial.sever()
	k.crash()
}

// A member that joins a group holding a member killed without leaving
// waits for that member's session to expire, and says so at info: what
// it waits for, until when at the latest, and who is in the group; then
// that it joined, and how long it waited.
func TestJoinSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel() // its own broker
	const session = 6 * time.Second
	kc := faultCluster(t, 1)
	brokers := kc.ListenAddrs()
	cfg := faultConfig(t, brokers, "")
	cfg.Source.SessionTimeout = session
	a := startKillable(t, cfg)
	waitPlacement(t, brokers, cfg.Source.Group, 1, map[string]int{inTopic: 4})
	a.kill()
	killed := time.Now()
	b := startKillable(t, cfg)
	waitForf(t, waitTimeout, pollEvery, func() bool { return len(b.log.lines("waiting for the group")) > 0 }, func() string {
		return "the new member saying what it waits for; its log:\n" + b.log.buf.String()
	})
	if b.c.Serving() {
		t.Error("the new member is ready (/readyz 200) before the group answered its join")
	}
	waitForf(t, waitTimeout, pollEvery, func() bool { return len(b.log.lines("joined the group")) > 0 }, func() string {
		return "the new member saying it joined; its log:\n" + b.log.buf.String()
	})
	waited := b.log.lines("waiting for the group")
	if len(waited) != 1 {
		t.Fatalf("%d lines say what the join waits for, want 1; log:\n%s", len(waited), b.log.buf.String())
	}
	w := waited[0]
	expires, err := time.Parse(time.RFC3339Nano, w["expires_by"].(string))
	if err != nil || expires.Before(killed) || expires.After(killed.Add(session+5*time.Second)) {
		t.Errorf("expires_by = %v (%v), want within the session timeout of the kill at %v", w["expires_by"], err, killed)
	}
	if members, _ := w["members"].([]any); len(members) != 1 || !strings.HasPrefix(members[0].(string), "aggregator@") {
		t.Errorf("members = %v, want the killed member, named by client ID and host", w["members"])
	}
	if w["session_timeout"] != session.String() || w["level"] != "info" {
		t.Errorf("session_timeout = %v, level = %v; want %v at info", w["session_timeout"], w["level"], session)
	}
	waitPlacement(t, brokers, cfg.Source.Group, 1, map[string]int{inTopic: 4})
	if took := time.Since(killed); took > session+3*time.Second {
		t.Errorf("the new member owned the partitions %v after the kill, want within the session timeout (%v) and a little", took, session)
	}
	b.stop(t)
}
