package main

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	sqlfiles "github.com/arke-institute/orchestrator/sql"
	"github.com/arke-institute/orchestrator/worker/protocol"
)

// upgradeFromFile names the previous release, the commit the rolling
// upgrade test starts on: its first line that is not a comment.
const upgradeFromFile = "scripts/upgrade-from"

// upgradeDefaults resolves the release to upgrade from (-upgrade-from,
// else UPGRADE_FROM, else upgradeFromFile) and sets the upgrade test's
// load where no flag says otherwise: 6 batches of 50 files on pools,
// submitted 1 s apart, no faults and no fault-free run.
func (o *options) upgradeDefaults(fs *flag.FlagSet) error {
	if o.upgradeFrom == "" {
		o.upgradeFrom = strings.TrimSpace(os.Getenv("UPGRADE_FROM"))
	}
	if o.upgradeFrom == "" {
		rev, err := readUpgradeFrom(upgradeFromFile)
		if err != nil {
			return err
		}
		o.upgradeFrom = rev
	}
	defaults := map[string]func(){
		"batches":     func() { o.batches = 6 },
		"files":       func() { o.files = 50 },
		"big-files":   func() { o.bigFiles = 0 },
		"spread":      func() { o.spread = time.Second },
		"executor":    func() { o.executor = "pool" },
		"timeout":     func() { o.timeout = 10 * time.Minute },
		"no-baseline": func() { o.skipBaseline = true },
	}
	for name, apply := range defaults {
		if !setFlag(fs, name) {
			apply()
		}
	}
	return nil
}

// readUpgradeFrom reads the release's commit from path.
func readUpgradeFrom(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("the previous release (run from the repository's root, or set UPGRADE_FROM): %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s names no commit", path)
}

// buildRelease builds the orchestrator of the release to upgrade from,
// from a copy of its tree (git archive: the repository is not touched).
func (w *world) buildRelease(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--verify", w.opts.upgradeFrom+"^{commit}").Output()
	if err != nil {
		return fmt.Errorf("the release to upgrade from, %q, is no commit of this clone (a shallow clone? git fetch --unshallow): %w", w.opts.upgradeFrom, err)
	}
	w.releaseSHA = strings.TrimSpace(string(out))
	if w.releaseProtocol, err = releaseProtocolOf(ctx, w.releaseSHA); err != nil {
		return err
	}
	dir := filepath.Join(w.tmp, "release-"+w.releaseSHA[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", w.releaseSHA)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return err
	}
	var stderr strings.Builder
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w: %s", w.releaseSHA, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpacking %s: %w: %s", w.releaseSHA, err, stderr.String())
	}
	w.release = filepath.Join(w.tmp, "orchestrator-"+w.releaseSHA[:12])
	w.logf("building the previous release's orchestrator (%s)", w.releaseSHA[:12])
	build := exec.CommandContext(ctx, "go", "build", "-o", w.release, "./cmd/orchestrator")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s's ./cmd/orchestrator: %w: %s", w.releaseSHA[:12], err, out)
	}
	return os.RemoveAll(dir)
}

