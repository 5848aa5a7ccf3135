// Command sluice runs declarative data pipelines next to Kafka.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Exit codes of the contract: 0 success, 1 a run stopped, 2 invalid spec or usage.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
	// exitInterrupted is a command a signal stopped before it ended (128
	// + SIGINT, as shells report it).
	exitInterrupted = 130
)

// exitError carries an exit code up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, g := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	g.endProfile()
	if err == nil {
		return exitOK
	}
	var problems spec.Problems
	if errors.As(err, &problems) {
		fmt.Fprintln(stderr, problems.Error())
		fmt.Fprintf(stderr, "spec invalid: %d problem(s)\n", len(problems))
		return exitUsage
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Not a crash: the loads committed before the signal are kept,
		// and the next start resumes after them.
		fmt.Fprintln(stderr, "sluice: stopped by a signal: every load committed before it is kept, none is half done; run the command again to resume")
		return exitInterrupted
	}
	fmt.Fprintln(stderr, "sluice:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if isUsageError(err) {
		return exitUsage
	}
	return exitFail
}

// isUsageError recognises cobra's own argument and flag errors.
func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "accepts ", "requires at least", "requires at most", "required flag"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

type globals struct {
	stdout, stderr io.Writer
	specPath       string
	logLevel       string
	logFormat      string

	// Hidden knobs for tests that kill processes: shorter heartbeats make a
	// killed run's heartbeat expire sooner.
	heartbeatEvery time.Duration
	heartbeatTTL   time.Duration
	leaseTTL       time.Duration

	// cpuProfile, when set, names a file that gets the command's CPU
	// profile (hidden: for performance reports).
	cpuProfile string
	memProfile string
	// heapPeak and heapPeakProfile get the peak of the live heap (bytes,
	// as text) and the heap profile taken at it (hidden: for memory
	// reports).
	heapPeak        string
	heapPeakProfile string
	stopProfile     func()

	// console is stderr when it is a terminal, shared by the log and the
	// progress bars of files flows (errOut).
	console *backfill.Console
}

// errOut is where logs and progress bars go: on a terminal one Console,
// so that a log line goes above a bar rather than through it.
func (g *globals) errOut() io.Writer {
	if g.console == nil && isTerminal(g.stderr) {
		g.console = backfill.NewConsole(g.stderr)
	}
	if g.console != nil {
		return g.console
	}
	return g.stderr
}

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *globals) {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Declarative data pipelines next to Kafka: append and CDC flows into ClickHouse or Parquet, exactly once",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVarP(&g.specPath, "file", "f", "sluice.yaml", "pipeline spec")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", envOr("SLUICE_LOG_LEVEL", "info"), "debug, info, warn or error (env SLUICE_LOG_LEVEL)")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", envOr("SLUICE_LOG_FORMAT", "text"), "text or json (env SLUICE_LOG_FORMAT)")
	root.PersistentFlags().DurationVar(&g.heartbeatEvery, "heartbeat-every", flows.DefaultHeartbeatEvery, "how often the heartbeat is renewed")
	root.PersistentFlags().DurationVar(&g.heartbeatTTL, "heartbeat-ttl", flows.DefaultHeartbeatTTL, "how long a heartbeat outlives its last renewal")
	_ = root.PersistentFlags().MarkHidden("heartbeat-every")
	_ = root.PersistentFlags().MarkHidden("heartbeat-ttl")
	root.PersistentFlags().DurationVar(&g.leaseTTL, "lease-ttl", flows.DefaultLeaseTTL, "how long the lease of a CDC target outlives its last renewal")
	_ = root.PersistentFlags().MarkHidden("lease-ttl")
	root.PersistentFlags().StringVar(&g.cpuProfile, "cpu-profile", "", "write the command's CPU profile (pprof) to this file")
	_ = root.PersistentFlags().MarkHidden("cpu-profile")
	root.PersistentFlags().StringVar(&g.memProfile, "mem-profile", "", "write the command's heap profile (pprof: allocations over the whole command, and what is in use at its end) to this file")
	_ = root.PersistentFlags().MarkHidden("mem-profile")
	root.PersistentFlags().StringVar(&g.heapPeak, "heap-peak", "", "write the peak of the command's live heap (bytes) to this file")
	_ = root.PersistentFlags().MarkHidden("heap-peak")
	root.PersistentFlags().StringVar(&g.heapPeakProfile, "heap-peak-profile", "", "write the heap profile (pprof) taken when the command's live heap peaked to this file")
	_ = root.PersistentFlags().MarkHidden("heap-peak-profile")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.startProfile() }
	root.AddCommand(
		newValidate(g),
		newUpdate(g),
		newRun(g),
		newStatus(g),
		newShow(g),
		newDeadLetters(g),
		newDevKafka(g),
		newDemo(g),
		newVersion(g),
		newWait(g),
		newVerify(g),
	)
	return root, g
}

