package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	}
}

// ledger is the in-memory copy of the ledger file, read incrementally. Only
// complete lines count; a last line without its newline is a torn append
// of a writer that died before its commit point.
type ledger struct {
	path string

	mu      sync.Mutex
	f       fsys.File
	off     int64 // bytes of complete lines read
	entries []entry
	ids     map[string]int64        // load id -> seq
	heads   map[flowKey]sinks.Heads // per flow, the heads of its slots (chain.go)
	// stateLast is, per CDC target, the seq of the last load that staged
	// states for it: GetState makes sure the state file holds it.
	stateLast map[string]int64
	cut       int // torn lines cut off, for the log
	// resets is, per flow, the seq of its last reset: its loads committed
	// before are forgotten by records and the stale check.
	resets map[flowKey]int64
}

func openLedger(disk fsys.FS, path string) (*ledger, error) {
	f, err := disk.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	return &ledger{path: path, f: f, ids: map[string]int64{}, heads: map[flowKey]sinks.Heads{}, stateLast: map[string]int64{}, resets: map[flowKey]int64{}}, nil
}

func (l *ledger) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// refresh reads lines appended since the last call. With repair (only under
// the destination lock, when no writer can be mid-append) a torn last line
// is cut off the file; without it, it is left for the next writer to cut.
// l.mu must be held.
func (l *ledger) refresh(repair bool) error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	size := st.Size()
	if size < l.off {
		return fmt.Errorf("ledger: %s shrank from %d to %d bytes", l.path, l.off, size)
	}
	if size == l.off {
		return nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(l.f, l.off, size-l.off), 1<<20)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A line longer than the buffer: gather it.
			full := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = r.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if err == io.EOF {
			break // a torn tail, or nothing
		}
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		var e entry
		if jerr := json.Unmarshal(line, &e); jerr != nil {
			if rest, _ := io.ReadAll(r); len(bytes.TrimSpace(rest)) > 0 {
				return fmt.Errorf("ledger: %s is corrupt at byte %d: %w", l.path, l.off, jerr)
			}
			break // a garbled last line: an append cut by a crash
		}
		if e.Seq != l.lastSeq()+1 {
			return fmt.Errorf("ledger: %s is corrupt at byte %d: sequence %d after %d", l.path, l.off, e.Seq, l.lastSeq())
		}
		l.add(e)
		l.off += int64(len(line))
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
}

func (l *ledger) lastSeq() int64 {
	if len(l.entries) == 0 {
		return 0
	}
	return l.entries[len(l.entries)-1].Seq
}

// since returns the entries after seq.
func (l *ledger) since(seq int64) []entry {
	// Seq i is at index i-1.
	if seq < 0 {
		seq = 0
	}
	if seq >= int64(len(l.entries)) {
		return nil
	}
	return l.entries[seq:]
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

// records returns the committed loads of pipeline (all when empty).
// l.mu must be held.
func (l *ledger) records(pipeline string) *batch.Ledger {
	out := &batch.Ledger{}
	for i := range l.entries {
		e := &l.entries[i]
		if e.Reset != nil || l.forgotten(e) {
			continue
		}
		if pipeline == "" || e.Pipeline == pipeline {
			out.Loads = append(out.Loads, e.record())
		}
	}
	return out
}

// loadsBatch returns the ledger as the _sluice_loads table.
func (l *ledger) loadsBatch() *batch.Batch {
	b := batch.New(batch.LoadsSchema, len(l.entries))
	for i := range l.entries {
		e := &l.entries[i]
		if e.Reset != nil {
			continue // history keeps the loads; resets are in ledger.jsonl
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
	}
	return b
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
