package dedup

import (
	"os/exec"
	"syscall"
)

// orphanGuard has the kernel kill redis-server if the test binary dies
// without reaching TestMain's cleanup (e.g. a panicking test).
func orphanGuard(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
