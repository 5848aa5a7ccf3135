package clickhouse

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Names of sluice's own tables and of the per-load objects the delivery
// protocol creates in the destination database.
const (
	sluicePrefix    = "_sluice_"
	stateTable      = chsql.StateTable
	heartbeatsTable = "_sluice_heartbeats"

	// A load's staging table for one target: _sluice_stage<epoch>_<enc>__<table>.
	// The epoch grows by one each time recovery takes a load's publication
	// over (a rename that fences the previous publisher).
	stagePrefix = "_sluice_stage"
	// A load's marker view, _sluice_load_<enc>: it exists from Begin until
	// the load is published or discarded. The commit reads it, so dropping
	// it fences a load off from committing.
	markerPrefix = "_sluice_load_"
	// A chain slot's commit lock, _sluice_lock_<hash>: a view naming the
	// load that holds it.
	lockPrefix = "_sluice_lock_"

	bytesComment = "sluice:bytes"
	// A timestamp column on a server without DateTime64 is an Int64 of
	// microseconds since the epoch with this comment: DateTime would cut
	// the fraction of a second.
	timestampComment = "sluice:timestamp_us"
	maxLoadID        = 64
)

// encodeID maps a load id or owner id onto [A-Za-z0-9_]: letters and digits
// stay, every other byte becomes _ and two hex digits. The result never holds
// two underscores in a row, so "__" can separate it from a table name.
func encodeID(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteString(hex.EncodeToString([]byte{c}))
	}
	return b.String()
}

// decodeID reverses encodeID.
func decodeID(enc string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(enc) {
			return "", fmt.Errorf("encoded id %q ends inside an escape", enc)
		}
		v, err := hex.DecodeString(enc[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("encoded id %q: %w", enc, err)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

func stageName(epoch int, enc, table string) string {
	return stagePrefix + strconv.Itoa(epoch) + "_" + enc + "__" + table
}

// parseStage splits a staging table's name; ok is false for other names.
func parseStage(name string) (epoch int, enc, table string, ok bool) {
	rest, found := strings.CutPrefix(name, stagePrefix)
	if !found {
		return 0, "", "", false
	}
	digits, rest, found := strings.Cut(rest, "_")
	if !found || digits == "" {
		return 0, "", "", false
	}
	epoch, err := strconv.Atoi(digits)
	if err != nil || epoch < 0 {
		return 0, "", "", false
	}
	enc, table, found = strings.Cut(rest, "__")
	if !found || enc == "" || !chsql.ValidIdent(table) {
		return 0, "", "", false
	}
	return epoch, enc, table, true
}

func markerName(enc string) string { return markerPrefix + enc }

func parseMarker(name string) (enc string, ok bool) {
	enc, ok = strings.CutPrefix(name, markerPrefix)
	return enc, ok && enc != ""
}

// lockName names the commit lock of one chain slot of a flow.
func lockName(pipeline, flow, slot string) string {
	h := sha256.Sum256([]byte(pipeline + "\x00" + flow + "\x00" + slot))
	return lockPrefix + hex.EncodeToString(h[:12])
}

// ledgerSlot is the value of the ledger's slot column for a load reaching
// positions to: its one slot, "*" when it spans several, "" when none.
func ledgerSlot(to batch.Positions) string {
	switch len(to) {
	case 0:
		return ""
	case 1:
		return sinks.Slot(to[0])
	}
	first := sinks.Slot(to[0])
	for _, p := range to[1:] {
		if sinks.Slot(p) != first {
			return "*"
		}
	}
	return first
}

// validPartitionID reports whether a partition id from system.parts can be
// written into ATTACH PARTITION ID '...': ClickHouse builds them from digits,
// letters (hashes) and '-'.
func validPartitionID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') {
			return false
		}
	}
	return true
}

// partitionOfPart returns the partition id of a part name
// (<partition>_<min>_<max>_<level>[_<mutation>]); partition ids hold no '_'.
func partitionOfPart(part string) string {
	id, _, _ := strings.Cut(part, "_")
	return id
}
