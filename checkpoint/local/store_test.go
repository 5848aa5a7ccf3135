package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/storetest"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

func open(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func() checkpoint.Store {
		dir := t.TempDir()
		return func() checkpoint.Store {
			s, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return s
		}
	})
}

func TestFileInDestination(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"existing_destination", func(t *testing.T) string { return t.TempDir() }},
		{"new_destination", func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "b") }},
		{"existing_state_folder", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.Mkdir(filepath.Join(d, "_sluice"), 0o755); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			s := open(t, dir, Options{})
			if err := s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte("x")}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			want := filepath.Join(dir, "_sluice", "checkpoint.db")
			if Path(dir) != want {
				t.Fatalf("Path = %s, want %s", Path(dir), want)
			}
			db, err := bbolt.Open(want, 0o644, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
			if err != nil {
				t.Fatalf("open %s: %v", want, err)
			}
			defer db.Close()
			err = db.View(func(tx *bbolt.Tx) error {
				v := tx.Bucket(bucket).Get([]byte(counterKey.String()))
				r, err := decodeRecord(v)
				if err != nil {
					return err
				}
				if string(r.value) != "x" || r.revision != 1 {
					return fmt.Errorf("stored %q at revision %d, want x at 1", r.value, r.revision)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLockTimeout(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{LockTimeout: 300 * time.Millisecond})
	// Another holder keeps the file, as a process stuck in a write would.
	holder, err := bbolt.Open(Path(dir), 0o644, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	start := time.Now()
	err = s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte("x")})
	if err == nil || errors.Is(err, checkpoint.ErrStale) {
		t.Fatalf("Put while held: err %v, want a timeout", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("Put gave up after %v, want about 300ms", waited)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte("x")}); err != nil {
		t.Fatalf("Put after release: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		do   func() error
	}{
		{"get", func() error { _, err := s.Get(context.Background(), counterKey); return err }},
		{"put", func() error { return s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte("x")}) }},
		{"delete", func() error { return s.Delete(context.Background(), checkpoint.Key{Pipeline: "p"}) }},
		{"list", func() error { _, err := s.List(context.Background(), checkpoint.Key{}); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, checkpoint.ErrClosed) {
				t.Fatalf("err %v, want ErrClosed", err)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		r    record
	}{
		{"value", record{revision: 7, at: at, value: []byte("abc")}},
		{"tombstone", record{revision: 1<<63 + 5, at: at, deleted: true, value: []byte{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord(tc.r.encode())
			if err != nil || got.revision != tc.r.revision || !got.at.Equal(tc.r.at) || got.deleted != tc.r.deleted || string(got.value) != string(tc.r.value) {
				t.Fatalf("decode(encode(%+v)) = %+v, %v", tc.r, got, err)
			}
		})
	}
	for _, bad := range [][]byte{{}, {1, 2}, append([]byte{9}, make([]byte, recordHeader)...)} {
		if _, err := decodeRecord(bad); err == nil {
			t.Fatalf("decodeRecord(%v) accepted", bad)
		}
	}
}

// TestNewFoldersSynced checks that a new store's folder, and each folder
// made for it, is fsynced once the file exists, and that a failed fsync
// fails Open.
func TestNewFoldersSynced(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	var mu sync.Mutex
	var synced []string
	fail := false
	disk := fsys.NewFaulty(fsys.OS{}, func(op fsys.Op, path string) error {
		if op != fsys.OpSyncDir {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		synced = append(synced, path)
		if fail {
			return syscall.EIO
		}
		return nil
	})
	s := open(t, dir, Options{FS: disk})
	state, err := filepath.EvalSymlinks(filepath.Join(dir, "_sluice"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{state, root, filepath.Join(root, "a"), dir}; !slices.Equal(synced, want) {
		t.Fatalf("synced %v, want %v", synced, want)
	}
	s.Close()
	synced = nil
	open(t, dir, Options{FS: disk}).Close()
	if len(synced) != 0 {
		t.Fatalf("reopening synced %v, want nothing", synced)
	}

	fail = true
	other := filepath.Join(root, "c")
	if _, err := Open(other, Options{FS: disk}); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync folder") {
		t.Fatalf("Open with a failing fsync: %v, want the EIO of a folder's sync", err)
	}
}

// TestRetryable classifies the errors the store really returns: the file
// held by another opener past LockTimeout and a failing file system are
// worth retrying; a stale write, a missing entry, a closed store and an
// invalid key are not.
func TestRetryable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	key := checkpoint.Key{Pipeline: "p", Kind: "k", Flow: "f"}
	if err := s.Put(ctx, key, checkpoint.Entry{Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	stale := s.Put(ctx, key, checkpoint.Entry{Value: []byte("w")})
	_, missing := s.Get(ctx, checkpoint.Key{Pipeline: "p", Kind: "k", Flow: "none"})
	_, invalid := s.Get(ctx, checkpoint.Key{Kind: "k"})
	// Another opener of the file holds it.
	db, err := bbolt.Open(s.path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, held := s.Get(ctx, key)
	db.Close()
	failing, err := Open(t.TempDir(), Options{FS: fsys.NewFaulty(fsys.OS{}, func(op fsys.Op, path string) error { return syscall.EIO })})
	var broken error
	if err == nil {
		_, broken = failing.Get(ctx, key)
	} else {
		broken = err
	}
	s.Close()
	_, closed := s.Get(ctx, key)
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"stale", stale, false},
		{"not found", missing, false},
		{"invalid key", invalid, false},
		{"closed", closed, false},
		{"cancelled", context.Canceled, false},
		{"held past the lock timeout", held, true},
		{"file system failing", broken, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the operation did not fail")
			}
			if got := s.Retryable(tc.err); got != tc.want {
				t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
