package chtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Server is a ClickHouse server of the test's own, started with
// scripts/clickhouse-test-server in a temporary folder, for tests that kill
// and restart it without disturbing other tests. It is killed and removed
// when the test ends.
type Server struct {
	Addr   string
	t      testing.TB
	script string
	dir    string
}

// StartServer starts a server of the test's own.
func StartServer(t testing.TB) *Server {
	t.Helper()
	srv := &Server{t: t, script: findScript(t), dir: filepath.Join(t.TempDir(), "clickhouse")}
	out := srv.run("start")
	_, addr, ok := strings.Cut(strings.TrimSpace(out), "SLUICE_CLICKHOUSE_ADDR=")
	if !ok {
		t.Fatalf("clickhouse-test-server start printed %q", out)
	}
	srv.Addr = addr
	t.Cleanup(func() {
		srv.run("kill") // faster than a clean shutdown, and the data goes anyway
		srv.run("stop")
	})
	return srv
}

// Kill kills the server with SIGKILL, keeping its data.
func (srv *Server) Kill() { srv.t.Helper(); srv.run("kill") }

// Start starts the killed server again on its data and port.
func (srv *Server) Start() { srv.t.Helper(); srv.run("start") }

func (srv *Server) run(cmd string) string {
	srv.t.Helper()
	var stdout, stderr bytes.Buffer
	c := exec.Command(srv.script, cmd, srv.dir)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		srv.t.Fatalf("clickhouse-test-server %s %s: %v\n%s", cmd, srv.dir, err, stderr.String())
	}
	return stdout.String()
}

// findScript finds scripts/clickhouse-test-server above the test's folder.
func findScript(t testing.TB) string {
	t.Helper()
	return findScriptNamed(t, "clickhouse-test-server")
}

// findScriptNamed finds scripts/NAME above the test's folder.
func findScriptNamed(t testing.TB, name string) string {
	t.Helper()
	p, err := scriptPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// scriptPath finds scripts/NAME above the working folder (a test's is its
// package's).
func scriptPath(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("scripts/%s not found above %s", name, dir)
		}
		dir = parent
	}
}
