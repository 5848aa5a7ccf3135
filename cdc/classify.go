package cdc

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/sluicehq/sluice/flows/batch"
)

// Op is what an event does.
type Op uint8

// The operations of an event.
const (
	OpUpsert Op = iota
	OpDelete
	OpTruncate // SCD type 1 only: a table-wide barrier at the event's sequence
	// OpTombstone deletes the key just after its newest sequence: a
	// message with no value (a Kafka tombstone) carries no sequence of
	// its own. See Input.Tombstones.
	OpTombstone
	// OpSnapshot (SCD type 2, a Config.Snapshot flow) is a snapshot at the
	// event's sequence V: every key the snapshot does not hold is deleted
	// at V, also those first seen later (TableState.Snapshots).
	OpSnapshot
)

func (o Op) String() string {
	switch o {
	case OpUpsert:
		return "upsert"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	case OpTombstone:
		return "tombstone"
	case OpSnapshot:
		return "snapshot"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// RecordMeta is what an expression may read of a Kafka record beyond its
// position.
type RecordMeta struct {
	Timestamp time.Time // _kafka_timestamp; zero reads as null
	Key       []byte    // _kafka_key; nil reads as null
}

// FieldFilePath is the metadata field naming a file source's file.
const FieldFilePath = "_file_path"

// expression is apply_as_deletes or apply_as_truncates, compiled once
// against the environment flows/spec checks it with (spec.ExprEnv), and
// evaluated per record over one reused environment: only the identifiers
// it names are set per record. The common forms col == "literal",
// col != "literal" and col in ["a", "b"] over a string column are evaluated
// on the whole column instead.
//
// Nulls: a null value is nil. An evaluation that fails while a value it
// reads is null counts as null (so op == "D" with a null op is null, an
// upsert, as SQL would have it); null and false mean "no".
type expression struct {
	src     string
	prog    *vm.Program
	machine vm.VM
	env     map[string]any
	refs    []exprRef
	fast    *fastForm
}

type exprRef struct {
	name string
	col  int // source column, or -1 for a metadata field
}

type fastForm struct {
	col  int
	op   string // "==", "!=" or "in"
	lits []string
}

// ExprType is the Go type a value of column type t has in an expression:
// string, int64, float64 (float64 and decimal), bool, time.Time (timestamp
// and date, in UTC) or []byte. A null value is nil.
func ExprType(t batch.Type) reflect.Type {
	switch t.Kind {
	case batch.KindString:
		return reflect.TypeFor[string]()
	case batch.KindInt64:
		return reflect.TypeFor[int64]()
	case batch.KindFloat64, batch.KindDecimal:
		return reflect.TypeFor[float64]()
	case batch.KindBool:
		return reflect.TypeFor[bool]()
	case batch.KindTimestamp, batch.KindDate:
		return reflect.TypeFor[time.Time]()
	case batch.KindArray:
		return reflect.TypeFor[[]any]()
	}
	return reflect.TypeFor[[]byte]()
}

// ExprEnv is the environment expressions over a source's records compile
// against: the source's columns, plus the Kafka metadata fields for a Kafka
// source, or _file_path for a file source. The spec's validation and the
// engine both use it, so that an expression valid in one is valid in the
// other.
func ExprEnv(source batch.Schema, kafka bool) map[string]any {
	env := make(map[string]any, len(source.Columns)+len(batch.KafkaFields))
	if kafka {
		for name, t := range batch.KafkaFields {
			env[name] = reflect.Zero(ExprType(t)).Interface()
		}
	} else {
		env[FieldFilePath] = ""
	}
	for _, col := range source.Columns {
		if col.Type.Kind == batch.KindInvalid {
			continue
		}
		env[col.Name] = reflect.Zero(ExprType(col.Type)).Interface()
	}
	return env
}

func compileExpression(src string, source batch.Schema, kafka, lenient bool) (*expression, error) {
	env := ExprEnv(source, kafka)
	opts := []expr.Option{expr.Env(env), expr.AsBool()}
	if lenient {
		// A target typed by its messages: a name that is no column yet is
		// null in every record.
		opts = append(opts, expr.AllowUndefinedVariables())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, fmt.Errorf("expression %q: %s", src, msg)
	}
	tree, err := parser.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", src, err)
	}
	x := &expression{src: src, prog: prog, env: env}
	seen := map[string]bool{}
	ast.Find(tree.Node, func(n ast.Node) bool {
		id, ok := n.(*ast.IdentifierNode)
		if !ok || seen[id.Value] {
			return false
		}
		if _, known := env[id.Value]; known {
			seen[id.Value] = true
			x.refs = append(x.refs, exprRef{name: id.Value, col: source.Index(id.Value)})
		}
		return false
	})
	x.fast = fastFormOf(tree.Node, source)
	return x, nil
}

// fastFormOf recognizes col == "lit", "lit" == col, col != "lit" and
// col in ["a", ...] over a string column.
func fastFormOf(n ast.Node, source batch.Schema) *fastForm {
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return nil
	}
	strCol := func(n ast.Node) int {
		id, ok := n.(*ast.IdentifierNode)
		if !ok {
			return -1
		}
		i := source.Index(id.Value)
		if i < 0 || source.Columns[i].Type.Kind != batch.KindString {
			return -1
		}
		return i
	}
	switch b.Operator {
	case "==", "!=":
		l, r := b.Left, b.Right
		if _, ok := l.(*ast.StringNode); ok {
			l, r = r, l
		}
		col := strCol(l)
		lit, ok := r.(*ast.StringNode)
		if col < 0 || !ok {
			return nil
		}
		return &fastForm{col: col, op: b.Operator, lits: []string{lit.Value}}
	case "in":
		col := strCol(b.Left)
		arr, ok := b.Right.(*ast.ArrayNode)
		if col < 0 || !ok {
			return nil
		}
		f := &fastForm{col: col, op: "in"}
		for _, e := range arr.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return nil
			}
			f.lits = append(f.lits, s.Value)
		}
		return f
	}
	return nil
}

