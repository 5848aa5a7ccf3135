package spec

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/sluicehq/sluice/flows/batch"
)

// The decoder walks go-yaml's AST into the typed structs of this package. It
// does the work a strict yaml.Unmarshal would, but reports every problem
// (unknown keys, values of the wrong shape or type) with its position instead
// of stopping at the first, and records where each key was written so that
// validation can point at it.

// maxDepth bounds nesting, aliases and merges included.
const maxDepth = 64

type pos struct {
	line, col int
	null      bool // the key was written with an empty value
}

// positions maps a key path (flows[1].source.kafka.topic) to where its value
// (a scalar) or its key (a mapping or a list) was written.
type positions map[string]pos

// at returns the position of path, or of its closest written ancestor.
func (ps positions) at(path string) pos {
	for {
		if p, ok := ps[path]; ok {
			return p
		}
		if path == "" {
			return pos{}
		}
		path = parentPath(path)
	}
}

// has reports whether the key at path was written, with a value.
func (ps positions) has(path string) bool {
	p, ok := ps[path]
	return ok && !p.null
}

func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

type decoder struct {
	file    string
	lookup  func(string) (string, bool)
	probs   *Problems
	pos     positions
	text    map[ast.Node]string   // scalar values after ${VAR} expansion
	anchors map[string]ast.Node   // anchor name -> its value, while scanning
	aliases map[ast.Node]ast.Node // alias -> the anchored value it names
	bad     map[string]bool       // paths whose value did not decode

	envErrs  map[ast.Node][]error // expansion errors not reported yet
	envOrder []ast.Node           // nodes with expansion errors, in document order
	depth    int
}

func newDecoder(file string, lookup func(string) (string, bool), probs *Problems) *decoder {
	return &decoder{
		file:    file,
		lookup:  lookup,
		probs:   probs,
		pos:     positions{},
		text:    map[ast.Node]string{},
		anchors: map[string]ast.Node{},
		aliases: map[ast.Node]ast.Node{},
		bad:     map[string]bool{},
		envErrs: map[ast.Node][]error{},
	}
}

func (d *decoder) addf(at pos, path, format string, args ...any) {
	d.bad[path] = true
	*d.probs = append(*d.probs, Problem{File: d.file, Line: at.line, Column: at.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// parse parses data into an AST and expands ${VAR} in its scalar values. It
// returns the root node (nil for an empty document) and whether parsing
// succeeded.
func (d *decoder) parse(data []byte) (ast.Node, bool) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil && ye.GetToken().Position != nil {
			p := ye.GetToken().Position
			d.addf(pos{line: p.Line, col: p.Column}, "", "%s", ye.GetMessage())
		} else {
			msg, _, _ := strings.Cut(err.Error(), "\n")
			d.addf(pos{}, "", "%s", msg)
		}
		return nil, false
	}
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		d.pos[""] = pos{line: 1}
		return nil, true
	}
	if len(docs) > 1 {
		d.addf(nodePos(docs[1].Body), "", "a spec is a single YAML document, found %d", len(docs))
	}
	d.pos[""] = nodePos(docs[0].Body)
	d.scan(docs[0].Body, 0)
	return docs[0].Body, true
}

