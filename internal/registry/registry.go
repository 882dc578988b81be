package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/sr"

	"aggregator/internal/cluster"
	"aggregator/internal/config"
	"aggregator/internal/record"
)

// Request results, the values of the result label.
const (
	resultOK       = "ok"        // the registry answered
	resultNotFound = "not_found" // it does not know the schema id: its records are dead letters unknown_schema
	resultError    = "error"     // out of reach or failing: retried
)

// Client fetches and registers schemas.
type Client struct {
	cl       *sr.Client
	log      zerolog.Logger
	requests *prometheus.CounterVec
	down     atomic.Bool
	// backoff is the wait before retry n; tests shorten it.
	backoff func(n int) time.Duration
	mu      sync.Mutex // one fetch at a time: decoders waiting for the same id wait for one request
}

// New returns a Client of the registry cfg names; it does no I/O. The
// password is read from cfg.PasswordFile for every request when that is
// set, so a rotated Secret is picked up without a restart.
func New(cfg config.SchemaRegistry, log zerolog.Logger, reg prometheus.Registerer) (*Client, error) {
	httpcl := &http.Client{Timeout: cluster.AttemptTimeout}
	if strings.HasPrefix(cfg.URL, "https://") {
		// The files are read again for every new connection: a renewed
		// certificate or CA needs no restart.
		certs, err := cluster.NewCerts("source.schema_registry.tls", config.TLS{Enabled: true, CAFile: cfg.TLS.CAFile, CertFile: cfg.TLS.CertFile,
			KeyFile: cfg.TLS.KeyFile, InsecureSkipVerify: cfg.TLS.InsecureSkipVerify}, log, cluster.ReloadFailures(reg))
		if err != nil {
			return nil, err
		}
		httpcl.Transport = &http.Transport{TLSClientConfig: certs.Config(), Proxy: http.ProxyFromEnvironment}
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URL), sr.HTTPClient(httpcl), sr.UserAgent("aggregator")}
	if cfg.Username != "" {
		user, pass, file := cfg.Username, cfg.Password, cfg.PasswordFile
		opts = append(opts, sr.PreReq(func(req *http.Request) error {
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("source.schema_registry.password_file: %w", err)
				}
				pass = strings.TrimRight(string(b), "\r\n")
			}
			req.SetBasicAuth(user, pass)
			return nil
		}))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry client: %w", err)
	}
	requests := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "aggregator_schema_registry_requests_total",
		Help: "Schema Registry requests by result (ok, not_found, error: out of reach or failing, retried).",
	}, []string{"result"})
	for _, r := range []string{resultOK, resultNotFound, resultError} {
		requests.WithLabelValues(r)
	}
	return &Client{cl: cl, log: log.With().Str("component", "schema_registry").Logger(), requests: requests, backoff: cluster.Backoff}, nil
}

// Down reports whether the last request failed: the registry is out of
// reach (or failing), and records that need a schema from it wait.
func (c *Client) Down() bool { return c.down.Load() }

