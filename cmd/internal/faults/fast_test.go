//go:build !faults

package faults

const allFaults = false
