//go:build unix

package localcompute

import (
	"os"
	"os/exec"
	"syscall"
)

// configureProcess puts the worker in a process group of its own, so that
// Destroy kills whatever it started too, and a Ctrl-C meant for the
// orchestrator's terminal reaches the orchestrator only (which then shuts
// the runner down).
func configureProcess(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcess kills the worker and then its process group. The process goes
// first, through os.Process, which knows whether it has been reaped: a
// reaped PID (hence group ID) may belong to an unrelated process by now, so
// the group is only signalled when the worker was still there an instant
// ago (reuse in between would need the PID space to wrap around in that
// instant).
func killProcess(p *os.Process) error {
	if err := p.Kill(); err != nil {
		return err
	}
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	return nil
}
