// Command orchestrator runs the preprocessing orchestrator of the archival
// ingest pipeline.
//
//	orchestrator serve     HTTP API and job workers (applies pending migrations first)
//	orchestrator migrate   apply pending database migrations and exit
//	orchestrator submit    upload a local folder as a batch and follow it
//	orchestrator status    print a batch's status (through the API)
//	orchestrator reset     reset a batch (admin, through the API)
//	orchestrator retry     re-run a batch's failed work (admin, through the API)
//	orchestrator retry-infra  re-run only what infrastructure failed (admin)
//	orchestrator document  upload a text document, index it and follow it
//	orchestrator search    search the indexed documents
//	orchestrator pause     pause work of everything, a phase or a batch (admin); resume lifts it
//	orchestrator webhooks  manage webhook subscriptions, their deliveries and replays (admin)
//	orchestrator report    print a report of the database (batch durations, failures, cost, ...)
//
// Configuration comes from the environment; see docs/configuration.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/arke-institute/orchestrator/config"
)

const usage = `orchestrator: the archival ingest preprocessing orchestrator

Usage:
  orchestrator serve [-no-migrate] [-queues Q,...]
                                     run the HTTP API and the job workers (-queues ocr:
                                     only OCR chunks; queues: default, phase_build,
                                     webhooks, ocr)
  orchestrator migrate               apply pending database migrations and exit
  orchestrator submit [flags] DIR    upload a folder as a batch and follow it (submit -h)
  orchestrator status [-json] ID     print a batch's status
  orchestrator reset ID              reset a batch: ERROR, open tasks ended (ADMIN_TOKEN)
  orchestrator retry ID              re-run a batch's failed work (ADMIN_TOKEN)
  orchestrator retry-infra ID        re-run only what infrastructure failed (ADMIN_TOKEN)
                                     (status, reset, retry, retry-infra: -url, default $ORCHESTRATOR_URL)
  orchestrator document [flags] FILE upload a markdown or text file and index it (document -h)
  orchestrator search [-k 10] QUERY  search the indexed documents
  orchestrator reindex               re-index the documents for search after the embedder or
                                     SEARCH_TEXT_CONFIG changed, and follow it (ADMIN_TOKEN)
  orchestrator pause -all|-phase P|-batch ID [-reason TEXT]
                                     stop launches, leases, provider calls and document steps
                                     of everything, a phase or a batch (ADMIN_TOKEN)
  orchestrator resume -all|-phase P|-batch ID
                                     lift a pause; orchestrator pauses lists them
  orchestrator webhooks create|list|deliveries|delivery|replay|disable|enable|delete
                                     manage webhook subscriptions (ADMIN_TOKEN; webhooks -h)
  orchestrator report [NAME] [-since 7d] [-format table|csv|json] [-limit 20]
                                     print a report of DATABASE_URL; no NAME lists them
  orchestrator help                  show this help

Configuration is read from the environment (DATABASE_URL, LISTEN_ADDR,
R2_*, FLY_*, ...); see docs/configuration.md for every setting.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "migrate":
		return migrate(ctx, args[1:], stderr)
	case "submit":
		return submit(ctx, args[1:], stdout, stderr)
	case "status", "reset", "retry", "retry-infra":
		return batchCmd(ctx, args[0], args[1:], stdout, stderr)
	case "report":
		return report(ctx, args[1:], stdout, stderr)
	case "document":
		return document(ctx, args[1:], stdout, stderr)
	case "search":
		return search(ctx, args[1:], stdout, stderr)
	case "reindex":
		return reindex(ctx, args[1:], stdout, stderr)
	case "pause", "resume", "pauses":
		return pauseCmd(ctx, args[0], args[1:], stdout, stderr)
	case "webhooks":
		return webhooksCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
}

// loadConfig reads the whole configuration from the environment (the
// operator commands read only the few settings they use).
func loadConfig() (*config.Config, error) {
	return config.Load(os.LookupEnv)
}

// newLogger builds the process logger: JSON unless LOG_FORMAT=text or, when
// LOG_FORMAT is unset, stderr is a terminal.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	format := cfg.LogFormat
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
