//go:build race

package flows_test

// raceOn is set when the race detector runs, which slows pipelines tenfold.
const raceOn = true
