package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Formats are the output formats Write knows, the first being the default.
var Formats = []string{"table", "csv", "json"}

// Write prints the result in format:
//   - table: aligned columns under a header, NULL shown as "-", times in
//     RFC 3339 to the second, for a terminal;
//   - csv: a header row then one record per row (RFC 4180), NULL as an empty
//     field, times in RFC 3339 with their fractions;
//   - json: an array of objects, one per row, keyed by column name in the
//     query's order; numbers stay numbers, NULL is null, times are RFC 3339
//     strings.
func (r *Result) Write(w io.Writer, format string) error {
	switch format {
	case "table", "":
		return r.writeTable(w)
	case "csv":
		return r.writeCSV(w)
	case "json":
		return r.writeJSON(w)
	default:
		return fmt.Errorf("unknown format %q (formats: %s)", format, strings.Join(Formats, ", "))
	}
}

func (r *Result) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(r.Columns, "\t"))
	for _, row := range r.Rows {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = text(v, "-", time.RFC3339)
			// A tab or newline in a value would break the alignment.
			cells[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(cells[i])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, "(no rows)")
	}
	return tw.Flush()
}

func (r *Result) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(r.Columns); err != nil {
		return err
	}
	for _, row := range r.Rows {
		rec := make([]string, len(row))
		for i, v := range row {
			rec[i] = text(v, "", time.RFC3339Nano)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func (r *Result) writeJSON(w io.Writer) error {
	var buf bytes.Buffer
	buf.WriteString("[")
	for n, row := range r.Rows {
		if n > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n  {")
		for i, v := range row {
			if i > 0 {
				buf.WriteString(", ")
			}
			k, err := json.Marshal(r.Columns[i])
			if err != nil {
				return err
			}
			val, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("encoding column %s: %w", r.Columns[i], err)
			}
			buf.Write(k)
			buf.WriteString(": ")
			buf.Write(val)
		}
		buf.WriteString("}")
	}
	if len(r.Rows) > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	_, err := w.Write(buf.Bytes())
	return err
}

// text renders a value for the text formats.
func text(v any, null, timeLayout string) string {
	switch v := v.(type) {
	case nil:
		return null
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case time.Time:
		return v.Format(timeLayout)
	default:
		return fmt.Sprint(v)
	}
}
