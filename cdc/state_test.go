package cdc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestKeyStateRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kinds := []vkind{vNull, vAbsent, vInt, vFloat, vBool, vStr, vBytes, vDec}
		ncols := rapid.IntRange(0, 4).Draw(t, "cols")
		s := &KeyState{}
		for c := range ncols {
			s.cols = append(s.cols, string(rune('a'+c)))
		}
		for range rapid.IntRange(0, 5).Draw(t, "events") {
			e := event{
				seq:  rapid.String().Draw(t, "seq"),
				del:  rapid.Bool().Draw(t, "del"),
				seen: rapid.Int64().Draw(t, "seen"),
				row:  -1,
				pos: Position{
					Flow:      rapid.SampledFrom([]string{"f", "g"}).Draw(t, "flow"),
					Topic:     rapid.SampledFrom([]string{"", "t"}).Draw(t, "topic"),
					Partition: rapid.Int32().Draw(t, "partition"),
					File:      rapid.SampledFrom([]string{"", "x/y.parquet"}).Draw(t, "file"),
					Offset:    rapid.Int64().Draw(t, "offset"),
				},
			}
			if !e.del {
				for range ncols {
					v := value{k: rapid.SampledFrom(kinds).Draw(t, "kind")}
					switch v.k {
					case vInt, vFloat:
						v.i = rapid.Int64().Draw(t, "i")
					case vBool:
						v.i = int64(rapid.IntRange(0, 1).Draw(t, "b"))
					case vStr, vBytes:
						v.s = rapid.String().Draw(t, "s")
					case vDec:
						v.i, v.h = rapid.Int64().Draw(t, "lo"), rapid.Int64().Draw(t, "hi")
					}
					e.vals = append(e.vals, v)
				}
			}
			s.events = append(s.events, e)
		}
		data, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back := &KeyState{}
		if err := back.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		if !equalEvents(s.events, back.events) || len(s.cols) != len(back.cols) {
			t.Fatalf("round trip changed the state:\n%+v\n%+v", s, back)
		}
		again, _ := back.MarshalBinary()
		fresh, _ := back.encode()
		if !bytes.Equal(data, again) || !bytes.Equal(data, fresh) {
			t.Fatal("encoding is not stable")
		}
		// Decoding with another state's columns shares them only when
		// they are the same.
		for _, like := range [][]string{s.cols, append(slices.Clone(s.cols), "z"), {"q"}} {
			d := &KeyState{}
			if err := d.decode(string(data), like); err != nil {
				t.Fatal(err)
			}
			if !equalEvents(s.events, d.events) || !slices.Equal(s.cols, d.cols) {
				t.Fatalf("decoded with columns %q: %+v, want %+v", like, d, s)
			}
		}
		// Any run of leading events encodes by copying.
		var offs []int32
		if _, _, _, err := decodeState(string(data), nil, nil, nil, nil, &offs); err != nil || len(offs) != len(s.events)+1 || int(offs[len(offs)-1]) != len(data) {
			t.Fatalf("event offsets %v of a %d-byte state of %d events (%v)", offs, len(data), len(s.events), err)
		}
		for n := range len(s.events) + 1 {
			got, err := appendStateReusing(nil, s.cols, s.events, nil, &prefixCode{enc: string(data), offs: offs}, n)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("copying %d events: %x, want %x (%v)", n, got, data, err)
			}
		}
		// A version 1 state lends no events.
		if _, _, _, err := decodeState(string(appendStateV1(nil, s.cols, s.events)), nil, nil, nil, nil, &offs); err != nil || len(offs) != 0 {
			t.Fatalf("version 1 state: event offsets %v (%v)", offs, err)
		}
		// A state written in version 1 decodes to the same events.
		v1 := &KeyState{}
		if err := v1.UnmarshalBinary(appendStateV1(nil, s.cols, s.events)); err != nil {
			t.Fatal(err)
		}
		if !equalEvents(s.events, v1.events) || !slices.Equal(s.cols, v1.cols) {
			t.Fatalf("version 1 state decoded as %+v, want %+v", v1, s)
		}
		// Every truncation is an error, never a panic.
		for n := range len(data) {
			if err := (&KeyState{}).UnmarshalBinary(data[:n]); err == nil {
				t.Fatalf("a state cut at %d of %d bytes decoded", n, len(data))
			}
		}
	})
}

