// Package proccpu reads the CPU time this process has used, user and
// system: benchmarks report CPU an operation beside the rate, which moves
// less than the rate on a shared machine.
package proccpu

import (
	"syscall"
	"time"
)

// Used is the user and system CPU this process has used so far; zero if
// the kernel does not say.
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