// eval evaluates the expression for every row; out[i] is true where it is
// true. A row whose evaluation fails gets an error in errs (by row).
func (x *expression) eval(b *batch.Batch, pos []Position, meta []RecordMeta, out []bool, errs map[int]error) {
	n := b.Len()
	if f := x.fast; f != nil {
		v := b.Vectors[f.col]
		for i := range n {
			if v.IsNull(i) {
				out[i] = false
				continue
			}
			s := v.Strs[i]
			switch f.op {
			case "==":
				out[i] = s == f.lits[0]
			case "!=":
				out[i] = s != f.lits[0]
			default:
				hit := false
				for _, l := range f.lits {
					if s == l {
						hit = true
						break
					}
				}
				out[i] = hit
			}
		}
		return
	}
	for i := range n {
		anyNull := false
		for _, r := range x.refs {
			v := x.valueOf(r, b, i, pos, meta)
			anyNull = anyNull || v == nil
			x.env[r.name] = v
		}
		res, err := x.machine.Run(x.prog, x.env)
		switch {
		case err != nil && anyNull:
			out[i] = false
		case err != nil:
			msg, _, _ := strings.Cut(err.Error(), "\n")
			errs[i] = fmt.Errorf("expression %q: %s", x.src, msg)
			out[i] = false
		default:
			t, _ := res.(bool)
			out[i] = t
		}
	}
}

// ExprValue is row i of v as an expression reads it (ExprType); nil when
// null.
func ExprValue(v *batch.Vector, i int) any {
	if v.IsNull(i) {
		return nil
	}
	switch v.Type.Kind {
	case batch.KindString:
		return v.Strs[i]
	case batch.KindInt64:
		return v.Ints[i]
	case batch.KindTimestamp:
		return time.UnixMicro(v.Ints[i]).UTC()
	case batch.KindDate:
		return batch.DateValue(v.Ints[i]).Time()
	case batch.KindFloat64:
		return v.Floats[i]
	case batch.KindDecimal:
		f, _ := strconv.ParseFloat(batch.FormatDecimal(v.Decs[i], v.Type.Scale), 64)
		return f
	case batch.KindBool:
		return v.Bools[i]
	case batch.KindBytes:
		return v.Bytes[i]
	case batch.KindArray:
		lo, hi := v.Array(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			out = append(out, ExprValue(v.Elems, j))
		}
		return out
	}
	return nil
}

