package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/client"
)

const webhooksUsage = `Usage: orchestrator webhooks create -url-of URL -events TYPE,... [-batch ID] [-description TEXT]
       orchestrator webhooks list
       orchestrator webhooks deliveries SUBSCRIPTION [-limit N]
       orchestrator webhooks delivery DELIVERY
       orchestrator webhooks replay DELIVERY
       orchestrator webhooks disable SUBSCRIPTION [-reason TEXT]
       orchestrator webhooks enable SUBSCRIPTION
       orchestrator webhooks delete SUBSCRIPTION

webhooks manages the webhook subscriptions (/admin/webhooks; see
docs/webhooks.md): create subscribes a receiver to event types (batch.done,
batch.error, phase.completed, document.completed, document.failed,
chunk.completed, ...) and prints its signing secret, which is shown this
once; deliveries lists a subscription's last deliveries, delivery shows one
with its attempts, replay sends one again with its webhook-id.

It needs the admin token (ADMIN_TOKEN, else the token file of .data/run.env).

Flags:
`

// webhooksCmd is `orchestrator webhooks`.
func webhooksCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runWebhooks(ctx, args, operatorEnv(), stdout, stderr)
}

// webhookActions are the subcommands of webhooks, with how many
// arguments each takes.
var webhookActions = map[string]int{"create": 0, "list": 0, "deliveries": 1, "delivery": 1, "replay": 1, "disable": 1, "enable": 1, "delete": 1}

// runWebhooks is webhooksCmd with the environment read through lookup.
func runWebhooks(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, err := readerConfig(lookup)
	if err != nil {
		return err
	}
	flags, url := operatorFlags("webhooks", webhooksUsage, cfg, stderr)
	target := flags.String("url-of", "", "create: the receiver's URL (http or https)")
	events := flags.String("events", "", "create: the event types, comma-separated")
	batch := flags.String("batch", "", "create: only this batch's events")
	description := flags.String("description", "", "create: what the receiver is")
	reason := flags.String("reason", "", "disable: why")
	limit := flags.Int("limit", 20, "deliveries: how many, newest first (at most 200)")
	if len(args) == 0 {
		flags.Usage()
		return usageError{"webhooks needs an action: create, list, deliveries, delivery, replay, disable, enable or delete"}
	}
	action := args[0]
	want, ok := webhookActions[action]
	if !ok {
		flags.Usage()
		return usageError{fmt.Sprintf("unknown webhooks action %q", action)}
	}
	rest, err := parseInterleaved(flags, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case len(rest) != want:
		return usageError{fmt.Sprintf("webhooks %s takes %d argument(s), got %d", action, want, len(rest))}
	case action == "create" && (*target == "" || *events == ""):
		return usageError{"webhooks create needs -url-of URL and -events TYPE,..."}
	case action != "create" && (*target != "" || *events != "" || *batch != "" || *description != ""):
		return usageError{"-url-of, -events, -batch and -description are for create"}
	case action != "disable" && *reason != "":
		return usageError{"-reason is for disable"}
	case cfg.AdminToken == "":
		return errors.New("webhooks needs the admin token: set ADMIN_TOKEN to the orchestrator's")
	}
	api, err := client.New(client.Config{URL: *url, AdminToken: cfg.AdminToken, HTTPClient: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return usageError{err.Error()}
	}
	id := ""
	if want == 1 {
		id = rest[0]
	}
	switch action {
	case "create":
		var types []string
		for t := range strings.SplitSeq(*events, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
		w, err := api.CreateWebhook(ctx, client.NewWebhook{URL: *target, EventTypes: types, BatchID: *batch, Description: *description})
		if err != nil {
			return err
		}
		printWebhook(stdout, w)
		fmt.Fprintf(stdout, "secret: %s\n(shown this once: give it to the receiver to verify the webhook-signature header)\n", w.Secret)
	case "list":
		ws, err := api.Webhooks(ctx)
		if err != nil {
			return err
		}
		if len(ws) == 0 {
			fmt.Fprintln(stdout, "no webhook subscriptions")
		}
		for _, w := range ws {
			printWebhook(stdout, w)
		}
	case "deliveries":
		ds, err := api.WebhookDeliveries(ctx, id, *limit)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			fmt.Fprintln(stdout, "no deliveries")
		}
		for _, d := range ds {
			printDelivery(stdout, d)
		}
	case "delivery":
		d, err := api.WebhookDelivery(ctx, id)
		if err != nil {
			return err
		}
		printDelivery(stdout, d)
		for _, a := range d.AttemptList {
			answer := "no answer"
			if a.StatusCode != 0 {
				answer = fmt.Sprint(a.StatusCode)
			}
			fmt.Fprintf(stdout, "  attempt %d at %s: %s in %d ms %s\n", a.Attempt, a.AttemptedAt.Local().Format(time.DateTime), answer, a.DurationMS, a.Error)
		}
		fmt.Fprintf(stdout, "  payload: %s\n", d.Payload)
	case "replay":
		d, err := api.ReplayWebhookDelivery(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replaying %s (%s) with its webhook-id\n", d.ID, d.EventType)
	case "disable", "enable":
		w, err := api.SetWebhookEnabled(ctx, id, action == "enable", *reason)
		if err != nil {
			return err
		}
		printWebhook(stdout, w)
	case "delete":
		if err := api.DeleteWebhook(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s and its deliveries\n", id)
	}
	return nil
}

// printWebhook writes a subscription on a line: id, state, URL, events.
func printWebhook(w io.Writer, s client.Webhook) {
	state := "enabled"
	if !s.Enabled {
		state = "disabled (" + s.DisabledReason + ")"
	} else if s.FailingSince != nil {
		state = "enabled, failing since " + s.FailingSince.Local().Format(time.DateTime)
	}
	scope := ""
	if s.BatchID != "" {
		scope = " batch " + s.BatchID
	}
	fmt.Fprintf(w, "%s %s %s [%s]%s\n", s.ID, state, s.URL, strings.Join(s.EventTypes, ","), scope)
}

// printDelivery writes a delivery on a line.
func printDelivery(w io.Writer, d client.WebhookDelivery) {
	line := fmt.Sprintf("%s %s %-9s %d attempt(s) %s", d.ID, d.EventType, d.Status, d.Attempts, d.UpdatedAt.Local().Format(time.DateTime))
	if d.BatchID != "" {
		line += " batch " + d.BatchID
	}
	if d.LastError != "" {
		line += ": " + d.LastError
	}
	fmt.Fprintln(w, line)
}
