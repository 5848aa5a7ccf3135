package render

import (
	"bufio"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/flows/batch"
)

// Formats are the formats Write knows, the default first.
var Formats = []string{"table", "jsonl", "csv"}

// Write prints the rows of b in order, in one of Formats:
//
//   - table: an aligned text table with a header row, a rule under it and a
//     "(N rows)" footer; columns separated by " | ", numbers (int64, float64,
//     decimal) right-aligned, everything else left-aligned; NULL shown as
//     NULL. Values read as in jsonl and csv (bytes as standard base64, not
//     hex, so that one value reads the same in every format); control
//     characters and invalid UTF-8 in strings are shown escaped (\n, \t, \r,
//     \xNN) so that a row stays on one line. It reads the rows twice: once
//     for the column widths, once to print.
//   - jsonl: one JSON object per row, keys in column order. int64 as exact
//     JSON integers, float64 as numbers (NaN and infinities as the strings
//     "NaN", "+Inf", "-Inf"), decimals as strings of their exact text, bytes
//     as standard base64, dates YYYY-MM-DD, timestamps time.RFC3339Nano in
//     UTC with Z, arrays as JSON lists of those, NULL as null.
//   - csv: RFC 4180 with a header row; the values' text as in jsonl without
//     JSON quoting, NULL as an empty field (and so is an empty string: use
//     jsonl to tell them apart); an array as its JSON list.
//
// Output streams row by row through a buffer. An unknown format is an error
// and writes nothing.
func Write(w io.Writer, b *batch.Batch, format string) error {
	if err := check(b); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	var err error
	switch format {
	case "table":
		err = writeTable(bw, b)
	case "jsonl":
		err = writeJSONL(bw, b)
	case "csv":
		err = writeCSV(bw, b)
	default:
		return fmt.Errorf("render: unknown format %q: one of %s", format, strings.Join(Formats, ", "))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("render %s: %w", format, err)
	}
	return nil
}

// check rejects a batch whose vectors do not line up with its schema.
func check(b *batch.Batch) error {
	if len(b.Vectors) != len(b.Schema.Columns) {
		return fmt.Errorf("render: batch has %d vectors for %d columns", len(b.Vectors), len(b.Schema.Columns))
	}
	n := b.Len()
	for i, v := range b.Vectors {
		c := b.Schema.Columns[i]
		if v.Type.Kind != c.Type.Kind || v.Len() != n || (v.Nulls != nil && len(v.Nulls) != n) {
			return fmt.Errorf("render: column %s does not match the batch (%v with %d rows, want %v with %d)", c.Name, v.Type, v.Len(), c.Type, n)
		}
	}
	return nil
}

// appendText appends the text of row i of v, which is not null: the value
// as csv prints it and jsonl prints it inside quotes (or bare for numbers and
// bools).
func appendText(dst []byte, v *batch.Vector, i int) []byte {
	switch v.Type.Kind {
	case batch.KindString:
		return append(dst, v.Strs[i]...)
	case batch.KindInt64:
		return strconv.AppendInt(dst, v.Ints[i], 10)
	case batch.KindFloat64:
		return appendFloat(dst, v.Floats[i])
	case batch.KindBool:
		return strconv.AppendBool(dst, v.Bools[i])
	case batch.KindTimestamp:
		return time.UnixMicro(v.Ints[i]).UTC().AppendFormat(dst, time.RFC3339Nano)
	case batch.KindDate:
		return batch.DateValue(v.Ints[i]).Time().AppendFormat(dst, time.DateOnly)
	case batch.KindDecimal:
		return appendDecimal(dst, v.Decs[i], v.Type.Scale)
	case batch.KindBytes:
		return base64.StdEncoding.AppendEncode(dst, v.Bytes[i])
	case batch.KindArray:
		lo, hi := v.Array(i)
		dst = append(dst, '[')
		for j := lo; j < hi; j++ {
			if j > lo {
				dst = append(dst, ',')
			}
			dst = appendJSON(dst, v.Elems, j)
		}
		return append(dst, ']')
	}
	return dst
}

// appendFloat writes f as encoding/json does (shortest text that reads back
// exactly; exponent form below 1e-6 and from 1e21 on), and NaN and the
// infinities as NaN, +Inf, -Inf.
func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-Inf"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 -> 1e-7, as encoding/json writes it.
		if n := len(dst) - start; n >= 4 && dst[len(dst)-4] == 'e' && dst[len(dst)-3] == '-' && dst[len(dst)-2] == '0' {
			dst[len(dst)-2] = dst[len(dst)-1]
			dst = dst[:len(dst)-1]
		}
	}
	return dst
}

// appendDecimal writes the exact text of a decimal, without big.Int when
// the unscaled value fits an int64.
func appendDecimal(dst []byte, d batch.Dec128, scale int) []byte {
	fits := (d.Hi == 0 && d.Lo <= math.MaxInt64) || (d.Hi == -1 && d.Lo > math.MaxInt64)
	if !fits || int64(d.Lo) == math.MinInt64 {
		return append(dst, batch.FormatDecimal(d, scale)...)
	}
	x := int64(d.Lo)
	if x < 0 {
		dst = append(dst, '-')
		x = -x
	}
	var buf [24]byte
	digits := strconv.AppendInt(buf[:0], x, 10)
	if scale == 0 {
		return append(dst, digits...)
	}
	if len(digits) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}

