package fsys

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	made, err := MkdirAll(OS{}, dir, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), dir}
	if !slices.Equal(made, want) {
		t.Fatalf("made %v, want %v", made, want)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("%s: %v", dir, err)
	}
	if made, err := MkdirAll(OS{}, dir, 0o755); err != nil || len(made) != 0 {
		t.Fatalf("again: made %v (%v), want none", made, err)
	}
}

func TestOSOpenMissing(t *testing.T) {
	f, err := OS{}.Open(filepath.Join(t.TempDir(), "missing"))
	if !errors.Is(err, fs.ErrNotExist) || f != nil {
		t.Fatalf("Open of a missing file: %v, %v; want a nil File and fs.ErrNotExist", f, err)
	}
}

// record returns a callback that records every operation, and the record.
func record() (func(Op, string) error, func() []string) {
	var mu sync.Mutex
	var ops []string
	return func(op Op, path string) error {
			mu.Lock()
			ops = append(ops, string(op)+" "+filepath.Base(path))
			mu.Unlock()
			return nil
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(ops)
		}
}

func TestFaultyReports(t *testing.T) {
	dir := t.TempDir()
	rec, ops := record()
	f := NewFaulty(OS{}, rec)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	file, err := f.OpenFile(a, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := SyncAndClose(file); err != nil {
		t.Fatal(err)
	}
	if err := f.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	if err := f.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := f.Symlink("b", a); err != nil {
		t.Fatal(err)
	}
	if target, err := f.Readlink(a); err != nil || target != "b" {
		t.Fatalf("Readlink: %q, %v", target, err)
	}
	want := []string{"create a", "write a", "sync a", "rename b", "syncdir " + filepath.Base(dir), "symlink a", "readlink a"}
	if got := ops(); !slices.Equal(got, want) {
		t.Fatalf("operations %q, want %q", got, want)
	}
}

func TestFaultyFails(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	f := NewFaulty(OS{}, func(op Op, path string) error {
		if op == OpRename || op == OpSync {
			return boom
		}
		return nil
	})
	err := f.Rename(a, b)
	var le *os.LinkError
	if !errors.As(err, &le) || !errors.Is(err, boom) || le.Op != "rename" || le.New != b {
		t.Fatalf("failed rename: %#v, want an *os.LinkError wrapping boom", err)
	}
	if _, err := os.Stat(b); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the failed rename happened: %v", err)
	}
	file, err := f.OpenFile(a, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = file.Sync()
	var pe *fs.PathError
	if !errors.As(err, &pe) || !errors.Is(err, boom) || pe.Op != "sync" || pe.Path != a {
		t.Fatalf("failed sync: %#v, want an *fs.PathError wrapping boom", err)
	}
	if err := file.Close(); err != nil {
		t.Fatalf("Close, which never fails: %v", err)
	}
	f.Set(nil)
	if err := f.Rename(a, b); err != nil {
		t.Fatalf("rename with no callback: %v", err)
	}
}

func TestFaultyTornWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	boom := errors.New("boom")
	writes := 0
	f := NewFaulty(OS{}, func(op Op, _ string) error {
		if op == OpWrite {
			if writes++; writes == 2 {
				return Torn(boom)
			}
		}
		return nil
	})
	file, err := f.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, err := file.WriteAt([]byte("first\n"), 0); err != nil {
		t.Fatal(err)
	}
	n, err := file.WriteAt([]byte("second\n"), 6)
	if n != 3 || !errors.Is(err, boom) {
		t.Fatalf("torn write: %d bytes, %v; want 3 and boom", n, err)
	}
	if data, _ := os.ReadFile(path); string(data) != "first\nsec" {
		t.Fatalf("file holds %q after the torn write", data)
	}
}
