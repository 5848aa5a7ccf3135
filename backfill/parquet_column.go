package backfill

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"

	"github.com/sluicehq/sluice/flows/batch"
)

// pqCol reads one Parquet column chunk after another, a page at a time,
// into vectors of the wanted column's type. Values are converted a page at
// a time into a typed value set (a dictionary once per column chunk), and
// rows are copied from it with their nulls.
type pqCol struct {
	name   string
	want   batch.Column
	leaf   int
	t      pqType
	kind   parquet.Kind // physical type
	maxDef byte
	scale  int          // decimals: powers of ten the unscaled value is multiplied by
	limit  batch.Dec128 // decimals: 10^P of the wanted type; values stay below it in magnitude

	pages     parquet.Pages
	page      parquet.Page
	rows, row int    // rows of the page, and the next one
	vi        int    // the page's next non-null value
	present   int    // non-null values of the page
	def       []byte // definition levels; nil for a required column
	// slots: a repeated column (a list's element) read by level slot, not
	// by row; rep holds the page's repetition levels, and read appends
	// the levels of the slots it reads to reps and defs.
	slots      bool
	rep        []byte
	reps, defs []byte
	converted  bool
	vals       valueSet
	dict       parquet.Dictionary
	dvals      valueSet
}

// valueSet holds the non-null values of a page (or a dictionary), converted
// to the wanted type; only the slice of its kind is used.
type valueSet struct {
	ints   []int64
	floats []float64
	bools  []bool
	strs   []string
	bytes  [][]byte
	decs   []batch.Dec128
	bad    map[int]badValue // value index -> why it does not fit the column
}

// badValue is why a value does not fit its column: a batch.Reason* code and
// a sentence.
type badValue struct{ reason, msg string }

func newPQCol(c batch.Column, pc *parquet.Column, t pqType) *pqCol {
	col := &pqCol{name: c.Name, want: c, leaf: pc.Index(), t: t, kind: pc.Type().Kind(), maxDef: byte(pc.MaxDefinitionLevel())}
	if c.Type.Kind == batch.KindDecimal {
		col.scale = c.Type.Scale - t.typ.Scale // t.typ.Scale is 0 for int64
		col.limit = batch.Dec128FromBig(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(c.Type.Precision)), nil))
	}
	return col
}

func (c *pqCol) open(pages parquet.Pages) {
	c.closePages()
	c.pages = pages
	c.dict = nil
}

func (c *pqCol) closePages() {
	if c.page != nil {
		parquet.Release(c.page)
		c.page = nil
	}
	if c.pages != nil {
		c.pages.Close()
		c.pages = nil
	}
	c.rows, c.row, c.vi = 0, 0, 0
}

var errShortChunk = errors.New("corrupt Parquet file: the column chunk ends before its row group's rows")

func (c *pqCol) nextPage() error {
	if c.page != nil {
		parquet.Release(c.page)
		c.page = nil
	}
	for {
		p, err := c.pages.ReadPage()
		if err == io.EOF {
			return errShortChunk
		}
		if err != nil {
			return fmt.Errorf("corrupt Parquet file: %w", err)
		}
		rows := int(p.NumRows())
		if c.slots {
			rows = int(p.NumValues())
		}
		if rows == 0 {
			parquet.Release(p)
			continue
		}
		c.page, c.rows, c.row, c.vi, c.converted = p, rows, 0, 0, false
		c.def, c.present = nil, rows
		if c.maxDef > 0 {
			c.def = p.DefinitionLevels()
			if len(c.def) != rows {
				return fmt.Errorf("corrupt Parquet file: page of %d rows has %d definition levels", rows, len(c.def))
			}
			c.present = countDefined(c.def, c.maxDef)
		}
		if c.slots {
			if c.rep = p.RepetitionLevels(); len(c.rep) != rows || c.def == nil {
				return fmt.Errorf("corrupt Parquet file: page of %d values has %d repetition levels", rows, len(c.rep))
			}
		}
		return nil
	}
}

func countDefined(def []byte, maxDef byte) int {
	n := 0
	for _, d := range def {
		if d == maxDef {
			n++
		}
	}
	return n
}

