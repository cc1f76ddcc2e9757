//go:build !unix

package bench

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