// Resolve adds to schemas every schema that values name and schemas does
// not have yet. While the registry cannot be reached it retries with
// capped exponential backoff (a warn line per attempt), so the caller
// waits; it returns only ctx's error. An id the registry does not know is
// added as unknown. Values not in the wire format are left to the decoder.
func (c *Client) Resolve(ctx context.Context, schemas *record.Schemas, values func(yield func([]byte) bool)) error {
	for v := range values {
		id, ok := record.WireSchemaID(v)
		if !ok || schemas.Has(id) {
			continue
		}
		if err := c.fetch(ctx, schemas, id); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) fetch(ctx context.Context, schemas *record.Schemas, id uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if schemas.Has(id) {
		return nil
	}
	for n := 0; ; n++ {
		sch, err := c.schema(ctx, id)
		switch {
		case err == nil:
			schemas.Add(id, sch)
			return nil
		case isNotFound(err):
			c.log.Warn().Uint32("schema_id", id).Msg("the schema registry does not know this schema id; its records go to the dead-letter topic")
			schemas.AddUnknown(id)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		wait := c.backoff(n)
		c.log.Warn().Err(err).Uint32("schema_id", id).Int("attempt", n+1).Str("retry_in", wait.String()).
			Msg("schema registry request failed; its records wait")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// schema fetches schema id and, depth first, the schemas it references.
func (c *Client) schema(ctx context.Context, id uint32) (record.Schema, error) {
	s, err := c.request(func() (sr.Schema, error) { return c.cl.SchemaByID(ctx, int(id)) })
	if err != nil {
		return record.Schema{}, err
	}
	return c.withReferences(ctx, s, 0)
}

// maxReferenceDepth bounds reference chains (the registry refuses cycles).
const maxReferenceDepth = 32

func (c *Client) withReferences(ctx context.Context, s sr.Schema, depth int) (record.Schema, error) {
	out := record.Schema{Type: schemaType(s.Type), Text: s.Schema}
	if depth > maxReferenceDepth {
		return out, errors.New("schema references nested too deeply")
	}
	for _, ref := range s.References {
		rs, err := c.request(func() (sr.Schema, error) {
			ss, err := c.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
			return ss.Schema, err
		})
		if err != nil {
			return out, fmt.Errorf("reference %s (subject %s version %d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		sub, err := c.withReferences(ctx, rs, depth+1)
		if err != nil {
			return out, err
		}
		out.References = append(out.References, record.Reference{Name: ref.Name, Schema: sub})
	}
	return out, nil
}

// request runs one registry request and counts and notes its result.
func (c *Client) request(do func() (sr.Schema, error)) (sr.Schema, error) {
	s, err := do()
	switch {
	case err == nil:
		c.requests.WithLabelValues(resultOK).Inc()
	case isNotFound(err):
		c.requests.WithLabelValues(resultNotFound).Inc()
	default:
		c.requests.WithLabelValues(resultError).Inc()
		c.down.Store(true)
		return s, err
	}
	if c.down.Swap(false) {
		c.log.Info().Msg("the schema registry answers again")
	}
	return s, err
}

// isNotFound reports whether the registry answered that the schema (or a
// referenced subject or version) does not exist.
func isNotFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

func schemaType(t sr.SchemaType) record.SchemaType {
	switch t {
	case sr.TypeProtobuf:
		return record.SchemaProtobuf
	case sr.TypeJSON:
		return record.SchemaJSON
	}
	return record.SchemaAvro
}

// Register registers the Avro schema text under subject (as a new version
// when it differs from the latest) and returns its id. While the registry
// cannot be reached it retries as Resolve does; a schema the registry
// refuses (not compatible with the subject's versions, say) is an error.
func (c *Client) Register(ctx context.Context, subject, text string) (uint32, error) {
	for n := 0; ; n++ {
		ss, err := c.cl.CreateSchema(ctx, subject, sr.Schema{Schema: text, Type: sr.TypeAvro})
		var re *sr.ResponseError
		switch {
		case err == nil:
			c.requests.WithLabelValues(resultOK).Inc()
			c.down.Store(false)
			return uint32(ss.ID), nil
		case errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500 && re.StatusCode != http.StatusRequestTimeout && re.StatusCode != http.StatusTooManyRequests:
			c.requests.WithLabelValues(resultError).Inc()
			return 0, fmt.Errorf("register the results schema under %s: %w", subject, err)
		case ctx.Err() != nil:
			return 0, ctx.Err()
		}
		c.requests.WithLabelValues(resultError).Inc()
		c.down.Store(true)
		wait := c.backoff(n)
		c.log.Warn().Err(err).Str("subject", subject).Int("attempt", n+1).Str("retry_in", wait.String()).
			Msg("registering the results schema failed; retrying")
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
