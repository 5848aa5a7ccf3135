// Package metrics holds sluice's Prometheus metrics and its health
// endpoints: /metrics, /healthz (the process is alive) and /readyz (every
// flow has started, the destination answers and no flow is failing),
// served on one listener during run and update (docs/operations.md#metrics).
//
// A nil *Set records nothing, so that callers need no checks.
package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Set is the metrics and health of one process.
type Set struct {
	reg *prometheus.Registry

	recordsRead    *prometheus.CounterVec
	rowsLoaded     *prometheus.CounterVec
	deadLetters    *prometheus.CounterVec
	loads          *prometheus.CounterVec
	loadDuration   *prometheus.HistogramVec
	lag            *prometheus.GaugeVec
	lastCommit     *prometheus.GaugeVec
	retries        *prometheus.CounterVec
	cacheBytes     *prometheus.GaugeVec
	filesRemaining *prometheus.GaugeVec

	names []string // of the sluice_ metrics

	mu    sync.Mutex
	flows map[string]*flowState // by flow name
	dest  error                 // the destination's last retryable error; nil while it answers
}

type flowState struct {
	started bool
	failing error
}

// Outcomes of a load (sluice_loads_total).
const (
	OutcomeCommitted = "committed" // its ledger row is written
	OutcomeStale     = "stale"     // refused: another writer moved a slot
	OutcomeFailed    = "failed"    // it failed (retried under a new load id while retryable)
)

// Phases of a load (sluice_load_duration_seconds).
const (
	PhaseWrite   = "write"   // staging its rows
	PhaseCommit  = "commit"  // up to and including its commit point
	PhasePublish = "publish" // making it visible after the commit point
)

