package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// runResult is what one run did and how its checks came out.
type runResult struct {
	label        string
	opts         options
	batches      int
	files        int
	elapsed      time.Duration
	mu           sync.Mutex
	faults       map[string]int
	workerFaults map[string]int
	// faultedLaunches lists, by task, its launches the fake made faulty
	// ("2:hang").
	faultedLaunches map[string][]string
	// faultLog is the driver's faults, in order, for timelines.
	faultLog []timelineLine
	// suspects are the tasks lost or failed with every machine faulty.
	suspects []taskRow
	resumes  []time.Duration
	pgDown   [][2]time.Time // Postgres stops, from and to
	stranded int            // jobs a killed process left running

	done, tasks, completed, failedTasks int
	lost, invented, unfinished          int
	allFaulty                           int // failed tasks whose every machine was made faulty
	lostReasons                         map[string]int
	duplicates                          int
	overlaps                            int
	callback503, callback500            int
	callbackFinal                       map[int]int // final answer of each callback post
	goroutines, conns                   int
	// missingFiles are the final manifests' files not in storage with
	// the content their worker (or the driver) wrote; droppedFiles the
	// submitted files no final manifest lists.
	missingFiles, droppedFiles int
	// describeBatches are the batches with a directory with OCR and
	// description on; ocrRefs the refs of those directories in the DONE
	// batches' final manifests, ocrLost those without their OCR text.
	describeBatches, ocrRefs, ocrLost int
	// documents are the documents those final manifests should name (each
	// text document and ref of those directories), docsCompleted those
	// that name a completed document; docsOther the batches' documents
	// not completed that no final manifest names.
	documents, docsCompleted, docsOther int
	// upgrades are the rolling upgrade's steps, protocols the callbacks
	// applied by their workers' protocol versions.
	upgrades  []string
	protocols map[int]int
	// provider is what chaos provider answered.
	provider providerReport
	checks   []assertion
}

// assertion is one check's outcome.
type assertion struct {
	name   string
	ok     bool
	detail string
}

func newRunResult(label string, opts options) *runResult {
	return &runResult{label: label, opts: opts, faults: map[string]int{}, workerFaults: map[string]int{}, lostReasons: map[string]int{}}
}

func (r *runResult) addFault(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[kind]++
}

func (r *runResult) addResume(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resumes = append(r.resumes, d)
}

// addPostgresDown records that Postgres is down from from, until about to
// (endPostgresDown says when it is back), and returns the stop's index.
func (r *runResult) addPostgresDown(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pgDown = append(r.pgDown, [2]time.Time{from, to})
	return len(r.pgDown) - 1
}

// endPostgresDown records when Postgres was back after stop i.
func (r *runResult) endPostgresDown(i int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pgDown[i][1] = at
}