func (x *expression) valueOf(r exprRef, b *batch.Batch, i int, pos []Position, meta []RecordMeta) any {
	if r.col >= 0 {
		return ExprValue(b.Vectors[r.col], i)
	}
	p := pos[i]
	switch r.name {
	case batch.FieldKafkaTopic:
		return p.Topic
	case batch.FieldKafkaPartition:
		return int64(p.Partition)
	case batch.FieldKafkaOffset:
		return p.Offset
	case batch.FieldKafkaTimestamp:
		if meta == nil || meta[i].Timestamp.IsZero() {
			return nil
		}
		return meta[i].Timestamp.UTC()
	case batch.FieldKafkaKey:
		if meta == nil || meta[i].Key == nil {
			return nil
		}
		return meta[i].Key
	case FieldFilePath:
		return p.File
	}
	return nil
}

// classifier turns records into operations with the flow's expressions.
type classifier struct {
	deletes    *expression
	truncates  *expression
	del, trunc []bool
}

func newClassifier(deletes, truncates string, source batch.Schema, kafka, lenient bool) (*classifier, error) {
	c := &classifier{}
	var err error
	if deletes != "" {
		if c.deletes, err = compileExpression(deletes, source, kafka, lenient); err != nil {
			return nil, fmt.Errorf("apply_as_deletes: %w", err)
		}
	}
	if truncates != "" {
		if c.truncates, err = compileExpression(truncates, source, kafka, lenient); err != nil {
			return nil, fmt.Errorf("apply_as_truncates: %w", err)
		}
	}
	return c, nil
}

// ClassifyOps returns the operation of each row of in as a flow's
// apply_as_deletes and apply_as_truncates (over source, the records'
// columns) decide it, before the engine applies it: in.Ops when set. A row
// whose expression fails is an upsert here (the engine dead-letters it).
// It compiles the expressions each call, so it is safe for concurrent use.
func ClassifyOps(deletes, truncates string, source batch.Schema, kafka bool, in Input) ([]Op, error) {
	var ops []Op
	switch {
	case in.Ops != nil:
		ops = slices.Clone(in.Ops)
	case deletes == "" && truncates == "":
		ops = make([]Op, in.Batch.Len())
	default:
		c, err := newClassifier(deletes, truncates, source, kafka, false)
		if err != nil {
			return nil, err
		}
		ops = make([]Op, in.Batch.Len())
		errs := map[int]error{}
		c.classify(in.Batch, in.Positions, in.Meta, ops, errs)
		for i := range errs {
			ops[i] = OpUpsert
		}
	}
	in.markTombstones(ops, nil)
	return ops, nil
}

// classify fills ops: truncates first (apply_as_truncates is evaluated
// first), then deletes, else upserts. errs gets the rows whose operation
// could not be evaluated.
func (c *classifier) classify(b *batch.Batch, pos []Position, meta []RecordMeta, ops []Op, errs map[int]error) {
	n := b.Len()
	for i := range ops {
		ops[i] = OpUpsert
	}
	var terrs, derrs map[int]error
	if c.truncates != nil {
		terrs = map[int]error{}
		c.trunc = grow(c.trunc, n)
		c.truncates.eval(b, pos, meta, c.trunc, terrs)
	}
	if c.deletes != nil {
		derrs = map[int]error{}
		c.del = grow(c.del, n)
		c.deletes.eval(b, pos, meta, c.del, derrs)
	}
	for i := range n {
		switch {
		case c.truncates != nil && c.trunc[i]:
			ops[i] = OpTruncate
		case terrs[i] != nil:
			errs[i] = fmt.Errorf("apply_as_truncates: %w", terrs[i])
		case derrs[i] != nil:
			errs[i] = fmt.Errorf("apply_as_deletes: %w", derrs[i])
		case c.deletes != nil && c.del[i]:
			ops[i] = OpDelete
		}
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
