// Package rules applies a flow's rules to each decoded record, in order:
// its computed columns, its where filter, then its expectations
// (docs/schema.md). Expressions are expr-lang over the record's columns,
// read as cdc.ExprValue gives them.
package rules

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
)

// Dead-letter reasons of the rules.
const (
	// ReasonExpectation: a record violated an expectation whose
	// on_violation is drop.
	ReasonExpectation = "expectation"
	// ReasonExpression: a computed column's expression failed, or gave a
	// value its type cannot hold exactly.
	ReasonExpression = cdc.ReasonExpression
)

// Rules are a flow's compiled rules; safe for concurrent use.
type Rules struct {
	out      batch.Schema
	reads    []string // the source columns some rule names
	computed []computed
	where    *program
	exps     []expectation
}

// run is one Apply's evaluation state.
type run struct {
	env     map[string]any
	machine vm.VM
}

type program struct {
	src  string
	prog *vm.Program
	refs []string // the columns it names
	nils bool     // it names nil: it tests for null itself
}

type computed struct {
	col batch.Column
	program
}

type expectation struct {
	name, action string
	program
}

// Reject is a record the rules send to the dead letters.
type Reject struct {
	Row    int    // in the batch given to Apply
	Reason string // ReasonExpectation or ReasonExpression
	Msg    string // a sentence naming the expectation or the column
}

// Result is what Apply made of a batch.
type Result struct {
	Batch    *batch.Batch     // the rows kept, of Schema()
	Rows     []int            // for each row kept, its row in the batch given
	Rejects  []Reject         // rows for the dead letters
	Filtered int64            // rows the where filter left out
	Violated map[string]int64 // per expectation, the rows that violated it (warn and drop)
	Failed   *Reject          // a violated fail expectation: the batch must not be committed
}

// New compiles a flow's rules over the records of source (its decoded
// columns). It returns nil when the flow has none. With lenient (a table
// typed by its messages, whose columns come as its messages bring them),
// a name that is no column yet is NULL in every record.
func New(f *spec.Flow, source batch.Schema, lenient bool) (*Rules, error) {
	if len(f.ComputedColumns) == 0 && f.Where == "" && len(f.Expectations) == 0 {
		return nil, nil
	}
	r := &Rules{out: batch.Schema{Columns: append([]batch.Column(nil), source.Columns...)}}
	compile := func(what, src string, opts ...expr.Option) (program, error) {
		typed := map[string]any{}
		for _, c := range r.out.Columns {
			typed[c.Name] = reflect.Zero(cdc.ExprType(c.Type)).Interface()
		}
		tree, perr := parser.Parse(src)
		callees := map[ast.Node]bool{} // names of functions, not of columns
		if lenient {
			opts = append(opts, expr.AllowUndefinedVariables())
			if perr == nil {
				ast.Find(tree.Node, func(n ast.Node) bool {
					if c, ok := n.(*ast.CallNode); ok {
						callees[c.Callee] = true
					}
					return false
				})
			}
		}
		p, err := expr.Compile(src, append([]expr.Option{expr.Env(typed)}, opts...)...)
		if err != nil {
			msg, _, _ := strings.Cut(err.Error(), "\n")
			return program{}, fmt.Errorf("%s: expression %q: %s", what, src, msg)
		}
		out := program{src: src, prog: p}
		if perr == nil {
			ast.Find(tree.Node, func(n ast.Node) bool {
				if _, ok := n.(*ast.NilNode); ok {
					out.nils = true
				}
				if id, ok := n.(*ast.IdentifierNode); ok && !slices.Contains(out.refs, id.Value) {
					// A column, or (lenient) a name that is no column yet:
					// NULL in every record.
					if _, col := typed[id.Value]; col || lenient && !callees[n] {
						out.refs = append(out.refs, id.Value)
					}
				}
				return false
			})
		}
		return out, nil
	}
	for _, cc := range f.ComputedColumns {
		p, err := compile("computed column "+cc.Name, cc.Expr)
		if err != nil {
			return nil, err
		}
		for _, name := range p.refs {
			if k := r.out.Index(name); k >= 0 && r.out.Columns[k].Type.Scalar().Kind == batch.KindDecimal {
				// A decimal reads as a float64: the result would not be exact.
				return nil, fmt.Errorf("computed column %s reads the decimal column %s, which an expression sees as a float64: compute it from other columns", cc.Name, name)
			}
		}
		col := batch.Column{Name: cc.Name, Type: cc.Type, Nullable: cc.Nullable}
		r.computed = append(r.computed, computed{col: col, program: p})
		r.out.Columns = append(r.out.Columns, col)
	}
	if f.Where != "" {
		p, err := compile("where", f.Where, expr.AsBool())
		if err != nil {
			return nil, err
		}
		r.where = &p
	}
	for _, e := range f.Expectations {
		p, err := compile("expectation "+e.Name, e.Expr, expr.AsBool())
		if err != nil {
			return nil, err
		}
		action := e.OnViolation
		if action == "" {
			action = spec.ViolationWarn
		}
		r.exps = append(r.exps, expectation{name: e.Name, action: action, program: p})
	}
	progs := []program{}
	for _, c := range r.computed {
		progs = append(progs, c.program)
	}
	if r.where != nil {
		progs = append(progs, *r.where)
	}
	for _, e := range r.exps {
		progs = append(progs, e.program)
	}
	for _, p := range progs {
		for _, name := range p.refs {
			if source.Index(name) >= 0 && !slices.Contains(r.reads, name) {
				r.reads = append(r.reads, name)
			}
		}
	}
	return r, nil
}