// New returns a Set with every metric registered, the Go runtime and
// process collectors included.
func New() *Set {
	s := &Set{reg: prometheus.NewRegistry(), flows: map[string]*flowState{}}
	flow := []string{"pipeline", "flow"}
	s.recordsRead = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_records_read_total",
		Help: "Records (messages, lines, file rows) read from the sources."}, flow)
	s.rowsLoaded = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rows_loaded_total",
		Help: "Rows of committed loads, by target table (its child tables' rows included)."}, append(flow, "table"))
	s.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_dead_letters_total",
		Help: "Dead letters of committed loads, by reason."}, append(flow, "reason"))
	s.loads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_loads_total",
		Help: "Load attempts, by outcome: committed, stale, failed."}, append(flow, "outcome"))
	s.loadDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_load_duration_seconds",
		Help:    "Time a committed load spent in each phase: write, commit, publish.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, append(flow, "phase"))
	s.lag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_consumer_lag_records",
		Help: "Records of a partition past the flow's committed position (the high watermark minus it)."}, append(flow, "topic", "partition"))
	s.lastCommit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_last_commit_timestamp_seconds",
		Help: "Unix time of the flow's last committed load."}, flow)
	s.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_destination_retries_total",
		Help: "Retries of failed destination, checkpoint store and schema registry operations."}, append(flow, "component"))
	s.cacheBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_cdc_state_cache_bytes",
		Help: "Bytes of CDC key state the flow's target keeps cached in memory."}, flow)
	s.filesRemaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_backfill_files_remaining",
		Help: "Files of a files or snapshots flow not yet loaded to their end."}, flow)
	s.names = []string{"sluice_records_read_total", "sluice_rows_loaded_total", "sluice_dead_letters_total", "sluice_loads_total",
		"sluice_load_duration_seconds", "sluice_consumer_lag_records", "sluice_last_commit_timestamp_seconds",
		"sluice_destination_retries_total", "sluice_cdc_state_cache_bytes", "sluice_backfill_files_remaining"}
	s.reg.MustRegister(s.recordsRead, s.rowsLoaded, s.deadLetters, s.loads, s.loadDuration, s.lag, s.lastCommit,
		s.retries, s.cacheBytes, s.filesRemaining,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// RecordsRead counts n records read by a flow.
func (s *Set) RecordsRead(pipeline, flow string, n int) {
	if s != nil && n > 0 {
		s.recordsRead.WithLabelValues(pipeline, flow).Add(float64(n))
	}
}

// Committed records a committed load: its rows (into table), its dead
// letters by reason, and how long its phases took.
func (s *Set) Committed(pipeline, flow, table string, rows int64, reasons map[string]int64, phases map[string]time.Duration) {
	if s == nil {
		return
	}
	s.loads.WithLabelValues(pipeline, flow, OutcomeCommitted).Inc()
	s.rowsLoaded.WithLabelValues(pipeline, flow, table).Add(float64(rows))
	for r, n := range reasons {
		s.deadLetters.WithLabelValues(pipeline, flow, r).Add(float64(n))
	}
	for p, d := range phases {
		s.loadDuration.WithLabelValues(pipeline, flow, p).Observe(d.Seconds())
	}
	s.lastCommit.WithLabelValues(pipeline, flow).Set(float64(time.Now().UnixNano()) / 1e9)
}

// LoadFailed counts a load attempt that did not commit (OutcomeStale or
// OutcomeFailed).
func (s *Set) LoadFailed(pipeline, flow, outcome string) {
	if s != nil {
		s.loads.WithLabelValues(pipeline, flow, outcome).Inc()
	}
}

// Lag sets how many records of a partition are past the flow's committed
// position.
func (s *Set) Lag(pipeline, flow, topic string, partition int32, records int64) {
	if s != nil {
		s.lag.WithLabelValues(pipeline, flow, topic, strconv.Itoa(int(partition))).Set(float64(max(records, 0)))
	}
}

// Retry counts a retry of a failed operation of component (destination,
// checkpoint store, schema registry); flow is "" for the pipeline's own.
func (s *Set) Retry(pipeline, flow, component string) {
	if s != nil {
		s.retries.WithLabelValues(pipeline, flow, component).Inc()
	}
}

// CacheBytes sets the bytes of CDC state a flow's target caches.
func (s *Set) CacheBytes(pipeline, flow string, n int64) {
	if s != nil {
		s.cacheBytes.WithLabelValues(pipeline, flow).Set(float64(n))
	}
}

// FilesRemaining sets how many files of a flow are not loaded yet.
func (s *Set) FilesRemaining(pipeline, flow string, n int) {
	if s != nil {
		s.filesRemaining.WithLabelValues(pipeline, flow).Set(float64(n))
	}
}

// Expect names the flows readiness waits for: until each has started,
// /readyz says 503.
func (s *Set) Expect(flows []string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range flows {
		if s.flows[f] == nil {
			s.flows[f] = &flowState{}
		}
	}
}

// FlowStarted marks a flow started (its source opened, reading).
func (s *Set) FlowStarted(flow string) { s.setFlow(flow, func(f *flowState) { f.started = true }) }

// FlowFailing marks a flow failing with err; nil marks it healthy again.
func (s *Set) FlowFailing(flow string, err error) {
	s.setFlow(flow, func(f *flowState) { f.failing = err })
}

func (s *Set) setFlow(flow string, fn func(*flowState)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[flow]
	if f == nil {
		f = &flowState{}
		s.flows[flow] = f
	}
	fn(f)
}

// Destination records whether the destination answers: err is its last
// retryable failure, nil once an operation succeeded again. It reports
// whether the destination recovered by this call (it was failing before).
func (s *Set) Destination(err error) (recovered bool) {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recovered = s.dest != nil && err == nil
	s.dest = err
	return recovered
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready    bool     `json:"ready"`
	NotReady []string `json:"not_ready,omitempty"` // what is not ready, one line each
}

// Ready reports whether every expected flow has started, the destination
// answers and no flow is failing.
func (s *Set) Ready() Readiness {
	s.mu.Lock()
	defer s.mu.Unlock()
	var why []string
	if s.dest != nil {
		why = append(why, "destination: "+s.dest.Error())
	}
	names := make([]string, 0, len(s.flows))
	for n := range s.flows {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		f := s.flows[n]
		switch {
		case f.failing != nil:
			why = append(why, "flow "+n+": failing: "+f.failing.Error())
		case !f.started:
			why = append(why, "flow "+n+": not started")
		}
	}
	return Readiness{Ready: len(why) == 0, NotReady: why}
}

// Handler serves /metrics, /healthz and /readyz.
func (s *Set) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := s.Ready()
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(r)
	})
	return mux
}

// Server is the listener of a Set.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Serve serves s on addr (host:port; port 0 picks one) until Close.
func Serve(addr string, s *Set) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return &Server{srv: srv, ln: ln}, nil
}

// Addr is the address the server listens on.
func (sv *Server) Addr() string { return sv.ln.Addr().String() }

// Close stops serving, waiting briefly for requests in flight.
func (sv *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return sv.srv.Shutdown(ctx)
}

// Names lists the sluice_ metrics the Set serves, whether they have
// samples yet or not (for checks of dashboards and alerts against it),
// and the runtime and process ones it has samples of.
func (s *Set) Names() ([]string, error) {
	out := slices.Clone(s.names)
	mfs, err := s.reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if !slices.Contains(out, mf.GetName()) {
			out = append(out, mf.GetName())
		}
	}
	return out, nil
}
