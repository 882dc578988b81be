package registry

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"aggregator/internal/config"
	"aggregator/internal/record"
)

const (
	callerSchema = `{"type":"record","name":"Caller","namespace":"calls","fields":[{"name":"region","type":"string"}]}`
	callSchema   = `{"type":"record","name":"Call","namespace":"calls","fields":[{"name":"sid","type":"string"},{"name":"caller","type":"calls.Caller"}]}`
)

func header(id uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0}, id) }

func values(vs ...[]byte) func(func([]byte) bool) { return slices.Values(vs) }

func newClient(t *testing.T, cfg config.SchemaRegistry) (*Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(cfg, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	c.backoff = func(int) time.Duration { return time.Millisecond }
	return c, reg
}

// TestResolve: a schema with a reference to another subject, fetched once;
// an id the registry does not know is noted as unknown.
func TestResolve(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	fake.SeedSchema("caller-value", 1, 1, sr.Schema{Schema: callerSchema, Type: sr.TypeAvro})
	fake.SeedSchema("calls-value", 1, 2, sr.Schema{Schema: callSchema, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "calls.Caller", Subject: "caller-value", Version: 1}}})
	c, reg := newClient(t, config.SchemaRegistry{URL: fake.URL()})
	schemas := record.NewSchemas()
	if err := c.Resolve(context.Background(), schemas, values(header(2), header(2), header(404), []byte("{}"))); err != nil {
		t.Fatal(err)
	}
	if !schemas.Has(2) || !schemas.Has(404) || schemas.Has(0) {
		t.Errorf("after Resolve: Has(2), Has(404), Has(0) = %v, %v, %v; want true, true, false", schemas.Has(2), schemas.Has(404), schemas.Has(0))
	}
	if ok, nf := testutil.ToFloat64(c.requests.WithLabelValues(resultOK)), testutil.ToFloat64(c.requests.WithLabelValues(resultNotFound)); ok != 2 || nf != 1 {
		t.Errorf("requests ok, not_found = %v, %v; want 2 (schema and reference), 1", ok, nf)
	}
	if n, err := testutil.GatherAndCount(reg, "aggregator_schema_registry_requests_total"); err != nil || n != 3 {
		t.Errorf("aggregator_schema_registry_requests_total series = %d, %v; want 3", n, err)
	}
	cfg := config.Config{Source: config.Source{Format: config.FormatAvro, Key: []string{"caller.region"},
		Timestamp: config.Timestamp{Field: "$timestamp"}}, Watermark: config.Watermark{Strategy: "bounded"}}
	dec, err := record.NewDecoder(cfg.RecordSpec(), schemas)
	if err != nil {
		t.Fatal(err)
	}
	var rec record.Record
	value := append(header(2), 2, 's', 4, 'e', 'u')
	if _, err := dec.Decode(&record.Input{Value: value, Timestamp: 5}, &rec); err != nil || rec.Key != `{"caller.region":"eu"}` {
		t.Errorf("Decode(with the fetched schema) = %q, %v", rec.Key, err)
	}
}

// TestResolveOutage: while the registry refuses, Resolve retries and Down
// is true; once it answers, Resolve returns with the schema.
func TestResolveOutage(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	fake.SeedSchema("caller-value", 1, 1, sr.Schema{Schema: callerSchema, Type: sr.TypeAvro})
	var out atomic.Bool
	out.Store(true)
	refused := make(chan struct{}, 1)
	fake.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if !out.Load() {
			return false
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		select {
		case refused <- struct{}{}:
		default:
		}
		return true
	})
	c, _ := newClient(t, config.SchemaRegistry{URL: fake.URL()})
	schemas := record.NewSchemas()
	done := make(chan error)
	go func() { done <- c.Resolve(context.Background(), schemas, values(header(1))) }()
	<-refused
	<-refused // a retry after the first refusal
	if !c.Down() || schemas.Has(1) {
		t.Errorf("during the outage: Down() = %v, Has(1) = %v; want true, false", c.Down(), schemas.Has(1))
	}
	out.Store(false)
	if err := <-done; err != nil || !schemas.Has(1) || c.Down() {
		t.Errorf("after the outage: Resolve = %v, Has(1) = %v, Down() = %v; want nil, true, false", err, schemas.Has(1), c.Down())
	}
	if n := testutil.ToFloat64(c.requests.WithLabelValues(resultError)); n < 2 {
		t.Errorf("requests error = %v, want at least 2", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out.Store(true)
	go func() { <-refused; cancel() }()
	if err := c.Resolve(ctx, schemas, values(header(7))); err == nil || schemas.Has(7) {
		t.Errorf("Resolve(canceled during an outage) = %v, Has(7) = %v; want ctx's error, false", err, schemas.Has(7))
	}
}

// TestBasicAuthPasswordFile: the password file is read for every request,
// so a rotated password is used without a new Client.
func TestBasicAuthPasswordFile(t *testing.T) {
	auth := func(pass string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte("svc:"+pass)) }
	fake := srfake.New(srfake.WithAuth(auth("new")))
	defer fake.Close()
	fake.SeedSchema("caller-value", 1, 1, sr.Schema{Schema: callerSchema, Type: sr.TypeAvro})
	fake.SeedSchema("caller-value", 2, 2, sr.Schema{Schema: callerSchema, Type: sr.TypeAvro})
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := newClient(t, config.SchemaRegistry{URL: fake.URL(), Username: "svc", PasswordFile: file})
	if _, err := c.schema(context.Background(), 1); err == nil {
		t.Fatal("schema(1) with the old password succeeded; want the registry to refuse it")
	}
	if err := os.WriteFile(file, []byte("new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.schema(context.Background(), 1); err != nil {
		t.Errorf("schema(1) after the password file changed: %v", err)
	}
}

// TestRegister: the first registration is version 1, the same schema again
// its id, a changed one the next version; a refused schema is an error,
// and an outage is waited out.
func TestRegister(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	c, _ := newClient(t, config.SchemaRegistry{URL: fake.URL()})
	ctx := context.Background()
	id1, err := c.Register(ctx, "res-value", callerSchema)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Register(ctx, "res-value", callerSchema); err != nil || again != id1 {
		t.Errorf("Register(same schema) = %d, %v; want %d", again, err, id1)
	}
	var out atomic.Bool
	out.Store(true)
	refused := make(chan struct{}, 1)
	fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case strings.Contains(r.URL.Path, "refused-value"):
			http.Error(w, `{"error_code":409,"message":"incompatible"}`, http.StatusConflict)
			return true
		case !out.Load():
			return false
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		select {
		case refused <- struct{}{}:
		default:
		}
		return true
	})
	go func() { <-refused; <-refused; out.Store(false) }()
	id2, err := c.Register(ctx, "res-value", callSchema)
	if err != nil || id2 == id1 {
		t.Errorf("Register(new version after an outage) = %d, %v; want a new id", id2, err)
	}
	if _, err := c.Register(ctx, "refused-value", callerSchema); err == nil {
		t.Error("Register(refused) = nil error, want the registry's refusal")
	}
}
