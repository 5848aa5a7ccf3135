package flows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local"
)

// orderSpec is a pipeline of one auto_cdc flow into a local target.
// Arguments: the SCD type.
const orderSpec = `pipeline: order
kafka:
  brokers: [127.0.0.1:1]
destination:
  local: {path: out}
tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: name, type: string, nullable: true}
flows:
  - name: f
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: events
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
    stored_as_scd_type: %d
`

// failing is a local sink whose loads fail as told: a load of a batch
// (its partition) in before fails without committing, one in after
// commits and then reports an error (its outcome unknown to the runner).
// It records the batches whose loads committed, in commit order.
type failing struct {
	*local.Sink
	before, after map[int32]bool

	mu        sync.Mutex
	committed []int32
}

func (s *failing) Begin(ctx context.Context, m sinks.LoadMeta) (sinks.Load, error) {
	ld, err := s.Sink.Begin(ctx, m)
	if err != nil {
		return nil, err
	}
	return &failingLoad{CDCLoad: ld.(sinks.CDCLoad), s: s}, nil
}

type failingLoad struct {
	sinks.CDCLoad
	s *failing
}

var errInjected = errors.New("injected load failure")

func (l *failingLoad) Commit(ctx context.Context, c sinks.Commit) error {
	part := c.To[0].Partition
	if l.s.before[part] {
		return errInjected
	}
	if err := l.CDCLoad.Commit(ctx, c); err != nil {
		return err
	}
	l.s.mu.Lock()
	l.s.committed = append(l.s.committed, part)
	l.s.mu.Unlock()
	if l.s.after[part] {
		return errInjected
	}
	return nil
}

// counter counts log records by message.
type counter struct {
	slog.Handler
	n   *atomic.Int64
	msg string
}

func (c counter) Enabled(context.Context, slog.Level) bool { return true }
func (c counter) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, c.msg) {
		c.n.Add(1)
	}
	return nil
}
func (c counter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c counter) WithGroup(string) slog.Handler      { return c }

// orderTarget is a CDC target of orderSpec in a fresh folder.
type orderTarget struct {
	r    *runner
	h    *cdcHandler
	sink *failing
	stop func()
}

func newOrderTarget(t *testing.T, scd int, reapplied *atomic.Int64) *orderTarget {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, orderSpec, scd), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := local.Open(ctx, local.Options{Path: p.Path(p.Destination.Local.Path), Pipeline: p.Pipeline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close() })
	sink := &failing{Sink: ls, before: map[int32]bool{}, after: map[int32]bool{}}
	log := slog.New(counter{n: reapplied, msg: "batch applied again"})
	r := newRunner(p, sink, Options{Mode: ModeUpdate, Logger: log})
	if err := sink.Ensure(ctx, Tables(p)); err != nil {
		t.Fatal(err)
	}
	targets, err := r.cdcTargets()
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]*leaseKeeper{}
	if err := r.holdAll(ctx, targets, held); err != nil {
		t.Fatal(err)
	}
	stop := func() { held["t"].release(ctx) }
	t.Cleanup(stop)
	h, err := r.newCDCHandler(&p.Flows[0], targets["t"])
	if err != nil {
		t.Fatal(err)
	}
	return &orderTarget{r: r, h: h, sink: sink, stop: stop}
}

// load applies batch i of bs and loads it as partition i of the topic.
func (o *orderTarget) load(ctx context.Context, bs []*batch.Batch, i int) error {
	b := bs[i]
	in := cdc.Input{Batch: b, Positions: make([]cdc.Position, b.Len())}
	for j := range in.Positions {
		in.Positions[j] = cdc.Position{Flow: "f", Topic: "events", Partition: int32(i), Offset: int64(j)}
	}
	p, err := o.h.apply(ctx, cdcRecords{Input: in}, nil, nil)
	if err != nil {
		return err
	}
	c := sinks.Commit{
		From: batch.Positions{{Topic: "events", Partition: int32(i), Offset: -1}},
		To:   batch.Positions{{Topic: "events", Partition: int32(i), Offset: int64(b.Len())}},
	}
	return o.r.commitLoad(ctx, o.h.flow, 0, p, c)
}

func (o *orderTarget) rows(t *testing.T) []string {
	t.Helper()
	b, err := o.r.sink.Scan(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range b.Len() {
		out = append(out, fmt.Sprint(b.Row(i)))
	}
	slices.Sort(out)
	return out
}

// orderBatches returns random change batches over a few keys, each key's
// events out of order across batches.
func orderBatches(rng *rand.Rand, n, size, keys int) []*batch.Batch {
	src := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Type{Kind: batch.KindInt64}},
		{Name: "name", Type: batch.Type{Kind: batch.KindString}, Nullable: true},
		{Name: "op", Type: batch.Type{Kind: batch.KindString}, Nullable: true},
		{Name: "seq", Type: batch.Type{Kind: batch.KindInt64}},
	}}
	seqs := rng.Perm(n * size)
	out := make([]*batch.Batch, n)
	for i := range out {
		b := batch.New(src, size)
		for j := range size {
			b.Vectors[0].AppendInt(int64(rng.IntN(keys)))
			b.Vectors[1].AppendString(fmt.Sprint("v", rng.IntN(3)))
			if rng.IntN(6) == 0 {
				b.Vectors[2].AppendString("D")
			} else {
				b.Vectors[2].AppendNull()
			}
			b.Vectors[3].AppendInt(int64(seqs[i*size+j]))
		}
		out[i] = b
	}
	return out
}

