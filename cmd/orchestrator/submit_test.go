package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/config"
	"github.com/arke-institute/orchestrator/internal/harness/s3test"
	"github.com/arke-institute/orchestrator/manifest"
)

// The submit tests need a real S3 server, but this package's
// TestServeOnEmbeddedDefaults runs `serve`, which starts the embedded
// gateway (locals3) in this process, and versitygw allows one gateway per
// process; it also changes the working directory for good. Starting
// s3test's gateway here as well would clash with it, whichever test ran
// first (and -run and -shuffle change that order).
//
// So the submit tests run their S3 server in a separate process: this test
// binary, re-executed to run TestS3ServerProcess only, which starts
// s3test's server there, prints its configuration on stdout and serves
// until its stdin closes (when this process exits, however it exits). The
// submit command is an S3 client of a server in another process anyway, as
// it is in real use.

// s3ChildEnv makes TestS3ServerProcess serve instead of skipping.
const s3ChildEnv = "ORCHESTRATOR_SUBMIT_TEST_S3_CHILD"

// s3ConfigLine prefixes the line the child prints its configuration on.
const s3ConfigLine = "submit-test-s3-config: "

var (
	s3ChildOnce sync.Once
	s3ChildCfg  blob.S3Config
	s3ChildErr  error
)

// TestS3ServerProcess is the S3 server process of the submit tests (see
// above); run normally it skips.
func TestS3ServerProcess(t *testing.T) {
	if os.Getenv(s3ChildEnv) != "1" {
		t.Skip("the submit tests' S3 server process; runs only when they start it")
	}
	srv := s3test.Start(t)
	line, err := json.Marshal(srv.Config())
	require.NoError(t, err)
	fmt.Printf("%s%s\n", s3ConfigLine, line)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes away
}

// childS3 returns the configuration of the submit tests' S3 server,
// starting it on first use, and a fresh bucket on it for the test.
func childS3(t *testing.T) (blob.S3Config, string) {
	t.Helper()
	s3ChildOnce.Do(func() { s3ChildCfg, s3ChildErr = startS3Child() })
	require.NoError(t, s3ChildErr, "starting the S3 server process")
	store, err := blob.NewS3(s3ChildCfg)
	require.NoError(t, err)
	bucket := fmt.Sprintf("submit-%d-%d", os.Getpid(), bucketSeq.Add())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, store.EnsureBucket(ctx, bucket))
	return s3ChildCfg, bucket
}

var bucketSeq counter

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func startS3Child() (blob.S3Config, error) {
	self, err := os.Executable()
	if err != nil {
		return blob.S3Config{}, err
	}
	cmd := exec.Command(self, "-test.run=^TestS3ServerProcess$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), s3ChildEnv+"=1")
	// The parent's working directory may be gone (serve's local S3 moved
	// it into a test's temporary folder), so give the child a stable one.
	cmd.Dir = os.TempDir()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// stdin stays open as long as this process lives; the child serves
	// until it reads EOF. The write end is deliberately never closed.
	if _, err := cmd.StdinPipe(); err != nil {
		return blob.S3Config{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return blob.S3Config{}, err
	}
	if err := cmd.Start(); err != nil {
		return blob.S3Config{}, err
	}
	found := make(chan blob.S3Config, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), s3ConfigLine); ok {
				var cfg blob.S3Config
				if json.Unmarshal([]byte(rest), &cfg) == nil {
					found <- cfg
				}
			}
		}
		_ = cmd.Wait()
		close(found)
	}()
	select {
	case cfg, ok := <-found:
		if !ok {
			return blob.S3Config{}, fmt.Errorf("the S3 server process exited: %s", stderr.String())
		}
		return cfg, nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return blob.S3Config{}, fmt.Errorf("the S3 server process did not report within 60s: %s", stderr.String())
	}
}

