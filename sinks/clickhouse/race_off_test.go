//go:build !race

package clickhouse

// raceOn: see race_on_test.go.
const raceOn = false
