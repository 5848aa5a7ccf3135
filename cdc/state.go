package cdc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"
)

// KeyState is what the engine remembers of one key beyond the rows it
// shows: the events that can still matter for events yet to come (see the
// package documentation, "State"). A KeyState is immutable once an Output
// returned it: sinks persist it with MarshalBinary. The states of an
// Output hold only their encoding, decoded when an engine reads one.
type KeyState struct {
	cols   []string // data column names the events' values follow
	events []event  // sorted by (seq, pos); SCD type 2: one per seq
	// enc is the state's encoding (MarshalBinary's), set when the state
	// is built or decoded: the cache keeps only it, and sinks store it.
	enc string
}

// event is one change of a key.
type event struct {
	seq  string // ordered encoding of the sequence
	pos  Position
	del  bool
	tomb bool    // a batch's tombstone whose sequence is not resolved yet
	snap bool    // SCD type 2: an upsert of a snapshot's row, or one that replaced it
	seen int64   // processing time first applied, µs since the epoch
	vals []value // upserts: one per data column; nil until materialized
	row  int32   // row in the current batch, -1 for a stored event
}

// Len returns the number of events the state holds.
func (s *KeyState) Len() int {
	if s.events == nil && s.enc != "" {
		d := &KeyState{}
		if d.decode(s.enc, nil) != nil {
			return 0
		}
		return len(d.events)
	}
	return len(s.events)
}

// Size estimates the bytes the state takes in memory.
func (s *KeyState) Size() int64 {
	if s == nil {
		return 0
	}
	n := int64(unsafe.Sizeof(*s)) + int64(len(s.enc)) + int64(len(s.events))*int64(unsafe.Sizeof(event{}))
	for i := range s.events {
		e := &s.events[i]
		n += int64(len(e.seq) + len(e.pos.Flow) + len(e.pos.Topic) + len(e.pos.File))
		n += int64(len(e.vals)) * int64(unsafe.Sizeof(value{}))
		for _, v := range e.vals {
			n += int64(len(v.s))
		}
	}
	return n
}

// TableState is what the engine remembers of a whole target.
type TableState struct {
	// Truncates are the table-wide truncates (SCD type 1) still
	// remembered, in sequence order: the newest always, older ones until
	// tombstone_retention has passed (they still matter where an upsert at
	// the sequence of a newer one precedes it). Every row whose sequence is
	// below the newest's is gone from the target: a sink removes such rows
	// of keys an Output does not mention when the newest barrier is new,
	// and the engine applies the barriers to every key state it reads.
	Truncates []Barrier
	// Snapshots are the versions SCD type 2 snapshots were applied at,
	// in sequence order: the newest always, older ones until
	// tombstone_retention has passed. A snapshot at V deletes at V every
	// key it does not hold: the keys the target held when it was applied
	// get a delete then; any other key that has an upsert older than V
	// gets one when its key is next applied (see Engine, snapshot barriers).
	Snapshots []Barrier
}

// Newest returns the newest truncate, or nil.
func (t TableState) Newest() *Barrier {
	if len(t.Truncates) == 0 {
		return nil
	}
	return &t.Truncates[len(t.Truncates)-1]
}

// Barrier is a table-wide truncate at sequence Seq.
type Barrier struct {
	Seq  string    // ordered encoding, comparable bytewise with Rows.Seqs
	Pos  Position  // the least position of the truncates at Seq
	Seen time.Time // when the first of them was applied
}

func (b Barrier) equal(o Barrier) bool {
	return b.Seq == o.Seq && b.Pos == o.Pos && b.Seen.Equal(o.Seen)
}

func equalBarriers(a, b []Barrier) bool { return slices.EqualFunc(a, b, Barrier.equal) }

// Serialized forms: a version byte, then varints and length-prefixed bytes.
// Key state version 2 writes each event's offset and creation time as the
// difference to the previous event's (a key's events mostly share a batch's
// time and nearby offsets), and a decimal that fits 64 bits as a varint;
// version 1 states (absolute offsets and times, decimals as two fixed
// words) still decode.
const (
	keyStateVersion   = 2
	tableStateVersion = 2
)

// encDec64 tags, in a version 2 key state, a decimal whose high word is the
// sign extension of its low word, written as one varint.
const encDec64 = 8

// MarshalBinary encodes the state. The encoding names the columns its
// values follow, so a state written before the table gained or lost a
// column is read back by name.
func (s *KeyState) MarshalBinary() ([]byte, error) {
	if s.enc != "" {
		return []byte(s.enc), nil
	}
	return s.encode()
}