// quoted reports whether jsonl writes the kind's text as a JSON string.
func quoted(k batch.Kind, f float64) bool {
	switch k {
	case batch.KindInt64, batch.KindBool, batch.KindArray:
		return false
	case batch.KindFloat64:
		return math.IsNaN(f) || math.IsInf(f, 0)
	}
	return true
}

// appendJSON appends row i of v as a JSON value.
func appendJSON(dst []byte, v *batch.Vector, i int) []byte {
	if v.IsNull(i) {
		return append(dst, "null"...)
	}
	var f float64
	if v.Type.Kind == batch.KindFloat64 {
		f = v.Floats[i]
	}
	switch {
	case v.Type.Kind == batch.KindString:
		return appendJSONString(dst, v.Strs[i])
	case quoted(v.Type.Kind, f):
		// The text of every other kind needs no escaping.
		return append(appendText(append(dst, '"'), v, i), '"')
	}
	return appendText(dst, v, i)
}

func writeJSONL(w *bufio.Writer, b *batch.Batch) error {
	keys := make([][]byte, len(b.Schema.Columns))
	for c, col := range b.Schema.Columns {
		sep := ","
		if c == 0 {
			sep = "{"
		}
		keys[c] = append(appendJSONString([]byte(sep), col.Name), ':')
	}
	var line []byte
	for i := range b.Len() {
		line = line[:0]
		if len(keys) == 0 {
			line = append(line, '{')
		}
		for c, v := range b.Vectors {
			line = append(line, keys[c]...)
			line = appendJSON(line, v, i)
		}
		line = append(line, '}', '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and
// U+2029 escaped (as encoding/json does, without its HTML escaping).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func writeCSV(w *bufio.Writer, b *batch.Batch) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(b.Schema.Names()); err != nil {
		return err
	}
	record := make([]string, len(b.Vectors))
	var text []byte
	for i := range b.Len() {
		for c, v := range b.Vectors {
			if v.IsNull(i) {
				record[c] = ""
				continue
			}
			if v.Type.Kind == batch.KindString {
				record[c] = v.Strs[i]
				continue
			}
			text = appendText(text[:0], v, i)
			record[c] = string(text)
		}
		if err := cw.Write(record); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// rightAligned reports whether the table format right-aligns a kind.
func rightAligned(k batch.Kind) bool {
	return k == batch.KindInt64 || k == batch.KindFloat64 || k == batch.KindDecimal
}

// appendCell appends row i of v as the table format shows it.
func appendCell(dst []byte, v *batch.Vector, i int) []byte {
	if v.IsNull(i) {
		return append(dst, "NULL"...)
	}
	if v.Type.Kind != batch.KindString {
		return appendText(dst, v, i)
	}
	return appendEscaped(dst, v.Strs[i])
}

// appendEscaped appends s with control characters and invalid UTF-8 escaped.
func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'x', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, '\\', 'x', hex[c>>4], hex[c&0xf])
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

func writeTable(w *bufio.Writer, b *batch.Batch) error {
	cols := b.Schema.Columns
	widths := make([]int, len(cols))
	names := make([][]byte, len(cols))
	for c, col := range cols {
		names[c] = appendEscaped(nil, col.Name)
		widths[c] = utf8.RuneCount(names[c])
	}
	var cell []byte
	for i := range b.Len() {
		for c, v := range b.Vectors {
			cell = appendCell(cell[:0], v, i)
			widths[c] = max(widths[c], utf8.RuneCount(cell))
		}
	}

	var line []byte
	// pad appends text padded to column c's width; the last column gets no
	// trailing spaces.
	pad := func(c int, text []byte, right bool) {
		fill := widths[c] - utf8.RuneCount(text)
		if c > 0 {
			line = append(line, " | "...)
		} else {
			line = append(line, ' ')
		}
		if right {
			line = appendSpaces(line, fill)
		}
		line = append(line, text...)
		if !right && c < len(cols)-1 {
			line = appendSpaces(line, fill)
		}
	}
	for c, col := range cols {
		pad(c, names[c], rightAligned(col.Type.Kind))
	}
	line = append(line, '\n')
	for c := range cols {
		if c > 0 {
			line = append(line, '+')
		}
		line = append(line, strings.Repeat("-", widths[c]+2)...)
	}
	line = append(line, '\n')
	if _, err := w.Write(line); err != nil {
		return err
	}
	for i := range b.Len() {
		line = line[:0]
		for c, v := range b.Vectors {
			cell = appendCell(cell[:0], v, i)
			pad(c, cell, rightAligned(v.Type.Kind))
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	footer := "(" + strconv.Itoa(b.Len()) + " rows)\n"
	if b.Len() == 1 {
		footer = "(1 row)\n"
	}
	_, err := w.WriteString(footer)
	return err
}

func appendSpaces(dst []byte, n int) []byte {
	for range n {
		dst = append(dst, ' ')
	}
	return dst
}
