//go:build faults

package faults

// allFaults runs every fault of TestFaults (scripts/faults.sh); without the
// faults build tag only the fast ones run, in the project's test command.
const allFaults = true