// Encoding returns the state's encoding, as MarshalBinary does, without
// copying it.
func (s *KeyState) Encoding() (string, error) {
	if s.enc != "" {
		return s.enc, nil
	}
	b, err := s.encode()
	return string(b), err
}

func (s *KeyState) encode() ([]byte, error) {
	return appendState(make([]byte, 0, 64+s.Size()/2), s.cols, s.events, nil)
}

// appendState appends the encoding of a state of events whose values
// follow cols. scratch, when not nil, lends the memory of the position
// strings' table.
func appendState(buf []byte, cols []string, events []event, scratch *[]string) ([]byte, error) {
	return appendStateReusing(buf, cols, events, scratch, nil, 0)
}

// prefixCode locates the events of a version 2 encoding (see decodeState):
// offs[i] is where event i starts, offs[len(offs)-1] the end. The events'
// position strings are numbered in order of first use, as appendState
// numbers them, so that a run of leading events encodes the same in any
// state that starts with them.
type prefixCode struct {
	enc  string
	offs []int32
}

// appendStateReusing is appendState, copying the encoding of events[:n]
// from reuse, which encodes a state that starts with the same n events and
// whose values follow the same columns. The result is byte for byte what
// appendState writes.
func appendStateReusing(buf []byte, cols []string, events []event, scratch *[]string, reuse *prefixCode, n int) ([]byte, error) {
	if reuse == nil || n > len(reuse.offs)-1 {
		n = 0
	}
	var table []string // position strings: few distinct ones per key
	if scratch != nil {
		table = (*scratch)[:0]
		defer func() { clear(table); *scratch = table[:0] }()
	}
	intern := func(x string) uint64 {
		if i := slices.Index(table, x); i >= 0 {
			return uint64(i)
		}
		table = append(table, x)
		return uint64(len(table) - 1)
	}
	for i := range events {
		p := &events[i].pos
		intern(p.Flow)
		intern(p.Topic)
		intern(p.File)
	}
	buf = append(buf, keyStateVersion)
	buf = binary.AppendUvarint(buf, uint64(len(cols)))
	for _, c := range cols {
		buf = appendString(buf, c)
	}
	buf = binary.AppendUvarint(buf, uint64(len(table)))
	for _, x := range table {
		buf = appendString(buf, x)
	}
	buf = binary.AppendUvarint(buf, uint64(len(events)))
	var off, seen int64 // the previous event's
	if n > 0 {
		buf = append(buf, reuse.enc[reuse.offs[0]:reuse.offs[n]]...)
		off, seen = events[n-1].pos.Offset, events[n-1].seen
	}
	for i := n; i < len(events); i++ {
		e := &events[i]
		switch {
		case e.del:
			buf = append(buf, 1)
		case e.snap:
			buf = append(buf, 2)
		default:
			buf = append(buf, 0)
		}
		buf = appendString(buf, e.seq)
		buf = binary.AppendUvarint(buf, intern(e.pos.Flow))
		buf = binary.AppendUvarint(buf, intern(e.pos.Topic))
		buf = binary.AppendUvarint(buf, intern(e.pos.File))
		buf = binary.AppendVarint(buf, int64(e.pos.Partition))
		buf = binary.AppendVarint(buf, e.pos.Offset-off)
		buf = binary.AppendVarint(buf, e.seen-seen)
		off, seen = e.pos.Offset, e.seen
		if e.del {
			continue
		}
		if len(e.vals) != len(cols) {
			return nil, fmt.Errorf("cdc: key state event has %d values for %d columns", len(e.vals), len(cols))
		}
		for _, v := range e.vals {
			if v.k == vDec && v.h == v.i>>63 {
				buf = append(buf, encDec64)
				buf = binary.AppendVarint(buf, v.i)
				continue
			}
			buf = append(buf, byte(v.k))
			switch v.k {
			case vInt, vBool:
				buf = binary.AppendVarint(buf, v.i)
			case vFloat:
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.i))
			case vStr, vBytes, vArr:
				buf = appendString(buf, v.s)
			case vDec:
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.i))
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.h))
			}
		}
	}
	return buf, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. The state owns its
// memory afterwards: data may be reused by the caller.
func (s *KeyState) UnmarshalBinary(data []byte) error {
	return s.decode(string(data), nil) // one copy; every string points into it
}

