package wire

import (
	"encoding/base64"
	"math"
	"strconv"
	"time"
)

// The JSON the decoders of package decode read, written for the values of
// Avro and Protobuf messages (docs/formats.md#how-values-map).

const hexDigits = "0123456789abcdef"

// appendString writes b as a JSON string. Bytes that are not UTF-8 are
// written as they are, so that the decoder reports the field as invalid
// UTF-8 rather than storing a replacement.
func appendString(out, b []byte) []byte {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, b[start:i]...)
		switch c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	out = append(out, b[start:]...)
	return append(out, '"')
}

// appendFloat writes a float of the given bit size; NaN and the
// infinities, which JSON has no number for, as the strings "NaN",
// "+Inf" and "-Inf" (a float64 column refuses them by name).
func appendFloat(out []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.AppendQuote(out, strconv.FormatFloat(f, 'g', -1, bits))
	}
	return strconv.AppendFloat(out, f, 'g', -1, bits)
}

func appendBase64(out, b []byte) []byte {
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, b)
	return append(out, '"')
}

// appendDate writes days since the epoch as "YYYY-MM-DD".
func appendDate(out []byte, days int64) []byte {
	out = append(out, '"')
	out = time.Unix(days*86400, 0).UTC().AppendFormat(out, "2006-01-02")
	return append(out, '"')
}

// appendTimeOfDay writes nanoseconds after midnight as "HH:MM:SS[.f]".
func appendTimeOfDay(out []byte, ns int64) []byte {
	out = append(out, '"')
	out = time.Unix(0, ns).UTC().AppendFormat(out, "15:04:05.999999999")
	return append(out, '"')
}

// appendTimestamp writes x units (of perUnit nanoseconds) since the epoch
// as an RFC 3339 timestamp in UTC, with every digit the unit has.
func appendTimestamp(out []byte, x, perUnit int64) []byte {
	var t time.Time
	switch perUnit {
	case 1_000_000:
		t = time.UnixMilli(x)
	case 1000:
		t = time.UnixMicro(x)
	default:
		t = time.Unix(0, x)
	}
	out = append(out, '"')
	out = t.UTC().AppendFormat(out, time.RFC3339Nano)
	return append(out, '"')
}

// appendUUID writes 16 bytes as the canonical UUID text.
func appendUUID(out, b []byte) []byte {
	out = append(out, '"')
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return append(out, '"')
}
