//go:build unix

package model

import "syscall"

// cpuSeconds is the CPU time (user + system) the process has used, so that
// benchmarks on a shared machine can report rates per CPU-second.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