// decode decodes an encoding held in a string, which the state keeps.
// When the state's columns are those of like, it shares like's slice (which
// makes the engine's check of a state's columns one comparison).
func (s *KeyState) decode(data string, like []string) error {
	cols, events, _, err := decodeState(data, like, nil, nil, nil, nil)
	if err != nil {
		return err
	}
	if events == nil {
		events = []event{}
	}
	s.cols, s.events, s.enc = cols, events, data
	return nil
}

// decodeState decodes a state's encoding (see decode), appending its
// events to events and taking their values from slab while it lasts. It
// returns how many values the events needed: an engine decoding into
// scratch grows its slab with it. scratch, when not nil, lends the memory
// of the position strings' table. offs, when not nil, is set to where each
// event starts and where the last ends (see prefixCode), or emptied when the
// encoding cannot lend its events (version 1, or strings not numbered in
// order of first use).
func decodeState(data string, like []string, events []event, slab []value, scratch *[]string, offs *[]int32) (cols []string, evs []event, needed int, err error) {
	r := reader{buf: data}
	version := r.byte()
	if version != keyStateVersion && version != 1 {
		if r.err != nil {
			return nil, nil, 0, fmt.Errorf("cdc: key state: %w", r.err)
		}
		return nil, nil, 0, fmt.Errorf("cdc: key state version %d, want 1 or %d", version, keyStateVersion)
	}
	delta := version >= 2
	ncols := r.count()
	if ncols == len(like) {
		cols = like
		for _, c := range like {
			if r.string() != c {
				cols = nil
				break
			}
		}
		if cols == nil {
			r = reader{buf: data}
			r.byte()
			r.count()
		}
	}
	if cols == nil {
		cols = make([]string, 0, min(ncols, 1<<10))
		for range ncols {
			cols = append(cols, r.string())
		}
	}
	nstr := r.count()
	var table []string
	if scratch != nil {
		table = (*scratch)[:0]
		defer func() { clear(table); *scratch = table[:0] }()
	} else {
		table = make([]string, 0, min(nstr, 1<<10))
	}
	for range nstr {
		table = append(table, r.string())
	}
	var o []int32
	lend := offs != nil
	if lend {
		o = (*offs)[:0]
	}
	used := uint64(0) // strings used so far: the next new one must be this
	str := func() string {
		i := r.uvarint()
		if i >= uint64(len(table)) {
			r.fail()
			return ""
		}
		if i == used {
			used++
		} else if i > used {
			lend = false
		}
		return table[i]
	}
	nev := r.count()
	var off, seen int64 // version 2: the previous event's
	if events == nil {
		events = make([]event, 0, min(nev, 1<<16))
	}
	for range nev {
		if r.err != nil {
			break
		}
		if lend {
			o = append(o, int32(len(data)-len(r.buf)))
		}
		e := event{row: -1}
		switch r.byte() {
		case 0:
		case 1:
			e.del = true
		case 2:
			e.snap = true
		default:
			r.fail()
		}
		e.seq = r.string()
		e.pos.Flow = str()
		e.pos.Topic = str()
		e.pos.File = str()
		part := r.varint()
		if part < math.MinInt32 || part > math.MaxInt32 {
			r.fail()
		}
		e.pos.Partition = int32(part)
		e.pos.Offset = off + r.varint()
		e.seen = seen + r.varint()
		if delta {
			off, seen = e.pos.Offset, e.seen
		}
		if !e.del {
			needed += len(cols)
			if len(slab) < len(cols) {
				slab = make([]value, len(cols)*max(1, min(nev, 64)))
			}
			e.vals, slab = slab[:len(cols):len(cols)], slab[len(cols):]
			for c := range e.vals {
				k := vkind(r.byte())
				v := value{k: k}
				switch k {
				case encDec64:
					if !delta {
						r.fail()
					}
					v.k = vDec
					v.i = r.varint()
					v.h = v.i >> 63
				case vNull, vAbsent:
				case vInt, vBool:
					v.i = r.varint()
				case vFloat:
					v.i = int64(r.fixed64())
				case vStr, vBytes, vArr:
					v.s = r.string()
				case vDec:
					v.i = int64(r.fixed64())
					v.h = int64(r.fixed64())
				default:
					r.fail()
				}
				e.vals[c] = v
			}
		}
		events = append(events, e)
	}
	if r.err == nil && r.buf != "" {
		r.fail()
	}
	if r.err != nil {
		return nil, nil, 0, fmt.Errorf("cdc: key state: %w", r.err)
	}
	if offs != nil {
		if lend && delta && len(data) <= math.MaxInt32 {
			o = append(o, int32(len(data)))
		} else {
			o = o[:0]
		}
		*offs = o
	}
	return cols, events, needed, nil
}

