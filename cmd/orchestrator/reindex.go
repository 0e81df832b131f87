package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/arke-institute/orchestrator/client"
)

const reindexUsage = `Usage: orchestrator reindex [-no-wait] [-url URL]

Re-indexes the documents' chunks for search (POST /admin/reindex) after the
embedder (EMBEDDINGS_MODEL, EMBEDDINGS_DIMENSIONS, EMBEDDINGS_API_URL) or
SEARCH_TEXT_CONFIG changed: the orchestrator that answers parses the text of
current versions' chunks again where another configuration parsed it, and
embeds their vectors again where another embedder made them, in batches,
each committed. Until it ends, searches find those chunks by their words
alone. Progress is printed until it ends (GET /admin/reindex). Stopped, it
resumes where it was when run again.

It needs the admin token (ADMIN_TOKEN, else the token file of .data/run.env).

Exit status: 0 when every chunk is re-indexed (or, with -no-wait, the
re-index started), 1 when it failed, 2 for a mistake on the command line.

Flags:
`

// reindex is `orchestrator reindex`.
func reindex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runReindex(ctx, args, operatorEnv(), stdout, stderr)
}

// runReindex is reindex with the environment read through lookup.
func runReindex(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, err := readerConfig(lookup)
	if err != nil {
		return err
	}
	flags, url := operatorFlags("reindex", reindexUsage, cfg, stderr)
	noWait := flags.Bool("no-wait", false, "exit once the re-index started")
	poll := flags.Duration("poll-interval", time.Second, "how often the progress is read")
	rest, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		flags.Usage()
		return usageError{"reindex takes no arguments"}
	case *poll <= 0:
		return usageError{"-poll-interval must be positive"}
	case cfg.AdminToken == "":
		return errors.New("reindex needs the admin token: set ADMIN_TOKEN to the orchestrator's")
	}
	api, err := client.New(client.Config{URL: *url, AdminToken: cfg.AdminToken})
	if err != nil {
		return usageError{err.Error()}
	}
	p, err := api.Reindex(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-indexing for %s, text as %s\n", p.Embedder, p.TextConfig)
	for {
		fmt.Fprintf(stdout, "%d of %d chunks done\n", p.Done, p.Chunks)
		switch {
		case p.Error != "":
			return fmt.Errorf("the re-index stopped: %s (run reindex again to resume)", p.Error)
		case !p.Running && p.Done == p.Chunks:
			return nil
		case !p.Running:
			// Its run in that process ended while another process's
			// re-index, or new documents, hold the rest: start again.
			if p, err = api.Reindex(ctx); err != nil {
				return err
			}
		case *noWait:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(*poll):
		}
		if p, err = api.ReindexProgress(ctx); err != nil {
			return err
		}
	}
}
