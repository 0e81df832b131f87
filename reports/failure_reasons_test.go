package reports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/reports"
)

// TestFailureReasonsGroup: messages as the workers and the orchestrator
// write them, which differ only by keys, ids and numbers, make one reason.
// Each case's events are recorded under a phase of its own, so each case is
// one row of the report.
func TestFailureReasonsGroup(t *testing.T) {
	t.Parallel()
	const batch = "01KAB3Z9Q4M7X2C5V8N1P6R0TW"
	key := func(name string) string { return "staging/" + batch + "/images/" + name }
	cases := []struct {
		name     string
		messages []string
		reason   string
	}{
		{"MissingInput", []string{
			"input s3://arke-staging/" + key("photo1.tiff") + " does not exist",
			"input s3://arke-staging/staging/01KAC0000000000000000000ZZ/scans/p-2.tif does not exist",
		}, "input s3://<key> does not exist"},
		{"Timeout", []string{
			"Task timed out after 600.3s",
			"Task timed out after 61.0s",
			"Task timed out after 1200s",
		}, "Task timed out after <n>s"},
		{"NoMachine", []string{
			"no machine could be launched after 3 attempts",
		}, "no machine could be launched after <n> attempts"},
		{"TooManyPages", []string{
			"PDF has too many pages: 3, more than PDF_MAX_PAGES (2)",
			"PDF has too many pages: 1200, more than PDF_MAX_PAGES (1000)",
		}, "PDF has too many pages: <n>, more than PDF_MAX_PAGES (<n>)"},
		{"Encrypted", []string{
			"splitting PDF " + key("report.pdf") + ": PDF is encrypted (a password is needed to open it)",
			"splitting PDF " + key("minutes-1999.pdf") + ": PDF is encrypted (a password is needed to open it)",
		}, "splitting PDF <key>: PDF is encrypted (a password is needed to open it)"},
		{"Libvips", []string{
			"decoding TIFF " + key("a.tiff") + ": tiff2vips: out of order read -- at line 2048, but line 1024 requested",
			"decoding TIFF " + key("b.tiff") + ": tiff2vips: out of order read -- at line 512, but line 96 requested",
		}, "decoding TIFF <key>: tiff2vips: out of order read -- at line <n>, but line <n> requested"},
		{"TooLarge", []string{
			"decoding TIFF " + key("map.tiff") + ": the image is 70000x80000 pixels; JPEG allows at most 65500 per side",
			"decoding TIFF " + key("plan.tiff") + ": the image is 66000x1200 pixels; JPEG allows at most 65500 per side",
		}, "decoding TIFF <key>: the image is <n>x<n> pixels; JPEG allows at most <n> per side"},
		{"NotTIFF", []string{
			`decoding TIFF ` + key("x.tiff") + `: not a TIFF file, nor any image format libvips reads (it starts with "<html>\n<")`,
			`decoding TIFF ` + key("y.tiff") + `: not a TIFF file, nor any image format libvips reads (it starts with "PK\x03\x04\x14\x00\x06\x00")`,
		}, `decoding TIFF <key>: not a TIFF file, nor any image format libvips reads (it starts with "<bytes>")`},
		{"S3Denied", []string{
			"downloading s3://arke-staging/" + key("a.tiff") + ": getting s3://arke-staging/" + key("a.tiff") +
				": operation error S3: GetObject, https response error StatusCode: 403, RequestID: 1800F5D7A1B2C3D4, " +
				"HostID: dd9025bab4ad464b049177c95eb6ebf374d3b3fd1af9251148b658df7ac2e3e8, api error AccessDenied: Access Denied",
			"downloading s3://arke-staging/" + key("b.tiff") + ": getting s3://arke-staging/" + key("b.tiff") +
				": operation error S3: GetObject, https response error StatusCode: 403, RequestID: 18A2B7C9D0E1F234, " +
				"HostID: 0c1d2e3f40516273849a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f901, api error AccessDenied: Access Denied",
		}, "downloading s3://<key>: getting s3://<key>: operation error S3: GetObject, https response error StatusCode: 403, " +
			"RequestID: <id>, HostID: <id>, api error AccessDenied: Access Denied"},
		// Another status code is another reason.
		{"S3SlowDown", []string{
			"uploading " + key("a.jpg") + ": putting s3://arke-staging/" + key("a.jpg") + ": operation error S3: PutObject, " +
				"exceeded maximum number of attempts, 3, https response error StatusCode: 503, RequestID: 1800F5D7A1B2C3D4, api error SlowDown: Please reduce your request rate.",
		}, "uploading <key>: putting s3://<key>: operation error S3: PutObject, exceeded maximum number of attempts, <n>, " +
			"https response error StatusCode: 503, RequestID: <id>, api error SlowDown: Please reduce your request rate."},
		{"PDFRender", []string{
			"rendering page 3 of 120: the page is 30000x40000 pixels at 300 dpi; JPEG allows at most 65500 per side",
			"rendering page 17 of 17: the page is 70000x900 pixels at 150 dpi; JPEG allows at most 65500 per side",
		}, "rendering page <n> of <n>: the page is <n>x<n> pixels at <n> dpi; JPEG allows at most <n> per side"},
		{"Interrupted", []string{
			"interrupted (received terminated): decoding TIFF " + key("a.tiff") + ": context canceled",
		}, "interrupted (received terminated): decoding TIFF <key>: context canceled"},
		{"Refused", []string{
			`orchestrator refused the worker's result: POST http://orchestrator:8080/tasks/tiff_01kab3z9q4m7x2c5v8n1p6r0tw/callback: 422: page 2: file_name "a-p2.jpg" must end in ".jpg"`,
		}, `orchestrator refused the worker's result: POST <url>: <n>: page <n>: file_name "a-p2.jpg" must end in ".jpg"`},
		{"Panic", []string{
			"worker panicked: runtime error: index out of range [3] with length 3",
		}, "worker panicked: runtime error: index out of range [<n>] with length <n>"},
		// Words are not ids, nor are short codes; i/o is not a key.
		{"Words", []string{
			"PDF is damaged: Syntax Error: Couldn't find trailer dictionary; tiff2vips: i/o error",
		}, "PDF is damaged: Syntax Error: Couldn't find trailer dictionary; tiff2vips: i/o error"},
	}

	pool := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO batches (id, status, uploader, queue_message, started_at, updated_at)
		VALUES ($1, 'TIFF_CONVERSION', 'tester', '{}', $2, $2)`, batch, since)
	require.NoError(t, err)
	want := map[string][2]any{}
	for _, c := range cases {
		want[c.name] = [2]any{c.reason, int64(len(c.messages))}
		for i, m := range c.messages {
			data, err := json.Marshal(map[string]string{"error": m})
			require.NoError(t, err)
			_, err = pool.Exec(ctx, `INSERT INTO batch_events (batch_id, type, phase, task_id, data, created_at)
				VALUES ($1, 'task.failed', $2, $3, $4, $5)`, batch, c.name, fmt.Sprintf("%s-%d", c.name, i), data, since)
			require.NoError(t, err)
		}
	}

	res := run(t, pool, "failure-reasons", reports.Params{Since: since, Limit: 100})
	got := map[string][2]any{}
	for _, r := range res.Rows {
		_, dup := got[r[0].(string)]
		require.False(t, dup, "case %s makes more than one reason: %v", r[0], res.Rows)
		got[r[0].(string)] = [2]any{r[1], r[2]}
	}
	require.Equal(t, want, got)
}
