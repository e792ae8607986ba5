package miniotest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the server if the test binary dies without
// running its cleanups (a panic, a timeout's SIGQUIT), so no MinIO outlives
// its test. Best effort: Linux delivers it when the starting thread exits.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