// scan walks the AST in document order: it records anchors, resolves each
// alias to the anchor defined before it, and expands ${VAR} in every scalar
// value. Keys are not expanded; comments are not in the AST.
func (d *decoder) scan(n ast.Node, depth int) {
	if n == nil || depth > 4*maxDepth {
		return
	}
	switch x := n.(type) {
	case *ast.MappingNode:
		for _, mv := range x.Values {
			d.scan(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.scan(x.Value, depth+1)
	case *ast.SequenceNode:
		for _, v := range x.Values {
			d.scan(v, depth+1)
		}
	case *ast.AnchorNode:
		if x.Name != nil {
			d.anchors[tokenText(x.Name)] = x.Value
		}
		d.scan(x.Value, depth+1)
	case *ast.AliasNode:
		if x.Value != nil {
			if target, ok := d.anchors[tokenText(x.Value)]; ok {
				d.aliases[x] = target
			}
		}
	case *ast.TagNode:
		d.scan(x.Value, depth+1)
	case *ast.LiteralNode:
		if x.Value != nil {
			d.expandNode(x, x.Value.Value)
		}
	case *ast.StringNode:
		d.expandNode(x, x.Value)
	}
}

func (d *decoder) expandNode(n ast.Node, s string) {
	if !strings.Contains(s, "$") {
		return
	}
	out, errs := expandEnv(s, d.lookup)
	if len(errs) > 0 {
		d.envErrs[n] = errs
		d.envOrder = append(d.envOrder, n)
	}
	d.text[n] = out
}

// envProblems reports the expansion errors of node n under path, once.
func (d *decoder) envProblems(n ast.Node, path string) bool {
	errs, ok := d.envErrs[n]
	if !ok {
		return false
	}
	for _, err := range errs {
		d.addf(nodePos(n), path, "%v", err)
	}
	delete(d.envErrs, n)
	return true
}

// expandEnv replaces ${VAR} with the variable's value, ${VAR:-default}
// with it or, when unset or empty, the default, and $${ with a literal ${.
// It reports every unset variable (${VAR:?message} with its message) and
// malformed reference.
func expandEnv(s string, lookup func(string) (string, bool)) (string, []error) {
	var b strings.Builder
	var errs []error
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte('$')
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			errs = append(errs, fmt.Errorf("unterminated ${ in %q (write $${ for a literal ${)", s))
			b.WriteString(s[i:])
			break
		}
		ref := s[i+2 : i+2+end]
		// ${VAR:-default} when VAR is unset or empty; ${VAR:?message} fails
		// with the message then, as POSIX shells do.
		name, op, arg := ref, "", ""
		if j := strings.Index(ref, ":-"); j >= 0 {
			name, op, arg = ref[:j], ":-", ref[j+2:]
		} else if j := strings.Index(ref, ":?"); j >= 0 {
			name, op, arg = ref[:j], ":?", ref[j+2:]
		}
		switch val, ok := lookup(name); {
		case !isVarName(name):
			errs = append(errs, fmt.Errorf("invalid variable name %q in ${%s} (write $${ for a literal ${)", name, ref))
		case op == ":-" && (!ok || val == ""):
			b.WriteString(arg)
		case op == ":?" && (!ok || val == ""):
			if arg == "" {
				arg = "not set"
			}
			errs = append(errs, fmt.Errorf("environment variable %s: %s", name, arg))
		case !ok:
			errs = append(errs, fmt.Errorf("environment variable %s is not set (write ${%s:-default} for a default)", name, name))
		default:
			b.WriteString(val)
		}
		i += 2 + end + 1
	}
	return b.String(), errs
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

func tokenText(n ast.Node) string {
	if s, ok := n.(*ast.StringNode); ok {
		return s.Value
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// nodePos returns where a node starts: for a mapping its first key.
func nodePos(n ast.Node) pos {
	switch x := n.(type) {
	case nil:
		return pos{}
	case *ast.MappingNode:
		if len(x.Values) > 0 {
			return nodePos(x.Values[0])
		}
	case *ast.MappingValueNode:
		if x.Key != nil {
			return nodePos(x.Key)
		}
	case *ast.LiteralNode:
		if x.Start != nil && x.Start.Position != nil {
			return pos{line: x.Start.Position.Line, col: x.Start.Position.Column}
		}
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return pos{line: tk.Position.Line, col: tk.Position.Column}
	}
	return pos{}
}

// unwrap resolves tags, anchors and aliases down to the value node. It
// returns nil, having reported why, for an alias it cannot resolve.
func (d *decoder) unwrap(n ast.Node, path string) ast.Node {
	v, why := d.resolve(n)
	if why != "" {
		d.addf(nodePos(n), path, "%s", why)
	}
	return v
}

// resolve is unwrap without reporting: it returns nil and the reason.
func (d *decoder) resolve(n ast.Node) (ast.Node, string) {
	for range maxDepth {
		switch x := n.(type) {
		case *ast.TagNode:
			n = x.Value
		case *ast.AnchorNode:
			n = x.Value
		case *ast.AliasNode:
			target, ok := d.aliases[x]
			if !ok {
				return nil, "unknown alias *" + tokenText(x.Value)
			}
			n = target
		default:
			return n, ""
		}
	}
	return nil, "aliases nest too deep"
}

func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode, nil:
		return false
	}
	return true
}

// scalar returns the text of a scalar value node, after expansion.
func (d *decoder) scalar(n ast.Node) (string, bool) {
	if t, ok := d.text[n]; ok {
		return t, true
	}
	switch x := n.(type) {
	case *ast.StringNode:
		return x.Value, true
	case *ast.LiteralNode:
		if x.Value == nil {
			return "", true
		}
		return x.Value.Value, true
	case *ast.NullNode:
		return "", true
	case *ast.MappingNode:
		return flowPair(x)
	case *ast.MappingValueNode, *ast.SequenceNode, *ast.MergeKeyNode:
		return "", false
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value, true
	}
	return "", false
}

// flowPair recovers host:port written in a flow list inside a flow mapping
// ({addr: [ch:9000]}), which the parser reads as the mapping {ch: 9000}: a
// one-entry flow mapping whose key, colon and value touch is the scalar text.
func flowPair(m *ast.MappingNode) (string, bool) {
	if len(m.Values) != 1 {
		return "", false
	}
	mv := m.Values[0]
	k, v, colon := mv.Key, mv.Value, mv.Start
	if k == nil || v == nil || colon == nil || !isScalar(k) || !isScalar(v) {
		return "", false
	}
	kt, vt := k.GetToken(), v.GetToken()
	if kt == nil || vt == nil || kt.Position == nil || vt.Position == nil || colon.Position == nil {
		return "", false
	}
	if kt.Type != token.StringType || vt.Type == token.DoubleQuoteType || vt.Type == token.SingleQuoteType {
		return "", false
	}
	kp, cp, vp := kt.Position, colon.Position, vt.Position
	if kp.Line != vp.Line || cp.Line != vp.Line || kp.Column+len(kt.Value) != cp.Column || cp.Column+1 != vp.Column {
		return "", false
	}
	return kt.Value + ":" + vt.Value, true
}

func shape(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	}
	return "a scalar"
}

