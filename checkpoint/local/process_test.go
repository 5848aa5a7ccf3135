package local

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
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
