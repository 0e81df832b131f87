// Package reports runs the operators' reporting queries (sql/reports/*.sql)
// and prints their results as an aligned table, CSV or JSON.
//
// A report is one SELECT over the orchestrator's tables, run in a READ ONLY
// transaction, so a role that may only read (pg_read_all_data, or SELECT on
// the tables) runs every report. Each report takes @since, the start of the
// period it covers, and some take @limit, the number of rows they keep.
package reports

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/arke-institute/orchestrator/cost"
	"github.com/arke-institute/orchestrator/phases"
	sqlfiles "github.com/arke-institute/orchestrator/sql"
)

// DefaultSince is how far back a report looks when no start is given.
const DefaultSince = 7 * 24 * time.Hour

// DefaultLimit is how many rows reports that rank rows keep by default.
const DefaultLimit = 20

// Report is one named report.
type Report struct {
	// Name is the file name of its query without .sql, e.g. "throughput".
	Name string
	// Description is the first line of the query's leading comment.
	Description string
	// SQL is the query, with @since and @limit placeholders.
	SQL string
}

// ErrUnknown is returned by Run for a name that is not a report.
var ErrUnknown = errors.New("unknown report")

var (
	loadOnce sync.Once
	loaded   []Report
	loadErr  error
)

// List returns every report, by name.
func List() ([]Report, error) {
	loadOnce.Do(func() { loaded, loadErr = load(sqlfiles.Reports) })
	return loaded, loadErr
}

// Get returns the report called name.
func Get(name string) (Report, error) {
	all, err := List()
	if err != nil {
		return Report{}, err
	}
	for _, r := range all {
		if r.Name == name {
			return r, nil
		}
	}
	names := make([]string, len(all))
	for i, r := range all {
		names[i] = r.Name
	}
	return Report{}, fmt.Errorf("%w %q (reports: %s)", ErrUnknown, name, strings.Join(names, ", "))
}

// load reads the reports of an embedded reports/ folder.
func load(fsys fs.FS) ([]Report, error) {
	files, err := fs.Glob(fsys, "reports/*.sql")
	if err != nil {
		return nil, err
	}
	var out []Report
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		r := Report{Name: strings.TrimSuffix(path.Base(f), ".sql"), SQL: string(b)}
		first, _, _ := strings.Cut(r.SQL, "\n")
		if !strings.HasPrefix(first, "-- ") {
			return nil, fmt.Errorf("report %s: the first line must be a comment describing it", f)
		}
		r.Description = strings.TrimSpace(strings.TrimPrefix(first, "--"))
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Params are a report's parameters.
type Params struct {
	// Since is the start of the period covered (@since).
	Since time.Time
	// Limit is the number of rows kept by reports that rank rows (@limit);
	// 0 means DefaultLimit.
	Limit int
	// Prices price the estimates of reports that make them
	// (@machine_prices: guest to the price of a second; @token_prices:
	// model to {prompt, completion} per 1,000 tokens). The zero Prices
	// price machines at Fly's prices and leave tokens unpriced.
	Prices cost.Prices
}

// Result is a report's output: its columns, named as the query names them,
// and its rows. Values are nil (NULL), int64, float64, string, bool,
// time.Time (in UTC) or, for a date column, a civil date string such as
// "2026-11-22".
type Result struct {
	Columns []string
	Rows    [][]any
}

// Beginner starts transactions: a *pgx.Conn or a *pgxpool.Pool.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// StatementTimeout bounds each report's query.
const StatementTimeout = "5min"

// Run runs the report called name in a read-only transaction.
func Run(ctx context.Context, db Beginner, name string, p Params) (*Result, error) {
	r, err := Get(name)
	if err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		p.Limit = DefaultLimit
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("starting the read-only transaction of report %s: %w", name, err)
	}
	// Read only: there is never anything to commit.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only: nothing to lose
	// A long read-only transaction on the primary holds back vacuum of the
	// tables callbacks update: a report gets a bounded time.
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '"+StatementTimeout+"'"); err != nil {
		return nil, fmt.Errorf("report %s: %w", name, err)
	}

	machine, tokens := priceArgs(p.Prices)
	rows, err := tx.Query(ctx, r.SQL, pgx.NamedArgs{"since": p.Since, "limit": p.Limit, "machine_prices": machine, "token_prices": tokens})
	if err != nil {
		return nil, fmt.Errorf("running report %s: %w", name, err)
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	res := &Result{Columns: make([]string, len(fields)), Rows: [][]any{}}
	for i, f := range fields {
		res.Columns[i] = f.Name
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("reading report %s: %w", name, err)
		}
		for i, v := range vals {
			if vals[i], err = normalize(v, fields[i].DataTypeOID); err != nil {
				return nil, fmt.Errorf("reading column %s of report %s: %w", fields[i].Name, name, err)
			}
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("running report %s: %w", name, err)
	}
	return res, nil
}

// priceArgs are prices as the reports' @machine_prices and @token_prices
// take them: the price of a second of every guest a phase launches and
// every guest priced, and the token prices of every model priced. A guest
// or model missing from them is unpriced.
func priceArgs(prices cost.Prices) (machine map[string]float64, tokens map[string]map[string]float64) {
	machine = map[string]float64{}
	for _, ph := range phases.All() {
		if g := ph.Spec().Defaults.Guest; g.MemoryMB > 0 {
			if v, ok := prices.MachineSecond(g.Name()); ok {
				machine[g.Name()] = v
			}
		}
	}
	maps.Copy(machine, prices.Machine)
	tokens = map[string]map[string]float64{}
	for model, tp := range prices.Tokens {
		tokens[model] = map[string]float64{"prompt": tp.Prompt, "completion": tp.Completion}
	}
	return machine, tokens
}

// normalize narrows a decoded value to the few types Result promises, so
// that the formats need not know about pgx.
func normalize(v any, oid uint32) (any, error) {
	switch v := v.(type) {
	case nil, string, bool, int64, float64:
		return v, nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case time.Time:
		if oid == pgtype.DateOID {
			return v.Format(time.DateOnly), nil
		}
		return v.UTC(), nil
	case pgtype.Numeric:
		f, err := v.Float64Value()
		if err != nil {
			return nil, err
		}
		if !f.Valid {
			return nil, nil
		}
		return f.Float64, nil
	default:
		return nil, fmt.Errorf("unsupported type %T (cast it in the query)", v)
	}
}

// ParseSince reads the start of a report's period: a duration back from now
// ("90m", "24h", "7d", "2w"), an RFC 3339 time ("2026-11-01T00:00:00Z") or a
// date ("2026-11-01", midnight UTC). An empty string means DefaultSince ago.
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return now.Add(-DefaultSince), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("since must be a positive duration such as 24h or 7d, an RFC 3339 time or a date such as 2026-11-01, got %q", s)
	}
	return now.Add(-d), nil
}

// parseDuration is time.ParseDuration plus whole days ("7d") and weeks
// ("2w"), which operators think in and Go does not parse.
func parseDuration(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(v * float64(unit)), nil
		}
	}
	return time.ParseDuration(s)
}
