package flows

import (
	"context"
	"maps"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/flows/wire"
)

// wireStep rewrites the messages of a Kafka source in a schema registry's
// wire format (Avro, Protobuf) as the JSON text the decoders read, before
// they decode (docs/formats.md). Safe for concurrent use.
type wireStep struct {
	pool  sync.Pool // of *wire.Decoder
	names func(string) string

	mu    sync.Mutex
	ids   map[string]bool       // the shapes of values met so far (wire.Shape.Key)
	types map[string]batch.Type // column name -> type, from their fields; replaced, never written, once published
}

// newWireStep returns the wire step of flow f, nil when its messages are
// JSON as they are.
func (r *runner) newWireStep(f *spec.Flow) (*wireStep, error) {
	k := f.Source.Kafka
	if k == nil || k.SchemaRegistry == nil {
		return nil, nil
	}
	reg, err := r.registry(k.SchemaRegistry)
	if err != nil {
		return nil, err
	}
	format := map[string]wire.Format{spec.FormatAvro: wire.Avro, spec.FormatProtobuf: wire.Protobuf, spec.FormatDebezium: wire.Framed}[k.Format]
	guard := func(ctx context.Context, what string, op func(context.Context) error) error {
		return r.retryWith(ctx, "flow "+f.Name+": "+what, wire.Classifier{}, op)
	}
	w := &wireStep{names: r.dataNames(), ids: map[string]bool{}, types: map[string]batch.Type{}}
	keyText := k.KeyFormatOrDefault() == "string"
	w.pool.New = func() any {
		d := wire.NewDecoder(reg, format, guard)
		d.KeyText = keyText
		return d
	}
	return w, nil
}

// registry returns the runner's client of a registry, one per connection.
func (r *runner) registry(sr *spec.SchemaRegistry) (*wire.Registry, error) {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	key := sr.URL + "\x00" + sr.Username + "\x00" + sr.Password
	if reg := r.registries[key]; reg != nil {
		return reg, nil
	}
	cfg := wire.Config{URL: sr.URL, Username: sr.Username, Password: sr.Password}
	if sr.TLS != nil {
		var err error
		if cfg.TLS, err = sr.TLS.ClientConfig(); err != nil {
			return nil, err
		}
	}
	reg, err := wire.NewRegistry(cfg)
	if err != nil {
		return nil, err
	}
	if r.registries == nil {
		r.registries = map[string]*wire.Registry{}
	}
	r.registries[key] = reg
	return reg, nil
}

// records rewrites recs; the dead letters are the messages that do not
// decode (unknown_schema, undecodable). The error is a registry that
// stayed unreachable.
func (w *wireStep) records(ctx context.Context, recs []batch.Record) ([]batch.Record, []batch.DeadLetter, error) {
	d := w.pool.Get().(*wire.Decoder)
	res, err := d.Records(ctx, recs)
	w.pool.Put(d)
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	for _, s := range res.Shapes {
		if w.ids[s.Key] {
			continue
		}
		w.ids[s.Key] = true
		types := maps.Clone(w.types)
		for _, f := range s.Fields() {
			name := w.column(f.Path)
			if _, ok := types[name]; !ok {
				types[name] = f.Type
			}
		}
		w.types = types
	}
	w.mu.Unlock()
	return res.Records, res.DeadLetters, nil
}

// column is the column name of a field path, as an inferring decoder
// names it (<parent>__<child>, each part normalized).
func (w *wireStep) column(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = p
		if w.names != nil {
			parts[i] = w.names(p)
		}
	}
	return strings.Join(parts, "__")
}

// hints returns the column types the schemas met so far give their
// fields, for a decoder that infers its columns (decode.JSON.SetTypes).
func (w *wireStep) hints() map[string]batch.Type {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.types
}