// fakeOrchestrator stands in for the orchestrator's API, the peer of the
// submit command: it accepts POST /batches and answers GET /status/:id
// with a scripted sequence of documents, one per poll, staying on the last.
type fakeOrchestrator struct {
	*httptest.Server
	t *testing.T

	mu       sync.Mutex
	posted   [][]byte
	script   []string
	polls    int
	finished func() // runs once, before the last document is first served
}

func newFakeOrchestrator(t *testing.T, script ...string) *fakeOrchestrator {
	f := &fakeOrchestrator{t: t, script: script}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeOrchestrator) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		fmt.Fprint(w, `{"status": "ok"}`)
	case r.Method == http.MethodPost && r.URL.Path == "/batches" && r.Header.Get("Authorization") != "Bearer "+submitIngestToken,
		r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/status/") && r.Header.Get("Authorization") != "Bearer "+submitReadToken:
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error": "missing or wrong credential"}`)
	case r.Method == http.MethodPost && r.URL.Path == "/batches":
		body, _ := io.ReadAll(r.Body)
		msg, err := manifest.ParseQueueMessage(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		f.mu.Lock()
		f.posted = append(f.posted, body)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]string{"batch_id": msg.BatchID, "status": "PENDING"})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/status/"):
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.posted) == 0 {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error": "batch not found"}`)
			return
		}
		i := min(f.polls, len(f.script)-1)
		f.polls++
		if i == len(f.script)-1 && f.finished != nil {
			f.finished()
			f.finished = nil
		}
		fmt.Fprint(w, f.script[i])
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": "not found"}`)
	}
}

func (f *fakeOrchestrator) messages() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.posted
}

