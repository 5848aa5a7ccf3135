package devkafka

import (
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// Registry is an in-memory Confluent Schema Registry for local development
// and tests: no real registry runs here. It serves the part of the REST
// API that clients of the wire format use (franz-go's srfake
// implementation): GET /schemas/ids/{id}, GET /subjects,
// GET /subjects/{subject}/versions[/{version}], POST
// /subjects/{subject}/versions to register a schema, and the config and
// compatibility endpoints. Schemas are kept in memory: a restart forgets
// them, and ids start at 1 again.
type Registry struct {
	fake *srfake.Registry
	srv  *http.Server
	ln   net.Listener
}

// StartRegistry serves a registry on addr (port 0 picks a free one).
func StartRegistry(addr string) (*Registry, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	fake := srfake.NewRegistry()
	r := &Registry{fake: fake, ln: ln, srv: &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return r, nil
}

// URL is the registry's base URL.
func (r *Registry) URL() string { return "http://" + r.ln.Addr().String() }

// Register adds a schema under subject (as POST
// /subjects/{subject}/versions does) and returns its id.
func (r *Registry) Register(subject string, s sr.Schema) (int, error) {
	id, _, err := r.fake.RegisterSchema(subject, s)
	return id, err
}

// Seed adds a schema under subject with the version and id given, as a
// registry that already holds it would serve it.
func (r *Registry) Seed(subject string, version, id int, s sr.Schema) {
	r.fake.SeedSchema(subject, version, id, s)
}

// Close stops serving.
func (r *Registry) Close() error {
	r.fake.Close()
	return r.srv.Close()
}
