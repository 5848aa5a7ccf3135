package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"
)

// heapSample is how often the heap watch reads the live heap. The live
// heap changes only when a collection ends, and collections of a busy
// process come tens of milliseconds apart: a peak is rarely missed.
const heapSample = 10 * time.Millisecond

// heapWatch follows the process's live heap (what the last collection
// found reachable: /gc/heap/live:bytes) and keeps its peak. With a profile
// file, it also keeps the heap profile of the moment the peak was reached
// (taken again each time the peak grows by a fiftieth), written by stop.
type heapWatch struct {
	profile string
	done    chan struct{}
	ended   chan struct{}
	peak    uint64
	prof    []byte
}

func startHeapWatch(profile string) *heapWatch {
	w := &heapWatch{profile: profile, done: make(chan struct{}), ended: make(chan struct{})}
	go w.run()
	return w
}

func (w *heapWatch) run() {
	defer close(w.ended)
	t := time.NewTicker(heapSample)
	defer t.Stop()
	for {
		w.sample()
		select {
		case <-w.done:
			return
		case <-t.C:
		}
	}
}

// sample reads the live heap, and takes the profile when the peak grew.
func (w *heapWatch) sample() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	v := s[0].Value.Uint64()
	if v <= w.peak {
		return
	}
	grown := w.prof == nil || v > w.peak+w.peak/50
	w.peak = v
	if grown && w.profile != "" {
		var buf bytes.Buffer
		if pprof.Lookup("heap").WriteTo(&buf, 0) == nil {
			w.prof = buf.Bytes()
		}
	}
}

// stop ends the watch and returns the peak; the profile, if asked for, is
// written then. A command too short for any collection gets one, to
// measure its heap as it ends (a longer one is not slowed by it).
func (w *heapWatch) stop() (uint64, error) {
	close(w.done)
	<-w.ended
	if w.sample(); w.peak == 0 {
		runtime.GC()
		w.sample()
	}
	if w.profile == "" {
		return w.peak, nil
	}
	if err := os.WriteFile(w.profile, w.prof, 0o644); err != nil {
		return w.peak, fmt.Errorf("heap profile at the peak: %w", err)
	}
	return w.peak, nil
}
