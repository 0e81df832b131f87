package docindex

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/jobs"
)

// ScanResult is what one run of a scan did.
type ScanResult struct {
	// Listed counts the objects listed, Queued the documents queued.
	Listed, Queued int
	// Ended reports that the run ended a pass: the next starts from the
	// first key.
	Ended bool
}

// errScanBudget stops a scan's listing once its run's time is spent.
var errScanBudget = errors.New("the scan's time is spent")

// Scan goes on with the scan of DOCUMENTS_PREFIX for up to budget: it
// lists the objects after the scan's cursor (the documents_scans row),
// a page at a time, and queues a document for each whose name ends in one
// of suffixes and whose key and ETag no version has yet (create with
// anyStatus: a failed document is not tried again by a scan, nor one
// posted with the same content). After each page the cursor moves to its
// last key, so a run cut short (its budget, a crash) goes on where it
// was; a page handled twice queues nothing twice. At the end of the
// listing the pass ends and the cursor goes back to the start.
func (d *Documents) Scan(ctx context.Context, suffixes []string, budget time.Duration) (ScanResult, error) {
	var res ScanResult
	sc, ok := d.store.(blob.Scanner)
	if !ok {
		return res, errors.New("scanning documents: the store cannot list objects")
	}
	q := db.New(d.pool)
	cur, err := q.DocumentScanGet(ctx, d.prefix)
	if err != nil {
		return res, fmt.Errorf("reading the scan of %s: %w", d.prefix, err)
	}
	deadline := time.Now().Add(budget)
	err = sc.Scan(ctx, d.bucket, d.prefix, cur.After, func(page []blob.Listed) error {
		res.Listed += len(page)
		var keys []string
		byKey := map[string]blob.Info{}
		for _, o := range page {
			if scanned(o.Key, suffixes) && d.checkKey(o.Key) == nil {
				keys = append(keys, o.Key)
				byKey[o.Key] = o.Info
			}
		}
		known := map[string]string{}
		if len(keys) > 0 {
			rows, err := q.DocumentLatestETags(ctx, keys)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Etag != nil {
					known[r.R2Key] = *r.Etag
				}
			}
		}
		queued := 0
		for _, k := range keys {
			info := byKey[k]
			if etag, ok := known[k]; ok && etag == info.ETag {
				continue
			}
			if _, created, err := d.create(ctx, k, &info, true); err != nil {
				return fmt.Errorf("queueing %s: %w", k, err)
			} else if created {
				queued++
			}
		}
		res.Queued += queued
		if err := q.DocumentScanAdvance(ctx, db.DocumentScanAdvanceParams{Prefix: d.prefix, After: page[len(page)-1].Key, Queued: int64(queued)}); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errScanBudget
		}
		return nil
	})
	switch {
	case errors.Is(err, errScanBudget):
		return res, nil
	case errors.Is(err, blob.ErrNotFound):
		return res, fmt.Errorf("scanning %s: the bucket %s does not exist", d.prefix, d.bucket)
	case err != nil:
		return res, fmt.Errorf("scanning %s: %w", d.prefix, err)
	}
	if err := q.DocumentScanEnd(ctx, d.prefix); err != nil {
		return res, err
	}
	res.Ended = true
	return res, nil
}

// scanned reports whether a scan picks up key: a name ending in one of
// suffixes (case aside), not a folder marker.
func scanned(key string, suffixes []string) bool {
	if strings.HasSuffix(key, "/") {
		return false
	}
	lower := strings.ToLower(key)
	for _, s := range suffixes {
		if strings.HasSuffix(lower, s) {
			return true
		}
	}
	return false
}

// ScanSuffixes reads DOCUMENTS_SCAN_SUFFIXES: ends of names, comma-
// separated, lowercased, empty ones dropped.
func ScanSuffixes(list string) []string {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.ToLower(strings.TrimSpace(s)); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ScanArgs is a run of the periodic scan of DOCUMENTS_PREFIX: one a
// period for the whole fleet.
type ScanArgs struct{}

// Kind is the job's kind.
func (ScanArgs) Kind() string { return "document_scan" }

// scanBudget is how long one run lists; the rest waits for the next.
const scanBudget = 40 * time.Second

// ScanWorker runs ScanArgs.
type ScanWorker struct {
	river.WorkerDefaults[ScanArgs]
	deps     jobs.Deps
	prefix   string
	suffixes []string
}

// NewScanWorker scans prefix (DOCUMENTS_PREFIX) of the staging bucket for
// names ending in suffixes.
func NewScanWorker(deps jobs.Deps, prefix string, suffixes []string) *ScanWorker {
	return &ScanWorker{deps: deps, prefix: prefix, suffixes: suffixes}
}

// Timeout bounds a run: its listing's budget and the page in hand.
func (w *ScanWorker) Timeout(*river.Job[ScanArgs]) time.Duration { return scanBudget + 20*time.Second }

// Work runs the scan for its budget and logs what it did.
func (w *ScanWorker) Work(ctx context.Context, _ *river.Job[ScanArgs]) error {
	docs := NewDocuments(w.deps.Pool, river.ClientFromContext[pgx.Tx](ctx), w.deps.Store, w.deps.Settings.StagingBucket(), w.prefix, w.deps.Logger)
	res, err := docs.Scan(ctx, w.suffixes, scanBudget)
	if err != nil {
		return err
	}
	if res.Queued > 0 || res.Ended {
		w.deps.Logger.Info("documents scanned", "prefix", w.prefix, "listed", res.Listed, "queued", res.Queued, "pass_ended", res.Ended)
	}
	return nil
}

// ScanJob is the periodic job of the scan, every interval, unique by
// period (a second at least, River's least) so that the fleet's processes
// start one between them.
func ScanJob(interval time.Duration) *river.PeriodicJob {
	period := max(interval, time.Second)
	return river.NewPeriodicJob(
		river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) {
			return ScanArgs{}, &river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByPeriod: period}}
		},
		&river.PeriodicJobOpts{RunOnStart: true, ID: "document_scan"},
	)
}