// appendStateV1 is the version 1 encoding of a state, which decoding still
// accepts.
func appendStateV1(buf []byte, cols []string, events []event) []byte {
	var table []string
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
	buf = append(buf, 1)
	buf = binary.AppendUvarint(buf, uint64(len(cols)))
	for _, c := range cols {
		buf = appendString(buf, c)
	}
	buf = binary.AppendUvarint(buf, uint64(len(table)))
	for _, x := range table {
		buf = appendString(buf, x)
	}
	buf = binary.AppendUvarint(buf, uint64(len(events)))
	for i := range events {
		e := &events[i]
		if e.del {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
		buf = appendString(buf, e.seq)
		buf = binary.AppendUvarint(buf, intern(e.pos.Flow))
		buf = binary.AppendUvarint(buf, intern(e.pos.Topic))
		buf = binary.AppendUvarint(buf, intern(e.pos.File))
		buf = binary.AppendVarint(buf, int64(e.pos.Partition))
		buf = binary.AppendVarint(buf, e.pos.Offset)
		buf = binary.AppendVarint(buf, e.seen)
		if e.del {
			continue
		}
		for _, v := range e.vals {
			buf = append(buf, byte(v.k))
			switch v.k {
			case vInt, vBool:
				buf = binary.AppendVarint(buf, v.i)
			case vFloat:
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.i))
			case vStr, vBytes:
				buf = appendString(buf, v.s)
			case vDec:
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.i))
				buf = binary.LittleEndian.AppendUint64(buf, uint64(v.h))
			}
		}
	}
	return buf
}

func TestKeyStateVersions(t *testing.T) {
	s := &KeyState{cols: []string{"a"}, events: []event{{seq: "s", row: -1, vals: []value{{k: vDec, i: 5}}}}}
	data, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != keyStateVersion {
		t.Fatalf("encoded as version %d, want %d", data[0], keyStateVersion)
	}
	// The compact decimal form is version 2's: in version 1 it is an error.
	v1 := append([]byte{1}, data[1:]...)
	if err := (&KeyState{}).UnmarshalBinary(v1); err == nil {
		t.Fatal("a version 1 state with a version 2 decimal decoded")
	}
	v9 := append([]byte{9}, data[1:]...)
	if err := (&KeyState{}).UnmarshalBinary(v9); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("a version 9 state: %v, want an error naming the version", err)
	}
}

func TestKeyStateOffsetsNeedStringsInOrder(t *testing.T) {
	// Version 2, no columns, strings "f" and "g", one delete whose flow is
	// "g" (string 1) before any use of string 0: decodable, but its events
	// cannot be copied into a state that numbers strings by first use.
	data := []byte{2, 0, 2, 1, 'f', 1, 'g', 1, 1, 1, 'a', 1, 0, 0, 0, 0, 0}
	var offs []int32
	_, evs, _, err := decodeState(string(data), nil, nil, nil, nil, &offs)
	if err != nil || len(evs) != 1 || evs[0].pos.Flow != "g" || evs[0].pos.Topic != "f" {
		t.Fatalf("decoded %+v (%v)", evs, err)
	}
	if len(offs) != 0 {
		t.Fatalf("event offsets %v, want none", offs)
	}
	data[11], data[12] = 0, 1 // flow "f", topic "g": in order of first use
	if _, _, _, err := decodeState(string(data), nil, nil, nil, nil, &offs); err != nil || !slices.Equal(offs, []int32{8, int32(len(data))}) {
		t.Fatalf("event offsets %v, want [8 %d] (%v)", offs, len(data), err)
	}
}

func TestKeyStateGarbage(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		data := rapid.SliceOf(rapid.Byte()).Draw(t, "data")
		_ = (&KeyState{}).UnmarshalBinary(data) // must not panic
		_ = (&TableState{}).UnmarshalBinary(data)
	})
}