// Schema is the columns of the rows Apply keeps: the source's, then the
// computed ones.
func (r *Rules) Schema() batch.Schema { return r.out }

// Apply runs the rules over every row of b (of the source's columns) but
// those pass marks (a CDC flow's deletes and truncates, which carry little
// more than their key): those are kept as they are, their computed
// columns null where they cannot be computed. pass may be nil.
// Expectations and the filter see null as SQL does: a comparison with a
// null value is null, which keeps a row in no filter and violates no
// expectation. A computed column whose expression fails on a null value
// is null.
func (r *Rules) Apply(b *batch.Batch, pass []bool) Result {
	n := b.Len()
	x := &run{env: make(map[string]any, len(r.out.Columns))}
	reads := make([]*batch.Vector, len(r.reads))
	for k, name := range r.reads {
		reads[k] = b.Column(name)
	}
	res := Result{Batch: batch.New(r.out, n), Violated: map[string]int64{}}
	extra := make([]*batch.Vector, len(r.computed))
	for k, c := range r.computed {
		extra[k] = batch.NewVector(c.col.Type, 1)
	}
rows:
	for i := range n {
		for k, name := range r.reads { // only what the rules name: this runs per row
			if reads[k] != nil {
				x.env[name] = cdc.ExprValue(reads[k], i)
			}
		}
		through := pass != nil && pass[i]
		for k, c := range r.computed {
			extra[k].Truncate(0)
			v, null, err := x.eval(c.program)
			if err == nil && !null {
				err = appendValue(extra[k], v)
			}
			if through && (err != nil || null) {
				extra[k].Truncate(0)
				extra[k].AppendNull()
				x.env[c.col.Name] = nil
				continue
			}
			switch {
			case err != nil:
				res.Rejects = append(res.Rejects, Reject{Row: i, Reason: ReasonExpression,
					Msg: fmt.Sprintf("computed column %s: %v", c.col.Name, err)})
				continue rows
			case null && !c.col.Nullable:
				res.Rejects = append(res.Rejects, Reject{Row: i, Reason: ReasonExpression,
					Msg: fmt.Sprintf("computed column %s: %q is null, and the column is not nullable", c.col.Name, c.src)})
				continue rows
			case null:
				extra[k].AppendNull()
			}
			x.env[c.col.Name] = cdc.ExprValue(extra[k], 0)
		}
		if r.where != nil && !through {
			if v, null, err := x.eval(*r.where); err != nil || null || v != true {
				if err != nil {
					res.Rejects = append(res.Rejects, Reject{Row: i, Reason: ReasonExpression, Msg: "where: " + err.Error()})
				} else {
					res.Filtered++
				}
				continue rows
			}
		}
		drop := ""
		for _, e := range r.exps {
			if through {
				break
			}
			v, null, err := x.eval(e.program)
			if err != nil {
				res.Rejects = append(res.Rejects, Reject{Row: i, Reason: ReasonExpression, Msg: fmt.Sprintf("expectation %s: %v", e.name, err)})
				continue rows
			}
			if null || v == true {
				continue
			}
			msg := fmt.Sprintf("expectation %s violated: %s", e.name, e.src)
			switch e.action {
			case spec.ViolationFail:
				if res.Failed == nil {
					res.Failed = &Reject{Row: i, Reason: ReasonExpectation, Msg: msg}
				}
			case spec.ViolationDrop:
				res.Violated[e.name]++
				if drop == "" {
					drop = msg
				}
			default:
				res.Violated[e.name]++
			}
		}
		if drop != "" {
			res.Rejects = append(res.Rejects, Reject{Row: i, Reason: ReasonExpectation, Msg: drop})
			continue
		}
		for k := range b.Vectors {
			res.Batch.Vectors[k].AppendFrom(b.Vectors[k], i)
		}
		for k := range r.computed {
			res.Batch.Vectors[len(b.Vectors)+k].AppendFrom(extra[k], 0)
		}
		res.Rows = append(res.Rows, i)
	}
	return res
}

