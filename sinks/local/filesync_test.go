package local

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileSyncer(t *testing.T) {
	dir := t.TempDir()
	sy := newFileSyncer()
	var files []*os.File
	for i := range 3 * syncsAtOnce {
		f, err := os.Create(filepath.Join(dir, strings.Repeat("f", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("data"); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		sy.add(f)
	}
	if err := sy.wait(); err != nil {
		t.Fatalf("wait: %v", err)
	}
	for _, f := range files {
		if _, err := f.WriteString("more"); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("%s after wait: write %v, want it closed", f.Name(), err)
		}
	}

	// A file that cannot be synced: wait reports it, by name.
	sy = newFileSyncer()
	bad, err := os.Create(filepath.Join(dir, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	bad.Close()
	sy.add(bad)
	if err := sy.wait(); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("wait after a failed sync: %v, want an error naming the file", err)
	}
}