// postgresDownBetween is how long Postgres was down between from and to
// (a stop still under way counts up to to).
func (r *runResult) postgresDownBetween(from, to time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d time.Duration
	for _, iv := range r.pgDown {
		if lo, hi := maxTime(iv[0], from), minTime(iv[1], to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (r *runResult) addStranded(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stranded += n
}

func (r *runResult) check(name string, ok bool, detail string) {
	r.checks = append(r.checks, assertion{name: name, ok: ok, detail: detail})
}

// failed names the checks that failed.
func (r *runResult) failed() []string {
	var out []string
	for _, c := range r.checks {
		if !c.ok {
			out = append(out, c.name)
		}
	}
	return out
}

// dbSnapshot is what the database says at the end of a run.
type dbSnapshot struct {
	batches    map[string]string // id -> status (with the error, if any)
	tasks      []taskRow
	completedN map[string]int   // task id -> task.completed events
	documents  map[int64]docRow // the batches' documents, by id
}

// docRow is one document of a batch.
type docRow struct {
	batchID, r2Key, status, errors string
}

type taskRow struct {
	id, batchID, phase, status, err, inputKey string
}

func (s *dbSnapshot) read(ctx context.Context, pool *pgxpool.Pool, ids []string) error {
	s.batches, s.tasks, s.completedN, s.documents = map[string]string{}, nil, map[string]int{}, map[int64]docRow{}
	rows, err := pool.Query(ctx, `SELECT id, status, coalesce(error, '') FROM batches WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, status, msg string
		if err := rows.Scan(&id, &status, &msg); err != nil {
			return err
		}
		if msg != "" {
			status += ": " + msg
		}
		s.batches[id] = status
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT t.id, t.batch_id, t.phase, t.status, coalesce(t.error, ''), f.r2_key
		FROM tasks t JOIN files f ON f.id = t.file_id WHERE t.batch_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var t taskRow
		if err := rows.Scan(&t.id, &t.batchID, &t.phase, &t.status, &t.err, &t.inputKey); err != nil {
			return err
		}
		s.tasks = append(s.tasks, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT task_id, count(*) FROM batch_events
		WHERE batch_id = ANY($1) AND type = 'task.completed' AND task_id IS NOT NULL GROUP BY 1`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return err
		}
		s.completedN[id] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT id, batch_id, r2_key, status, errors::text FROM documents WHERE batch_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id int64
		var d docRow
		if err := rows.Scan(&id, &d.batchID, &d.r2Key, &d.status, &d.errors); err != nil {
			return err
		}
		s.documents[id] = d
	}
	return rows.Err()
}

var numbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// evaluate runs the checks against the database, the fake Machines API's
// report and ingest's deliveries.
func (r *runResult) evaluate(s dbSnapshot, report fakefly.Report, in *ingest, ids []string) {
	var notDone []string
	for _, id := range ids {
		if st := s.batches[id]; st == "DONE" {
			r.done++
		} else {
			notDone = append(notDone, id+" "+st)
		}
	}
	r.check("every batch DONE", len(notDone) == 0, firstFew(notDone))

	applied := map[string]bool{} // tasks with a success callback answered 200
	r.callbackFinal = map[int]int{}
	for _, c := range report.Callbacks {
		r.callbackFinal[c.Status]++
		if c.Status == http.StatusOK && c.Outcome == "success" {
			applied[c.TaskID] = true
		}
	}
	var invented []string
	for _, t := range s.tasks {
		r.tasks++
		want := intendedSuccess(t.inputKey)
		switch t.status {
		case "completed":
			r.completed++
			if !want || !applied[t.id] {
				r.invented++
				invented = append(invented, fmt.Sprintf("%s (worker said success: %v, success callback applied: %v)", t.id, want, applied[t.id]))
			}
		case "failed":
			r.failedTasks++
			// As many machines hung, crashed or answered late as a task
			// has attempts: each counted failure can be one of them, no
			// worker gave an outcome, and the task rightly failed. Other
			// launches cost no attempt (one that made no machine, one
			// whose worker reported a transient error within
			// TRANSIENT_RETRY_WINDOW), so fewer faulty machines than
			// attempts is a loss.
			switch {
			case !want:
			case len(r.faultedLaunches[t.id]) >= taskMaxAttempts:
				r.allFaulty++
				r.suspects = append(r.suspects, t)
			default:
				r.lost++
				r.lostReasons[numbers.ReplaceAllString(t.err, "N")]++
				r.suspects = append(r.suspects, t)
			}
		default:
			r.unfinished++
		}
	}
	var reasons []string
	for k, v := range r.lostReasons {
		reasons = append(reasons, fmt.Sprintf("%d x %q", v, k))
	}
	sort.Strings(reasons)
	r.check("every task has its worker's outcome: lost = 0", r.lost == 0 && r.unfinished == 0,
		fmt.Sprintf("%d successes lost, %d tasks unfinished; %s", r.lost, r.unfinished, strings.Join(reasons, ", ")))
	r.check("no outcome invented", r.invented == 0, firstFew(invented))

	var undelivered, manyKeys []string
	extraKeys := 0
	for _, id := range ids {
		if s.batches[id] != "DONE" {
			continue
		}
		ds := in.deliveries(id)
		keys := map[string]bool{}
		for _, d := range ds {
			keys[d.IdempotencyKey] = true
		}
		switch {
		case len(ds) == 0:
			undelivered = append(undelivered, id)
		case len(keys) > 1:
			manyKeys = append(manyKeys, fmt.Sprintf("%s (%d keys)", id, len(keys)))
			extraKeys += len(keys) - 1
		}
	}
	r.check("ingest received every DONE batch's final manifest", len(undelivered) == 0, firstFew(undelivered))
	r.check("repeated deliveries carry one idempotency key", len(manyKeys) == 0, firstFew(manyKeys))

	var dups []string
	for id, n := range s.completedN {
		if n > 1 {
			r.duplicates += n - 1
			dups = append(dups, fmt.Sprintf("%s (%d task.completed)", id, n))
		}
	}
	r.duplicates += extraKeys
	r.check("duplicates = 0", r.duplicates == 0, firstFew(dups))

	r.overlaps = len(report.Overlaps)
	var ov []string
	for _, o := range report.Overlaps {
		ov = append(ov, fmt.Sprintf("%s: %s launched while %s ran", o.TaskID, o.MachineID, o.Running))
	}
	r.check("no task had two machines alive at once", r.overlaps == 0, firstFew(ov))

	r.callback503 = report.CallbackAnswers["503"]
	r.callback500 = report.CallbackAnswers["500"]
	r.check("no callback answered 500", r.callback500 == 0, fmt.Sprintf("%d callback posts answered 500", r.callback500))

	if worst := r.maxResume(); len(r.resumes) > 0 {
		r.check(fmt.Sprintf("a killed process's jobs ran again within %s", r.opts.resumeLimit), worst >= 0 && worst <= r.opts.resumeLimit,
			fmt.Sprintf("slowest: %s over %d kills", worst.Round(time.Second), len(r.resumes)))
	}
}

// evaluateDocuments checks that every document a DONE batch's final
// manifest should name is named and completed: each text document and each
// ref of the batch's directory with description on (describe, by batch
// id; an OCR'd ref is a document). A ref whose OCR was lost has no
// document either.
func (r *runResult) evaluateDocuments(s dbSnapshot, in *ingest, ids []string, describe map[string]string) {
	var lost []string
	named := map[int64]bool{}
	anyDone := false
	for _, id := range ids {
		dir, ds := describe[id], in.deliveries(id)
		if dir == "" || s.batches[id] != "DONE" || len(ds) == 0 {
			continue
		}
		anyDone = true
		last := ds[len(ds)-1]
		for i, p := range last.Paths {
			if path.Dir(p) != dir || !isTextDoc(p) && !strings.HasSuffix(p, ".ref.json") {
				continue
			}
			r.documents++
			var docID int64
			if i < len(last.DocIDs) {
				docID = last.DocIDs[i]
			}
			named[docID] = true
			d, ok := s.documents[docID]
			switch {
			case docID == 0:
				lost = append(lost, fmt.Sprintf("%s %s: no document_id", id, p))
			case !ok:
				lost = append(lost, fmt.Sprintf("%s %s: document %d is not the batch's", id, p, docID))
			case d.status != "completed":
				lost = append(lost, fmt.Sprintf("%s %s: document %d %s %s", id, p, docID, d.status, d.errors))
			default:
				r.docsCompleted++
			}
		}
	}
	for id, d := range s.documents {
		if !named[id] && d.status != "completed" {
			r.docsOther++
		}
	}
	sort.Strings(lost)
	r.check("every document of a describe-on file completed: documents lost = 0", len(lost) == 0 && (r.documents > 0 || !anyDone),
		cmp.Or(firstFew(lost), "no document expected in the final manifests"))
}

// compareLeaks checks that connections and goroutines ended where the
// fault-free run's did (with some slack for pools that grew under load).
func (r *runResult) compareLeaks(base *runResult) {
	maxConns := 2*r.opts.maxConns + 10
	r.check(fmt.Sprintf("database connections at the end within the pools' bound (%d)", maxConns), r.conns <= maxConns,
		fmt.Sprintf("%d connections", r.conns))
	if base == nil {
		return
	}
	limit := base.goroutines*3/2 + 100
	r.check("goroutines at the end near the fault-free run's", r.goroutines <= limit,
		fmt.Sprintf("%d goroutines, fault-free %d (limit %d)", r.goroutines, base.goroutines, limit))
}

func (r *runResult) maxResume() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var worst time.Duration
	for _, d := range r.resumes {
		if d < 0 {
			return -1
		}
		worst = max(worst, d)
	}
	return worst
}

func firstFew(list []string) string {
	if len(list) > 3 {
		return strings.Join(list[:3], "; ") + fmt.Sprintf("; and %d more", len(list)-3)
	}
	return strings.Join(list, "; ")
}

// printTable prints the faults, the figures of both runs and the checks.
func printTable(out io.Writer, opts options, base, res *runResult) {
	big := ""
	if opts.bigFiles > 0 {
		big = fmt.Sprintf(" (the first %d)", opts.bigFiles)
	}
	fmt.Fprintf(out, "\nchaos: seed %d, %d batches x %d files%s, %s executor, 2 orchestrators\n\n", opts.seed, opts.batches, opts.files, big, opts.executor)
	if opts.upgradeFrom != "" {
		fmt.Fprintf(out, "rolling upgrade from %s:\n", opts.upgradeFrom)
		for _, u := range res.upgrades {
			fmt.Fprintf(out, "  %s\n", u)
		}
		fmt.Fprint(out, "callbacks applied by protocol version:")
		for v := protocol.Oldest; v <= protocol.Current; v++ {
			fmt.Fprintf(out, " %d: %d", v, res.protocols[v])
		}
		fmt.Fprint(out, "\n\n")
		printFigures(out, base, res)
		return
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fault injected\tcount\t")
	names := []struct{ key, label string }{
		{faultKill, "kill -9 of an orchestrator (back after 1-3 s)"},
		{faultPostgres, fmt.Sprintf("Postgres stopped -m immediate (%s-%s), started again", opts.pgDownMin(), opts.pgDown)},
		{faultPartition, fmt.Sprintf("partition: orchestrators cut off Postgres (up) for %s", opts.partition)},
		{faultFly503, fmt.Sprintf("Machines API answers 503 for %s", opts.outage)},
		{faultFlyCreate, fmt.Sprintf("Machines API creates, then answers 503, for %s", opts.outage)},
		{faultS3503, fmt.Sprintf("S3 answers 503 for %s", opts.outage)},
		{faultProvider, fmt.Sprintf("OCR and documents providers answer 429, then 503, for %s", opts.outage)},
		{faultHang, "machine hangs (never calls back)"},
		{faultCrash, "machine crashes (exits without callback)"},
		{faultLate, "machine calls back after its deadline"},
	}
	for _, n := range names {
		c := res.faults[n.key] + res.workerFaults[n.key]
		fmt.Fprintf(tw, "%s\t%d\t\n", n.label, c)
	}
	tw.Flush()
	fmt.Fprintln(out)
	printFigures(out, base, res)
}

// printFigures prints the figures of both runs and the checks.
func printFigures(out io.Writer, base, res *runResult) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tfault-free\t%s\t\n", res.label)
	row := func(name string, f func(*runResult) string) {
		b := "-"
		if base != nil {
			b = f(base)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, b, f(res))
	}
	row("batches DONE", func(r *runResult) string { return fmt.Sprintf("%d/%d", r.done, r.batches) })
	row("files", func(r *runResult) string { return fmt.Sprint(r.files) })
	row("tasks (completed/failed)", func(r *runResult) string { return fmt.Sprintf("%d (%d/%d)", r.tasks, r.completed, r.failedTasks) })
	row("lost", func(r *runResult) string { return fmt.Sprint(r.lost + r.unfinished) })
	row("failed, every machine faulty", func(r *runResult) string { return fmt.Sprint(r.allFaulty) })
	row("invented", func(r *runResult) string { return fmt.Sprint(r.invented) })
	row("duplicates", func(r *runResult) string { return fmt.Sprint(r.duplicates) })
	row("two machines for a task", func(r *runResult) string { return fmt.Sprint(r.overlaps) })
	row("files missing from storage / from ingest", func(r *runResult) string { return fmt.Sprintf("%d / %d", r.missingFiles, r.droppedFiles) })
	row("OCR-on refs (lost)", func(r *runResult) string { return fmt.Sprintf("%d (%d)", r.ocrRefs, r.ocrLost) })
	row("documents completed / expected", func(r *runResult) string {
		s := fmt.Sprintf("%d / %d", r.docsCompleted, r.documents)
		if r.docsOther > 0 {
			s += fmt.Sprintf(" (+%d unnamed, not completed)", r.docsOther)
		}
		return s
	})
	answers := func(by map[int]int) string {
		return fmt.Sprintf("%d / %d / %d", by[http.StatusOK], by[http.StatusTooManyRequests], by[http.StatusServiceUnavailable])
	}
	row("OCR provider answers 200 / 429 / 503", func(r *runResult) string { return answers(r.provider.OCR.ByStatus) })
	row("documents provider answers 200 / 429 / 503", func(r *runResult) string { return answers(r.provider.AI.ByStatus) })
	row("callback posts answered 503 / 500", func(r *runResult) string { return fmt.Sprintf("%d / %d", r.callback503, r.callback500) })
	row("callbacks' final answers", func(r *runResult) string {
		var codes []int
		for c := range r.callbackFinal {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		var parts []string
		for _, c := range codes {
			parts = append(parts, fmt.Sprintf("%d: %d", c, r.callbackFinal[c]))
		}
		return strings.Join(parts, ", ")
	})
	row("slowest resume after a kill", func(r *runResult) string {
		if len(r.resumes) == 0 {
			return "-"
		}
		return fmt.Sprintf("%s (%d kills, %d jobs stranded)", r.maxResume().Round(time.Second), len(r.resumes), r.stranded)
	})
	row("connections / goroutines at the end", func(r *runResult) string { return fmt.Sprintf("%d / %d", r.conns, r.goroutines) })
	row("time to finish", func(r *runResult) string {
		s := r.elapsed.Round(time.Second).String()
		if r != base && base != nil && base.elapsed > 0 {
			s += fmt.Sprintf(" (%.1fx)", r.elapsed.Seconds()/base.elapsed.Seconds())
		}
		return s
	})
	tw.Flush()
	fmt.Fprintln(out)
	for _, r := range []*runResult{base, res} {
		if r == nil {
			continue
		}
		for _, c := range r.checks {
			mark := "PASS"
			if !c.ok {
				mark = "FAIL"
			}
			line := fmt.Sprintf("%s %-9s %s", mark, r.label, c.name)
			if !c.ok && c.detail != "" {
				line += ": " + c.detail
			}
			fmt.Fprintln(out, line)
		}
	}
}
