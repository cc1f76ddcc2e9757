//go:build !unix

package cputime

import "time"

// Process is unknown (ok false) where the system does not say.
func Process() (d time.Duration, ok bool) { return 0, false }
