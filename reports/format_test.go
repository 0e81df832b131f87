package reports_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/reports"
)

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, in string
		want     time.Time
	}{
		{"Default", "", now.Add(-7 * 24 * time.Hour)},
		{"Hours", "24h", now.Add(-24 * time.Hour)},
		{"Minutes", "90m", now.Add(-90 * time.Minute)},
		{"Days", "7d", now.Add(-7 * 24 * time.Hour)},
		{"HalfDay", "1.5d", now.Add(-36 * time.Hour)},
		{"Weeks", "2w", now.Add(-14 * 24 * time.Hour)},
		{"RFC3339", "2026-03-01T06:30:00+02:00", time.Date(2026, 3, 1, 4, 30, 0, 0, time.UTC)},
		{"Date", "2026-03-01", time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := reports.ParseSince(c.in, now)
			require.NoError(t, err)
			require.True(t, c.want.Equal(got), "got %s, want %s", got, c.want)
		})
	}
	for _, bad := range []string{"yesterday", "-24h", "0d", "7 days", "2026-13-01"} {
		_, err := reports.ParseSince(bad, now)
		require.ErrorContains(t, err, "since must be", bad)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel()
	res := &reports.Result{
		Columns: []string{"name", "count", "rate", "at", "note"},
		Rows: [][]any{
			{"a", int64(3), 0.125, time.Date(2026, 3, 2, 10, 0, 0, 500_000_000, time.UTC), nil},
			{"b, \"c\"", int64(12), 1.0, nil, "tab\there"},
		},
	}
	write := func(format string) string {
		var buf bytes.Buffer
		require.NoError(t, res.Write(&buf, format))
		return buf.String()
	}
	t.Run("Table", func(t *testing.T) {
		require.Equal(t, ""+
			"name    count  rate   at                    note\n"+
			"a       3      0.125  2026-03-02T10:00:00Z  -\n"+
			"b, \"c\"  12     1      -                     tab here\n", write("table"))
	})
	t.Run("CSV", func(t *testing.T) {
		require.Equal(t, ""+
			"name,count,rate,at,note\n"+
			"a,3,0.125,2026-03-02T10:00:00.5Z,\n"+
			"\"b, \"\"c\"\"\",12,1,,tab\there\n", write("csv"))
	})
	t.Run("JSON", func(t *testing.T) {
		require.Equal(t, "[\n"+
			`  {"name": "a", "count": 3, "rate": 0.125, "at": "2026-03-02T10:00:00.5Z", "note": null},`+"\n"+
			`  {"name": "b, \"c\"", "count": 12, "rate": 1, "at": null, "note": "tab\there"}`+"\n"+
			"]\n", write("json"))
	})
	t.Run("Unknown", func(t *testing.T) {
		require.EqualError(t, res.Write(&bytes.Buffer{}, "xml"), `unknown format "xml" (formats: table, csv, json)`)
	})
}