// eval evaluates p over the current row. null says the result is null:
// nil, or an error while a value the row holds is null (as SQL has it).
func (x *run) eval(p program) (v any, null bool, err error) {
	v, err = x.machine.Run(p.prog, x.env)
	if err != nil {
		for _, name := range p.refs {
			if x.env[name] == nil {
				return nil, true, nil
			}
		}
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, false, fmt.Errorf("%q: %s", p.src, msg)
	}
	if v == false && !p.nils {
		// amount > 0 with a null amount is null, not false, unless the
		// expression asks about null itself (amount != nil).
		for _, name := range p.refs {
			if x.env[name] == nil {
				return nil, true, nil
			}
		}
	}
	return v, v == nil, nil
}

// appendValue appends an expression's value to a vector of the column's
// type, exactly or not at all.
func appendValue(v *batch.Vector, x any) error {
	bad := func() error { return fmt.Errorf("%v (%T) is not a %v", x, x, v.Type) }
	switch v.Type.Kind {
	case batch.KindString:
		s, ok := x.(string)
		if !ok {
			return bad()
		}
		v.AppendString(s)
	case batch.KindBytes:
		switch b := x.(type) {
		case []byte:
			v.AppendBytes(b)
		case string:
			v.AppendBytes([]byte(b))
		default:
			return bad()
		}
	case batch.KindBool:
		b, ok := x.(bool)
		if !ok {
			return bad()
		}
		v.AppendBool(b)
	case batch.KindInt64:
		switch n := x.(type) {
		case int:
			v.AppendInt(int64(n))
		case int64:
			v.AppendInt(n)
		case float64:
			if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
				return fmt.Errorf("%v is not an integer int64 holds exactly", n)
			}
			v.AppendInt(int64(n))
		default:
			return bad()
		}
	case batch.KindFloat64:
		switch n := x.(type) {
		case int:
			v.AppendFloat(float64(n))
		case int64:
			v.AppendFloat(float64(n))
		case float64:
			v.AppendFloat(n)
		default:
			return bad()
		}
	case batch.KindTimestamp, batch.KindDate:
		t, ok := x.(time.Time)
		if !ok {
			return bad()
		}
		if t.Nanosecond()%1000 != 0 {
			return fmt.Errorf("%s has a fraction of a microsecond, which a timestamp cannot hold", t.Format(time.RFC3339Nano))
		}
		if v.Type.Kind == batch.KindTimestamp {
			v.AppendInt(t.UnixMicro())
			break
		}
		u := t.UTC()
		if u.Hour() != 0 || u.Minute() != 0 || u.Second() != 0 || u.Nanosecond() != 0 {
			return fmt.Errorf("%s is not a midnight UTC, not a date", u.Format(time.RFC3339Nano))
		}
		v.AppendInt(int64(batch.DateFromTime(u)))
	case batch.KindDecimal:
		var text string
		switch n := x.(type) {
		case int:
			text = strconv.Itoa(n)
		case int64:
			text = strconv.FormatInt(n, 10)
		case float64:
			text = strconv.FormatFloat(n, 'f', -1, 64)
		case string:
			text = n
		default:
			return bad()
		}
		d, err := batch.ParseDecimal(text, v.Type.Precision, v.Type.Scale)
		if err != nil {
			return err
		}
		v.AppendDecimal(d)
	case batch.KindArray:
		xs := reflect.ValueOf(x)
		if xs.Kind() != reflect.Slice {
			return bad()
		}
		n := v.Elems.Len()
		for j := range xs.Len() {
			e := xs.Index(j).Interface()
			if e == nil {
				v.Elems.Truncate(n)
				return fmt.Errorf("element %d is null: the elements of %v are never null", j, v.Type)
			}
			if err := appendValue(v.Elems, e); err != nil {
				v.Elems.Truncate(n)
				return fmt.Errorf("element %d: %w", j, err)
			}
		}
		v.EndArray()
	default:
		return bad()
	}
	return nil
}
