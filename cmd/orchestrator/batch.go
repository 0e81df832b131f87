package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/config"
)

// batchCommand is one of the operator commands on a single batch: status,
// reset and retry, each a call to the orchestrator's API.
type batchCommand struct {
	call  func(*client.Client, context.Context, string) (client.Status, error)
	admin bool // needs ADMIN_TOKEN
	// verb says what happened, for the line printed before the status.
	verb string
	// about is the command's help text.
	about string
}

// batchCommands are the commands on one batch, by name.
var batchCommands = map[string]batchCommand{
	"status": {call: (*client.Client).Status,
		about: "Prints the batch's status document (GET /status/ID)."},
	"reset": {call: (*client.Client).Reset, admin: true, verb: "reset",
		about: "Resets the batch (POST /admin/reset/ID): it goes to ERROR, its open tasks\nend and its machines are destroyed. Then prints its status."},
	"retry": {call: (*client.Client).Retry, admin: true, verb: "retried",
		about: "Re-runs the batch's failed work (POST /admin/retry/ID), never its\ncompleted work. Then prints its status."},
	"retry-infra": {call: (*client.Client).RetryInfrastructure, admin: true, verb: "retried",
		about: "Re-runs only the batch's work that infrastructure failed (timeouts, dead\nmachines, outages, a spent quota: POST /admin/retry/ID?mode=infrastructure),\nnot the files that are bad. Then prints its status."},
}

const batchUsage = `Usage: orchestrator %s [-url URL] [-json] ID

%s

The orchestrator is at -url (default $ORCHESTRATOR_URL, else that of the
make run whose .data/run.env is in this folder, else the address of
LISTEN_ADDR on this machine).%s

Exit status: 0 on success, 1 when the orchestrator refuses (unknown batch,
bad token, nothing to do) or cannot be reached, 2 for a mistake on the
command line.

Flags:
`

// readerConfig reads only the settings of the commands that call the API
// as a reader or admin (status, reset, retry, search), so that an
// unrelated bad setting in the operator's shell does not stop them.
func readerConfig(lookup func(string) (string, bool)) (*config.Config, error) {
	return config.Load(func(k string) (string, bool) {
		switch k {
		case "ORCHESTRATOR_URL", "LISTEN_ADDR", "ADMIN_TOKEN", "READ_TOKEN":
			return lookup(k)
		}
		return "", false
	})
}

// runBatchCommand is `orchestrator status|reset|retry`, with the
// environment read through lookup.
func runBatchCommand(ctx context.Context, name string, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cmd := batchCommands[name]
	cfg, err := readerConfig(lookup)
	if err != nil {
		return err
	}
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		token := " The read token is read from\nREAD_TOKEN (else ADMIN_TOKEN), as the server's, else from the token files\nof .data/run.env."
		if cmd.admin {
			token = " The admin token is read from\nADMIN_TOKEN, as the server's, else from the token file of .data/run.env."
		}
		fmt.Fprintf(stderr, batchUsage, name, cmd.about, token)
		flags.PrintDefaults()
	}
	base := flags.String("url", cfg.OrchestratorURL, "orchestrator base URL ($ORCHESTRATOR_URL, else from LISTEN_ADDR)")
	asJSON := flags.Bool("json", false, "print the status document as JSON, as the API answers it")
	ids, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ids) != 1 || ids[0] == "" {
		flags.Usage()
		return usageError{fmt.Sprintf("%s takes one batch ID, got %d", name, len(ids))}
	}
	id := ids[0]
	c, err := client.New(client.Config{URL: *base, AdminToken: cfg.AdminToken, ReadToken: cfg.ReadToken, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return usageError{fmt.Sprintf("-url %q must be an http:// or https:// URL", strings.TrimRight(*base, "/"))}
	}
	if cmd.admin && cfg.AdminToken == "" {
		return fmt.Errorf("%s needs the admin token: set ADMIN_TOKEN to the orchestrator's ADMIN_TOKEN (next to a `make run`, run this from its folder: its .data/run.env leads to the token)", name)
	}
	if !cmd.admin && cfg.ReadToken == "" && cfg.AdminToken == "" {
		return fmt.Errorf("%s needs the read token: set READ_TOKEN to the orchestrator's READ_TOKEN (or ADMIN_TOKEN; next to a `make run`, run this from its folder: its .data/run.env leads to the tokens)", name)
	}

	st, err := cmd.call(c, ctx, id)
	var apiErr *client.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &apiErr):
		return apiError(name, id, c.URL(), cmd.admin, apiErr)
	case errors.As(err, &urlErr):
		return fmt.Errorf("cannot reach the orchestrator at %s: %w", c.URL(), err)
	case err != nil:
		return err
	}
	if cmd.verb != "" {
		fmt.Fprintf(stderr, "batch %s %s; it is now %s\n", id, cmd.verb, st.Status)
	}
	if *asJSON {
		var out bytes.Buffer
		if err := json.Indent(&out, st.Raw, "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err := stdout.Write(out.Bytes())
		return err
	}
	return printStatus(stdout, st)
}

