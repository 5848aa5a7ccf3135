package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

// The test binary doubles as the other process of the multi-process tests:
// with helperEnv set it runs one helper and exits.
const (
	helperEnv = "SLUICE_CHECKPOINT_LOCAL_HELPER"
	dirEnv    = "SLUICE_CHECKPOINT_LOCAL_DIR"
	idEnv     = "SLUICE_CHECKPOINT_LOCAL_ID"
	countEnv  = "SLUICE_CHECKPOINT_LOCAL_COUNT"
)

var counterKey = checkpoint.Key{Pipeline: "p", Kind: "counter", Flow: "shared"}

type counter struct {
	N       int      `json:"n"`
	Writers []string `json:"writers"`
}

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "increment":
		os.Exit(helperIncrement())
	case "loop":
		os.Exit(helperLoop())
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// helperIncrement increments the shared counter COUNT times.
func helperIncrement() int {
	s, err := Open(os.Getenv(dirEnv), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	n, _ := strconv.Atoi(os.Getenv(countEnv))
	for i := range n {
		id := fmt.Sprintf("%s.%d", os.Getenv(idEnv), i)
		_, _, err := checkpoint.UpdateJSON(context.Background(), s, counterKey, func(c *counter, _ bool) (bool, error) {
			c.N++
			c.Writers = append(c.Writers, id)
			return true, nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// helperLoop writes the counter key again and again, printing each revision
// once its Put returned.
func helperLoop() int {
	s, err := Open(os.Getenv(dirEnv), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for rev := uint64(0); ; rev++ {
		if err := s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte(fmt.Sprintf("v%d", rev+1)), Revision: rev}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(rev + 1)
	}
}

func helper(t *testing.T, mode, dir, id string, count int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, dirEnv+"="+dir, idEnv+"="+id, countEnv+"="+strconv.Itoa(count))
	cmd.Stderr = os.Stderr
	return cmd
}

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

func TestProcessesShareTheFile(t *testing.T) {
	const procs, each = 3, 15
	dir := t.TempDir()
	open(t, dir, Options{}) // creates the file before the race
	var cmds []*exec.Cmd
	for i := range procs {
		c := helper(t, "increment", dir, fmt.Sprintf("proc%d", i), each)
		if err := c.Start(); err != nil {
			t.Fatalf("start helper: %v", err)
		}
		cmds = append(cmds, c)
	}
	// This process writes too, through two Stores.
	local := []*Store{open(t, dir, Options{}), open(t, dir, Options{})}
	var want []string
	for i := range each {
		id := fmt.Sprintf("self.%d", i)
		want = append(want, id)
		_, _, err := checkpoint.UpdateJSON(context.Background(), local[i%2], counterKey, func(c *counter, _ bool) (bool, error) {
			c.N++
			c.Writers = append(c.Writers, id)
			return true, nil
		})
		if err != nil {
			t.Errorf("UpdateJSON: %v", err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper %d: %v", i, err)
		}
		for j := range each {
			want = append(want, fmt.Sprintf("proc%d.%d", i, j))
		}
	}
	c, e, err := checkpoint.GetJSON[counter](context.Background(), open(t, dir, Options{}), counterKey)
	if err != nil {
		t.Fatalf("GetJSON: %v", err)
	}
	total := (procs + 1) * each
	if c.N != total || e.Revision != uint64(total) {
		t.Fatalf("counter %d at revision %d, want %d: an update was lost", c.N, e.Revision, total)
	}
	if got := slices.Sorted(slices.Values(c.Writers)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("writers %v, want %v", got, want)
	}
}

func TestKilledWriterLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	cmd := helper(t, "loop", dir, "", 0)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	var acked uint64
	sc := bufio.NewScanner(out)
	for acked < 25 && sc.Scan() {
		acked, err = strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			t.Fatalf("helper said %q", sc.Text())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	for sc.Scan() { // revisions acknowledged before the kill landed
		if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
			acked = v
		}
	}
	cmd.Wait()
	if acked < 25 {
		t.Fatalf("helper acknowledged %d writes, want 25", acked)
	}

	s := open(t, dir, Options{LockTimeout: 5 * time.Second}) // the dead writer's lock is gone
	e, err := s.Get(context.Background(), counterKey)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	// A Put that returned is there; one more may have landed unacknowledged.
	if e.Revision != acked && e.Revision != acked+1 {
		t.Fatalf("revision %d after the kill, last acknowledged %d", e.Revision, acked)
	}
	if string(e.Value) != fmt.Sprintf("v%d", e.Revision) {
		t.Fatalf("value %q at revision %d", e.Value, e.Revision)
	}
	if err := s.Put(context.Background(), counterKey, checkpoint.Entry{Value: []byte("after"), Revision: e.Revision}); err != nil {
		t.Fatalf("Put after the kill: %v", err)
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
