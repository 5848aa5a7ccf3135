package local

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// entry is one line of _sluice/ledger.jsonl: a committed load.
type entry struct {
	// Seq numbers committed loads 1, 2, ... in commit order. A table's
	// manifest says up to which Seq it holds every load that wrote it.
	Seq         int64           `json:"seq"`
	LoadID      string          `json:"load_id"`
	Pipeline    string          `json:"pipeline"`
	Flow        string          `json:"flow"`
	Targets     []string        `json:"targets"`
	Files       []stagedFile    `json:"files"`         // per table the load wrote, one per partition
	CDC         []cdcEntry      `json:"cdc,omitempty"` // per CDC target the load changed
	From        batch.Positions `json:"from"`
	To          batch.Positions `json:"positions"`
	Rows        int64           `json:"rows"`
	DeadLetters int64           `json:"dead_letters"`
	Generation  int64           `json:"generation"`
	CommittedAt time.Time       `json:"committed_at"`
	SchemaHash  string          `json:"schema_version_hash,omitempty"`
	// Reset, when set, makes the line a reset (reset.go) rather than a load.
	Reset *resetEntry `json:"reset,omitempty"`
	// Replace lists the partition folders of append targets the load
	// replaces (replace.go): publishing drops their files before adding
	// the load's.
	Replace []replaceEntry `json:"replace,omitempty"`
}