// apiError turns a refusal of the API into a message saying what to do.
func apiError(name, id, base string, admin bool, err *client.Error) error {
	switch {
	case (err.StatusCode == http.StatusUnauthorized || err.StatusCode == http.StatusForbidden) && admin:
		return fmt.Errorf("the orchestrator at %s refused the admin token (%d): ADMIN_TOKEN must be the server's ADMIN_TOKEN", base, err.StatusCode)
	case err.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("the orchestrator at %s refused the read token (401): READ_TOKEN (or ADMIN_TOKEN) must be the server's", base)
	}
	switch err.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("batch %s not found at %s (404): %s", id, base, err.Message)
	case http.StatusConflict:
		return fmt.Errorf("cannot %s batch %s (409): %s", name, id, err.Message)
	default:
		return err
	}
}

// printStatus prints a status document for a terminal: its fields, one per
// line, then a table of its phases.
func printStatus(w io.Writer, st client.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	str := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	p := st.Progress
	fmt.Fprintf(tw, "batch\t%s\n", st.BatchID)
	fmt.Fprintf(tw, "status\t%s\n", st.Status)
	fmt.Fprintf(tw, "phase\t%s\n", str(st.Phase))
	unit := "tasks"
	if cur, ok := st.Current(); ok && cur.Unit != "" {
		unit = cur.Unit
	}
	fmt.Fprintf(tw, "progress\t%d/%d %s completed, %d failed\n", p.TasksCompleted, p.TasksTotal, unit, p.TasksFailed)
	fmt.Fprintf(tw, "started\t%s\n", ts(&st.StartedAt))
	fmt.Fprintf(tw, "updated\t%s\n", ts(&st.UpdatedAt))
	fmt.Fprintf(tw, "completed\t%s\n", ts(st.CompletedAt))
	fmt.Fprintf(tw, "error\t%s\n", str(st.Error))
	ingest := st.Ingest.Status
	if st.Ingest.Attempts > 0 {
		ingest += fmt.Sprintf(" (%d attempts)", st.Ingest.Attempts)
	}
	if st.Ingest.DeliveredAt != nil {
		ingest += ", delivered " + ts(st.Ingest.DeliveredAt)
	}
	if st.Ingest.LastError != nil {
		ingest += ", last error: " + *st.Ingest.LastError
	}
	fmt.Fprintf(tw, "ingest\t%s\n", ingest)
	if st.Pruned != nil {
		fmt.Fprintf(tw, "details\t%s\n", st.Pruned.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Phases) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tunit\ttotal\tpending\tprocessing\tcompleted\tfailed")
	for _, ph := range st.Phases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", ph.Phase, ph.Unit, ph.TasksTotal, ph.TasksPending, ph.TasksProcessing, ph.TasksCompleted, ph.TasksFailed)
	}
	return tw.Flush()
}

// batchCmd is `orchestrator status|reset|retry` on the process environment,
// with the run.env of a `make run` beneath it.
func batchCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	return runBatchCommand(ctx, name, args, operatorEnv(), stdout, stderr)
}
