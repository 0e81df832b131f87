// Package workertest is what the test binaries of the worker packages
// (worker/vips and the workers on it) share: libvips started once, and the
// programs a worker runs checked for before any test does.
package workertest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/arke-institute/orchestrator/worker/vips"
)

// Main is the TestMain of a worker package: it checks that each of tools
// (programs the worker runs, such as "pdfinfo") is on the PATH, starts
// libvips, and runs the tests. A missing tool or a libvips that will not
// start fails the whole package at once, with the reason, rather than
// every test with an error of its own.
func Main(m *testing.M, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "workertest: the tests need %s, which is not on the PATH: install it (README.md lists the packages)\n", tool)
			os.Exit(1)
		}
	}
	// Two threads per pipeline, not one per CPU: the tests run many
	// pipelines in parallel.
	if err := vips.Startup(vips.Config{Concurrency: 2}); err != nil {
		fmt.Fprintln(os.Stderr, "workertest:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
