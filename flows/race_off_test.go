//go:build !race

package flows_test

const raceOn = false
