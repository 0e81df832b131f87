package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/arke-institute/orchestrator/config"
)

// operatorFlags is the flag set of an operator command that calls the API:
// its usage (text, then the flags) and -url, defaulting to the
// orchestrator's URL of cfg.
func operatorFlags(name, usage string, cfg *config.Config, stderr io.Writer) (*flag.FlagSet, *string) {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(stderr, usage)
		flags.PrintDefaults()
	}
	return flags, flags.String("url", cfg.OrchestratorURL, "orchestrator base URL ($ORCHESTRATOR_URL, else from LISTEN_ADDR)")
}