// entries returns the key/value pairs of a mapping, with merge keys (<<)
// resolved: explicit keys first, then merged keys not given explicitly.
func (d *decoder) entries(n ast.Node, path string) ([]*ast.MappingValueNode, bool) {
	var vals []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		vals = m.Values
	case *ast.MappingValueNode:
		vals = []*ast.MappingValueNode{m}
	default:
		return nil, false
	}
	if d.depth > maxDepth {
		d.addf(nodePos(n), path, "merge keys nest too deep")
		return nil, true
	}
	var out, merged []*ast.MappingValueNode
	for _, mv := range vals {
		if _, ok := mv.Key.(*ast.MergeKeyNode); !ok {
			out = append(out, mv)
			continue
		}
		src := d.unwrap(mv.Value, path)
		srcs := []ast.Node{src}
		if seq, ok := src.(*ast.SequenceNode); ok {
			srcs = srcs[:0]
			for _, it := range seq.Values {
				srcs = append(srcs, d.unwrap(it, path))
			}
		}
		for _, s := range srcs {
			if s == nil {
				continue
			}
			d.depth++
			es, ok := d.entries(s, path)
			d.depth--
			if !ok {
				d.addf(nodePos(mv.Value), path, "<< merges a mapping or a list of mappings, not %s", shape(s))
				continue
			}
			merged = append(merged, es...)
		}
	}
	if len(merged) == 0 {
		return out, true
	}
	seen := map[string]bool{}
	for _, mv := range out {
		seen[d.keyText(mv.Key)] = true
	}
	for _, mv := range merged {
		if k := d.keyText(mv.Key); !seen[k] {
			seen[k] = true
			out = append(out, mv)
		}
	}
	return out, true
}

func (d *decoder) keyText(k ast.MapKeyNode) string {
	if k == nil {
		return ""
	}
	var n ast.Node = k
	if mk, ok := k.(*ast.MappingKeyNode); ok {
		n = mk.Value
	}
	if t, ok := n.(*ast.TagNode); ok {
		n = t.Value
	}
	if n == nil || !isScalar(n) {
		return ""
	}
	return tokenText(n)
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	typeType     = reflect.TypeFor[batch.Type]()
)

