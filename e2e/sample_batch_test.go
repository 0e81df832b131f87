// Package e2e runs the orchestrator the way a newcomer does: the built
// binaries, `orchestrator serve` on its embedded defaults (local S3, local
// machine runner, real workers on libvips) against a fresh database, then
// `orchestrator submit examples/sample-batch`.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/jpeg"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/syncbuf"
)

const batchID = "01SAMPLEBATCHE2E000000000A"

// repoRoot is the repository's folder, resolved before any test runs: a
// test of this package that starts the in-process S3 server (testenv)
// changes the process's working directory.
var repoRoot, _ = filepath.Abs("..")

// bins builds the two programs once for the package's tests.
func bins(t *testing.T) (orchestrator, worker string) {
	t.Helper()
	dir := t.TempDir()
	root := repoRoot
	require.NotEmpty(t, root)
	for _, b := range []struct{ out, pkg string }{{"orchestrator", "./cmd/orchestrator"}, {"worker", "./cmd/worker"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "building %s: %s", b.pkg, out)
	}
	return filepath.Join(dir, "orchestrator"), filepath.Join(dir, "worker")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestSampleBatchThroughRealWorkers takes the sample batch through the
// built binaries and real workers, its machine phases on pools (the
// default) and on a machine per task.
func TestSampleBatchThroughRealWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs real workers (about 40 s); make test runs it")
	}
	orchestrator, worker := bins(t)
	for _, kind := range []string{"pool", "machine"} {
		t.Run(kind, func(t *testing.T) { sampleBatch(t, orchestrator, worker, kind) })
	}
}