// skip passes over k rows.
func (c *pqCol) skip(k int) error {
	for k > 0 {
		if c.page == nil || c.row == c.rows {
			if err := c.nextPage(); err != nil {
				return err
			}
		}
		t := min(k, c.rows-c.row)
		if c.def != nil {
			c.vi += countDefined(c.def[c.row:c.row+t], c.maxDef)
		} else {
			c.vi += t
		}
		c.row += t
		k -= t
	}
	return nil
}

// read appends k rows to v; values that do not fit the column are recorded
// in bad (by their row in v).
func (c *pqCol) read(v *batch.Vector, k int, bad *[]badRow) error {
	for k > 0 {
		if c.page == nil || c.row == c.rows {
			if err := c.nextPage(); err != nil {
				return err
			}
		}
		if !c.converted {
			if err := c.convertPage(); err != nil {
				return err
			}
			c.converted = true
		}
		t := min(k, c.rows-c.row)
		if c.slots {
			c.reps = append(c.reps, c.rep[c.row:c.row+t]...)
			c.defs = append(c.defs, c.def[c.row:c.row+t]...)
		}
		base, vi0 := v.Len(), c.vi
		switch v.Type.Kind {
		case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
			v.Ints, c.vi = copyRows(v.Ints, c.vals.ints, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		case batch.KindFloat64:
			v.Floats, c.vi = copyRows(v.Floats, c.vals.floats, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		case batch.KindBool:
			v.Bools, c.vi = copyRows(v.Bools, c.vals.bools, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		case batch.KindString:
			v.Strs, c.vi = copyRows(v.Strs, c.vals.strs, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		case batch.KindBytes:
			v.Bytes, c.vi = copyRows(v.Bytes, c.vals.bytes, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		case batch.KindDecimal:
			v.Decs, c.vi = copyRows(v.Decs, c.vals.decs, c.def, c.maxDef, c.row, t, c.vi, &v.Nulls)
		}
		if c.vals.bad != nil {
			vi := vi0
			for r := range t {
				if c.def != nil && c.def[c.row+r] != c.maxDef {
					continue
				}
				if b, ok := c.vals.bad[vi]; ok {
					*bad = append(*bad, badRow{row: base + r, field: c.name, reason: b.reason, msg: b.msg})
				}
				vi++
			}
		}
		c.row += t
		k -= t
	}
	return nil
}

// copyRows appends rows [from, from+k) of a page to dst: the non-null values
// come from src starting at vi. nulls is the vector's null flags, created
// when the first null arrives. It returns dst and the next value index.
func copyRows[T any](dst, src []T, def []byte, maxDef byte, from, k, vi int, nulls *[]bool) ([]T, int) {
	if def == nil {
		dst = append(dst, src[vi:vi+k]...)
		if *nulls != nil {
			for range k {
				*nulls = append(*nulls, false)
			}
		}
		return dst, vi + k
	}
	var zero T
	for _, d := range def[from : from+k] {
		if d == maxDef {
			dst = append(dst, src[vi])
			vi++
			if *nulls != nil {
				*nulls = append(*nulls, false)
			}
			continue
		}
		dst = append(dst, zero)
		if *nulls == nil {
			*nulls = make([]bool, len(dst)-1, cap(dst))
		}
		*nulls = append(*nulls, true)
	}
	return dst, vi
}

// convertPage converts the current page's values.
func (c *pqCol) convertPage() error {
	data := c.page.Data()
	dict := c.page.Dictionary()
	if dict == nil {
		return c.convert(data, c.present, &c.vals)
	}
	if dict != c.dict {
		c.dict = dict
		if err := c.convert(dict.Page().Data(), dict.Len(), &c.dvals); err != nil {
			return fmt.Errorf("dictionary: %w", err)
		}
	}
	idx := data.Int32()
	if len(idx) < c.present {
		return fmt.Errorf("corrupt Parquet file: page of %d values holds %d", c.present, len(idx))
	}
	return c.gather(idx[:c.present], dict.Len())
}

// gather looks the page's dictionary indexes up in the converted dictionary.
func (c *pqCol) gather(idx []int32, n int) error {
	for _, x := range idx {
		if x < 0 || int(x) >= n {
			return fmt.Errorf("corrupt Parquet file: dictionary index %d of %d values", x, n)
		}
	}
	out, d := &c.vals, &c.dvals
	out.bad = nil
	switch c.want.Type.Kind {
	case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
		out.ints = lookup(out.ints, d.ints, idx)
	case batch.KindFloat64:
		out.floats = lookup(out.floats, d.floats, idx)
	case batch.KindBool:
		out.bools = lookup(out.bools, d.bools, idx)
	case batch.KindString:
		out.strs = lookup(out.strs, d.strs, idx)
	case batch.KindBytes:
		out.bytes = lookup(out.bytes, d.bytes, idx)
	case batch.KindDecimal:
		out.decs = lookup(out.decs, d.decs, idx)
	}
	if d.bad != nil {
		for i, x := range idx {
			if b, ok := d.bad[int(x)]; ok {
				if out.bad == nil {
					out.bad = map[int]badValue{}
				}
				out.bad[i] = b
			}
		}
	}
	return nil
}

func lookup[T any](dst, dict []T, idx []int32) []T {
	dst = resize(dst, len(idx))
	for i, x := range idx {
		dst[i] = dict[x]
	}
	return dst
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func short(n, have int) error {
	return fmt.Errorf("corrupt Parquet file: page of %d values holds %d", n, have)
}

// convert converts n physical values into out, as the wanted type.
func (c *pqCol) convert(data encoding.Values, n int, out *valueSet) error {
	out.bad = nil
	target := c.want.Type.Kind
	switch c.t.conv {
	case convBool:
		bits := data.Boolean()
		if len(bits)*8 < n {
			return short(n, len(bits)*8)
		}
		out.bools = resize(out.bools, n)
		for i := range out.bools {
			out.bools[i] = bits[i>>3]>>(i&7)&1 == 1
		}
	case convInt32, convUint32, convDate, convDecInt32:
		src := data.Int32()
		if len(src) < n {
			return short(n, len(src))
		}
		src = src[:n]
		if target == batch.KindDecimal {
			out.decs = resize(out.decs, n)
			for i, x := range src {
				d := batch.Dec128FromInt64(int64(x))
				if c.t.conv == convUint32 {
					d = batch.Dec128{Lo: uint64(uint32(x))}
				}
				c.putDecimal(out, i, d)
			}
			break
		}
		out.ints = resize(out.ints, n)
		switch {
		case c.t.conv == convUint32:
			for i, x := range src {
				out.ints[i] = int64(uint32(x))
			}
		case c.t.conv == convDate && target == batch.KindTimestamp:
			for i, x := range src {
				us, ok := mulCheck(int64(x), 86_400_000_000)
				if !ok {
					c.markBad(out, i, fmt.Sprintf("date %d days from 1970-01-01 is out of the timestamp range", x))
				}
				out.ints[i] = us
			}
		default:
			for i, x := range src {
				out.ints[i] = int64(x)
			}
		}
	case convInt64, convUint64, convTsMillis, convTsMicros, convTsNanos, convDecInt64:
		src := data.Int64()
		if len(src) < n {
			return short(n, len(src))
		}
		src = src[:n]
		if target == batch.KindDecimal {
			out.decs = resize(out.decs, n)
			for i, x := range src {
				d := batch.Dec128FromInt64(x)
				if c.t.conv == convUint64 {
					d = batch.Dec128{Lo: uint64(x)}
				}
				c.putDecimal(out, i, d)
			}
			break
		}
		out.ints = resize(out.ints, n)
		switch c.t.conv {
		case convTsMillis:
			for i, x := range src {
				us, ok := mulCheck(x, 1000)
				if !ok {
					c.markBad(out, i, fmt.Sprintf("timestamp %d ms is out of the timestamp range", x))
				}
				out.ints[i] = us
			}
		case convTsNanos:
			for i, x := range src {
				out.ints[i] = floorDiv(x, 1000)
			}
		default:
			copy(out.ints, src)
		}
	case convInt96:
		src := data.Int96()
		if len(src) < n {
			return short(n, len(src))
		}
		out.ints = resize(out.ints, n)
		for i, x := range src[:n] {
			nanos := int64(uint64(x[1])<<32 | uint64(x[0]))
			days := int64(x[2]) - julianUnixEpoch
			out.ints[i] = days*86_400_000_000 + floorDiv(nanos, 1000)
		}
	case convFloat:
		src := data.Float()
		if len(src) < n {
			return short(n, len(src))
		}
		out.floats = resize(out.floats, n)
		for i, x := range src[:n] {
			out.floats[i] = float64(x)
		}
	case convDouble:
		src := data.Double()
		if len(src) < n {
			return short(n, len(src))
		}
		out.floats = resize(out.floats, n)
		copy(out.floats, src[:n])
	case convByteArray, convDecBytes, convFixed, convUUID:
		return c.convertBytes(data, n, out)
	default:
		return fmt.Errorf("no conversion for %s", c.t.desc)
	}
	return nil
}

// julianUnixEpoch is the Julian day of 1970-01-01 (INT96 timestamps).
const julianUnixEpoch = 2_440_588

func (c *pqCol) convertBytes(data encoding.Values, n int, out *valueSet) error {
	// at(i) returns value i; values are byte arrays or fixed-length ones.
	var at func(i int) []byte
	var all []byte
	if c.kind == parquet.FixedLenByteArray {
		buf, size := data.FixedLenByteArray()
		if len(buf) < n*size {
			return short(n, len(buf)/max(size, 1))
		}
		all = buf[:n*size]
		at = func(i int) []byte { return buf[i*size : (i+1)*size : (i+1)*size] }
	} else {
		buf, offs := data.ByteArray()
		if len(offs) < n+1 {
			return short(n, max(len(offs)-1, 0))
		}
		for i := range n {
			if offs[i] > offs[i+1] || int(offs[i+1]) > len(buf) {
				return errors.New("corrupt Parquet file: byte array offsets out of order")
			}
		}
		all = buf[offs[0]:offs[n]]
		base := offs[0]
		at = func(i int) []byte { return all[offs[i]-base : offs[i+1]-base : offs[i+1]-base] }
	}
	switch {
	case c.t.conv == convDecBytes:
		out.decs = resize(out.decs, n)
		for i := range n {
			d, ok := decFromBigEndian(at(i))
			if !ok {
				out.decs[i] = batch.Dec128{}
				c.markBad(out, i, fmt.Sprintf("decimal of %d bytes does not fit decimal(%d,%d)", len(at(i)), c.want.Type.Precision, c.want.Type.Scale))
				continue
			}
			c.putDecimal(out, i, d)
		}
	case c.t.conv == convUUID:
		out.strs = resize(out.strs, n)
		for i := range n {
			out.strs[i] = formatUUID(at(i))
		}
		if c.want.Type.Kind == batch.KindBytes {
			out.bytes = resize(out.bytes, n)
			for i, s := range out.strs {
				out.bytes[i] = []byte(s)
			}
		}
	case c.want.Type.Kind == batch.KindString:
		// One string per page (or dictionary); values are slices of it.
		s := string(all)
		out.strs = resize(out.strs, n)
		off := 0
		// One pass over the page; a value on its own only when the page
		// fails, or when a character spans its start or its end (two
		// invalid values can join into a valid page).
		valid := utf8.ValidString(s)
		for i := range n {
			l := len(at(i))
			start := off
			out.strs[i] = s[off : off+l]
			off += l
			spans := start < len(s) && !utf8.RuneStart(s[start]) || off < len(s) && !utf8.RuneStart(s[off])
			if (!valid || spans) && !utf8.ValidString(out.strs[i]) {
				c.markBadAs(out, i, batch.ReasonInvalidUTF8, strconv.QuoteToASCII(clipText(out.strs[i]))+" is not valid UTF-8 (declare the column bytes to keep any bytes)")
			}
		}
	default:
		buf := append([]byte(nil), all...)
		out.bytes = resize(out.bytes, n)
		off := 0
		for i := range n {
			l := len(at(i))
			out.bytes[i] = buf[off : off+l : off+l]
			off += l
		}
	}
	return nil
}

// putDecimal stores unscaled value d (of the file's scale) as value i.
func (c *pqCol) putDecimal(out *valueSet, i int, d batch.Dec128) {
	r, ok := scaleDec(d, c.scale)
	if !ok || !below(r, c.limit) {
		out.decs[i] = batch.Dec128{}
		c.markBad(out, i, fmt.Sprintf("%s does not fit %v", batch.FormatDecimal(d, c.t.typ.Scale), c.want.Type))
		return
	}
	out.decs[i] = r
}

func (c *pqCol) markBad(out *valueSet, i int, msg string) {
	c.markBadAs(out, i, batch.ReasonTypeMismatch, msg)
}

func (c *pqCol) markBadAs(out *valueSet, i int, reason, msg string) {
	if out.bad == nil {
		out.bad = map[int]badValue{}
	}
	out.bad[i] = badValue{reason, msg}
}

func mulCheck(x, m int64) (int64, bool) {
	if x > math.MaxInt64/m || x < math.MinInt64/m {
		return 0, false
	}
	return x * m, true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// decFromBigEndian reads a big-endian two's complement integer of up to 16
// significant bytes.
func decFromBigEndian(b []byte) (batch.Dec128, bool) {
	if len(b) == 0 {
		return batch.Dec128{}, true
	}
	neg := b[0]&0x80 != 0
	ext := byte(0)
	if neg {
		ext = 0xff
	}
	if len(b) > 16 {
		for _, x := range b[:len(b)-16] {
			if x != ext {
				return batch.Dec128{}, false
			}
		}
		b = b[len(b)-16:]
		if (b[0]&0x80 != 0) != neg {
			return batch.Dec128{}, false
		}
	}
	var buf [16]byte
	for i := range 16 - len(b) {
		buf[i] = ext
	}
	copy(buf[16-len(b):], b)
	return batch.Dec128{Hi: int64(binary.BigEndian.Uint64(buf[:8])), Lo: binary.BigEndian.Uint64(buf[8:])}, true
}

// pow10 holds 10^0 .. 10^19.
var pow10 = func() [20]uint64 {
	var p [20]uint64
	p[0] = 1
	for i := 1; i < 20; i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// scaleDec multiplies d by 10^k (k >= 0), reporting overflow of 127 bits.
func scaleDec(d batch.Dec128, k int) (batch.Dec128, bool) {
	if k == 0 {
		return d, true
	}
	neg := d.Hi < 0
	hi, lo := uint64(d.Hi), d.Lo
	if neg {
		hi, lo = negate128(hi, lo)
	}
	for k > 0 {
		step := min(k, 19)
		m := pow10[step]
		h1, l1 := bits.Mul64(lo, m)
		h2, l2 := bits.Mul64(hi, m)
		if h2 != 0 {
			return batch.Dec128{}, false
		}
		var carry uint64
		hi, carry = bits.Add64(l2, h1, 0)
		if carry != 0 || hi>>63 != 0 {
			return batch.Dec128{}, false
		}
		lo = l1
		k -= step
	}
	if neg {
		hi, lo = negate128(hi, lo)
	}
	return batch.Dec128{Hi: int64(hi), Lo: lo}, true
}

func negate128(hi, lo uint64) (uint64, uint64) {
	lo = ^lo + 1
	hi = ^hi
	if lo == 0 {
		hi++
	}
	return hi, lo
}

// below reports whether |d| < limit (limit positive).
func below(d batch.Dec128, limit batch.Dec128) bool {
	if d.Hi < 0 {
		hi, lo := negate128(uint64(d.Hi), d.Lo)
		d = batch.Dec128{Hi: int64(hi), Lo: lo}
		if d.Hi < 0 { // the most negative value
			return false
		}
	}
	return d.Cmp(limit) < 0
}

func formatUUID(b []byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:16])
	return string(s[:])
}

// clipText shortens a value for a message.
func clipText(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