type fieldOpts struct {
	scalar bool // a list also accepts one scalar
	size   bool // an integer or a byte size with a unit
}

type fieldInfo struct {
	index int
	opts  fieldOpts
}

type structInfo struct {
	fields map[string]fieldInfo
	names  []string // sorted
	line   int      // index of the Line field, or -1
}

var structInfos = map[reflect.Type]*structInfo{}

func infoOf(t reflect.Type) *structInfo {
	if si, ok := structInfos[t]; ok {
		return si
	}
	si := &structInfo{fields: map[string]fieldInfo{}, line: -1}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" || tag == "" {
			if f.Name == "Line" && f.Type.Kind() == reflect.Int {
				si.line = i
			}
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fi := fieldInfo{index: i}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "scalar":
				fi.opts.scalar = true
			case "size":
				fi.opts.size = true
			}
		}
		si.fields[name] = fi
		si.names = append(si.names, name)
	}
	sort.Strings(si.names)
	structInfos[t] = si
	return si
}

func init() {
	// Build the field tables of every struct the spec holds up front, so
	// that decoding never writes the shared map (Parse runs concurrently).
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Pipeline]().PkgPath() {
			return
		}
		if _, done := structInfos[t]; done {
			return
		}
		si := infoOf(t)
		for _, name := range si.names {
			walk(t.Field(si.fields[name].index).Type)
		}
	}
	walk(reflect.TypeFor[Pipeline]())
}

// decode decodes the root node into p.
func (d *decoder) decode(root ast.Node, p *Pipeline) {
	if root != nil {
		d.value(root, reflect.ValueOf(p).Elem(), "", fieldOpts{})
	}
	for _, n := range d.envOrder {
		d.envProblems(n, "") // values of keys that were not decoded
	}
}

