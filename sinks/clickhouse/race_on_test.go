//go:build race

package clickhouse

// raceOn is set when the race detector runs. make test runs the package
// twice, with and without it; the long suites on the test cluster run in
// the pass without (the race pass keeps the short cluster tests).
const raceOn = true
