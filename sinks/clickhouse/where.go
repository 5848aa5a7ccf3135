package clickhouse

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// whereSQL translates src, an expression of the rules dialect
// (docs/schema.md), into a ClickHouse condition over cols that every row
// the expression keeps passes: comparisons of int64, float64, string and
// bool columns with each other and with literals, in with a list of
// literals, and, or, not. Anything else (functions, arithmetic, other
// types, nil) is not translated: cond is "" when nothing is.
//
// The rules keep a row whose expression is true, and a true with a null
// operand is possible (amount != 5 with a null amount) where SQL has null:
// so a row with a null in a column the condition reads passes it too, and
// the condition is exact only when it reads no nullable column and
// translates all of src. The caller filters the rows it gets either way.
func whereSQL(src string, cols []column) (cond string, exact bool) {
	tree, err := parser.Parse(src)
	if err != nil {
		return "", false
	}
	byName := make(map[string]column, len(cols))
	for _, c := range cols {
		byName[c.Name] = c
	}
	// A conjunct that does not translate is left to the caller; the others
	// still narrow the read.
	var conds []string
	exact = true
	for _, n := range conjuncts(tree.Node) {
		tr := &translator{cols: byName}
		sql, ok := tr.bool(n)
		if !ok {
			exact = false
			continue
		}
		if len(tr.nullable) > 0 {
			exact = false
			for _, name := range tr.nullable {
				sql += " OR isNull(" + chsql.Quote(name) + ")"
			}
		}
		conds = append(conds, "("+sql+")")
	}
	return strings.Join(conds, " AND "), exact && len(conds) > 0
}

// conjuncts splits n at its top-level ands.
func conjuncts(n ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "and" || b.Operator == "&&") {
		return append(conjuncts(b.Left), conjuncts(b.Right)...)
	}
	return []ast.Node{n}
}

type translator struct {
	cols     map[string]column
	nullable []string // the nullable columns read
}

// operand is a column or a literal of a comparison.
type operand struct {
	sql  string
	kind batch.Kind
	lit  bool // a literal; an int literal also compares with a float64 column
}

func (t *translator) bool(n ast.Node) (string, bool) {
	switch n := n.(type) {
	case *ast.BinaryNode:
		switch n.Operator {
		case "and", "&&", "or", "||":
			l, ok := t.bool(n.Left)
			if !ok {
				return "", false
			}
			r, ok := t.bool(n.Right)
			if !ok {
				return "", false
			}
			op := " AND "
			if n.Operator == "or" || n.Operator == "||" {
				op = " OR "
			}
			return "(" + l + op + r + ")", true
		case "==", "!=", "<", "<=", ">", ">=":
			l, ok := t.operand(n.Left)
			if !ok {
				return "", false
			}
			r, ok := t.operand(n.Right)
			if !ok || !comparable(l, r) {
				return "", false
			}
			if (l.kind == batch.KindBool || r.kind == batch.KindBool) && n.Operator != "==" && n.Operator != "!=" {
				return "", false
			}
			op := n.Operator
			if op == "==" {
				op = "="
			}
			return "(" + l.sql + " " + op + " " + r.sql + ")", true
		case "in":
			l, ok := t.operand(n.Left)
			arr, isArr := n.Right.(*ast.ArrayNode)
			if !ok || l.lit || !isArr || len(arr.Nodes) == 0 || l.kind == batch.KindBool {
				return "", false
			}
			items := make([]string, len(arr.Nodes))
			for i, e := range arr.Nodes {
				r, ok := t.operand(e)
				if !ok || !r.lit || !comparable(l, r) {
					return "", false
				}
				items[i] = r.sql
			}
			return "(" + l.sql + " IN (" + strings.Join(items, ", ") + "))", true
		}
	case *ast.UnaryNode:
		if n.Operator == "not" || n.Operator == "!" {
			s, ok := t.bool(n.Node)
			if !ok {
				return "", false
			}
			return "(NOT " + s + ")", true
		}
	case *ast.IdentifierNode:
		if o, ok := t.operand(n); ok && o.kind == batch.KindBool {
			return "(" + o.sql + " = 1)", true
		}
	case *ast.BoolNode:
		if n.Value {
			return "1", true
		}
		return "0", true
	}
	return "", false
}

func comparable(a, b operand) bool {
	if a.lit && b.lit {
		return false // nothing to read: left to the caller
	}
	switch {
	case a.kind == b.kind:
		return true
	case a.kind == batch.KindFloat64 && b.kind == batch.KindInt64 && b.lit,
		b.kind == batch.KindFloat64 && a.kind == batch.KindInt64 && a.lit:
		return true
	}
	return false
}

func (t *translator) operand(n ast.Node) (operand, bool) {
	switch n := n.(type) {
	case *ast.IdentifierNode:
		c, ok := t.cols[n.Value]
		if !ok {
			return operand{}, false
		}
		kind := c.Type.Kind
		switch {
		case kind == batch.KindInt64 && c.storage == storeInt64,
			kind == batch.KindFloat64 && c.storage == storeFloat64,
			kind == batch.KindString && c.storage == storeString,
			kind == batch.KindBool && c.storage == storeUInt8:
		default:
			return operand{}, false
		}
		if c.Nullable && !contains(t.nullable, c.Name) {
			t.nullable = append(t.nullable, c.Name)
		}
		return operand{sql: chsql.Quote(c.Name), kind: kind}, true
	case *ast.IntegerNode:
		return operand{sql: strconv.Itoa(n.Value), kind: batch.KindInt64, lit: true}, true
	case *ast.FloatNode:
		return operand{sql: "toFloat64(" + strconv.FormatFloat(n.Value, 'g', -1, 64) + ")", kind: batch.KindFloat64, lit: true}, true
	case *ast.StringNode:
		return operand{sql: "unhex('" + hex.EncodeToString([]byte(n.Value)) + "')", kind: batch.KindString, lit: true}, true
	case *ast.BoolNode:
		if n.Value {
			return operand{sql: "1", kind: batch.KindBool, lit: true}, true
		}
		return operand{sql: "0", kind: batch.KindBool, lit: true}, true
	case *ast.UnaryNode:
		if n.Operator != "-" {
			return operand{}, false
		}
		switch x := n.Node.(type) {
		case *ast.IntegerNode:
			return operand{sql: "-" + strconv.Itoa(x.Value), kind: batch.KindInt64, lit: true}, true
		case *ast.FloatNode:
			return operand{sql: "toFloat64(" + strconv.FormatFloat(-x.Value, 'g', -1, 64) + ")", kind: batch.KindFloat64, lit: true}, true
		}
	}
	return operand{}, false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
