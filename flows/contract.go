package flows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
)

// A CDC target's rows and key states were written under its keys, its SCD
// type and the type of its sequence: each new change is compared with the
// sequence its key's state holds, so a state written under another type
// would decide wrongly, silently. The checkpoint store keeps what each
// target was first written under, and a start under anything else is
// refused until a refresh empties the target (docs/schema.md).

// targetContract is what a CDC target is written under.
type targetContract struct {
	Keys     []string `json:"keys"`
	SCDType  int      `json:"scd_type"`
	Sequence string   `json:"sequence,omitempty"` // the sequence's type(s), or the snapshot version's; "" when not known yet
}

// contractOf returns what the spec now writes table t under.
func (r *runner) contractOf(t *spec.Table) targetContract {
	c := targetContract{Keys: t.Keys, SCDType: t.SCDType}
	for _, f := range r.p.FlowsOf(t.Name) {
		switch {
		case f.Kind == spec.KindAutoCDC && len(f.SequenceBy) > 0:
			src := f.RecordSchema()
			var types []string
			for _, name := range f.SequenceBy {
				k := src.Index(name)
				if k < 0 {
					return c
				}
				types = append(types, src.Columns[k].Type.String())
			}
			c.Sequence = strings.Join(types, ", ")
			return c
		case f.Kind == spec.KindAutoCDCFromSnapshot:
			if vt := r.versionType(f); vt.Kind != batch.KindInvalid {
				c.Sequence = vt.String()
			}
		}
	}
	return c
}

// checkContracts compares every CDC target's contract with the one it was
// written under, records it for a target written the first time or just
// emptied by a refresh (refreshed), and refuses the others that differ.
func (r *runner) checkContracts(ctx context.Context, refreshed []string) error {
	var problems []string
	for i := range r.p.Tables {
		t := &r.p.Tables[i]
		if !t.CDC || len(t.Schema.Columns) == 0 {
			continue
		}
		for {
			problem, err := r.checkContract(ctx, t, slices.Contains(refreshed, t.Name))
			if errors.Is(err, checkpoint.ErrStale) {
				continue // another process recorded it meanwhile: compare with that
			}
			if err != nil {
				return err
			}
			if problem != "" {
				problems = append(problems, problem)
			}
			break
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkTargetContract checks (and records) the contract of a CDC target
// typed by its messages once they gave it columns (checkContracts skips a
// target without any).
func (r *runner) checkTargetContract(ctx context.Context, table string) error {
	r.dataMu.RLock()
	t := r.p.Table(table)
	r.dataMu.RUnlock()
	for {
		problem, err := r.checkContract(ctx, t, false)
		switch {
		case errors.Is(err, checkpoint.ErrStale):
			continue
		case err != nil:
			return err
		case problem != "":
			return errors.New(problem)
		}
		return nil
	}
}

// checkContract checks one target (see checkContracts) and returns what
// refuses it, if anything.
func (r *runner) checkContract(ctx context.Context, t *spec.Table, refreshed bool) (string, error) {
	want := r.contractOf(t)
	key := checkpoint.Key{Pipeline: r.p.Pipeline, Kind: checkpoint.KindTarget, Name: t.Name}
	e, err := r.checkpoints.Get(ctx, key)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return "", err
	}
	if err == nil {
		var had targetContract
		if err := json.Unmarshal(e.Value, &had); err != nil {
			return "", fmt.Errorf("table %s: the checkpoint of what it was written under does not decode: %w", t.Name, err)
		}
		learnt := had.Sequence == "" && want.Sequence != ""
		if had.Sequence == "" {
			had.Sequence = want.Sequence // not known then: nothing to compare
		}
		diffs := had.diff(want)
		if len(diffs) == 0 && !learnt {
			return "", nil
		}
		if len(diffs) > 0 && !refreshed {
			var names []string
			for _, f := range r.p.FlowsOf(t.Name) {
				names = append(names, f.Name)
			}
			return fmt.Sprintf("table %s: %s; its rows and key states were written under the old one: run `sluice update --refresh %s` to empty it and load it again",
				t.Name, strings.Join(diffs, ", "), strings.Join(names, ",")), nil
		}
	}
	value, _ := json.Marshal(want)
	if err := r.checkpoints.Put(ctx, key, checkpoint.Entry{Value: value, Revision: e.Revision}); err != nil {
		if errors.Is(err, checkpoint.ErrStale) {
			return "", err
		}
		return "", fmt.Errorf("table %s: record what it is written under: %w", t.Name, err)
	}
	return "", nil
}

// diff names what changed from c to now, old and new.
func (c targetContract) diff(now targetContract) []string {
	var out []string
	if !slices.Equal(c.Keys, now.Keys) {
		out = append(out, fmt.Sprintf("keys changed from [%s] to [%s]", strings.Join(c.Keys, ", "), strings.Join(now.Keys, ", ")))
	}
	if c.SCDType != now.SCDType {
		out = append(out, fmt.Sprintf("SCD type changed from %d to %d", c.SCDType, now.SCDType))
	}
	if c.Sequence != now.Sequence {
		out = append(out, fmt.Sprintf("the sequence type changed from %s to %s", c.Sequence, now.Sequence))
	}
	return out
}