// sampleBatch is the sample batch with the machine phases on executor kind.
func sampleBatch(t *testing.T, orchestrator, worker, kind string) {
	sample, err := filepath.Abs(filepath.Join(repoRoot, "examples/sample-batch"))
	require.NoError(t, err)
	// The runner starts this script, which keeps each machine's environment
	// (what a Fly machine gets) before it becomes the worker.
	envDir := t.TempDir()
	recorder := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, os.WriteFile(recorder, []byte("#!/bin/sh\nenv > '"+envDir+"'/\"${TASK_ID:-$FLY_MACHINE_ID}.env\"\nexec '"+worker+"' \"$@\"\n"), 0o755))
	srv := serve(t, orchestrator, recorder, "EXECUTOR_TIFF_CONVERSION="+kind, "EXECUTOR_PDF_PAGES="+kind, "EXECUTOR_IMAGE_PROCESSING="+kind)
	base, env, s3Addr, dataDir, serveLog := srv.base, srv.env, srv.s3Addr, srv.dataDir, srv.log

	// submit uploads the folder, posts the batch and follows it to DONE.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	submit := exec.CommandContext(ctx, orchestrator, "submit", "-url", base, "-batch-id", batchID, "-ocr", "-describe", sample)
	submit.Env = env
	var stdout, stderr bytes.Buffer
	submit.Stdout, submit.Stderr = &stdout, &stderr
	require.NoError(t, submit.Run(), "submit failed\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), batchID)

	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://" + s3Addr, AccessKeyID: "local", SecretAccessKey: "localsecret"})
	require.NoError(t, err)
	prefix := "staging/" + batchID + "/"

	// The processed manifest: every TIFF kept as the source, every image
	// (uploaded or converted, every page) replaced by its ref.json, the
	// documents untouched.
	data, err := store.Get(ctx, "arke-staging", prefix+"_manifest.processed.json")
	require.NoError(t, err)
	var processed struct {
		Manifest struct {
			TotalFiles  int64 `json:"total_files"`
			Directories []struct {
				Files []struct {
					R2Key       string   `json:"r2_key"`
					LogicalPath string   `json:"logical_path"`
					ContentType string   `json:"content_type"`
					Tags        []string `json:"preprocessor_tags"`
					DocumentID  int64    `json:"document_id"`
					DocTags     []string `json:"document_tags"`
				} `json:"files"`
			} `json:"directories"`
		} `json:"manifest"`
	}
	require.NoError(t, json.Unmarshal(data, &processed))
	got := map[string]string{}
	var refs []string
	refPath := map[string]string{} // ref key -> logical path
	var indexed []string           // files with a document
	for _, d := range processed.Manifest.Directories {
		for _, f := range d.Files {
			got[f.LogicalPath] = strings.Join(f.Tags, ",")
			if f.DocumentID != 0 {
				require.NotNil(t, f.DocTags, f.LogicalPath)
				indexed = append(indexed, f.LogicalPath)
			}
			if strings.HasSuffix(f.R2Key, ".ref.json") {
				refs = append(refs, f.R2Key)
				refPath[f.R2Key] = f.LogicalPath
			}
		}
	}
	// Submitted with -ocr: every image ref is transcribed by the local
	// engine (tesseract), but the PDF pages that have a text layer, which
	// are skipped. Only the typed page has text: the others are tagged
	// OCR:no-text and make no document.
	const ocrDone = "ImageProcessor,OCR"
	const noText = "ImageProcessor,OCR,OCR:no-text"
	want := map[string]string{
		"/scans/lzw.tif": "TiffConverter:source", "/scans/lzw.jpg.ref.json": noText,
		"/scans/jpeg-ycbcr.tif": "TiffConverter:source", "/scans/jpeg-ycbcr.jpg.ref.json": noText,
		"/scans/cmyk.tif": "TiffConverter:source", "/scans/cmyk.jpg.ref.json": noText,
		"/scans/16bit.tif": "TiffConverter:source", "/scans/16bit.jpg.ref.json": noText,
		"/scans/multipage.tif":               "TiffConverter:source",
		"/scans/multipage-p1.jpg.ref.json":   noText,
		"/scans/multipage-p2.jpg.ref.json":   noText,
		"/scans/multipage-p3.jpg.ref.json":   noText,
		"/scans/typed-page.tif":              "TiffConverter:source",
		"/scans/typed-page.jpg.ref.json":     ocrDone,
		"/photos/photo.jpg.ref.json":         noText,
		"/photos/graphic.png.ref.json":       noText,
		"/documents/letter.pdf":              "PdfPages:source",
		"/documents/letter-p1.jpg.ref.json":  "ImageProcessor", // skipped: the page has a text layer
		"/documents/letter-p1.txt":           "PdfPages:text",
		"/documents/minutes.pdf":             "PdfPages:source",
		"/documents/minutes-p1.jpg.ref.json": "ImageProcessor",
		"/documents/minutes-p1.txt":          "PdfPages:text",
		"/documents/minutes-p2.jpg.ref.json": noText, // a scan: no text layer, and none OCR found
		"/documents/minutes-p3.jpg.ref.json": "ImageProcessor",
		"/documents/minutes-p3.txt":          "PdfPages:text",
		"/metadata/record.json":              "",
		"/metadata/inventory.csv":            "",
	}
	require.Equal(t, want, got)
	require.Equal(t, int64(len(want)), processed.Manifest.TotalFiles)

	// Submitted with -describe: DOCUMENT_INDEXING made a document of each
	// PDF (its pages' text, a scanned page's OCR text) and of each other
	// OCR'd ref with text; the page text files are part of their PDF's
	// document.
	wantIndexed := []string{"/documents/letter.pdf", "/documents/minutes.pdf"}
	for lp, tags := range want {
		if tags == ocrDone && !strings.HasPrefix(lp, "/documents/") {
			wantIndexed = append(wantIndexed, lp)
		}
	}
	sort.Strings(wantIndexed)
	sort.Strings(indexed)
	require.Equal(t, wantIndexed, indexed)

	// The converted and rendered JPEGs exist next to their TIFFs and PDFs,
	// and decode.
	for _, key := range []string{"scans/lzw.jpg", "scans/cmyk.jpg", "scans/16bit.jpg", "scans/jpeg-ycbcr.jpg", "scans/multipage-p1.jpg", "scans/multipage-p3.jpg", "documents/letter-p1.jpg", "documents/minutes-p2.jpg"} {
		b, err := store.Get(ctx, "arke-staging", prefix+key)
		require.NoError(t, err, key)
		_, err = jpeg.Decode(bytes.NewReader(b))
		require.NoError(t, err, key)
	}

	// The letter's page text came from its PDF's text layer.
	text, err := store.Get(ctx, "arke-staging", prefix+"documents/letter-p1.txt")
	require.NoError(t, err)
	require.Contains(t, string(text), "Sample batch: a letter")

	// Each ref.json points at variants that exist on the local S3 server
	// (the embedded default's CDN), and the original is archived.
	sort.Strings(refs)
	for _, key := range refs {
		b, err := store.Get(ctx, "arke-staging", key)
		require.NoError(t, err, key)
		var ref struct {
			URL      string            `json:"url"`
			Type     string            `json:"type"`
			Size     int64             `json:"size"`
			Filename string            `json:"filename"`
			Width    int               `json:"width"`
			Height   int               `json:"height"`
			Variants map[string]string `json:"variants"`
			OCR      *struct {
				Text     string `json:"text"`
				Provider string `json:"provider"`
				Model    string `json:"model"`
			} `json:"ocr"`
		}
		require.NoError(t, json.Unmarshal(b, &ref), key)
		require.NotEmpty(t, ref.URL, key)
		require.Positive(t, ref.Width, key)
		require.Positive(t, ref.Height, key)
		require.Equal(t, strings.TrimSuffix(filepath.Base(refPath[key]), ".ref.json"), ref.Filename)
		// A transcribed ref is a new object beside the image phase's, with
		// the text; a skipped one is the image phase's own.
		transcribed := got[refPath[key]] == ocrDone || got[refPath[key]] == noText
		require.Equal(t, transcribed, strings.HasSuffix(key, ".ocr.ref.json"), key)
		require.Equal(t, transcribed, ref.OCR != nil, key)
		if transcribed {
			require.Equal(t, got[refPath[key]] == noText, ref.OCR.Text == "", "%s: tagged %s, text %q", key, got[refPath[key]], ref.OCR.Text)
			require.Equal(t, "tesseract", ref.OCR.Provider, key)
			require.Contains(t, ref.OCR.Model, "tesseract", key)
		}
		if refPath[key] == "/scans/typed-page.jpg.ref.json" {
			// The scanned page of printed text, read back by real OCR.
			require.Contains(t, ref.OCR.Text, "ARCHIVAL INGEST SAMPLE")
			require.Contains(t, ref.OCR.Text, "This page was printed and scanned.")
		}
		require.Len(t, ref.Variants, 3, key)
		for name, u := range ref.Variants {
			require.True(t, strings.HasPrefix(u, "http://"+s3Addr+"/arke-cdn/"), "%s variant %s: %s", key, name, u)
			cdnKey := strings.TrimPrefix(u, "http://"+s3Addr+"/arke-cdn/")
			ok, err := store.Exists(ctx, "arke-cdn", unescape(t, cdnKey))
			require.NoError(t, err)
			require.True(t, ok, "variant %s of %s missing", name, key)
		}
		original := prefix + strings.TrimSuffix(refPath[key], ".ref.json")[1:]
		ok, err := store.Exists(ctx, "arke-archive", original)
		require.NoError(t, err)
		require.True(t, ok, "archive copy of %s", original)
	}
	// The image workers wrote those under their attempts' staging areas;
	// promoted, nothing is left there.
	for bucket, area := range map[string]string{"arke-staging": prefix + ".attempts/", "arke-archive": prefix + ".attempts/",
		"arke-cdn": "variants/" + strings.TrimPrefix(prefix, "staging/") + ".attempts/"} {
		var left []string
		require.NoError(t, store.List(ctx, bucket, area, func(keys []string) error { left = append(left, keys...); return nil }))
		require.Empty(t, left, "staged in s3://%s/%s", bucket, area)
	}

	// submit printed the final list with its tags.
	require.Contains(t, stdout.String(), "TiffConverter:source")
	require.Contains(t, stdout.String(), "ImageProcessor")

	// METRICS_ADDR serves the batch's metrics, River's queue and the
	// runtime's. The batch is counted just after it is DONE: awaited.
	metrics := srv.metricsWhen(t, `orchestrator_batches_finished_total{status="DONE"} 1`)
	for _, line := range []string{
		`orchestrator_batches_started_total 1`,
		`orchestrator_tasks_finished_total{outcome="completed",phase="TIFF_CONVERSION"} 6`,
		`orchestrator_tasks_finished_total{outcome="completed",phase="PDF_PAGES"} 2`,
		`orchestrator_tasks_finished_total{outcome="completed",phase="IMAGE_PROCESSING"} 14`,
		`orchestrator_chunk_items_finished_total{outcome="done",phase="OCR"} 11`,
		`orchestrator_chunk_items_finished_total{outcome="skipped",phase="OCR"} 3`,
		`orchestrator_provider_requests_total{outcome="success",provider="tesseract"} 11`,
		`orchestrator_river_jobs{queue="default",state="completed"}`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		require.Contains(t, metrics, line)
	}
	// Neither the workers nor serve logged the storage secret or a
	// presigned URL, nor the tokens serve generated, which its banner shows
	// on a terminal only.
	require.NotContains(t, serveLog.String(), "localsecret")
	require.NotContains(t, serveLog.String(), "X-Amz-Signature")
	require.Contains(t, serveLog.String(), "(shown here on a terminal only)")
	for _, name := range []string{"admin-token", "read-token", "ingest-token"} {
		token, err := os.ReadFile(filepath.Join(dataDir, name))
		require.NoError(t, err, "serve generated %s", name)
		require.NotContains(t, serveLog.String(), strings.TrimSpace(string(token)))
	}

	// Every machine did its work with presigned URLs alone: no storage
	// credentials or endpoint in its environment. A pool machine has its
	// pool credential only: each task's URLs and token came with its
	// lease.
	envs, err := filepath.Glob(filepath.Join(envDir, "*.env"))
	require.NoError(t, err)
	if kind == "pool" {
		require.NotEmpty(t, envs)
		require.LessOrEqual(t, len(envs), 3*runtime.NumCPU(), "at most a pool's machines per phase (POOL_SIZE capped at LOCAL_MAX_MACHINES locally)")
		for _, f := range envs {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, k := range []string{"R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "CALLBACK_TOKEN", "INPUT_URL", "TASK_ID="} {
				require.NotContains(t, string(b), k, f)
			}
			require.NotContains(t, string(b), "localsecret", f)
			require.Contains(t, string(b), "POOL_TOKEN=", f)
			require.Contains(t, string(b), "POOL_LEASE_URL="+base+"/pools/", f)
		}
		for _, line := range []string{
			`orchestrator_pool_leases_total{phase="TIFF_CONVERSION"} 6`,
			`orchestrator_pool_leases_total{phase="PDF_PAGES"} 2`,
			`orchestrator_pool_leases_total{phase="IMAGE_PROCESSING"} 14`,
		} {
			require.Contains(t, metrics, line)
		}
		return
	}
	require.Len(t, envs, 6+2+14, "one machine per TIFF, PDF and image task")
	for _, f := range envs {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		vars := map[string]string{}
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			vars[k] = v
		}
		for _, k := range []string{"R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "R2_ACCOUNT_ID", "R2_ENDPOINT"} {
			require.NotContains(t, vars, k, f)
		}
		require.NotContains(t, string(b), "localsecret", f)
		require.True(t, strings.HasPrefix(vars["INPUT_URL"], "http://"+s3Addr+"/arke-staging/"+prefix), f)
		require.Equal(t, 1, strings.Count(string(b), "X-Amz-Signature="), "%s: INPUT_URL alone is a whole URL (OUTPUT_URLS is compact)", f)
		require.NotEmpty(t, vars["CALLBACK_TOKEN"], f)
	}

	// A newcomer indexes one markdown file with `orchestrator document`,
	// which uploads it and follows its steps to completed, and finds it
	// with `orchestrator search`.
	doc := filepath.Join(t.TempDir(), "lighthouse.md")
	require.NoError(t, os.WriteFile(doc, []byte("# The lighthouse keeper's log\n\n"+
		"The keeper trimmed the lamp wick every evening and logged the passing schooners.\n\n"+
		"## Storms\n\nIn the winter gales the fog bell rang through the night.\n"), 0o644))
	run := func(args ...string) string {
		cmd := exec.CommandContext(ctx, orchestrator, args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		require.NoError(t, cmd.Run(), "%v failed\nstdout:\n%s\nstderr:\n%s", args, out.String(), errOut.String())
		return out.String()
	}
	out := run("document", "-url", base, doc)
	require.Regexp(t, `^\d+\ntags: `, out)
	require.Contains(t, out, "keeper")
	ok, err := store.Exists(ctx, "arke-staging", "documents/lighthouse.md")
	require.NoError(t, err)
	require.True(t, ok, "document uploaded under DOCUMENTS_PREFIX")
	found := run("search", "-url", base, "-k", "3", "fog bell in winter gales")
	lines := strings.Split(strings.TrimSpace(found), "\n")
	require.GreaterOrEqual(t, len(lines), 2, found)
	require.Contains(t, lines[1], "documents/lighthouse.md", "the lighthouse document ranks first:\n%s", found)
}