// value decodes node n into v (settable), reporting problems under path.
func (d *decoder) value(n ast.Node, v reflect.Value, path string, opts fieldOpts) {
	if d.depth > maxDepth {
		d.addf(nodePos(n), path, "nesting too deep")
		return
	}
	d.depth++
	defer func() { d.depth-- }()

	n = d.unwrap(n, path)
	if n == nil {
		return
	}
	if _, ok := n.(*ast.NullNode); ok {
		return // an empty value leaves the default
	}
	at := nodePos(n)
	switch v.Type() {
	case durationType:
		if text, ok := d.want(n, path, "a duration"); ok {
			dur, err := parseDuration(text)
			if err != nil {
				d.addf(at, path, "%v", err)
				return
			}
			v.SetInt(int64(dur))
		}
		return
	case typeType:
		if text, ok := d.want(n, path, "a column type"); ok {
			t, err := batch.ParseType(text)
			if err != nil {
				if strings.HasPrefix(strings.ToLower(text), "decimal(") && !strings.Contains(text, ")") {
					d.addf(at, path, "%v (inside {...} quote it: \"decimal(P,S)\")", err)
					return
				}
				d.addf(at, path, "%v", err)
				return
			}
			v.Set(reflect.ValueOf(t))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		d.value(n, nv.Elem(), path, opts)
		v.Set(nv)
	case reflect.Struct:
		d.structValue(n, v, path)
	case reflect.Slice:
		var items []ast.Node
		switch x := n.(type) {
		case *ast.SequenceNode:
			items = x.Values
		default:
			if !opts.scalar || !isScalar(n) {
				d.addf(at, path, "want a list, got %s", shape(n))
				return
			}
			items = []ast.Node{n}
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		if _, single := n.(*ast.SequenceNode); !single {
			d.value(n, s.Index(0), path, fieldOpts{})
			v.Set(s)
			return
		}
		for i, it := range items {
			ip := indexPath(path, i)
			d.pos[ip] = nodePos(it)
			d.value(it, s.Index(i), ip, fieldOpts{})
		}
		v.Set(s)
	case reflect.Map:
		ents, ok := d.entries(n, path)
		if !ok {
			d.addf(at, path, "want a mapping, got %s", shape(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(ents))
		for _, mv := range ents {
			key := d.keyText(mv.Key)
			kp := joinPath(path, key)
			d.pos[kp] = nodePos(mv.Value)
			ev := reflect.New(v.Type().Elem()).Elem()
			d.value(mv.Value, ev, kp, fieldOpts{})
			m.SetMapIndex(reflect.ValueOf(key), ev)
		}
		v.Set(m)
	case reflect.String:
		if text, ok := d.want(n, path, "a string"); ok {
			v.SetString(text)
		}
	case reflect.Bool:
		if text, ok := d.want(n, path, "true or false"); ok {
			switch strings.ToLower(text) {
			case "true":
				v.SetBool(true)
			case "false":
				v.SetBool(false)
			default:
				d.addf(at, path, "want true or false, got %q", text)
			}
		}
	case reflect.Int, reflect.Int64:
		if text, ok := d.want(n, path, "an integer"); ok {
			var x int64
			var err error
			if opts.size {
				x, err = parseSize(text)
			} else {
				x, err = strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(text), "_", ""), 10, 64)
				if err != nil {
					err = fmt.Errorf("want an integer, got %q", text)
				}
			}
			if err == nil && v.OverflowInt(x) {
				err = fmt.Errorf("%s is out of range", text)
			}
			if err != nil {
				d.addf(at, path, "%v", err)
				return
			}
			v.SetInt(x)
		}
	default:
		panic(fmt.Sprintf("spec: no decoder for %v", v.Type()))
	}
}

func (d *decoder) want(n ast.Node, path, what string) (string, bool) {
	text, ok := d.scalar(n)
	if !ok {
		d.addf(nodePos(n), path, "want %s, got %s", what, shape(n))
		return "", false
	}
	if d.envProblems(n, path) {
		return "", false
	}
	return text, true
}

func (d *decoder) structValue(n ast.Node, v reflect.Value, path string) {
	ents, ok := d.entries(n, path)
	if !ok {
		d.addf(nodePos(n), path, "want a mapping, got %s", shape(n))
		return
	}
	si := infoOf(v.Type())
	if si.line >= 0 {
		v.Field(si.line).SetInt(int64(nodePos(n).line))
	}
	for _, mv := range ents {
		key := d.keyText(mv.Key)
		kp := joinPath(path, key)
		fi, ok := si.fields[key]
		if !ok {
			d.addf(nodePos(mv.Key), kp, "%s", unknownKey(key, si.names))
			continue
		}
		val, _ := d.resolve(mv.Value)
		if val != nil && isScalar(val) {
			d.pos[kp] = nodePos(mv.Value)
		} else {
			d.pos[kp] = nodePos(mv.Key)
		}
		if _, null := val.(*ast.NullNode); null {
			p := nodePos(mv.Key)
			p.null = true
			d.pos[kp] = p
		}
		d.value(mv.Value, v.Field(fi.index), kp, fi.opts)
	}
}

func unknownKey(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if dist := editDistance(key, k); dist < bestDist && dist < len(k) {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q, did you mean %q?", key, best)
	}
	return fmt.Sprintf("unknown key %q (known keys: %s)", key, strings.Join(known, ", "))
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseDuration parses a Go duration (90s, 1h30m) or a number of days (7d).
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(t, "d"); ok {
		if n, err := strconv.ParseInt(days, 10, 64); err == nil {
			if n > int64(math.MaxInt64/(24*time.Hour)) || n < int64(math.MinInt64/(24*time.Hour)) {
				return 0, fmt.Errorf("duration %q is out of range", s)
			}
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write for example 30s, 1h30m or 7d", s)
	}
	return d, nil
}

var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kb":  1000,
	"mb":  1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
}

// parseSize parses a byte size: an integer, or an integer with a unit (B,
// KB, MB, GB, KiB, MiB, GiB; case-insensitive).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '_' || i == 0 && t[i] == '-') {
		i++
	}
	num, unit := strings.ReplaceAll(t[:i], "_", ""), strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("%q is not a size: write an integer or for example 512KiB, 32MiB, 1GB", s)
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("size %q is out of range", s)
	}
	return n * mult, nil
}