func TestTableStateRoundTrip(t *testing.T) {
	for _, ts := range []TableState{
		{},
		{Truncates: []Barrier{{Seq: "\x80\x00", Pos: Position{Flow: "f", Topic: "t", Partition: 3, Offset: 9}, Seen: t0}}},
		{Truncates: []Barrier{
			{Seq: "a", Pos: Position{Flow: "f", File: "x.jsonl", Offset: 2}, Seen: t0},
			{Seq: "b", Pos: Position{Flow: "g"}, Seen: t0.Add(time.Hour)},
		}},
	} {
		data, err := ts.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back TableState
		if err := back.UnmarshalBinary(data); err != nil {
			t.Fatal(err)
		}
		if !equalBarriers(ts.Truncates, back.Truncates) {
			t.Fatalf("round trip: %+v, got %+v", ts, back)
		}
	}
}

// TestTableStateVersion: a table state without snapshots is written in
// version 1, which a release that knows no snapshots reads; one with
// snapshots needs version 2.
func TestTableStateVersion(t *testing.T) {
	trunc := []Barrier{{Seq: "a", Pos: Position{Flow: "f", Topic: "t", Offset: 4}, Seen: t0}}
	snap := []Barrier{{Seq: "b", Pos: Position{Flow: "s", File: "v/1.parquet"}, Seen: t0.Add(time.Hour)}}
	for _, tc := range []struct {
		name    string
		ts      TableState
		version byte
	}{
		{"empty", TableState{}, 1},
		{"truncates", TableState{Truncates: trunc}, 1},
		{"snapshots", TableState{Snapshots: snap}, 2},
		{"both", TableState{Truncates: trunc, Snapshots: snap}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.ts.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if data[0] != tc.version {
				t.Fatalf("version %d, want %d", data[0], tc.version)
			}
			var back TableState
			if err := back.UnmarshalBinary(data); err != nil {
				t.Fatal(err)
			}
			if !equalBarriers(tc.ts.Truncates, back.Truncates) || !equalBarriers(tc.ts.Snapshots, back.Snapshots) {
				t.Fatalf("round trip: %+v, got %+v", tc.ts, back)
			}
		})
	}
	// Version 1 as a release without snapshots wrote it: the truncates alone.
	v1 := []byte{1, 1, 1, 'a', 1, 'f', 1, 't', 0, 0, 8}
	v1 = binary.AppendVarint(v1, t0.UnixMicro())
	if data, _ := (TableState{Truncates: trunc}).MarshalBinary(); !bytes.Equal(data, v1) {
		t.Errorf("encoding %v, want %v", data, v1)
	}
}

// countingStore counts reads and can fail.
type countingStore struct {
	*MemStore
	gets int
	fail error
}

func (s *countingStore) Get(ctx context.Context, keys []string) ([]*KeyState, error) {
	s.gets++
	if s.fail != nil {
		return nil, s.fail
	}
	return s.MemStore.Get(ctx, keys)
}

