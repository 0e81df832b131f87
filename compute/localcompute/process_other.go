//go:build !unix

package localcompute

import (
	"os"
	"os/exec"
)

// configureProcess has nothing to add where process groups are not
// available.
func configureProcess(*exec.Cmd) {}

// killProcess kills the worker process.
func killProcess(p *os.Process) error {
	return p.Kill()
}