// upgradeProcs is the rolling upgrade, once every batch is submitted to
// the previous release's orchestrators: as about a quarter, then about
// five eighths, of the tasks are completed (a TIFF and its JPEG are a
// task each), it upgrades one orchestrator after the
// other to this checkout's (SIGTERM, then the new binary, which applies
// the new migrations while the other still runs the release). Between the
// two, it restarts the other on the release, which must start against
// the new schema. It closes done when it is over.
func (l *loadRun) upgradeProcs(ctx context.Context, done chan<- struct{}, submitted <-chan struct{}) {
	defer close(done)
	select {
	case <-ctx.Done():
		return
	case <-submitted:
	}
	pool, err := dbPool(ctx, l.dbURL)
	if err != nil {
		l.res.check("the rolling upgrade ran", false, err.Error())
		return
	}
	defer pool.Close()
	var stranded []string
	for step, p := range l.procs {
		want := []int{l.res.files / 2, l.res.files * 5 / 4}[step]
		err := retry(ctx, l.w.opts.timeout, func() error {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE batch_id = ANY($1) AND status = 'completed'`, l.ids).Scan(&n); err != nil {
				return err
			}
			if n < want {
				return fmt.Errorf("%d of %d tasks completed", n, want)
			}
			return nil
		})
		if err != nil {
			l.res.check("the rolling upgrade ran", false, err.Error())
			return
		}
		inFlight, err := batchesInFlight(ctx, pool, l.ids)
		if err != nil {
			l.res.check("the rolling upgrade ran", false, err.Error())
			return
		}
		if inFlight == "" {
			stranded = append(stranded, p.name)
		}
		l.upgradeStep(ctx, p, l.w.bin, p.name+" upgraded to this checkout", "batches in flight: "+cmp.Or(inFlight, "none"))
		if step > 0 {
			continue
		}
		// The new binary migrated on start, while the other ran on.
		var version int64
		if err := pool.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&version); err != nil {
			l.res.check("the rolling upgrade ran", false, err.Error())
			return
		}
		newest, err := newestMigration()
		if err != nil {
			l.res.check("the rolling upgrade ran", false, err.Error())
			return
		}
		l.res.check(fmt.Sprintf("the new orchestrator applied its migrations on start (to %d) beside the release's", newest), version == newest,
			fmt.Sprintf("the schema is at %d", version))
		other := l.procs[1]
		l.upgradeStep(ctx, other, l.w.release, other.name+" restarted on the release, against the new schema", "")
	}
	l.res.check("each orchestrator was upgraded while batches were in flight", len(stranded) == 0,
		"no batch was in flight when "+strings.Join(stranded, " and ")+" was upgraded: a larger load (-files, -batches) would be")
}

// upgradeStep stops p (SIGTERM: it drains, or is killed after 30 s),
// starts bin in its place and checks that it serves, as what says; detail
// goes to the steps' list.
func (l *loadRun) upgradeStep(ctx context.Context, p *proc, bin, what, detail string) {
	p.stop()
	p.mu.Lock()
	p.bin = bin
	p.mu.Unlock()
	err := p.start()
	if err == nil {
		err = p.awaitHealthy(ctx, 2*time.Minute)
	}
	l.res.check(what, err == nil, fmt.Sprintf("%v (log %s)", err, p.logPath))
	if detail != "" {
		what += " (" + detail + ")"
	}
	l.note("%s", what)
	l.res.mu.Lock()
	l.res.upgrades = append(l.res.upgrades, fmt.Sprintf("after %s: %s", time.Since(l.started).Round(time.Second), what))
	l.res.mu.Unlock()
}

// batchesInFlight names how many of the batches are in each status but
// DONE and ERROR ("IMAGE_PROCESSING 2, OCR 1"), "" for none.
func batchesInFlight(ctx context.Context, pool *pgxpool.Pool, ids []string) (string, error) {
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM batches WHERE id = ANY($1) AND status NOT IN ('DONE', 'ERROR')
		GROUP BY status ORDER BY status`, ids)
	if err != nil {
		return "", err
	}
	var parts []string
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("%s %d", status, n))
	}
	return strings.Join(parts, ", "), rows.Err()
}

// newestMigration is the version of this checkout's newest migration.
func newestMigration() (int64, error) {
	entries, err := fs.ReadDir(sqlfiles.Migrations, "migrations")
	if err != nil {
		return 0, err
	}
	var newest int64
	for _, e := range entries {
		prefix, _, _ := strings.Cut(e.Name(), "_")
		if v, err := strconv.ParseInt(prefix, 10, 64); err == nil {
			newest = max(newest, v)
		}
	}
	return newest, nil
}

// evaluateProtocols checks that the callbacks of workers of the release's
// protocol version (release) and of this one's were applied: both, when
// they differ.
func (r *runResult) evaluateProtocols(report fakefly.Report, release int) {
	applied := map[int]int{}
	for _, c := range report.Callbacks {
		if c.Status == 200 {
			applied[c.Protocol]++
		}
	}
	r.check(fmt.Sprintf("callbacks of the release's protocol version (%d) and this one's (%d) applied", release, protocol.Current),
		applied[release] > 0 && applied[protocol.Current] > 0,
		fmt.Sprintf("version %d: %d, version %d: %d", release, applied[release], protocol.Current, applied[protocol.Current]))
	r.protocols = applied
}

// releaseProtocolOf is the worker protocol version the release at sha
// speaks: its worker/protocol package's Current, or V1 for a release
// from before the protocol had versions.
func releaseProtocolOf(ctx context.Context, sha string) (int, error) {
	src, err := exec.CommandContext(ctx, "git", "show", sha+":worker/protocol/protocol.go").Output()
	if err != nil {
		return protocol.V1, nil //nolint:nilerr // no such file: the release predates versions
	}
	m := regexp.MustCompile(`(?m)^\s*Current\s*=\s*V([0-9]+)\s*$`).FindSubmatch(src)
	if m == nil {
		return 0, fmt.Errorf("reading the worker protocol version of release %s: no Current = V<n> in worker/protocol/protocol.go", sha)
	}
	return strconv.Atoi(string(m[1]))
}
