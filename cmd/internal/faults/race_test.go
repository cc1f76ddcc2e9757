//go:build race

package faults

// raceEnabled builds the party binaries with the race detector when the
// tests run with it, so that they share the build cache with the tests.
const raceEnabled = true
