package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/client"
	"github.com/arke-institute/orchestrator/config"
)

const documentUsage = `Usage: orchestrator document [flags] FILE
       orchestrator document [flags] -key KEY

Indexes a text document (spec 003) and follows it until it is completed or
failed: FILE (markdown or plain text, UTF-8) is uploaded to the staging
bucket at -key, by default DOCUMENTS_PREFIX (documents/) and FILE's name;
with -key alone, the object already there is indexed. The document then
goes through its steps (download, embeddings, tags, store) and, once
completed, is found by ` + "`orchestrator search`" + `. Its ID is printed on stdout,
and at the end its tags.

Posting a key whose content is indexed already does no work and answers
that document; changed content makes a new version.

The request carries the ingest credential (INGEST_TOKEN, else a signature
keyed by INGEST_SIGNING_SECRET, else ADMIN_TOKEN); progress is read with
READ_TOKEN (else ADMIN_TOKEN). Storage is configured as for submit. Next to a
` + "`make run`" + `, all of it comes from its .data/run.env.

Exit status: 0 when the document is completed (or queued, with -no-wait), 1
when it failed or the orchestrator refused it, 2 for a mistake on the
command line.

Flags:
`

const searchUsage = `Usage: orchestrator search [-k 10] [-json] QUERY...

Searches the indexed documents (GET /documents/search) and prints the k
chunks that best match QUERY, best first: their rank's score, the cosine of
their vector and the query's ("-" without one), whether they hold its
words, their document and text. A search ranked by its words alone (no
vector of the configured embedder yet) says why on stderr.
It reads with READ_TOKEN (else ADMIN_TOKEN), as status does.

Flags:
`

// document is `orchestrator document`.
func document(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runDocument(ctx, args, operatorEnv(), stdout, stderr)
}

// documentOptions is a parsed document command line.
type documentOptions struct {
	file, key    string
	noWait       bool
	pollInterval time.Duration
}

// runDocument is document with the environment read through lookup.
func runDocument(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, err := config.Load(lookup)
	if err != nil {
		return err
	}
	flags, url := operatorFlags("document", documentUsage, cfg, stderr)
	var o documentOptions
	flags.StringVar(&o.key, "key", "", "object key in R2_BUCKET (default DOCUMENTS_PREFIX + FILE's name)")
	flags.BoolVar(&o.noWait, "no-wait", false, "exit once the document is queued")
	flags.DurationVar(&o.pollInterval, "poll-interval", 300*time.Millisecond, "how often the document's status is read")
	rest, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 1:
		flags.Usage()
		return usageError{fmt.Sprintf("document takes one file, got %d", len(rest))}
	case len(rest) == 0 && o.key == "":
		flags.Usage()
		return usageError{"document takes a FILE to upload, or -key naming an object in the bucket"}
	case o.pollInterval <= 0:
		return usageError{"-poll-interval must be positive"}
	case len(rest) == 1:
		o.file = rest[0]
		if o.key == "" {
			o.key = cfg.Executors.Documents.Prefix + filepath.Base(o.file)
		}
	}
	api, err := client.New(client.Config{URL: *url, IngestToken: cfg.IngestToken, IngestSigningSecret: cfg.IngestSigningSecret,
		ReadToken: cfg.ReadToken, AdminToken: cfg.AdminToken})
	if err != nil {
		return usageError{err.Error()}
	}
	if cfg.IngestToken == "" && cfg.IngestSigningSecret == "" && cfg.AdminToken == "" {
		return errors.New("document needs the ingest credential: set INGEST_TOKEN (or INGEST_SIGNING_SECRET, or ADMIN_TOKEN) to the orchestrator's (next to a `make run`, run this from its folder: its .data/run.env leads to the tokens)")
	}

	if o.file != "" {
		if err := uploadDocument(ctx, cfg, o); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "uploaded %s to s3://%s/%s\n", o.file, cfg.R2Bucket, o.key)
	}
	doc, created, err := api.IndexDocument(ctx, o.key)
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("the orchestrator refused document %s: %s: %s", o.key, apiErr.Status, apiErr.Message)
	}
	if err != nil {
		return fmt.Errorf("posting document %s to %s: %w", o.key, api.URL(), err)
	}
	fmt.Fprintln(stdout, doc.ID)
	if created {
		fmt.Fprintf(stderr, "document %d (version %d of %s) queued\n", doc.ID, doc.Version, o.key)
	} else {
		fmt.Fprintf(stderr, "document %d (version %d of %s) has this content already: %s\n", doc.ID, doc.Version, o.key, doc.Status)
	}
	if o.noWait {
		return nil
	}
	return followDocument(ctx, api, doc, o.pollInterval, stdout, stderr)
}

