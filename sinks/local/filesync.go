package local

import (
	"sync"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// fileSyncer syncs and closes files in the background, several at once: a
// file system commits fsyncs that wait together in one journal commit,
// where one after the other each waits for a commit of its own. A load's
// plan writes up to four files per bucket it rewrites, and a load stages
// several.
type fileSyncer struct {
	sem chan struct{} // bounds the files open and syncing
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

// syncsAtOnce bounds the fsyncs a fileSyncer runs at once.
const syncsAtOnce = 16

func newFileSyncer() *fileSyncer { return &fileSyncer{sem: make(chan struct{}, syncsAtOnce)} }

// add syncs and closes f in the background; f is the syncer's from now.
// It waits while syncsAtOnce files are syncing.
func (s *fileSyncer) add(f fsys.File) {
	s.sem <- struct{}{}
	s.wg.Go(func() {
		defer func() { <-s.sem }()
		if err := fsys.SyncAndClose(f); err != nil {
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
		}
	})
}

// syncClose syncs and closes a finished file: through s in the background,
// or, with a nil s, before it returns (with the error).
func (s *fileSyncer) syncClose(f fsys.File) error {
	if s != nil {
		s.add(f)
		return nil
	}
	return fsys.SyncAndClose(f)
}

// wait returns once every file added is synced and closed, with the first
// error (an *os.PathError, naming the file). A nil syncer has none.
func (s *fileSyncer) wait() error {
	if s == nil {
		return nil
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
