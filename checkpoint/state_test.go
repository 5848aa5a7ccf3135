package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

// racingStore lets another writer change the key between each Get and Put,
// races times.
type racingStore struct {
	*Memory
	races  int
	putErr error
	puts   int
}

func (r *racingStore) Put(ctx context.Context, key Key, e Entry) error {
	r.puts++
	if r.putErr != nil {
		return r.putErr
	}
	if r.races > 0 {
		r.races--
		cur, _ := r.Memory.Get(ctx, key)
		if err := r.Memory.Put(ctx, key, Entry{Value: []byte(`{"n":100}`), Revision: cur.Revision}); err != nil {
			return err
		}
	}
	return r.Memory.Put(ctx, key, e)
}

type num struct {
	N int `json:"n"`
}

func TestUpdateJSON(t *testing.T) {
	boom := errors.New("boom")
	k := Key{Pipeline: "p", Kind: "k"}
	tests := []struct {
		name     string
		races    int
		putErr   error
		change   func(v *num, exists bool) (bool, error)
		wantN    int
		wantRev  uint64
		wantErr  error
		wantPuts int
	}{
		{"first_write", 0, nil, func(v *num, _ bool) (bool, error) { v.N++; return true, nil }, 1, 1, nil, 1},
		{"retried_after_race", 2, nil, func(v *num, _ bool) (bool, error) { v.N++; return true, nil }, 101, 3, nil, 3},
		{"unchanged_writes_nothing", 0, nil, func(v *num, _ bool) (bool, error) { return false, nil }, 0, 0, nil, 0},
		{"change_error", 0, nil, func(v *num, _ bool) (bool, error) { return false, boom }, 0, 0, boom, 0},
		{"other_put_error_not_retried", 0, boom, func(v *num, _ bool) (bool, error) { v.N++; return true, nil }, 0, 0, boom, 1},
		{"gives_up", updateAttempts, nil, func(v *num, _ bool) (bool, error) { v.N++; return true, nil }, 0, 0, ErrStale, updateAttempts},
	}
	defer func(d time.Duration) { updateBackoff = d }(updateBackoff)
	updateBackoff = time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &racingStore{Memory: NewMemory(), races: tc.races, putErr: tc.putErr}
			v, rev, err := UpdateJSON(context.Background(), s, k, tc.change)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if v.N != tc.wantN || rev != tc.wantRev || s.puts != tc.wantPuts {
				t.Fatalf("UpdateJSON = %d at revision %d after %d puts, want %d at %d after %d", v.N, rev, s.puts, tc.wantN, tc.wantRev, tc.wantPuts)
			}
		})
	}
}

func TestSnapshotStateAdd(t *testing.T) {
	tests := []struct {
		name    string
		adds    []string
		applied []string
		last    string
	}{
		{"none", nil, nil, ""},
		{"ascending", []string{"1", "2", "10"}, []string{"1", "2", "10"}, "10"},
		{"replayed", []string{"1", "2", "2", "1"}, []string{"1", "2"}, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s SnapshotState
			for _, v := range tc.adds {
				s.Add(v)
			}
			if len(s.Applied) != len(tc.applied) || s.Last != tc.last {
				t.Fatalf("state %+v, want %v last %q", s, tc.applied, tc.last)
			}
			for i := range s.Applied {
				if s.Applied[i] != tc.applied[i] {
					t.Fatalf("state %+v, want %v", s, tc.applied)
				}
			}
		})
	}
}

// TestPutCursorRetried: a PutCursor whose first attempt landed although it
// reported an error is tried again with the same revision: it counts as
// stored. Another writer's cursor in between is still refused.
func TestPutCursorRetried(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	st := CursorState{LastValue: "2025-01-02", Type: "date", Runs: 3}
	if err := PutCursor(ctx, m, "p", "f", st, 0); err != nil {
		t.Fatal(err)
	}
	// The same cursor again from revision 0, as a retry after a lost answer.
	if err := PutCursor(ctx, m, "p", "f", st, 0); err != nil {
		t.Fatalf("retried PutCursor: %v, want it counted as stored", err)
	}
	other := st
	other.LastValue = "2025-01-03"
	if err := PutCursor(ctx, m, "p", "f", other, 0); !errors.Is(err, ErrStale) {
		t.Fatalf("PutCursor over another cursor: %v, want ErrStale", err)
	}
	got, rev, err := GetCursor(ctx, m, "p", "f")
	if err != nil || got != st || rev != 1 {
		t.Fatalf("stored cursor %+v at revision %d (%v), want %+v at 1", got, rev, err, st)
	}
}
