//go:build unix

package dedup

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used,
// its garbage collector's included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