// MarshalBinary encodes the table state: version 2 writes the truncates,
// then the snapshots. A state without snapshots is written in version 1
// (the truncates only), which releases that know no snapshots read: only
// a target with a snapshot flow needs version 2.
func (t TableState) MarshalBinary() ([]byte, error) {
	buf, lists := []byte{tableStateVersion}, [][]Barrier{t.Truncates, t.Snapshots}
	if len(t.Snapshots) == 0 {
		buf, lists = []byte{1}, lists[:1]
	}
	for _, bs := range lists {
		buf = binary.AppendUvarint(buf, uint64(len(bs)))
		for _, b := range bs {
			buf = appendString(buf, b.Seq)
			buf = appendString(buf, b.Pos.Flow)
			buf = appendString(buf, b.Pos.Topic)
			buf = appendString(buf, b.Pos.File)
			buf = binary.AppendVarint(buf, int64(b.Pos.Partition))
			buf = binary.AppendVarint(buf, b.Pos.Offset)
			buf = binary.AppendVarint(buf, b.Seen.UnixMicro())
		}
	}
	return buf, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote.
func (t *TableState) UnmarshalBinary(data []byte) error {
	r := reader{buf: string(data)}
	v := r.byte()
	if v != 1 && v != tableStateVersion {
		if r.err != nil {
			return fmt.Errorf("cdc: table state: %w", r.err)
		}
		return fmt.Errorf("cdc: table state version %d, want %d", v, tableStateVersion)
	}
	var out TableState
	lists := []*[]Barrier{&out.Truncates, &out.Snapshots}
	if v == 1 {
		lists = lists[:1]
	}
	for _, bs := range lists {
		n := r.count()
		for range n {
			var b Barrier
			b.Seq = r.string()
			b.Pos.Flow = r.string()
			b.Pos.Topic = r.string()
			b.Pos.File = r.string()
			part := r.varint()
			if part < math.MinInt32 || part > math.MaxInt32 {
				r.fail()
			}
			b.Pos.Partition = int32(part)
			b.Pos.Offset = r.varint()
			b.Seen = time.UnixMicro(r.varint()).UTC()
			*bs = append(*bs, b)
		}
	}
	if r.err == nil && r.buf != "" {
		r.fail()
	}
	if r.err != nil {
		return fmt.Errorf("cdc: table state: %w", r.err)
	}
	*t = out
	return nil
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

var errMalformed = errors.New("malformed encoding")

// reader reads the serialized forms; the first error sticks.
type reader struct {
	buf string
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errMalformed
	}
	r.buf = ""
}

func (r *reader) byte() byte {
	if r.buf == "" {
		r.fail()
		return 0
	}
	b := r.buf[0]
	r.buf = r.buf[1:]
	return b
}

func (r *reader) uvarint() uint64 {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if i >= len(r.buf) {
			r.fail()
			return 0
		}
		b := r.buf[i]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				r.fail()
				return 0
			}
			r.buf = r.buf[i+1:]
			return x | uint64(b)<<s
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	r.fail()
	return 0
}

func (r *reader) varint() int64 {
	ux := r.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// count reads a length that must fit in what is left.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.buf)) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) string() string {
	n := r.count()
	s := r.buf[:n]
	r.buf = r.buf[n:]
	return s
}

func (r *reader) fixed64() uint64 {
	if len(r.buf) < 8 {
		r.fail()
		return 0
	}
	x := binary.LittleEndian.Uint64([]byte(r.buf[:8]))
	r.buf = r.buf[8:]
	return x
}

// equalEvents reports whether two event lists are the same state.
func equalEvents(a, b []event) bool {
	return len(a) == len(b) && commonEvents(a, b) == len(a)
}

// commonEvents returns how many leading events two lists share.
func commonEvents(a, b []event) int {
	n := min(len(a), len(b))
	for i := range n {
		x, y := &a[i], &b[i]
		if x.seq != y.seq || x.pos != y.pos || x.del != y.del || x.snap != y.snap || x.seen != y.seen || !slices.Equal(x.vals, y.vals) {
			return i
		}
	}
	return n
}
