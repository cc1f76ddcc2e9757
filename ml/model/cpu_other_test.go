//go:build !unix

package model

// cpuSeconds is 0 where the process's CPU time is not available.
func cpuSeconds() float64 { return 0 }