// newKeys applies an upsert of each of n keys to a new SCD type 1 target
// and returns the output, its keys, and the bytes a cache counts for one
// of them.
func newKeys(t *testing.T, n int) (out *Output, keys []string, one int64) {
	t.Helper()
	e, err := New(f1("f"), NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]any
	var pos []Position
	for i := range n {
		rows = append(rows, U(i, "some name", 1))
		pos = append(pos, Position{Flow: "f", Topic: "t", Offset: int64(i)})
	}
	out, err = e.Apply(t.Context(), Input{Batch: mkBatch(f1Source, rows), Positions: pos, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	keys = make([]string, len(out.States))
	for i, kc := range out.States {
		keys[i] = kc.Key
	}
	return out, keys, cacheItemOverhead + int64(len(keys[0])) + int64(len(out.States[0].State.enc))
}

func TestCache(t *testing.T) {
	ctx := t.Context()
	st := &countingStore{MemStore: NewMemStore()}
	out, keys, one := newKeys(t, 10)
	if err := st.Commit(out); err != nil {
		t.Fatal(err)
	}

	c := NewCache(st, 3*one)
	got, err := c.Get(ctx, keys)
	if err != nil || len(got) != 10 || slices.Contains(got, nil) || st.gets != 1 {
		t.Fatalf("Get: %v, %v, %d reads", got, err, st.gets)
	}
	if c.Len() != 3 || c.Bytes() > 3*one {
		t.Fatalf("cache holds %d keys, %d bytes; want 3 keys within %d", c.Len(), c.Bytes(), 3*one)
	}
	// The three most recent are served without a read.
	if _, err := c.Get(ctx, keys[7:]); err != nil || st.gets != 1 {
		t.Fatalf("hits read the store: %d reads, %v", st.gets, err)
	}
	// Touching keys[7] makes keys[8] the least recent.
	if _, err := c.Get(ctx, keys[7:8]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, []string{keys[0]}); err != nil || st.gets != 2 {
		t.Fatalf("miss: %d reads, %v", st.gets, err)
	}
	if _, err := c.Get(ctx, []string{keys[8]}); err != nil || st.gets != 3 {
		t.Fatalf("keys[8] should have been evicted: %d reads", st.gets)
	}
	// Keys without state are remembered too.
	if _, err := c.Get(ctx, []string{"nope"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, []string{"nope"}); len(got) != 1 || got[0] != nil || st.gets != 4 {
		t.Fatalf("absent key: %v, %d reads", got, st.gets)
	}
	// Commit replaces, a nil state removes.
	c.Commit(&Output{States: []KeyChange{{Key: "nope", State: out.States[0].State}, {Key: keys[0]}}})
	got, _ = c.Get(ctx, []string{"nope", keys[0]})
	if got[0] == nil || got[0].enc != out.States[0].State.enc || !equalEvents(decoded(t, got[0]).events, decoded(t, out.States[0].State).events) || got[1] != nil || st.gets != 4 {
		t.Fatalf("after commit: %v, %d reads", got, st.gets)
	}
	// States come in the order of the keys, hits and misses mixed.
	mixed := []string{keys[1], "gone", keys[8], keys[2]}
	got, err = c.Get(ctx, mixed)
	if err != nil || len(got) != len(mixed) || got[1] != nil {
		t.Fatalf("mixed Get: %v, %v", got, err)
	}
	for i, k := range mixed {
		if k != "gone" && (got[i] == nil || got[i].enc != string(st.keys[k])) {
			t.Fatalf("mixed Get: state %d is not key %x's", i, k)
		}
	}
	// Errors are wrapped once; Reset forgets.
	c.Reset()
	st.fail = errors.New("boom")
	if _, err := c.Get(ctx, keys[:1]); err == nil || !errors.Is(err, st.fail) {
		t.Fatalf("Get = %v, want the store's error", err)
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("after Reset: %d keys, %d bytes", c.Len(), c.Bytes())
	}
}

// probingStore counts probes and reads of a MemStore; a probe can fail,
// or run a hook while it reads.
type probingStore struct {
	countingStore
	probes    int
	probeFail error
	during    func()
}

func (s *probingStore) NoKeyStates(ctx context.Context) (bool, error) {
	s.probes++
	if s.probeFail != nil {
		return false, s.probeFail
	}
	none, err := s.MemStore.NoKeyStates(ctx)
	if s.during != nil {
		s.during()
	}
	return none, err
}

// TestCacheWhole checks that a cache over a store without key states
// reads nothing back until it drops a state, and that whatever may have
// let a state escape it (a Reset, an eviction, a probe racing a Reset)
// makes it read again.
func TestCacheWhole(t *testing.T) {
	ctx := t.Context()
	out, keys, one := newKeys(t, 5)
	// commit commits out to the store, then to the cache, as a load does.
	commit := func(st *probingStore, c *Cache) {
		t.Helper()
		if err := st.Commit(out); err != nil {
			t.Fatal(err)
		}
		c.Commit(out)
	}
	get := func(c *Cache, keys []string) []*KeyState {
		t.Helper()
		got, err := c.Get(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	// A new target: one probe, no read, not even of keys never seen.
	st := &probingStore{countingStore: countingStore{MemStore: NewMemStore()}}
	c := NewCache(st, 10*one)
	if got := get(c, keys); slices.ContainsFunc(got, func(s *KeyState) bool { return s != nil }) || st.gets != 0 || st.probes != 1 {
		t.Fatalf("empty store: %v, %d reads, %d probes", got, st.gets, st.probes)
	}
	commit(st, c)
	if got := get(c, append([]string{"never"}, keys...)); got[0] != nil || slices.Contains(got[1:], nil) || st.gets != 0 || st.probes != 1 {
		t.Fatalf("after a commit: %v, %d reads, %d probes", got, st.gets, st.probes)
	}
	if c.Len() != len(keys) {
		t.Fatalf("the cache holds %d keys, want %d: misses are not kept", c.Len(), len(keys))
	}

	// Reset: a probe again, which now finds states, so misses read.
	c.Reset()
	if got := get(c, keys[:1]); got[0] == nil || st.gets != 1 || st.probes != 2 {
		t.Fatalf("after Reset: %v, %d reads, %d probes", got, st.gets, st.probes)
	}
	if get(c, []string{"never"}); st.gets != 2 || st.probes != 2 {
		t.Fatalf("a store with states: %d reads, %d probes", st.gets, st.probes)
	}

	// Too small to hold every state: the commit evicts, and an evicted
	// key is read back.
	st = &probingStore{countingStore: countingStore{MemStore: NewMemStore()}}
	c = NewCache(st, 3*one)
	get(c, keys)
	commit(st, c)
	if got := get(c, keys[:1]); got[0] == nil || st.gets != 1 {
		t.Fatalf("evicted key: %v, %d reads", got, st.gets)
	}

	// A probe that fails fails the Get, and is tried again.
	st = &probingStore{countingStore: countingStore{MemStore: NewMemStore()}, probeFail: errors.New("boom")}
	c = NewCache(st, 10*one)
	if _, err := c.Get(ctx, keys); !errors.Is(err, st.probeFail) {
		t.Fatalf("Get = %v, want the probe's error", err)
	}
	st.probeFail = nil
	if get(c, keys); st.probes != 2 || st.gets != 0 {
		t.Fatalf("after a failed probe: %d probes, %d reads", st.probes, st.gets)
	}

	// A load committed, then a Reset, while the probe reads: its answer
	// (no state) predates states the cache then forgot, so it is not
	// taken.
	st = &probingStore{countingStore: countingStore{MemStore: NewMemStore()}}
	c = NewCache(st, 10*one)
	st.during = func() {
		st.during = nil
		if err := st.Commit(out); err != nil {
			t.Error(err)
		}
		c.Reset()
	}
	if got := get(c, keys); slices.Contains(got, nil) || st.gets != 1 {
		t.Fatalf("probe racing a Reset: %v, %d reads", got, st.gets)
	}
	if got := get(c, keys[:1]); got[0] == nil || st.probes != 2 {
		t.Fatalf("after the race: %v, %d probes", got, st.probes)
	}

	// No cache, no probe.
	st = &probingStore{countingStore: countingStore{MemStore: NewMemStore()}}
	c = NewCache(st, 0)
	if get(c, keys); st.probes != 0 || st.gets != 1 {
		t.Fatalf("cache of 0 bytes: %d probes, %d reads", st.probes, st.gets)
	}
}

func TestCacheTable(t *testing.T) {
	st := NewMemStore()
	ts := TableState{Truncates: []Barrier{{Seq: "x", Seen: t0}}}
	if err := st.Commit(&Output{Table: &ts}); err != nil {
		t.Fatal(err)
	}
	c := NewCache(st, 1<<10)
	got, err := c.Table(t.Context())
	if err != nil || got.Newest() == nil || got.Newest().Seq != "x" {
		t.Fatalf("Table = %+v, %v", got, err)
	}
	c.Commit(&Output{Table: &TableState{Truncates: []Barrier{{Seq: "y"}}}})
	if got, _ := c.Table(t.Context()); got.Newest().Seq != "y" {
		t.Fatalf("after commit: %+v", got)
	}
}

func TestOrderedEncoding(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom([]batch.Type{batch.Int64, batch.String, batch.Float64, batch.Decimal(38, 3), batch.Bool, batch.Bytes}).Draw(t, "type")
		v := batch.NewVector(kind, 2)
		for range 2 {
			switch kind.Kind {
			case batch.KindInt64:
				v.AppendInt(rapid.Int64().Draw(t, "i"))
			case batch.KindString:
				v.AppendString(rapid.StringOf(rapid.RuneFrom([]rune{0, 1, 'a', 0xFF, 'é'})).Draw(t, "s"))
			case batch.KindBytes:
				v.AppendBytes(rapid.SliceOf(rapid.SampledFrom([]byte{0, 1, 0xFF})).Draw(t, "b"))
			case batch.KindFloat64:
				v.AppendFloat(rapid.Float64().Draw(t, "f"))
			case batch.KindBool:
				v.AppendBool(rapid.Bool().Draw(t, "b"))
			case batch.KindDecimal:
				v.AppendDecimal(batch.Dec128{Hi: rapid.Int64Range(-3, 3).Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")})
			}
		}
		x, y := appendOrdered(nil, v, 0), appendOrdered(nil, v, 1)
		var want int
		switch kind.Kind {
		case batch.KindInt64:
			want = cmpOf(v.Ints[0] < v.Ints[1], v.Ints[0] > v.Ints[1])
		case batch.KindString:
			want = cmpOf(v.Strs[0] < v.Strs[1], v.Strs[0] > v.Strs[1])
		case batch.KindBytes:
			want = bytes.Compare(v.Bytes[0], v.Bytes[1])
		case batch.KindFloat64:
			a, b := v.Floats[0], v.Floats[1]
			want = cmpOf(a < b, a > b)
		case batch.KindBool:
			want = cmpOf(!v.Bools[0] && v.Bools[1], v.Bools[0] && !v.Bools[1])
		case batch.KindDecimal:
			want = v.Decs[0].Cmp(v.Decs[1])
		}
		if got := bytes.Compare(x, y); got != want {
			t.Fatalf("encodings of %v and %v compare %d, want %d", v.Value(0), v.Value(1), got, want)
		}
		if kind.Kind == batch.KindString || kind.Kind == batch.KindInt64 || kind.Kind == batch.KindDecimal {
			back, err := decodeOrdered([]batch.Type{kind}, string(x))
			if err != nil || back[0] != readValue(v, 0) {
				t.Fatalf("decode of %v: %v, %v", v.Value(0), back, err)
			}
		}
	})
}

func cmpOf(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

// TestCacheHoldsEncodings checks that the cache keeps what the store keeps
// (each state's encoding, counted in its bytes), and that the states it
// returns decode to what the engine built.
func TestCacheHoldsEncodings(t *testing.T) {
	ctx := t.Context()
	st := NewMemStore()
	c := NewCache(st, 1<<20)
	for _, scd := range []int{1, 2} {
		cfg := f1("f")
		cfg.SCDType = scd
		e, err := New(cfg, c)
		if err != nil {
			t.Fatal(err)
		}
		c.Reset()
		var rows [][]any
		var pos []Position
		for i := range 20 {
			rows = append(rows, U(i%5, "name "+string(rune('a'+i)), int64(i)))
			pos = append(pos, Position{Flow: "f", Topic: "t", Offset: int64(i)})
		}
		out, err := e.Apply(ctx, Input{Batch: mkBatch(f1Source, rows), Positions: pos, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(out); err != nil {
			t.Fatal(err)
		}
		c.Commit(out)
		var want int64
		keys := make([]string, len(out.States))
		for i, kc := range out.States {
			keys[i] = kc.Key
			data, err := kc.State.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, st.keys[kc.Key]) {
				t.Fatalf("SCD type %d: key %x: the cache's encoding differs from the store's", scd, kc.Key)
			}
			want += cacheItemOverhead + int64(len(kc.Key)+len(data))
		}
		if len(keys) != 5 || c.Bytes() != want {
			t.Fatalf("SCD type %d: %d states, cache holds %d bytes, want %d", scd, len(keys), c.Bytes(), want)
		}
		got, err := c.Get(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, kc := range out.States {
			g := got[i] // keys[i] is kc.Key
			if g == nil {
				t.Fatalf("SCD type %d: key %x: no cached state", scd, kc.Key)
			}
			if want, d := decoded(t, kc.State), decoded(t, g); len(want.events) == 0 || !equalEvents(d.events, want.events) || !slices.Equal(d.cols, want.cols) {
				t.Fatalf("SCD type %d: key %x: cached state %+v, want %+v", scd, kc.Key, g, kc.State)
			}
		}
	}
}

// decoded returns a state decoded from its encoding.
func decoded(t *testing.T, s *KeyState) *KeyState {
	t.Helper()
	data, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d := &KeyState{}
	if err := d.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	return d
}