// uploadDocument puts the file at o.key, refusing what indexing would
// refuse anyway: a file over DOCUMENT_MAX_BYTES or not UTF-8 text.
func uploadDocument(ctx context.Context, cfg *config.Config, o documentOptions) error {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return err
	}
	switch {
	case int64(len(data)) > cfg.Executors.Documents.MaxBytes:
		return fmt.Errorf("%s is %s, over DOCUMENT_MAX_BYTES (%s); nothing was uploaded", o.file, humanBytes(int64(len(data))), humanBytes(cfg.Executors.Documents.MaxBytes))
	case !utf8.Valid(data):
		return fmt.Errorf("%s is not UTF-8 text; nothing was uploaded", o.file)
	case !strings.HasPrefix(o.key, cfg.Executors.Documents.Prefix):
		return fmt.Errorf("-key %q must lie under DOCUMENTS_PREFIX %q", o.key, cfg.Executors.Documents.Prefix)
	}
	storage, err := submitStorage(cfg)
	if err != nil {
		return err
	}
	store, err := blob.NewS3(storage)
	if err != nil {
		return err
	}
	ctype := "text/plain; charset=utf-8"
	if strings.EqualFold(filepath.Ext(o.file), ".md") {
		ctype = "text/markdown; charset=utf-8"
	}
	if err := store.Put(ctx, cfg.R2Bucket, o.key, bytes.NewReader(data), int64(len(data)), ctype); err != nil {
		return fmt.Errorf("uploading %s to s3://%s/%s: %w", o.file, cfg.R2Bucket, o.key, err)
	}
	return nil
}

// followDocument polls the document until it ends, printing each change
// of step or progress, then its tags or its errors.
func followDocument(ctx context.Context, api *client.Client, doc client.Document, every time.Duration, stdout, stderr io.Writer) error {
	last := ""
	var failingFor time.Time
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if line := documentLine(doc); line != last {
			fmt.Fprintln(stderr, line)
			last = line
		}
		switch doc.Status {
		case client.DocumentCompleted:
			tags := strings.Join(doc.DocumentTags, ", ")
			if tags == "" {
				tags = "(none)"
			}
			fmt.Fprintf(stdout, "tags: %s\n", tags)
			return nil
		case client.DocumentFailed:
			for _, e := range doc.Errors {
				fmt.Fprintf(stderr, "  %s %s: %s\n", e.Timestamp, e.Step, e.Error)
			}
			return fmt.Errorf("document %d failed (retry it with POST /documents/%d/retry once the cause is mended)", doc.ID, doc.ID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped following document %d; it carries on (see %s/documents/%d)", doc.ID, api.URL(), doc.ID)
		case <-tick.C:
		}
		next, err := api.Document(ctx, doc.ID)
		switch {
		case err == nil:
			doc, failingFor = next, time.Time{}
		case ctx.Err() != nil:
		case failingFor.IsZero():
			failingFor = time.Now()
		case time.Since(failingFor) > lostContactAfter:
			return fmt.Errorf("lost contact with the orchestrator while following document %d: %w", doc.ID, err)
		}
	}
}

// documentLine is one line of a document's progress.
func documentLine(d client.Document) string {
	switch d.Status {
	case client.DocumentCompleted, client.DocumentNotStarted:
		return d.Status
	case client.DocumentFailed:
		return fmt.Sprintf("failed at %s", d.CurrentStep)
	}
	p := d.Progress
	return fmt.Sprintf("processing %-10s %s %d/%d chunks", d.CurrentStep, bar(int64(p.ProcessedChunks), int64(p.TotalChunks)), p.ProcessedChunks, p.TotalChunks)
}

// search is `orchestrator search`.
func search(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runSearch(ctx, args, operatorEnv(), stdout, stderr)
}

// runSearch is search with the environment read through lookup.
func runSearch(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	cfg, err := readerConfig(lookup)
	if err != nil {
		return err
	}
	flags, url := operatorFlags("search", searchUsage, cfg, stderr)
	k := flags.Int("k", 10, "how many chunks to print")
	asJSON := flags.Bool("json", false, "print the results as JSON")
	rest, err := parseInterleaved(flags, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	query := strings.TrimSpace(strings.Join(rest, " "))
	if query == "" {
		flags.Usage()
		return usageError{"search takes a QUERY"}
	}
	api, err := client.New(client.Config{URL: *url, ReadToken: cfg.ReadToken, AdminToken: cfg.AdminToken})
	if err != nil {
		return usageError{err.Error()}
	}
	res, err := api.SearchDocuments(ctx, query, *k)
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("the orchestrator refused the search: %s: %s", apiErr.Status, apiErr.Message)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if res.Notice != "" {
		fmt.Fprintln(stderr, "by words alone:", res.Notice)
	}
	if len(res.Results) == 0 {
		fmt.Fprintln(stderr, "no indexed document matches")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCORE\tCOSINE\tWORDS\tDOCUMENT\tKEY\tCHUNK\tPAGES\tTEXT")
	for _, r := range res.Results {
		cosine, words := "-", "no"
		if r.Similarity != nil {
			cosine = fmt.Sprintf("%.3f", *r.Similarity)
		}
		if r.TextMatch {
			words = "yes"
		}
		fmt.Fprintf(tw, "%.4f\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", r.Score, cosine, words, r.DocumentID, r.R2Key, r.ChunkIndex, pages(r.FirstPage, r.LastPage), snippet(r.Text, 72))
	}
	return tw.Flush()
}

// pages says which pages a chunk is from: "3", "3-4", or "-" without pages.
func pages(first, last int32) string {
	switch {
	case first == 0:
		return "-"
	case last <= first:
		return strconv.Itoa(int(first))
	}
	return fmt.Sprintf("%d-%d", first, last)
}

// snippet is text on one line, cut to at most n runes.
func snippet(text string, n int) string {
	text = strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	r := []rune(text)
	return string(r[:n-1]) + "…"
}
