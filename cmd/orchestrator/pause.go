package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/arke-institute/orchestrator/client"
)

const pauseUsage = `Usage: orchestrator pause -all|-phase PHASE|-batch ID [-reason TEXT] [-url URL]
       orchestrator resume -all|-phase PHASE|-batch ID [-url URL]
       orchestrator pauses [-url URL]

pause stops new work (POST /admin/pause): of every batch and document (-all),
of one phase in every batch (-phase), or of one batch (-batch). Nothing it
covers is launched, leased, sent to a provider or stepped until resume;
running machines finish and their callbacks are taken, status and the sweep
go on. resume lifts the pause (POST /admin/resume): the work goes on, and
the time paused is not charged to its retry windows. pauses lists the pauses
in force (GET /admin/pauses).

It needs the admin token (ADMIN_TOKEN, else the token file of .data/run.env).

Flags:
`

// pauseCmd is `orchestrator pause`, `resume` and `pauses`.
func pauseCmd(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	return runPause(ctx, name, args, operatorEnv(), stdout, stderr)
}

// runPause is pauseCmd with the environment read through lookup.
func runPause(ctx context.Context, name string, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, err := readerConfig(lookup)
	if err != nil {
		return err
	}
	flags, url := operatorFlags(name, pauseUsage, cfg, stderr)
	all := flags.Bool("all", false, "everything: every batch's work and the documents posted alone")
	phase := flags.String("phase", "", "one phase's work in every batch (e.g. OCR)")
	batch := flags.String("batch", "", "one batch's work")
	reason := flags.String("reason", "", "why (pause only): shown on the dashboard and in the batch's status")
	rest, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	named := 0
	for _, set := range []bool{*all, *phase != "", *batch != ""} {
		if set {
			named++
		}
	}
	switch {
	case len(rest) > 0:
		flags.Usage()
		return usageError{name + " takes no arguments"}
	case name == "pauses" && named > 0:
		return usageError{"pauses takes no -all, -phase or -batch"}
	case name != "pauses" && named != 1:
		flags.Usage()
		return usageError{name + " takes one of -all, -phase PHASE and -batch ID"}
	case name != "pause" && *reason != "":
		return usageError{"-reason is for pause"}
	case cfg.AdminToken == "":
		return fmt.Errorf("%s needs the admin token: set ADMIN_TOKEN to the orchestrator's", name)
	}
	api, err := client.New(client.Config{URL: *url, AdminToken: cfg.AdminToken, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return usageError{err.Error()}
	}
	t := client.PauseTarget{BatchID: *batch, Phase: *phase}
	switch name {
	case "pause":
		p, err := api.Pause(ctx, t, *reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "paused %s since %s\n", pauseScope(p), p.Since.Local().Format(time.DateTime))
	case "resume":
		r, err := api.Resume(ctx, t)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed %s after %s\n", pauseScope(r.Pause), (time.Duration(r.PausedSeconds) * time.Second).String())
	default:
		ps, err := api.Pauses(ctx)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			fmt.Fprintln(stdout, "nothing is paused")
		}
		for _, p := range ps {
			line := fmt.Sprintf("%-28s since %s", pauseScope(p), p.Since.Local().Format(time.DateTime))
			if p.Reason != "" {
				line += ": " + p.Reason
			}
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

// pauseScope names what p covers: "everything", "phase OCR", "batch ID".
func pauseScope(p client.Pause) string {
	if p.Scope == "global" {
		return "everything"
	}
	return p.Scope + " " + p.Target
}
