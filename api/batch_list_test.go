package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/testenv"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/status"
)

func TestListBatches(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{NoWorkers: true})
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	insert := func(id, status, uploader string, at time.Time) {
		t.Helper()
		_, err := env.Pool.Exec(ctx, `INSERT INTO batches (id, status, uploader, queue_message, started_at, completed_at)
			VALUES ($1, $2, $3, '{"total_files": 4, "total_bytes": 400}', $4, CASE WHEN $2 IN ('DONE', 'ERROR') THEN $4::timestamptz END)`,
			id, status, uploader, at)
		require.NoError(t, err)
	}
	// B3 and B4 were accepted at the same instant: the id breaks the tie.
	insert("B1", "DONE", "ann@arke.institute", base)
	insert("B2", "ERROR", "bob@arke.institute", base.Add(time.Minute))
	insert("B3", "DONE", "ann@arke.institute", base.Add(2*time.Minute))
	insert("B4", "TIFF_CONVERSION", "bob@arke.institute", base.Add(2*time.Minute))
	insert("B5", "ERROR", "ann@arke.institute", base.Add(3*time.Minute))
	insert("B6", "PENDING", "ann@arke.institute", base.Add(4*time.Minute))

	list := func(query url.Values) status.BatchPage {
		t.Helper()
		code, body := env.Do(t, http.MethodGet, "/batches?"+query.Encode(), nil)
		require.Equal(t, http.StatusOK, code, "body: %s", body)
		var page status.BatchPage
		require.NoError(t, json.Unmarshal(body, &page))
		return page
	}
	ids := func(p status.BatchPage) []string {
		out := []string{}
		for _, b := range p.Batches {
			out = append(out, b.BatchID)
		}
		return out
	}

	all := list(nil)
	require.Equal(t, []string{"B6", "B5", "B4", "B3", "B2", "B1"}, ids(all))
	require.Nil(t, all.NextCursor)
	require.Equal(t, status.BatchSummary{BatchID: "B5", Status: "ERROR", Uploader: "ann@arke.institute", TotalFiles: 4, TotalBytes: 400,
		StartedAt: base.Add(3 * time.Minute), UpdatedAt: all.Batches[1].UpdatedAt, CompletedAt: all.Batches[1].CompletedAt, IngestStatus: "none"},
		all.Batches[1])

	t.Run("PagesAreStableUnderInserts", func(t *testing.T) {
		var got []string
		q := url.Values{"limit": {"2"}}
		for page := 0; ; page++ {
			p := list(q)
			got = append(got, ids(p)...)
			if page == 0 {
				// A batch accepted meanwhile is newer than every cursor: it
				// neither shifts nor repeats the pages that follow.
				insert("B7", "PENDING", "ann@arke.institute", base.Add(time.Hour))
			}
			if p.NextCursor == nil {
				break
			}
			q.Set("cursor", *p.NextCursor)
		}
		require.Equal(t, []string{"B6", "B5", "B4", "B3", "B2", "B1"}, got)
	})

	filters := []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"Status", url.Values{"status": {"ERROR"}}, []string{"B5", "B2"}},
		{"Uploader", url.Values{"uploader": {"bob@arke.institute"}}, []string{"B4", "B2"}},
		{"StatusAndUploader", url.Values{"status": {"DONE"}, "uploader": {"ann@arke.institute"}}, []string{"B3", "B1"}},
		{"Since", url.Values{"since": {base.Add(2 * time.Minute).Format(time.RFC3339)}, "until": {base.Add(30 * time.Minute).Format(time.RFC3339)}}, []string{"B6", "B5", "B4", "B3"}},
		{"Until", url.Values{"until": {base.Add(2 * time.Minute).Format(time.RFC3339)}}, []string{"B2", "B1"}},
		{"OtherTimeZone", url.Values{"since": {"2026-03-01T13:01:00+01:00"}, "until": {"2026-03-01T13:02:00+01:00"}}, []string{"B2"}},
		{"NoMatch", url.Values{"uploader": {"nobody"}}, []string{}},
		{"StatusFirstPage", url.Values{"status": {"DONE"}, "limit": {"1"}}, []string{"B3"}},
	}
	for _, tt := range filters {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ids(list(tt.query)))
		})
	}

	bad := []struct {
		name  string
		query string
		msg   string
	}{
		{"UnknownStatus", "status=RUNNING", `status must be one of ` + allStatuses() + `, got "RUNNING"`},
		{"SinceNotRFC3339", "since=2026-03-01", `since must be an RFC 3339 time such as 2025-10-29T19:15:30Z, got "2026-03-01"`},
		{"UntilNotRFC3339", "until=yesterday", `until must be an RFC 3339 time`},
		{"SinceAfterUntil", "since=2026-03-02T00:00:00Z&until=2026-03-01T00:00:00Z", "since must be before until"},
		{"BadCursor", "cursor=not-a-cursor", "cursor is not one this server issued"},
		{"LimitTooLarge", "limit=501", "limit must be between 1 and 500, got 501"},
		{"LimitNotANumber", "limit=ten", `limit must be a non-negative integer, got "ten"`},
		{"SeveralProblems", "since=x&limit=-1", `since must be an RFC 3339 time such as 2025-10-29T19:15:30Z, got "x"; limit must be a non-negative integer, got "-1"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			code, body := env.Do(t, http.MethodGet, "/batches?"+tt.query, nil)
			require.Equal(t, http.StatusBadRequest, code, "body: %s", body)
			var out map[string]string
			require.NoError(t, json.Unmarshal(body, &out))
			require.Contains(t, out["error"], tt.msg)
			require.Contains(t, out["error"], "invalid batch listing: ")
		})
	}
}

// allStatuses lists every batch status as the listing's error names them:
// PENDING, the registered phases, DONE, ERROR.
func allStatuses() string {
	var out []string
	for _, st := range phases.Statuses() {
		out = append(out, string(st))
	}
	return strings.Join(out, ", ")
}
