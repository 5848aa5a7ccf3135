package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"
)

// ErrUnknownSchema is the error of a schema id the registry does not have:
// the record is a dead letter (reason unknown_schema), the flow goes on.
var ErrUnknownSchema = errors.New("unknown schema id")

// Registry fetches writer schemas from a Confluent Schema Registry by id
// and keeps them compiled: an id names one schema for good, so the cache
// never expires. Safe for concurrent use.
type Registry struct {
	url string
	cl  *sr.Client

	mu     sync.RWMutex
	cache  map[int]*Schema
	single singleflight.Group
}

// Config is the connection to a registry.
type Config struct {
	URL      string
	Username string // with Password: HTTP basic authentication
	Password string
	TLS      *tls.Config // nil: the system's roots for https URLs
	Timeout  time.Duration
}

// NewRegistry returns a client of the registry at cfg.URL.
func NewRegistry(cfg Config) (*Registry, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URL), sr.UserAgent("sluice")}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = 5 * time.Second
	if cfg.TLS != nil {
		tr.TLSClientConfig = cfg.TLS
	}
	opts = append(opts, sr.HTTPClient(&http.Client{Transport: tr, Timeout: cfg.Timeout}))
	if cfg.Username != "" || cfg.Password != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry %s: %w", cfg.URL, err)
	}
	return &Registry{url: cfg.URL, cl: cl, cache: map[int]*Schema{}}, nil
}

// Schema returns the compiled writer schema of id: ErrUnknownSchema when
// the registry has none of that id, a retryable error (Retryable) when it
// could not be asked.
func (r *Registry) Schema(ctx context.Context, id int) (*Schema, error) {
	r.mu.RLock()
	s := r.cache[id]
	r.mu.RUnlock()
	if s != nil {
		return s, nil
	}
	// One fetch per id serves every caller waiting for it: it must not end
	// with the first caller's context.
	ch := r.single.DoChan(fmt.Sprint(id), func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		s, err := r.fetch(fctx, id)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.cache[id] = s
		r.mu.Unlock()
		return s, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*Schema), nil
	}
}

// fetch reads schema id and the schemas it references, and compiles it.
func (r *Registry) fetch(ctx context.Context, id int) (*Schema, error) {
	raw, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return nil, r.wrap(fmt.Sprintf("schema id %d", id), err)
	}
	refs := map[string]string{}
	if err := r.references(ctx, raw.References, refs, 0); err != nil {
		return nil, err
	}
	s, err := compile(id, raw, refs)
	if err != nil {
		// A schema the registry holds but sluice cannot read is no outage:
		// its records are dead letters that name it.
		return nil, &SchemaError{ID: id, Err: err}
	}
	return s, nil
}

// references collects the text of every schema refs name, transitively, by
// the name the referencing schema imports it under.
func (r *Registry) references(ctx context.Context, refs []sr.SchemaReference, into map[string]string, depth int) error {
	if depth > 32 {
		return &SchemaError{Err: errors.New("schema references nest deeper than 32 levels")}
	}
	for _, ref := range refs {
		if _, ok := into[ref.Name]; ok {
			continue
		}
		s, err := r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return r.wrap(fmt.Sprintf("reference %s (subject %s version %d)", ref.Name, ref.Subject, ref.Version), err)
		}
		into[ref.Name] = s.Schema.Schema
		if err := r.references(ctx, s.References, into, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// wrap names the registry in err, and makes a missing schema
// ErrUnknownSchema.
func (r *Registry) wrap(what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		switch re.ErrorCode {
		case sr.ErrSchemaNotFound.Code, sr.ErrSubjectNotFound.Code, sr.ErrVersionNotFound.Code:
			return fmt.Errorf("schema registry %s: %s: %w (%s)", r.url, what, ErrUnknownSchema, re.Error())
		}
		// A 404 that is no registry's answer (a wrong path in the url, a
		// proxy): the registry was not asked.
	}
	return &UnavailableError{URL: r.url, What: what, Err: err}
}

// UnavailableError is a registry that could not be asked, or that failed
// the request: worth trying again.
type UnavailableError struct {
	URL, What string
	Err       error
}

func (e *UnavailableError) Error() string {
	hint := ""
	var re *sr.ResponseError
	if errors.As(e.Err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden) {
		hint = " (check source.kafka.schema_registry.username and password)"
	} else if !errors.As(e.Err, &re) || re.StatusCode == http.StatusNotFound {
		hint = " (is source.kafka.schema_registry.url right, and the registry up?)"
	}
	msg := e.Err.Error()
	if strings.Contains(msg, e.URL) {
		return fmt.Sprintf("schema registry: %s: %s%s", e.What, msg, hint)
	}
	return fmt.Sprintf("schema registry %s: %s: %s%s", e.URL, e.What, msg, hint)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// SchemaError is a schema that sluice cannot read: its records are dead
// letters.
type SchemaError struct {
	ID  int
	Err error
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("schema id %d: %v", e.ID, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Classifier tells the runner which registry errors to retry: an
// unreachable or failing registry, not a refusal such as bad credentials.
type Classifier struct{}

// Component names what fails in the runner's retry log lines.
func (Classifier) Component() string { return "schema registry" }

// Retryable implements sinks.Classifier.
func (Classifier) Retryable(err error) bool {
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		return false
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests || re.StatusCode == http.StatusRequestTimeout ||
			re.StatusCode == http.StatusNotFound
	}
	// A certificate refused is no outage: trying again cannot help.
	var ce *tls.CertificateVerificationError
	var ue2 x509.UnknownAuthorityError
	var he x509.HostnameError
	if errors.As(err, &ce) || errors.As(err, &ue2) || errors.As(err, &he) {
		return false
	}
	return !errors.Is(err, context.Canceled)
}
