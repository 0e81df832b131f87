package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/reports"
	"github.com/arke-institute/orchestrator/setting"
)

const reportUsage = `Usage: orchestrator report [NAME] [-since WHEN] [-format table|csv|json] [-limit N]

Runs the named report against DATABASE_URL and prints it; without a name,
lists the reports. Reports only read, in a read-only transaction: a role
with SELECT on the tables (sql/reporter_role.sql) or pg_read_all_data is
enough.

WHEN is a duration back from now (90m, 24h, 7d, 2w), an RFC 3339 time
(2026-11-01T00:00:00Z) or a date (2026-11-01, midnight UTC). Estimates are
at PRICE_MACHINE_SECOND and PRICE_TOKENS_PER_1K, in US dollars.

Flags:
`

// report is `orchestrator report`, on the process environment with the
// run.env of a `make run` beneath it.
func report(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runReport(ctx, args, operatorEnv(), time.Now(), stdout, stderr)
}

// runReport is report with the environment read through lookup and the
// current time given, so tests run it as they like.
func runReport(ctx context.Context, args []string, lookup func(string) (string, bool), now time.Time, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("report", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprint(stderr, reportUsage)
		flags.PrintDefaults()
	}
	since := flags.String("since", "7d", "start of the period covered")
	format := flags.String("format", "table", "output format: "+strings.Join(reports.Formats, ", "))
	limit := flags.Int("limit", reports.DefaultLimit, "rows kept by reports that rank rows (failure-reasons, slowest-tasks, document-slowest-steps)")
	names, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}

	if len(names) == 0 {
		return listReports(stdout)
	}
	if len(names) > 1 {
		flags.Usage()
		return usageError{fmt.Sprintf("report takes one report name, got %d", len(names))}
	}
	if _, err := reports.Get(names[0]); err != nil {
		return usageError{err.Error()}
	}
	if !slices.Contains(reports.Formats, *format) {
		return usageError{fmt.Sprintf("-format must be one of %s, got %q", strings.Join(reports.Formats, ", "), *format)}
	}
	if *limit <= 0 {
		return usageError{"-limit must be positive"}
	}
	from, err := reports.ParseSince(*since, now)
	if err != nil {
		return usageError{"-" + err.Error()}
	}

	// The estimates are at the service's prices (PRICE_*), read as serve
	// reads them.
	var prices cost.Prices
	if err := setting.Load(lookup, []setting.Group{cost.Settings(&prices)}); err != nil {
		return usageError{err.Error()}
	}

	dbURL, _ := lookup("DATABASE_URL")
	if dbURL == "" {
		return errors.New("DATABASE_URL is not set: point it at the orchestrator's database (a read-only role is enough; see sql/reporter_role.sql), or run this from the folder of a running `make run`, whose .data/run.env names its database")
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := reports.Run(ctx, conn, names[0], reports.Params{Since: from, Limit: *limit, Prices: prices})
	if err != nil {
		return err
	}
	return res.Write(stdout, *format)
}

// listReports prints each report's name and description.
func listReports(w io.Writer) error {
	all, err := reports.List()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Reports (orchestrator report NAME [-since 7d] [-format table|csv|json]):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range all {
		fmt.Fprintf(tw, "  %s\t%s\n", r.Name, r.Description)
	}
	return tw.Flush()
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`report throughput -since 24h`), which flag alone
// stops at, and returns the positional arguments. Everything after "--" is
// positional.
func parseInterleaved(flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := flags.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		after := flags.Args()
		if consumed := len(rest) - len(after); consumed > 0 && rest[consumed-1] == "--" {
			return append(pos, after...), nil
		}
		if len(after) == 0 {
			return pos, nil
		}
		pos, rest = append(pos, after[0]), after[1:]
	}
}