// TestCDCPipelinedLoads loads batches of one target from several
// goroutines, each batch applied while earlier loads are under way, and
// makes some loads fail before or after they commit. The target must end
// as the batches whose loads committed, applied one after the other in the
// order they committed; a last batch applied to both shows that the key
// states agree too.
func TestCDCPipelinedLoads(t *testing.T) {
	for _, scd := range []int{1, 2} {
		t.Run(fmt.Sprint("scd", scd), func(t *testing.T) {
			var reapplied atomic.Int64
			for seed := range uint64(12) {
				rng := rand.New(rand.NewPCG(seed, uint64(scd)))
				const n = 12
				bs := orderBatches(rng, n+1, 40, 25)
				ctx := context.Background()
				got := newOrderTarget(t, scd, &reapplied)
				for i := range n {
					switch rng.IntN(6) {
					case 0:
						got.sink.before[int32(i)] = true
					case 1:
						got.sink.after[int32(i)] = true
					}
				}
				work := make(chan int)
				var wg sync.WaitGroup
				for range 3 {
					wg.Go(func() {
						for i := range work {
							err := got.load(ctx, bs, i)
							if failed := got.sink.before[int32(i)] || got.sink.after[int32(i)]; failed != (err != nil) {
								t.Errorf("seed %d: batch %d: load error %v", seed, i, err)
							}
						}
					})
				}
				for i := range n {
					work <- i
				}
				close(work)
				wg.Wait()

				want := newOrderTarget(t, scd, new(atomic.Int64))
				for _, i := range got.sink.committed {
					if err := want.load(ctx, bs, int(i)); err != nil {
						t.Fatal(err)
					}
				}
				for _, o := range []*orderTarget{got, want} {
					if err := o.load(ctx, bs, n); err != nil {
						t.Fatal(err)
					}
				}
				if g, w := got.rows(t), want.rows(t); !slices.Equal(g, w) {
					t.Fatalf("seed %d: loads committed in the order %v:\ngot  %q\nwant %q", seed, got.sink.committed, g, w)
				}
			}
			if reapplied.Load() == 0 {
				t.Fatal("no batch was applied again after a failed load: the test does not exercise it")
			}
			t.Logf("%d batches applied again", reapplied.Load())
		})
	}
}

// TestKafkaFlowBusy checks what a Kafka flow tells its consumer: a CDC flow
// is busy while its target has maxBatchesAhead batches applied and not
// loaded, an append flow never.
func TestKafkaFlowBusy(t *testing.T) {
	target := &cdcTarget{ahead: make(chan struct{}, maxBatchesAhead)}
	kf := &kafkaFlow{handler: &cdcHandler{target: target}}
	for i := range maxBatchesAhead {
		if kf.Busy() {
			t.Fatalf("busy with %d batches ahead, want %d first", i, maxBatchesAhead)
		}
		if err := target.takeAhead(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !kf.Busy() {
		t.Fatalf("not busy with %d batches ahead", maxBatchesAhead)
	}
	<-target.ahead
	if kf.Busy() {
		t.Fatal("still busy once a batch was loaded")
	}
	if (&kafkaFlow{handler: &appendHandler{}}).Busy() {
		t.Fatal("an append flow is busy")
	}
}

// TestStateCacheOption checks that a table's state_cache bounds its
// target's cache of key states, and that the default applies without it.
func TestStateCacheOption(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int64
	}{{"", DefaultStateCacheBytes}, {"    state_cache: 4KiB\n", 4 << 10}} {
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		text := strings.Replace(fmt.Sprintf(orderSpec, 1), "  - name: t\n", "  - name: t\n"+tc.line, 1)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := spec.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := local.Open(context.Background(), local.Options{Path: p.Path(p.Destination.Local.Path), Pipeline: p.Pipeline})
		if err != nil {
			t.Fatal(err)
		}
		r := newRunner(p, ls, Options{Mode: ModeUpdate})
		if err := ls.Ensure(context.Background(), Tables(p)); err != nil {
			t.Fatal(err)
		}
		targets, err := r.cdcTargets()
		if err != nil {
			t.Fatal(err)
		}
		got := targets["t"].cache.Max()
		ls.Close()
		if got != tc.want {
			t.Errorf("state_cache %q: cache of %d bytes, want %d", strings.TrimSpace(tc.line), got, tc.want)
		}
	}
}
