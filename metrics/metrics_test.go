package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestReadiness walks /readyz through a start, a destination outage and
// a failing flow, with the Set written from several goroutines.
func TestReadiness(t *testing.T) {
	s := New()
	s.Expect([]string{"a", "b"})
	ready := func() (int, string) {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		return w.Code, w.Body.String()
	}
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "flow a: not started") || !strings.Contains(body, "flow b: not started") {
		t.Errorf("before the flows started: %d %s", code, body)
	}
	var wg sync.WaitGroup
	for _, f := range []string{"a", "b"} {
		wg.Go(func() {
			s.FlowStarted(f)
			s.RecordsRead("p", f, 10)
			s.Committed("p", f, "t", 10, map[string]int64{"type_mismatch": 1}, nil)
		})
	}
	wg.Wait()
	if code, body := ready(); code != http.StatusOK || body != "{\"ready\":true}\n" {
		t.Errorf("started: %d %s", code, body)
	}
	s.Destination(errors.New("connection refused"))
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "destination: connection refused") {
		t.Errorf("destination down: %d %s", code, body)
	}
	if !s.Destination(nil) {
		t.Error("Destination(nil) after a failure did not report a recovery")
	}
	if s.Destination(nil) {
		t.Error("a second Destination(nil) reported a recovery again")
	}
	s.FlowFailing("b", errors.New("boom"))
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "flow b: failing: boom") {
		t.Errorf("flow failing: %d %s", code, body)
	}
	s.FlowFailing("b", nil)
	if code, _ := ready(); code != http.StatusOK {
		t.Errorf("flow healthy again: %d", code)
	}
	var nilSet *Set
	nilSet.RecordsRead("p", "f", 1) // a nil Set records nothing, and does not panic
	nilSet.FlowStarted("f")
}
