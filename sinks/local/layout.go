package local

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// layout names every path of a destination; doc.go describes the tree.
type layout struct{ root string }

const stateDir = "_sluice"

func (l layout) state() string    { return filepath.Join(l.root, stateDir) }
func (l layout) lockFile() string { return filepath.Join(l.root, stateDir, "lock") }
func (l layout) ledger() string   { return filepath.Join(l.root, stateDir, "ledger.jsonl") }

// ledgerBase folds the ledger's lines up to a seq (ledger.go).
func (l layout) ledgerBase() string { return filepath.Join(l.root, stateDir, "ledger.base.json") }

// ledgerArchive holds the ledger's lines that a base folds, for lineage.
func (l layout) ledgerArchive() string { return filepath.Join(l.root, stateDir, "loads") }
func (l layout) tmp() string           { return filepath.Join(l.root, stateDir, "tmp") }
func (l layout) staging() string       { return filepath.Join(l.root, stateDir, "staging") }
func (l layout) tables() string        { return filepath.Join(l.root, stateDir, "tables") }

// stagingDir is where a load stages its files until it is published.
func (l layout) stagingDir(loadID string) string {
	return filepath.Join(l.staging(), fsName(loadID))
}

// stagedFile is the nth file a load stages for a table (one per partition).
func (l layout) stagedFile(loadID, table string, n int) string {
	return filepath.Join(l.stagingDir(loadID), table+"."+strconv.Itoa(n)+".parquet")
}

// link is the table's folder as readers see it: a symlink to the current
// version folder.
func (l layout) link(table string) string { return filepath.Join(l.root, table) }

func (l layout) tableDir(table string) string { return filepath.Join(l.tables(), table) }
func (l layout) schemaFile(table string) string {
	return filepath.Join(l.tableDir(table), "schema.json")
}

func versionName(v int64) string { return fmt.Sprintf("v%012d", v) }

func (l layout) versionDir(table string, v int64) string {
	return filepath.Join(l.tableDir(table), versionName(v))
}

func (l layout) manifestFile(table string, v int64) string {
	return filepath.Join(l.tableDir(table), versionName(v)+".json")
}

// idsDir holds the identity sidecars of version v of a CDC target: for each
// data file <name>, <name>.ids lists its rows' (key, sequence).
func (l layout) idsDir(table string, v int64) string {
	return filepath.Join(l.tableDir(table), versionName(v)+idsSuffix)
}

const idsSuffix = ".ids"

// stateFile is a CDC target's hidden state (bbolt).
func (l layout) stateFile(table string) string { return filepath.Join(l.tableDir(table), "state.db") }

func (l layout) leases() string { return filepath.Join(l.root, stateDir, "leases") }

// leaseFile is the record of a lease (lease.go).
func (l layout) leaseFile(table string) string { return filepath.Join(l.leases(), table+".json") }

// leaseHolders holds the flocks that mark lease holders alive.
func (l layout) leaseHolders() string { return filepath.Join(l.leases(), "holders") }

// leaseHolder is flocked by a live holder of leases.
func (l layout) leaseHolder(holder string) string {
	return filepath.Join(l.leaseHolders(), fsName(holder))
}

func (l layout) tmpFile(name string) string { return filepath.Join(l.tmp(), name) }

// A load's staged changes of a CDC target: upserted rows with their
// identities, removed identities, states, and the new bucket files prepared
// before the commit point.
func (l layout) stagedUpserts(loadID, table string) string {
	return filepath.Join(l.stagingDir(loadID), table+".cdc.up.parquet")
}

func (l layout) stagedRemoves(loadID, table string) string {
	return filepath.Join(l.stagingDir(loadID), table+".cdc.rm")
}

func (l layout) stagedStates(loadID, table string) string {
	return filepath.Join(l.stagingDir(loadID), table+".cdc.st")
}

func (l layout) stagedPlan(loadID, table, name string) string {
	return filepath.Join(l.stagingDir(loadID), table+".cdc", name)
}

// linkTarget is the symlink's content: relative, so that the destination
// folder can be moved or mounted elsewhere.
func (l layout) linkTarget(table string, v int64) string {
	return filepath.Join(stateDir, "tables", table, versionName(v))
}

// parseLinkTarget returns the version a table's symlink points to.
func parseLinkTarget(table, target string) (int64, bool) {
	prefix := filepath.Join(stateDir, "tables", table) + string(filepath.Separator)
	if !strings.HasPrefix(target, prefix) {
		return 0, false
	}
	return parseVersionName(target[len(prefix):])
}

func parseVersionName(name string) (int64, bool) {
	if len(name) != 13 || name[0] != 'v' {
		return 0, false
	}
	v, err := strconv.ParseInt(name[1:], 10, 64)
	return v, err == nil && v >= 0
}

func (l layout) heartbeatDir(pipeline string) string {
	return filepath.Join(l.root, stateDir, "heartbeats", fsName(pipeline))
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// fsName maps an identifier (a load id, a heartbeat id) to a file name:
// itself when it is a safe name, else "~" and the hex SHA-256 of it ("~" never
// starts a safe name, so the two forms cannot collide).
func fsName(id string) string {
	if safeName.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "~" + hex.EncodeToString(sum[:])
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,199}$`)

func randomSuffix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("local: crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// writeFileSync writes a new file and syncs it (not its directory).
func writeFileSync(disk fsys.FS, path string, data []byte) error {
	f, err := disk.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	return fsys.SyncAndClose(f)
}

// writeAtomic replaces path with data: a synced temporary file renamed over
// it, then the directory synced.
func writeAtomic(disk fsys.FS, path string, data []byte) error {
	tmp := path + ".tmp-" + randomSuffix()
	if err := writeFileSync(disk, tmp, data); err != nil {
		disk.Remove(tmp)
		return err
	}
	if err := disk.Rename(tmp, path); err != nil {
		disk.Remove(tmp)
		return err
	}
	return disk.SyncDir(filepath.Dir(path))
}