// statusDoc is a status document of the orchestrator.
func statusDoc(id, status string, total, completed, failed int, errMsg string, ingest string) string {
	doc := map[string]any{
		"batch_id": id, "status": status,
		"progress": map[string]int{"tasks_total": total, "tasks_completed": completed, "tasks_failed": failed},
		"error":    nil,
		"ingest":   map[string]any{"status": ingest, "attempts": 0, "last_error": nil},
	}
	if errMsg != "" {
		doc["error"] = errMsg
	}
	if status != "PENDING" && status != "DONE" && status != "ERROR" {
		doc["phase"] = status
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

// The credentials submit is given, and the fake orchestrator expects.
const (
	submitIngestToken = "submit-ingest-token"
	submitReadToken   = "submit-read-token"
)

// submitEnv is the environment of a submit run against the test's S3
// server and bucket, with the ingest and read tokens.
func submitEnv(cfg blob.S3Config, bucket string, extra ...string) func(string) (string, bool) {
	env := map[string]string{
		"R2_ENDPOINT": cfg.Endpoint, "R2_ACCESS_KEY_ID": cfg.AccessKeyID, "R2_SECRET_ACCESS_KEY": cfg.SecretAccessKey,
		"R2_BUCKET": bucket, "USER": "tester", "INGEST_TOKEN": submitIngestToken, "READ_TOKEN": submitReadToken,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// writeTree creates files (relative path -> content) under a new folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir() // absolute: the working directory may move
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// rawS3 is an SDK client for looking at what submit stored (content types).
func rawS3(cfg blob.S3Config) *s3.Client {
	return s3.New(s3.Options{
		Region: blob.DefaultRegion, BaseEndpoint: aws.String(cfg.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
	})
}

// listKeys lists every key of the bucket.
func listKeys(t *testing.T, cfg blob.S3Config, bucket string) []string {
	t.Helper()
	out, err := rawS3(cfg).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	keys := []string{}
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// TestSubmitUploadsAndFollows submits a folder and follows it to DONE: the
// files land under staging/{id}/ with their content types, the manifest
// groups them by folder with the flags' processing switches, the message is
// spec 001's, and the final list is printed with tags.
func TestSubmitUploadsAndFollows(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	const id = "01K8RNKN488RQCG3YGG72QBZS5"
	dir := writeTree(t, map[string]string{
		"scan.TIF":                 "tiff bytes",
		"notes.txt":                "some notes",
		"photos/p1.jpg":            "jpeg",
		"photos/p2.png":            "png!",
		"data/deep/table.csv":      "a,b\n1,2\n",
		"data/meta.json":           `{"k": 1}`,
		"docs/report.pdf":          "%PDF-1.4",
		".DS_Store":                "junk",
		"photos/._p1.jpg":          "apple double",
		"__MACOSX/photos/._p2.png": "zip junk",
	})
	processed := map[string]any{"batch_id": id, "manifest": manifest.Build(id, []manifest.DirectoryGroup{{
		DirectoryPath: "/", ProcessingConfig: manifest.ProcessingConfig{OCR: true, Pinax: true},
		Files: []manifest.FileInfo{
			{R2Key: "staging/" + id + "/scan.TIF", LogicalPath: "/scan.TIF", FileName: "scan.TIF", FileSize: 10, ContentType: "image/tiff", PreprocessorTags: []string{"tiff-source"}},
			{R2Key: "staging/" + id + "/scan.jpg", LogicalPath: "/scan.jpg", FileName: "scan.jpg", FileSize: 2048, ContentType: "image/jpeg", PreprocessorTags: []string{"tiff-converted", "image-processed"}},
			{R2Key: "staging/" + id + "/notes.txt", LogicalPath: "/notes.txt", FileName: "notes.txt", FileSize: 10, ContentType: "text/plain", PreprocessorTags: []string{}},
		},
	}})}
	orch := newFakeOrchestrator(t,
		statusDoc(id, "PENDING", 0, 0, 0, "", "none"),
		statusDoc(id, "TIFF_CONVERSION", 1, 0, 0, "", "none"),
		statusDoc(id, "TIFF_CONVERSION", 1, 1, 0, "", "none"),
		statusDoc(id, "IMAGE_PROCESSING", 3, 1, 1, "", "none"),
		statusDoc(id, "DONE", 3, 2, 1, "", "pending"),
		statusDoc(id, "DONE", 3, 2, 1, "", "delivered"),
	)
	store, err := blob.NewS3(cfg)
	require.NoError(t, err)
	orch.finished = func() {
		body, _ := json.Marshal(processed)
		require.NoError(t, store.Put(context.Background(), bucket, "staging/"+id+"/_manifest.processed.json",
			bytes.NewReader(body), int64(len(body)), "application/json"))
	}

	var stdout, stderr bytes.Buffer
	// Flags go before and after DIR.
	err = runSubmit(context.Background(), []string{
		"--url", orch.URL + "/", "--batch-id", id, "--ocr", dir, "--root-path", "/archives/x", "--poll-interval=5ms", "-priority", "high",
	}, submitEnv(cfg, bucket), &stdout, &stderr)
	require.NoError(t, err, stderr.String())

	// The files, under their relative paths, with content types by
	// extension; the clutter stayed home.
	prefix := "staging/" + id + "/"
	want := map[string]struct{ body, contentType string }{
		"scan.TIF":            {"tiff bytes", "image/tiff"},
		"notes.txt":           {"some notes", "text/plain"},
		"photos/p1.jpg":       {"jpeg", "image/jpeg"},
		"photos/p2.png":       {"png!", "image/png"},
		"data/deep/table.csv": {"a,b\n1,2\n", "text/csv"},
		"data/meta.json":      {`{"k": 1}`, "application/json"},
		"docs/report.pdf":     {"%PDF-1.4", "application/pdf"},
	}
	wantKeys := []string{prefix + "_manifest.json", prefix + "_manifest.processed.json"}
	for rel, w := range want {
		wantKeys = append(wantKeys, prefix+rel)
		got, err := store.Get(context.Background(), bucket, prefix+rel)
		require.NoError(t, err)
		require.Equal(t, w.body, string(got))
		head, err := rawS3(cfg).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + rel)})
		require.NoError(t, err)
		require.Equal(t, w.contentType, aws.ToString(head.ContentType), rel)
	}
	require.ElementsMatch(t, wantKeys, listKeys(t, cfg, bucket))

	// The message, as the orchestrator received it.
	posted := orch.messages()
	require.Len(t, posted, 1)
	var msg map[string]any
	require.NoError(t, json.Unmarshal(posted[0], &msg))
	for k, v := range map[string]any{
		"batch_id": id, "manifest_r2_key": prefix + "_manifest.json", "r2_prefix": prefix,
		"uploader": "tester", "root_path": "/archives/x", "parent_pi": "00000000000000000000000000",
		"total_files": float64(7), "total_bytes": float64(10 + 10 + 4 + 4 + 8 + 8 + 8),
		"metadata": map[string]any{"source": "orchestrator submit"}, "priority": float64(5),
	} {
		require.Equal(t, v, msg[k], k)
	}
	parsedMsg, err := manifest.ParseQueueMessage(posted[0])
	require.NoError(t, err)
	require.False(t, parsedMsg.FinalizedAt.Before(parsedMsg.UploadedAt))

	// The manifest: one group per folder, in walk order.
	body, err := store.Get(context.Background(), bucket, prefix+"_manifest.json")
	require.NoError(t, err)
	man, err := manifest.ParseManifest(body, parsedMsg, manifest.DefaultLimits())
	require.NoError(t, err)
	sw := manifest.ProcessingConfig{OCR: true, Describe: false, Pinax: true}
	type file struct{ key, logical, name, ct string }
	var got []string
	gotFiles := map[string][]file{}
	for _, d := range man.Directories {
		require.Equal(t, sw, d.ProcessingConfig, d.DirectoryPath)
		got = append(got, fmt.Sprintf("%s %d %d", d.DirectoryPath, d.FileCount, d.TotalBytes))
		for _, f := range d.Files {
			gotFiles[d.DirectoryPath] = append(gotFiles[d.DirectoryPath], file{f.R2Key, f.LogicalPath, f.FileName, f.ContentType})
		}
	}
	require.Equal(t, []string{"/data/deep 1 8", "/data 1 8", "/docs 1 8", "/ 2 20", "/photos 2 8"}, got)
	require.Equal(t, map[string][]file{
		"/":          {{prefix + "notes.txt", "/notes.txt", "notes.txt", "text/plain"}, {prefix + "scan.TIF", "/scan.TIF", "scan.TIF", "image/tiff"}},
		"/data/deep": {{prefix + "data/deep/table.csv", "/data/deep/table.csv", "table.csv", "text/csv"}},
		"/data":      {{prefix + "data/meta.json", "/data/meta.json", "meta.json", "application/json"}},
		"/docs":      {{prefix + "docs/report.pdf", "/docs/report.pdf", "report.pdf", "application/pdf"}},
		"/photos":    {{prefix + "photos/p1.jpg", "/photos/p1.jpg", "p1.jpg", "image/jpeg"}, {prefix + "photos/p2.png", "/photos/p2.png", "p2.png", "image/png"}},
	}, gotFiles)

	// Progress went to stderr line by line (not a terminal); the ID and
	// the final list with tags to stdout.
	for _, line := range []string{
		"skipping 3 system files: .DS_Store, __MACOSX/, photos/._p1.jpg",
		"PENDING: waiting for the batch to start",
		"TIFF_CONVERSION [--------------------] 0/1 tasks",
		"TIFF_CONVERSION [####################] 1/1 tasks",
		"IMAGE_PROCESSING [#############-------] 2/3 tasks (1 failed)",
		"DONE: delivering the final manifest",
		"batch " + id + " is DONE: 3 files, 2.1 kB (s3://" + bucket + "/staging/" + id + "/_manifest.processed.json)",
	} {
		require.Contains(t, stderr.String(), line+"\n")
	}
	require.Equal(t, id+"\n"+
		"PATH        TYPE        SIZE    TAGS\n"+
		"/scan.TIF   image/tiff  10 B    tiff-source\n"+
		"/scan.jpg   image/jpeg  2.0 kB  tiff-converted,image-processed\n"+
		"/notes.txt  text/plain  10 B    -\n", stdout.String())
}

// TestSubmitRefusesFiles: files the manifest rules reject are listed with
// their reasons, and nothing is uploaded or submitted.
func TestSubmitRefusesFiles(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	orch := newFakeOrchestrator(t, statusDoc("x", "DONE", 0, 0, 0, "", "delivered"))
	dir := writeTree(t, map[string]string{
		"ok.tif":           "fine",
		"letter.docx":      "word",
		"README":           "no extension",
		"big.jpg":          strings.Repeat("x", 101),
		".env.txt":         "hidden",
		".git/config":      "hidden folder",
		"sub/Thumbs.db":    "clutter, skipped",
		"sub/archive.zip":  "zip",
		"sub/fine/ok2.pdf": "fine",
	})
	require.NoError(t, os.Symlink(filepath.Join(dir, "sub"), filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink(filepath.Join(dir, "ok.tif"), filepath.Join(dir, "alias.tif")))

	var stdout, stderr bytes.Buffer
	err := runSubmit(context.Background(), []string{"-url", orch.URL, "-batch-id", "b1", dir},
		submitEnv(cfg, bucket, "MAX_FILE_SIZE", "100"), &stdout, &stderr)
	require.EqualError(t, err, "7 entries refused; nothing was uploaded")
	allowed := "(allowed: .tiff .tif .jpg .jpeg .png .gif .bmp .json .xml .txt .csv .pdf .md)"
	require.Equal(t, "skipping 1 system file: sub/Thumbs.db\n"+
		"refused (nothing was uploaded):\n"+
		"  .env.txt: hidden file (remove or rename it to upload the folder)\n"+
		"  .git: hidden folder (remove or rename it to upload the folder)\n"+
		"  README: no file extension "+allowed+"\n"+
		"  big.jpg: 101 B exceeds the per-file limit of 100 B (MAX_FILE_SIZE)\n"+
		"  letter.docx: extension .docx is not allowed "+allowed+"\n"+
		"  link: symbolic link to a folder (not followed)\n"+
		"  sub/archive.zip: extension .zip is not allowed "+allowed+"\n",
		stderr.String())
	require.Empty(t, stdout.String())
	require.Empty(t, listKeys(t, cfg, bucket), "nothing uploaded")
	require.Empty(t, orch.messages(), "nothing submitted")

	// Over the batch limit: refused as a whole.
	small := writeTree(t, map[string]string{"a.txt": "12345", "b.txt": "67890"})
	stderr.Reset()
	err = runSubmit(context.Background(), []string{"-url", orch.URL, small},
		submitEnv(cfg, bucket, "MAX_BATCH_SIZE", "9"), &stdout, &stderr)
	require.EqualError(t, err, "1 entry refused; nothing was uploaded")
	require.Contains(t, stderr.String(), "  .: the files add up to 10 B, over the batch limit of 9 B (MAX_BATCH_SIZE)\n")
	require.Empty(t, listKeys(t, cfg, bucket))
}

// TestSubmitBatchError: a batch that ends in ERROR exits non-zero with the
// batch's error.
func TestSubmitBatchError(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	const id = "01K8RNKN488RQCG3YGG72QBZS6"
	orch := newFakeOrchestrator(t,
		statusDoc(id, "PENDING", 0, 0, 0, "", "none"),
		statusDoc(id, "ERROR", 0, 0, 0, `invalid manifest: file staging/x: extension ".exe" is not allowed`, "none"),
	)
	dir := writeTree(t, map[string]string{"a.tif": "tiff"})
	var stdout, stderr bytes.Buffer
	err := runSubmit(context.Background(), []string{"-url", orch.URL, "-batch-id", id, "-poll-interval", "5ms", dir},
		submitEnv(cfg, bucket), &stdout, &stderr)
	require.EqualError(t, err, "batch "+id+` ended in ERROR: invalid manifest: file staging/x: extension ".exe" is not allowed`)
	require.Equal(t, id+"\n", stdout.String())
	require.Contains(t, stderr.String(), "\nERROR\n")

	// Through run, as main sees it: a plain error, exit status 1.
	require.NotErrorAs(t, err, new(usageError))
}

// TestSubmitDoneWithoutProcessedManifest: when the final manifest went to
// an ingest service instead of the bucket, submit says so and prints the
// status.
func TestSubmitDoneWithoutProcessedManifest(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	const id = "batch-delivered"
	done := statusDoc(id, "DONE", 2, 2, 0, "", "delivered")
	orch := newFakeOrchestrator(t, done)
	dir := writeTree(t, map[string]string{"a.tif": "tiff"})
	var stdout, stderr bytes.Buffer
	err := runSubmit(context.Background(), []string{"-url", orch.URL, "-batch-id", id, "-poll-interval", "5ms", dir},
		submitEnv(cfg, bucket), &stdout, &stderr)
	require.NoError(t, err)
	require.Contains(t, stderr.String(), "batch "+id+" is DONE. Its final manifest is not at s3://"+bucket+
		"/staging/"+id+"/_manifest.processed.json: the orchestrator delivered it to its ingest service (WORKER_URL) instead (delivery delivered). Final status:\n")
	out, found := strings.CutPrefix(stdout.String(), id+"\n")
	require.True(t, found, stdout.String())
	require.JSONEq(t, done, out)
}

// TestSubmitNoWait returns once the batch is submitted, without polling.
func TestSubmitNoWait(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	orch := newFakeOrchestrator(t, statusDoc("x", "PENDING", 0, 0, 0, "", "none"))
	dir := writeTree(t, map[string]string{"a.md": "# hi"})
	var stdout, stderr bytes.Buffer
	require.NoError(t, runSubmit(context.Background(), []string{dir, "-no-wait", "-url", orch.URL, "-describe", "-pinax=false"},
		submitEnv(cfg, bucket), &stdout, &stderr))
	id := strings.TrimSpace(stdout.String())
	require.Len(t, id, 26, "a ULID")
	require.Len(t, orch.messages(), 1)
	orch.mu.Lock()
	require.Zero(t, orch.polls)
	orch.mu.Unlock()

	store, err := blob.NewS3(cfg)
	require.NoError(t, err)
	body, err := store.Get(context.Background(), bucket, "staging/"+id+"/_manifest.json")
	require.NoError(t, err)
	var man manifest.Manifest
	require.NoError(t, json.Unmarshal(body, &man))
	require.Equal(t, manifest.ProcessingConfig{Describe: true}, man.Directories[0].ProcessingConfig)
	require.Equal(t, "text/markdown", man.Directories[0].Files[0].ContentType)

	// The same batch ID again is refused before uploading anything.
	stderr.Reset()
	err = runSubmit(context.Background(), []string{"-no-wait", "-url", orch.URL, "-batch-id", id, dir},
		submitEnv(cfg, bucket), &stdout, &stderr)
	require.ErrorContains(t, err, "batch "+id+" already has a manifest")
	require.Len(t, orch.messages(), 1)
}

// TestSubmitUnreachable: with no orchestrator answering, nothing is
// uploaded.
func TestSubmitUnreachable(t *testing.T) {
	t.Parallel()
	cfg, bucket := childS3(t)
	orch := newFakeOrchestrator(t)
	url := orch.URL
	orch.Close()
	dir := writeTree(t, map[string]string{"a.tif": "tiff"})
	err := runSubmit(context.Background(), []string{"-url", url, dir}, submitEnv(cfg, bucket), io.Discard, io.Discard)
	require.ErrorContains(t, err, "the orchestrator does not answer at "+url)
	require.Empty(t, listKeys(t, cfg, bucket))
}

func TestSubmitCommandLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	tokens := func(k string) (string, bool) {
		return map[string]string{"INGEST_TOKEN": submitIngestToken}[k], k == "INGEST_TOKEN"
	}
	none := func(string) (string, bool) { return "", false }
	for name, tc := range map[string]struct {
		args   []string
		usage  bool
		want   string
		lookup func(string) (string, bool)
	}{
		"NoDir":        {[]string{}, true, "submit takes one folder, got 0", nil},
		"TwoDirs":      {[]string{dir, dir}, true, "submit takes one folder, got 2", nil},
		"UnknownFlag":  {[]string{"-frobnicate", dir}, true, "flag provided but not defined: -frobnicate", nil},
		"BadURL":       {[]string{"-url", "localhost:8080", dir}, true, `-url "localhost:8080" must be an http:// or https:// URL`, nil},
		"NotAFolder":   {[]string{file}, false, file + " is not a folder", nil},
		"BadPriority":  {[]string{"-priority", "urgent", dir}, true, `priority must be an integer from -10 (lowest) to 10 (highest)`, nil},
		"BadBatchID":   {[]string{"-batch-id", "a/b", "-url", "http://127.0.0.1:1", dir}, false, `batch_id "a/b" may contain only`, nil},
		"DashDashThen": {[]string{"--", "-url"}, false, "no such file or directory", nil},
		"NoCredential": {[]string{dir}, false, "submit needs the ingest credential: set INGEST_TOKEN (or INGEST_SIGNING_SECRET)", none},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if name == "BadBatchID" {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("x"), 0o644))
			}
			lookup := tokens
			if tc.lookup != nil {
				lookup = tc.lookup
			}
			err := runSubmit(context.Background(), tc.args, lookup, io.Discard, io.Discard)
			require.ErrorContains(t, err, tc.want)
			if tc.usage {
				require.ErrorAs(t, err, new(usageError))
			} else {
				require.NotErrorAs(t, err, new(usageError))
			}
		})
	}
}