// stagedFile is a file a load staged for a table: layout.stagedFile(load,
// Table, N), published into the folder Dir of the table ("" unless the
// table is partitioned).
type stagedFile struct {
	Table string `json:"table"`
	Dir   string `json:"dir,omitempty"`
	N     int    `json:"n"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// cdcEntry is what a load staged for one CDC target: counts of its staged
// upserts, removals and states (layout.stagedUpserts and the others), the
// truncate barrier, and the version its prepared bucket files were built
// on.
type cdcEntry struct {
	Table    string `json:"table"`
	Upserts  int64  `json:"upserts,omitempty"`
	Removes  int64  `json:"removes,omitempty"`
	States   int64  `json:"states,omitempty"`
	Truncate []byte `json:"truncate,omitempty"` // rows whose sequence is below it go
	// Prepared is the table version the load's bucket files were prepared
	// against before its commit point; -1 when none were. Publishing uses
	// them when the table is still at that version, else rebuilds them.
	Prepared int64 `json:"prepared"`
}

// rowChanges reports whether the entry changes rows.
func (c *cdcEntry) rowChanges() bool { return c.Upserts > 0 || c.Removes > 0 || c.Truncate != nil }

// cdcFor returns the entry's changes of a CDC target, or nil.
func (e *entry) cdcFor(table string) *cdcEntry {
	for i := range e.CDC {
		if e.CDC[i].Table == table {
			return &e.CDC[i]
		}
	}
	return nil
}

func (e *entry) record() batch.LoadRecord {
	return batch.LoadRecord{
		LoadID:      e.LoadID,
		Pipeline:    e.Pipeline,
		Flow:        e.Flow,
		Targets:     append([]string(nil), e.Targets...),
		Positions:   append(batch.Positions(nil), e.To...),
		Rows:        e.Rows,
		DeadLetters: e.DeadLetters,
		Generation:  e.Generation,
		CommittedAt: e.CommittedAt,
		SchemaHash:  e.SchemaHash,
	}
}

// ledger is the in-memory copy of the ledger, read incrementally. The
// ledger is ledger.jsonl, one line per committed load or reset after the
// seq its base (ledger.base.json) folds: the heads, totals, resets and
// state watermarks of every line up to it. Only complete lines count; a
// last line without its newline is a torn append of a writer that died
// before its commit point. Compaction (compact) moves the lines into an
// archive segment (_sluice/loads/, lineage for _sluice_loads), folds them
// into the base and starts ledger.jsonl anew, so that what a reader of the
// ledger reads, and what this process keeps in memory, stays bounded by
// the loads since the last compaction.
type ledger struct {
	disk fsys.FS
	lay  layout

	mu      sync.Mutex
	f       fsys.File
	off     int64 // bytes of complete lines read
	base    int64 // seq the base folds; entries hold base+1 on
	entries []entry
	ids     map[string]int64        // load id -> seq, of the entries
	heads   map[flowKey]sinks.Heads // per flow, the heads of its slots (chain.go)
	totals  map[flowKey]*sinks.FlowTotals
	// stateLast is, per CDC target, the seq of the last load that staged
	// states for it: GetState makes sure the state file holds it.
	stateLast map[string]int64
	cut       int // torn lines cut off, for the log
	// resets is, per flow, the seq of its last reset: its loads committed
	// before are forgotten by records and the stale check.
	resets map[flowKey]int64
}

// ledgerBase is ledger.base.json.
type ledgerBase struct {
	Seq       int64            `json:"seq"`
	Flows     []baseFlow       `json:"flows"`
	StateLast map[string]int64 `json:"state_last,omitempty"`
	Resets    []baseReset      `json:"resets,omitempty"`
}

type baseFlow struct {
	Pipeline    string          `json:"pipeline"`
	Flow        string          `json:"flow"`
	Heads       batch.Positions `json:"heads,omitempty"`
	Loads       int64           `json:"loads,omitempty"`
	Rows        int64           `json:"rows,omitempty"`
	DeadLetters int64           `json:"dead_letters,omitempty"`
	LastAt      time.Time       `json:"last_at,omitzero"`
}

type baseReset struct {
	Pipeline string `json:"pipeline"`
	Flow     string `json:"flow"`
	Seq      int64  `json:"seq"`
}

// compactLedgerAt is how many lines ledger.jsonl holds before a commit
// compacts it.
const compactLedgerAt = 1024

func openLedger(disk fsys.FS, lay layout) (*ledger, error) {
	l := &ledger{disk: disk, lay: lay}
	if err := l.reopen(); err != nil {
		return nil, err
	}
	return l, nil
}

// reopen opens ledger.jsonl afresh and resets the in-memory state to its
// base. l.mu held (or the ledger not shared yet).
func (l *ledger) reopen() error {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	f, err := l.disk.OpenFile(l.lay.ledger(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	l.f, l.off, l.entries = f, 0, nil
	l.ids, l.heads, l.totals = map[string]int64{}, map[flowKey]sinks.Heads{}, map[flowKey]*sinks.FlowTotals{}
	l.stateLast, l.resets = map[string]int64{}, map[flowKey]int64{}
	data, err := l.disk.ReadFile(l.lay.ledgerBase())
	if errors.Is(err, fs.ErrNotExist) {
		l.base = 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	var b ledgerBase
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("ledger: %s is corrupt: %w", l.lay.ledgerBase(), err)
	}
	l.base = b.Seq
	for _, fl := range b.Flows {
		k := flowKey{fl.Pipeline, fl.Flow}
		if len(fl.Heads) > 0 {
			h := sinks.Heads{}
			h.Advance(fl.Heads)
			l.heads[k] = h
		}
		if fl.Loads > 0 {
			l.totals[k] = &sinks.FlowTotals{Loads: fl.Loads, Rows: fl.Rows, DeadLetters: fl.DeadLetters, LastAt: fl.LastAt}
		}
	}
	maps.Copy(l.stateLast, b.StateLast)
	for _, r := range b.Resets {
		l.resets[flowKey{r.Pipeline, r.Flow}] = r.Seq
	}
	return nil
}

func (l *ledger) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// refresh reads lines appended since the last call, after reopening the
// ledger when another process compacted it. With repair (only under the
// destination lock, when no writer can be mid-append) a torn last line is
// cut off the file; without it, it is left for the next writer to cut.
// l.mu must be held.
func (l *ledger) refresh(repair bool) error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if cur, err := l.disk.Stat(l.lay.ledger()); err == nil && !os.SameFile(st, cur) {
		if err := l.reopen(); err != nil {
			return err
		}
		if st, err = l.f.Stat(); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
	}
	size := st.Size()
	if size < l.off {
		return fmt.Errorf("ledger: %s shrank from %d to %d bytes", l.lay.ledger(), l.off, size)
	}
	if size == l.off {
		return nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, l.off, size-l.off), 1<<20)
	for {
		line, err := readLine(r)
		if err == io.EOF {
			break // a torn tail, or nothing
		}
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		var e entry
		if jerr := json.Unmarshal(line, &e); jerr != nil {
			if rest, _ := io.ReadAll(r); len(bytes.TrimSpace(rest)) > 0 {
				return fmt.Errorf("ledger: %s is corrupt at byte %d: %w", l.lay.ledger(), l.off, jerr)
			}
			break // a garbled last line: an append cut by a crash
		}
		l.off += int64(len(line))
		if e.Seq <= l.base {
			continue // folded into the base by a compaction that stopped before starting the file anew
		}
		if e.Seq != l.lastSeq()+1 {
			return fmt.Errorf("ledger: %s is corrupt at byte %d: sequence %d after %d", l.lay.ledger(), l.off-int64(len(line)), e.Seq, l.lastSeq())
		}
		l.add(e)
	}
	if repair && l.off < size {
		if err := l.f.Truncate(l.off); err != nil {
			return fmt.Errorf("ledger: cut torn line: %w", err)
		}
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("ledger: cut torn line: %w", err)
		}
		l.cut++
	}
	return nil
}

// readLine reads one line with its newline, however long; io.EOF when no
// complete line is left.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		full := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = r.ReadSlice('\n')
			full = append(full, line...)
		}
		line = full
	}
	return line, err
}

func (l *ledger) add(e entry) {
	l.entries = append(l.entries, e)
	l.ids[e.LoadID] = e.Seq
	if e.Reset != nil {
		l.addReset(&e)
		return
	}
	for _, c := range e.CDC {
		if c.States > 0 {
			l.stateLast[c.Table] = e.Seq
		}
	}
	if len(e.To) == 0 {
		return
	}
	k := flowKey{e.Pipeline, e.Flow}
	h := l.heads[k]
	if h == nil {
		h = sinks.Heads{}
		l.heads[k] = h
	}
	h.Advance(e.To)
	t := l.totals[k]
	if t == nil {
		t = &sinks.FlowTotals{}
		l.totals[k] = t
	}
	t.Loads++
	t.Rows += e.Rows
	t.DeadLetters += e.DeadLetters
	if e.CommittedAt.After(t.LastAt) {
		t.LastAt = e.CommittedAt
	}
}

func (l *ledger) lastSeq() int64 {
	if len(l.entries) == 0 {
		return l.base
	}
	return l.entries[len(l.entries)-1].Seq
}

// since returns the entries after seq (those in memory: every entry a
// compaction folded was published first).
func (l *ledger) since(seq int64) []entry {
	i := seq - l.base
	if i < 0 {
		i = 0
	}
	if i >= int64(len(l.entries)) {
		return nil
	}
	return l.entries[i:]
}

// flowHeads returns a copy of a flow's heads, of the slots named (all
// when nil). l.mu held.
func (l *ledger) flowHeads(pipeline, flow string, slots []string) sinks.Heads {
	h := l.heads[flowKey{pipeline, flow}]
	out := sinks.Heads{}
	if slots == nil {
		maps.Copy(out, h)
		return out
	}
	for _, sl := range slots {
		if p, ok := h[sl]; ok {
			out[sl] = p
		}
	}
	return out
}

// flowTotals returns the totals of a pipeline's flows (of every pipeline's
// when empty, by flow). l.mu held.
func (l *ledger) flowTotals(pipeline string) map[string]sinks.FlowTotals {
	out := map[string]sinks.FlowTotals{}
	for k, t := range l.totals {
		if pipeline != "" && k.pipeline != pipeline {
			continue
		}
		cur := out[k.flow]
		cur.Loads += t.Loads
		cur.Rows += t.Rows
		cur.DeadLetters += t.DeadLetters
		if t.LastAt.After(cur.LastAt) {
			cur.LastAt = t.LastAt
		}
		out[k.flow] = cur
	}
	return out
}

// checkStale refuses a load that does not continue the chain of every slot
// of from, Kafka partitions and files alike (sinks.Heads.Stale). l.mu must
// be held.
func (l *ledger) checkStale(meta sinks.LoadMeta, from batch.Positions) error {
	if stale := l.heads[flowKey{meta.Pipeline, meta.Flow}].Stale(from); len(stale) > 0 {
		return fmt.Errorf("%w: %s", sinks.ErrStale, strings.Join(stale, "; "))
	}
	return nil
}

// append writes e as the ledger's next line and syncs the file: the commit
// point. On failure the file is cut back so that the load stays
// uncommitted. l.mu and the destination lock must be held, after a refresh
// with repair.
func (l *ledger) append(e entry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	line = append(line, '\n')
	if _, err = l.f.WriteAt(line, l.off); err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		if terr := l.f.Truncate(l.off); terr == nil {
			l.f.Sync()
		}
		return fmt.Errorf("ledger: append: %w", err)
	}
	l.off += int64(len(line))
	l.add(e)
	return nil
}

// history calls each for every entry ever committed, in seq order: the
// archive segments' lines the base folds, then the entries in memory.
// l.mu must be held.
func (l *ledger) history(each func(e *entry)) error {
	segs, err := l.segments()
	if err != nil {
		return err
	}
	last := int64(0)
	for _, sg := range segs {
		if sg.first > l.base {
			continue // left by a compaction that stopped before its base
		}
		f, err := l.disk.Open(filepath.Join(l.lay.ledgerArchive(), sg.name))
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return fmt.Errorf("ledger: %w", err)
		}
		r := bufio.NewReaderSize(io.NewSectionReader(f, 0, st.Size()), 1<<20)
		for {
			line, err := readLine(r)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return fmt.Errorf("ledger: %s: %w", sg.name, err)
			}
			var e entry
			if err := json.Unmarshal(line, &e); err != nil {
				f.Close()
				return fmt.Errorf("ledger: %s is corrupt: %w", sg.name, err)
			}
			if e.Seq <= last || e.Seq > l.base {
				continue
			}
			last = e.Seq
			each(&e)
		}
		f.Close()
	}
	for i := range l.entries {
		each(&l.entries[i])
	}
	return nil
}

// ledgerSegment is an archive segment: _sluice/loads/ledger-<first>-<last>.jsonl.
type ledgerSegment struct {
	name        string
	first, last int64
}

// segments lists the archive segments in seq order.
func (l *ledger) segments() ([]ledgerSegment, error) {
	des, err := l.disk.ReadDir(l.lay.ledgerArchive())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	var out []ledgerSegment
	for _, de := range des {
		var sg ledgerSegment
		if _, err := fmt.Sscanf(de.Name(), "ledger-%d-%d.jsonl", &sg.first, &sg.last); err != nil {
			continue
		}
		sg.name = de.Name()
		out = append(out, sg)
	}
	slices.SortFunc(out, func(a, b ledgerSegment) int { return cmp.Compare(a.first, b.first) })
	return out, nil
}

// records returns every committed load of pipeline (all when empty), the
// archived ones included. l.mu must be held.
func (l *ledger) records(pipeline string) (*batch.Ledger, error) {
	out := &batch.Ledger{}
	err := l.history(func(e *entry) {
		if e.Reset != nil || l.forgotten(e) {
			return
		}
		if pipeline == "" || e.Pipeline == pipeline {
			out.Loads = append(out.Loads, e.record())
		}
	})
	return out, err
}

// loadsBatch returns the ledger as the _sluice_loads table.
func (l *ledger) loadsBatch() (*batch.Batch, error) {
	b := batch.New(batch.LoadsSchema, len(l.entries))
	err := l.history(func(e *entry) {
		if e.Reset != nil {
			return // history keeps the loads; resets are in the ledger's lines
		}
		b.Vectors[0].AppendString(e.LoadID)
		b.Vectors[1].AppendString(e.Pipeline)
		b.Vectors[2].AppendString(e.Flow)
		b.Vectors[3].AppendString(joinComma(e.Targets))
		b.Vectors[4].AppendString(e.To.Encode())
		b.Vectors[5].AppendInt(e.Rows)
		b.Vectors[6].AppendInt(e.DeadLetters)
		b.Vectors[7].AppendInt(e.Generation)
		b.Vectors[8].AppendInt(e.CommittedAt.UnixMicro())
		b.Vectors[9].AppendString(e.SchemaHash)
	})
	return b, err
}

// compact folds every entry in memory into the base: it writes them to an
// archive segment, then the base, then starts ledger.jsonl anew, each step
// durable before the next, so that a crash at any point leaves a ledger
// that reads the same (lines the base folds are skipped, segments beyond
// it ignored). The caller holds the destination lock and l.mu, after
// publishing every entry and applying its states.
func (l *ledger) compact() error {
	if len(l.entries) == 0 {
		return nil
	}
	upTo := l.lastSeq()
	segs, err := l.segments()
	if err != nil {
		return err
	}
	for _, sg := range segs {
		if sg.first > l.base {
			if err := l.disk.Remove(filepath.Join(l.lay.ledgerArchive(), sg.name)); err != nil {
				return fmt.Errorf("ledger: compact: %w", err)
			}
		}
	}
	var buf bytes.Buffer
	for i := range l.entries {
		line, err := json.Marshal(&l.entries[i])
		if err != nil {
			return fmt.Errorf("ledger: compact: %w", err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	name := fmt.Sprintf("ledger-%012d-%012d.jsonl", l.base+1, upTo)
	if err := l.disk.MkdirAll(l.lay.ledgerArchive(), 0o755); err != nil {
		return fmt.Errorf("ledger: compact: %w", err)
	}
	if err := l.writeDurably(filepath.Join(l.lay.ledgerArchive(), name), buf.Bytes()); err != nil {
		return err
	}
	b := ledgerBase{Seq: upTo, StateLast: l.stateLast}
	keys := slices.SortedFunc(maps.Keys(l.totals), compareFlowKeys)
	for k := range l.heads {
		if _, ok := l.totals[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		bf := baseFlow{Pipeline: k.pipeline, Flow: k.flow}
		for _, p := range l.heads[k] {
			bf.Heads = append(bf.Heads, p)
		}
		bf.Heads = sortedPositions(bf.Heads)
		if t := l.totals[k]; t != nil {
			bf.Loads, bf.Rows, bf.DeadLetters, bf.LastAt = t.Loads, t.Rows, t.DeadLetters, t.LastAt
		}
		b.Flows = append(b.Flows, bf)
	}
	for _, k := range slices.SortedFunc(maps.Keys(l.resets), compareFlowKeys) {
		b.Resets = append(b.Resets, baseReset{Pipeline: k.pipeline, Flow: k.flow, Seq: l.resets[k]})
	}
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("ledger: compact: %w", err)
	}
	if err := l.writeDurably(l.lay.ledgerBase(), data); err != nil {
		return err
	}
	if err := l.writeDurably(l.lay.ledger(), nil); err != nil {
		return err
	}
	// The base holds what the entries did.
	l.f.Close()
	f, err := l.disk.OpenFile(l.lay.ledger(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: compact: %w", err)
	}
	l.f, l.off, l.base, l.entries, l.ids = f, 0, upTo, nil, map[string]int64{}
	return nil
}

// writeDurably replaces path with data: a file in _sluice/tmp, synced,
// renamed over path, its folder synced.
func (l *ledger) writeDurably(path string, data []byte) error {
	tmp := filepath.Join(l.lay.tmp(), "ledger-"+randomSuffix())
	f, err := l.disk.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err == nil {
		if len(data) > 0 {
			_, err = f.Write(data)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = l.disk.Rename(tmp, path)
	}
	if err == nil {
		err = l.disk.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		l.disk.Remove(tmp)
		return fmt.Errorf("ledger: compact: %w", err)
	}
	return nil
}

func compareFlowKeys(a, b flowKey) int {
	return cmp.Or(cmp.Compare(a.pipeline, b.pipeline), cmp.Compare(a.flow, b.flow))
}

// sortedPositions sorts positions by slot, so that a base reads the same
// for the same heads.
func sortedPositions(ps batch.Positions) batch.Positions {
	slices.SortFunc(ps, func(a, b batch.Position) int { return cmp.Compare(sinks.Slot(a), sinks.Slot(b)) })
	return ps
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x)
	}
	return b.String()
}