// startProfile starts the profiles asked for by --cpu-profile,
// --mem-profile, --heap-peak and --heap-peak-profile; endProfile writes
// them.
func (g *globals) startProfile() error {
	var stops []func()
	if g.cpuProfile != "" {
		f, err := os.Create(g.cpuProfile)
		if err != nil {
			return usageErr("--cpu-profile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		stops = append(stops, func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintln(g.stderr, "sluice: --cpu-profile:", err)
			}
		})
	}
	if g.memProfile != "" {
		f, err := os.Create(g.memProfile)
		if err != nil {
			return usageErr("--mem-profile: %v", err)
		}
		stops = append(stops, func() {
			err := pprof.Lookup("allocs").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				fmt.Fprintln(g.stderr, "sluice: --mem-profile:", err)
			}
		})
	}
	if g.heapPeak != "" || g.heapPeakProfile != "" {
		w := startHeapWatch(g.heapPeakProfile)
		stops = append(stops, func() {
			peak, err := w.stop()
			if err == nil && g.heapPeak != "" {
				err = os.WriteFile(g.heapPeak, fmt.Appendf(nil, "%d\n", peak), 0o644)
			}
			if err != nil {
				fmt.Fprintln(g.stderr, "sluice: --heap-peak:", err)
			}
		})
	}
	if len(stops) > 0 {
		g.stopProfile = func() {
			for _, stop := range stops {
				stop()
			}
		}
	}
	return nil
}

// endProfile ends the profiles, if any runs.
func (g *globals) endProfile() {
	if g.stopProfile != nil {
		g.stopProfile()
		g.stopProfile = nil
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func (g *globals) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageErr("--log-level %q: %v", g.logLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: readableAttr}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(g.errOut(), opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(g.errOut(), opts)), nil
	}
	return nil, usageErr("--log-format %q: text or json", g.logFormat)
}

// readableAttr writes durations as text ("1.5s", "250ms"), which JSON
// logs would otherwise give as integer nanoseconds.
func readableAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// openPipeline loads the spec, runs check on it (flags that name its
// flows; nil: none) and opens its destination, for a command that works on
// what the destination holds. The caller closes the sink.
func (g *globals) openPipeline(ctx context.Context, check func(*spec.Pipeline) error) (*spec.Pipeline, *slog.Logger, sinks.Sink, error) {
	p, err := g.loadSpec()
	if err != nil {
		return nil, nil, nil, err
	}
	if check != nil {
		if err := check(p); err != nil {
			return nil, nil, nil, err
		}
	}
	log, err := g.logger()
	if err != nil {
		return nil, nil, nil, err
	}
	sink, err := destination.Open(ctx, p, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return p, log, sink, nil
}

// loadSpec reads and validates the spec named by -f.
func (g *globals) loadSpec() (*spec.Pipeline, error) {
	if _, err := os.Stat(g.specPath); err != nil {
		return nil, usageErr("spec %s: %v", g.specPath, errors.Unwrap(err))
	}
	return spec.Load(g.specPath)
}
