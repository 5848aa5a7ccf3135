package flows

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// TestRemoveDeadSpills checks which spill folders a new snapshot apply
// removes: those whose lock is free, and old ones without a lock file; not
// a live apply's, a young one's, or other folders.
func TestRemoveDeadSpills(t *testing.T) {
	tmp := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	old := time.Now().Add(-2 * unlockedSpillAge)
	mk := func(name string, lock bool, mtime time.Time) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rows-0"), []byte("spilled"), 0o644); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(dir, spillLock), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead := mk(spillPrefix+"dead", true, old)
	live := mk(spillPrefix+"live", true, old)
	lk := flock.New(filepath.Join(live, spillLock))
	if ok, err := lk.TryLock(); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	defer lk.Unlock()
	young := mk(spillPrefix+"young", true, time.Now())
	unlockedOld := mk(spillPrefix+"nolock-old", false, old)
	unlockedRecent := mk(spillPrefix+"nolock-recent", false, time.Now().Add(-2*youngSpillAge))
	other := mk("other-dead", true, old)

	dir, release, err := newSpillDir(tmp, log)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{dead: false, live: true, young: true, unlockedOld: false, unlockedRecent: true, other: true, dir: true} {
		_, err := os.Stat(path)
		if got := err == nil; got != want {
			t.Errorf("%s: there %v, want %v", filepath.Base(path), got, want)
		}
	}
	// The new folder is locked: another apply leaves it alone, old or not.
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	removeDeadSpills(tmp, log)
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the new spill folder was removed while its apply lives: %v", err)
	}
	// Once released (its process died), the next apply removes it.
	release()
	removeDeadSpills(tmp, log)
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("the released spill folder is still there")
	}
}
