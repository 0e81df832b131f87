// Command chaos runs batches through two real orchestrator processes while
// it injects faults, then checks that nothing was lost (`make chaos`; a
// short form, `make chaos-short`, runs in CI). See CHAOS.md.
//
//	chaos [flags]   the driver: build bin/orchestrator, start Postgres
//	                (internal/harness/pgcluster), the S3 server, the fake
//	                Machines API and the fake providers as processes of
//	                their own, two
//	                orchestrators, a fake ingest service; run the load
//	                fault-free, then again with faults; print the table
//	chaos s3 ...    the local S3 server with an outage knob (a child)
//	chaos fly ...   the fake Machines API with worker faults (a child)
//	chaos provider  the fake OCR, embeddings and tags providers with an
//	                outage knob (a child)
//
// Faults, at random (seeded; -seed): kill -9 of one orchestrator (back
// after 1-3 s), Postgres stopped immediately (every connection dropped)
// and started again, 503s from the Machines API and from S3 for a while,
// 429s then 503s from the OCR and documents providers, and machines that
// hang, crash or call back late. The run fails, naming the assertion,
// unless every batch is DONE, every task has the outcome its worker gave,
// every OCR-on image's ref has its text and every document completed,
// ingest got each batch's manifest under one idempotency key, no task had
// two machines at once, work a killed process held resumed within 90 s,
// and connections and goroutines end where the fault-free run's did.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "s3":
		err = runS3(ctx, os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "fly":
		err = runFly(ctx, os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "provider":
		err = runProvider(ctx, os.Args[2:], os.Stdout)
	default:
		var opts options
		if opts, err = parseOptions(os.Args[1:]); err == nil {
			err = drive(ctx, opts)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}