func TestSubmitStorage(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		env  map[string]string
		want blob.S3Config
		err  string
	}{
		"LocalDefault": {env: map[string]string{},
			want: blob.S3Config{Endpoint: "http://127.0.0.1:7070", AccessKeyID: "local", SecretAccessKey: "localsecret"}},
		"LocalOverride": {env: map[string]string{"LOCAL_S3_ADDR": ":9000", "LOCAL_S3_ACCESS_KEY": "k", "LOCAL_S3_SECRET_KEY": "s"},
			want: blob.S3Config{Endpoint: "http://127.0.0.1:9000", AccessKeyID: "k", SecretAccessKey: "s"}},
		"R2": {env: map[string]string{"R2_ACCOUNT_ID": "acc", "R2_ACCESS_KEY_ID": "k", "R2_SECRET_ACCESS_KEY": "s"},
			want: blob.S3Config{AccountID: "acc", AccessKeyID: "k", SecretAccessKey: "s"}},
		"Partial": {env: map[string]string{"R2_ENDPOINT": "http://s3.example"},
			err: "missing required setting: R2_ACCESS_KEY_ID, R2_SECRET_ACCESS_KEY"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			require.NoError(t, err)
			got, err := submitStorage(cfg)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestContentType(t *testing.T) {
	t.Parallel()
	for _, ext := range manifest.AllowedExtensions() {
		require.NotEqual(t, "application/octet-stream", contentType("f"+ext), "every allowed extension has a type: %s", ext)
	}
	require.Equal(t, "image/tiff", contentType("SCAN.TIFF"))
	require.Equal(t, "text/markdown", contentType("a.md"))
}

func TestStatusLine(t *testing.T) {
	t.Parallel()
	ocr := "OCR"
	image := "IMAGE_PROCESSING"
	require.Equal(t, "IMAGE_PROCESSING [##########----------] 2/4 tasks (1 failed)",
		statusLine(client.Status{Status: image, Phase: &image, Progress: client.Progress{TasksTotal: 4, TasksCompleted: 1, TasksFailed: 1}}))
	require.Equal(t, "OCR [###############-----] 3/4 refs",
		statusLine(client.Status{Status: ocr, Phase: &ocr, Phases: []client.PhaseProgress{{Phase: ocr, Unit: "refs", TasksTotal: 4, TasksCompleted: 3}},
			Progress: client.Progress{TasksTotal: 4, TasksCompleted: 3}}))
}
