package cdc

import (
	"cmp"
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Position is where an event was read, stable under replay: the flow, then
// the Kafka topic, partition and offset, or the file and the row number in
// it. It breaks ties between events of one key with equal sequences:
// the greater position wins, and since a redelivered record has the same
// position, a replay never changes the winner.
type Position struct {
	Flow      string
	Topic     string // Kafka topic; empty for files
	Partition int32  // Kafka partition
	File      string // file path; empty for Kafka
	Offset    int64  // Kafka offset, or the row number in File
}

// Compare orders positions by flow, topic, partition, file, then offset.
func (p Position) Compare(q Position) int {
	if c := strings.Compare(p.Flow, q.Flow); c != 0 {
		return c
	}
	if c := strings.Compare(p.Topic, q.Topic); c != 0 {
		return c
	}
	if c := cmp.Compare(p.Partition, q.Partition); c != 0 {
		return c
	}
	if c := strings.Compare(p.File, q.File); c != 0 {
		return c
	}
	return cmp.Compare(p.Offset, q.Offset)
}

// source is the dead-letter source: the topic or the file.
func (p Position) source() string {
	if p.Topic != "" || p.File == "" {
		return p.Topic
	}
	return p.File
}

// DeadLetterAt returns the source and the position a dead letter of the
// record at p names.
func (p Position) DeadLetterAt() (source, position string) { return p.source(), p.deadLetterPosition() }

// deadLetterPosition is the dead-letter position: "partition/offset" for
// Kafka, the row number for files.
func (p Position) deadLetterPosition() string {
	if p.Topic == "" && p.File != "" {
		return strconv.FormatInt(p.Offset, 10)
	}
	return strconv.FormatInt(int64(p.Partition), 10) + "/" + strconv.FormatInt(p.Offset, 10)
}

// String renders the position for errors and logs.
func (p Position) String() string {
	if p.Topic == "" && p.File != "" {
		return p.Flow + ":" + p.File + "#" + strconv.FormatInt(p.Offset, 10)
	}
	return p.Flow + ":" + p.Topic + "/" + strconv.FormatInt(int64(p.Partition), 10) + "/" + strconv.FormatInt(p.Offset, 10)
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func base64Std(s string) string {
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// writeJSONString writes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func writeJSONString(sb *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	sb.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				sb.WriteByte('\\')
				sb.WriteByte(c)
			case c == '\n':
				sb.WriteString(`\n`)
			case c == '\r':
				sb.WriteString(`\r`)
			case c == '\t':
				sb.WriteString(`\t`)
			case c < 0x20:
				sb.WriteString(`\u00`)
				sb.WriteByte(hex[c>>4])
				sb.WriteByte(hex[c&0xF])
			default:
				sb.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			sb.WriteString(`\ufffd`)
		} else {
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	sb.WriteByte('"')
}