// server is an `orchestrator serve` of the built binary on its embedded
// defaults, against a fresh database.
type server struct {
	base, s3Addr, metricsAddr, dataDir string
	// env is serve's environment, which the CLI commands get too.
	env []string
	log *syncbuf.Buffer
}

// serve starts `orchestrator serve` with worker as the local runner's
// worker program and the settings extra, and waits for it to answer.
func serve(t *testing.T, orchestrator, worker string, extra ...string) *server {
	t.Helper()
	_, dbURL := dbtest.NewEmpty(t)
	listen, s3Addr, metricsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	dataDir := t.TempDir()
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"LISTEN_ADDR="+listen,
		"METRICS_ADDR="+metricsAddr,
		"LOCAL_S3_DIR="+t.TempDir(),
		"LOCAL_DATA_DIR="+dataDir,
		"LOCAL_S3_ADDR="+s3Addr,
		"LOCAL_WORKER_BIN="+worker,
		"LOG_FORMAT=text",
		"ALARM_DELAY_TIFF_CONVERSION=200",
		"ALARM_DELAY_PDF_PAGES=200",
		"ALARM_DELAY_IMAGE_PROCESSING=200",
		"SWEEP_INTERVAL=500",
	)
	for _, k := range []string{"R2_ACCOUNT_ID", "R2_ENDPOINT", "R2_ACCESS_KEY_ID", "R2_SECRET_ACCESS_KEY", "FLY_API_TOKEN", "WORKER_URL", "ORCHESTRATOR_URL", "CDN_PUBLIC_URL"} {
		env = append(env, k+"=")
	}
	env = append(env, extra...)

	serveLog := &syncbuf.Buffer{} // written by exec's copiers while we read it
	cmd := exec.Command(orchestrator, "serve")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = serveLog, serveLog
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done: //nolint:errcheck // interrupted: its exit status says nothing new
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", serveLog.String())
		}
	})
	base := "http://" + listen
	if !eventually.Within(60*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("serve did not come up:\n%s", serveLog.String())
	}
	return &server{base: base, s3Addr: s3Addr, metricsAddr: metricsAddr, dataDir: dataDir, env: env, log: serveLog}
}

// metricsWhen is what METRICS_ADDR serves once it contains line (a batch
// is counted just after it is DONE: awaited).
func (s *server) metricsWhen(t *testing.T, line string) string {
	t.Helper()
	var metrics string
	if !eventually.Within(30*time.Second, func() bool {
		resp, err := http.Get("http://" + s.metricsAddr + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		metrics = string(b)
		return strings.Contains(metrics, line)
	}) {
		t.Fatalf("no %s in the metrics:\n%s", line, metrics)
	}
	return metrics
}

func unescape(t *testing.T, s string) string {
	t.Helper()
	out, err := url.PathUnescape(s)
	require.NoError(t, err)
	return out
}
