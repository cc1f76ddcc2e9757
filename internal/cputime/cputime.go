// Package cputime reads the CPU time this process has used, for figures
// that compare work done with the wall time it took.
package cputime

// Seconds is Process in seconds, 0 where it cannot be read.
func Seconds() float64 {
	d, _ := Process()
	return d.Seconds()
}
