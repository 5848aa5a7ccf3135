package flows

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// spillPrefix names a snapshot apply's spill folder in the temporary
// directory ($TMPDIR).
const spillPrefix = "sluice-snapshot-"

// spillLock is the file in a spill folder whose lock its apply holds for as
// long as it lives: a folder whose lock is free belongs to a process that
// died (or was killed) before removing it.
const spillLock = ".lock"

// A spill folder is made, then its lock file is made and locked: one
// younger than youngSpillAge may be between those steps, and is left
// alone; one without a lock file is removed once older than
// unlockedSpillAge.
const (
	youngSpillAge    = time.Minute
	unlockedSpillAge = time.Hour
)

// newSpillDir makes a spill folder in tmp and locks it; release unlocks it
// (the folder's removal is the caller's). First it removes the folders of
// applies that died: killed mid-apply, a process leaves its spill behind,
// as large as the snapshot.
func newSpillDir(tmp string, log *slog.Logger) (dir string, release func(), err error) {
	removeDeadSpills(tmp, log)
	dir, err = os.MkdirTemp(tmp, spillPrefix)
	if err != nil {
		return "", nil, err
	}
	lk := flock.New(filepath.Join(dir, spillLock))
	if ok, err := lk.TryLock(); err != nil || !ok {
		os.RemoveAll(dir)
		return "", nil, errors.Join(errors.New("spill folder lock not taken"), err)
	}
	return dir, func() { lk.Unlock(); lk.Close() }, nil
}

// removeDeadSpills removes the spill folders in tmp whose lock no process
// holds, and those older than unlockedSpillAge without a lock file; none
// younger than youngSpillAge.
func removeDeadSpills(tmp string, log *slog.Logger) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spillPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < youngSpillAge {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		path := filepath.Join(dir, spillLock)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			if time.Since(info.ModTime()) < unlockedSpillAge {
				continue
			}
			if err := os.RemoveAll(dir); err == nil {
				log.Info("removed a snapshot spill left by a process that died", "dir", dir)
			}
			continue
		}
		lk := flock.New(path)
		if ok, err := lk.TryLock(); err != nil || !ok {
			lk.Close()
			continue // its apply is alive
		}
		err = os.RemoveAll(dir)
		lk.Unlock()
		lk.Close()
		if err == nil {
			log.Info("removed a snapshot spill left by a process that died", "dir", dir)
		}
	}
}
