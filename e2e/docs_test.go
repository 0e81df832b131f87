package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/internal/harness/dbtest"
	"github.com/arke-institute/orchestrator/internal/harness/eventually"
	"github.com/arke-institute/orchestrator/internal/harness/syncbuf"
)

// docBlock is one fenced code block of a markdown file.
type docBlock struct {
	file string // relative to the repository, e.g. docs/api.md
	line int    // of the opening fence, from 1
	info string // the fence's info string's first word: sh, sql, text, ...
	text string // the block's lines, the fence's indentation removed
}

// where is the block's place, for messages: file:line of its first line.
func (b docBlock) where(offset int) string {
	return fmt.Sprintf("%s:%d", b.file, b.line+offset)
}

var fence = regexp.MustCompile("^( *)(```+)(.*)$")

// unmarkedShell are info strings that look like shell but are not the
// convention's sh: a shell block is either sh (run) or text (not run).
var unmarkedShell = map[string]bool{"": true, "bash": true, "shell": true, "console": true, "zsh": true, "shell-session": true, "sh-session": true}

// parseBlocks returns the fenced code blocks of a markdown file.
func parseBlocks(file, content string) ([]docBlock, error) {
	var (
		blocks []docBlock
		open   *docBlock
		indent string
		ticks  string
		body   []string
	)
	sc := bufio.NewScanner(strings.NewReader(content))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := fence.FindStringSubmatch(line)
		if open == nil {
			if m == nil {
				continue
			}
			info := strings.Fields(m[3])
			open = &docBlock{file: file, line: n}
			if len(info) > 0 {
				open.info = info[0]
			}
			indent, ticks, body = m[1], m[2], nil
			continue
		}
		if m != nil && len(m[2]) >= len(ticks) && strings.TrimSpace(m[3]) == "" {
			open.text = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, *open)
			open = nil
			continue
		}
		body = append(body, strings.TrimPrefix(line, indent))
	}
	if open != nil {
		return nil, fmt.Errorf("%s:%d: the fence is never closed", file, open.line)
	}
	return blocks, sc.Err()
}

// docFiles are the documentation files, in the order TestDocs runs their
// blocks: README.md, then docs/*.md by name.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	require.NoError(t, err)
	sort.Strings(files)
	out := []string{"README.md"}
	for _, f := range files {
		rel, err := filepath.Rel(repoRoot, f)
		require.NoError(t, err)
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// docSubstitutions are the mechanical changes TestDocs makes to a block
// before it runs (README.md, "Commands in the docs"), beside giving curl
// --fail-with-body: its own orchestrator listens on free ports, and
// `go run ./cmd/orchestrator` is the binary it built (what `make run`
// builds as bin/orchestrator).
func docSubstitutions(apiAddr, s3Addr string) *strings.Replacer {
	return strings.NewReplacer(
		"127.0.0.1:8080", apiAddr,
		"127.0.0.1:7070", s3Addr,
		"go run ./cmd/orchestrator", "bin/orchestrator",
	)
}

// curlCommand is curl where a command starts: at a line's start, or after
// a pipe, a list operator or a command substitution.
var curlCommand = regexp.MustCompile(`(?m)(^|[\s;|&(])curl `)

// TestDocs runs every command the documentation shows, as a reader beside
// `make run` would: the code blocks marked sh of README.md and docs/*.md,
// in order, as one terminal session, in a folder laid out as a clone (the
// repository's files, bin/ with the built programs, .data/ of a running
// `orchestrator serve` on its embedded defaults). Blocks marked sql run
// with psql on its database. Blocks marked otherwise are not run; a block
// with no mark, or a shell mark other than sh, fails the test.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs the documented commands beside a running orchestrator (about a minute); make test runs it")
	}
	// Every block first, so that a misfenced block fails at once.
	var blocks []docBlock
	for _, f := range docFiles(t) {
		content, err := os.ReadFile(filepath.Join(repoRoot, f))
		require.NoError(t, err)
		bs, err := parseBlocks(f, string(content))
		require.NoError(t, err)
		for _, b := range bs {
			if unmarkedShell[b.info] {
				t.Errorf("%s: a code block marked %q: mark it sh (TestDocs runs it beside make run) or text (not run), see README.md, \"Commands in the docs\"", b.where(0), b.info)
			}
		}
		blocks = append(blocks, bs...)
	}
	if t.Failed() {
		return
	}
	for _, tool := range []string{"bash", "curl", "jq", "aws"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the documented commands need %s: scripts/setup.sh test (make test) installs it", tool)
	}
	psql := findPsql(t)

	// A clone: the repository's files, and bin/ and .data/ of its own.
	clone := t.TempDir()
	entries, err := os.ReadDir(repoRoot)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" {
			continue
		}
		require.NoError(t, os.Symlink(filepath.Join(repoRoot, e.Name()), filepath.Join(clone, e.Name())))
	}
	orchestrator, worker := bins(t)
	require.NoError(t, os.Mkdir(filepath.Join(clone, "bin"), 0o755))
	require.NoError(t, os.Symlink(orchestrator, filepath.Join(clone, "bin", "orchestrator")))
	require.NoError(t, os.Symlink(worker, filepath.Join(clone, "bin", "worker")))

	// The reader's environment: nothing of the orchestrator's, of a
	// database or of AWS set; the docs say what to export.
	base := readerEnv()

	// `make run`: serve on its embedded defaults, in the clone, but on
	// free ports and a fresh database.
	_, dbURL := dbtest.NewEmpty(t)
	listen, s3Addr := freeAddr(t), freeAddr(t)
	var serveLog syncbuf.Buffer
	serve := exec.Command(orchestrator, "serve")
	serve.Dir = clone
	serve.Env = append(append([]string{}, base...),
		"DATABASE_URL="+dbURL,
		"LISTEN_ADDR="+listen,
		"LOCAL_S3_ADDR="+s3Addr,
		"LOG_FORMAT=text",
	)
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	require.NoError(t, serve.Start())
	t.Cleanup(func() {
		_ = serve.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- serve.Wait() }()
		select {
		case <-done: //nolint:errcheck // interrupted: its exit status says nothing new
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", serveLog.String())
		}
	})
	// Up once it answers and has written .data/run.env and its banner,
	// which ends with "Ctrl-C stops everything.".
	if !eventually.Within(60*time.Second, func() bool {
		resp, err := http.Get("http://" + listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.Contains(serveLog.String(), "Ctrl-C stops everything.")
	}) {
		t.Fatalf("serve did not come up:\n%s", serveLog.String())
	}
	_, err = os.Stat(filepath.Join(clone, ".data", "run.env"))
	require.NoError(t, err, "serve wrote no .data/run.env")

	// The whole session is bounded; each block too.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	work := t.TempDir()
	state := filepath.Join(work, "state")
	require.NoError(t, os.WriteFile(state, nil, 0o600))
	subst := docSubstitutions(listen, s3Addr)
	ran := 0
	for i, b := range blocks {
		switch b.info {
		case "sh":
			script := curlCommand.ReplaceAllString(subst.Replace(b.text), "${1}curl --fail-with-body ")
			for _, fixed := range []string{"localhost:", ":8080", ":7070"} {
				if strings.Contains(script, fixed) {
					t.Errorf("%s: %q in a block that runs: use 127.0.0.1:8080 (the API) or 127.0.0.1:7070 (S3), which the test replaces with its addresses", b.where(0), fixed)
				}
			}
			runShell(ctx, t, b, script, clone, base, state, filepath.Join(work, fmt.Sprintf("block%d", i)))
			ran++
		case "sql":
			runSQL(ctx, t, b, psql, dbURL, base)
			ran++
		}
	}
	require.Positive(t, ran, "no block ran")
}

// readerEnv is the test process's environment without what would make it
// differ from a reader's shell beside `make run`: the settings of the
// orchestrator, of a database and of AWS.
func readerEnv() []string {
	drop := []string{"DATABASE_URL=", "TEST_DATABASE_URL=", "BENCH_DATABASE_URL=", "ORCHESTRATOR_URL=", "LISTEN_ADDR=", "METRICS_ADDR=", "PPROF_ADDR=",
		"ADMIN_TOKEN", "READ_TOKEN", "INGEST_TOKEN", "INGEST_SIGNING_SECRET=", "STATUS_PUBLIC=", "BATCH_ID=",
		"R2_", "FLY_", "LOCAL_", "AWS_", "OCR_", "EMBEDDINGS_", "TAGS_", "CDN_", "PG", "LOG_"}
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, d := range drop {
			if strings.HasPrefix(kv, d) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// runShell runs one sh block with bash, as the next command of one
// terminal session: it starts with the variables the blocks before it
// exported (kept in state), stops at the first command that fails, and
// reports that command's file and line.
func runShell(ctx context.Context, t *testing.T, b docBlock, script, dir string, env []string, state, scratch string) {
	t.Helper()
	failedAt := scratch + ".line"
	// The prologue is the script's first line, so that line n+1 of the
	// script is line n of the block.
	prologue := fmt.Sprintf("set -Eeuo pipefail; source %q; trap 'echo $LINENO > %q' ERR\n", state, failedAt)
	// A command that failed inside a command substitution (export
	// BATCH_ID=$(curl ...)) does not stop bash, but fails the block.
	epilogue := fmt.Sprintf("\nif [ -e %q ]; then exit 1; fi\nexport -p > %q\n", failedAt, state)
	path := scratch + ".sh"
	require.NoError(t, os.WriteFile(path, []byte(prologue+script+epilogue), 0o600))

	blockCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(blockCtx, "bash", path)
	cmd.Dir = dir
	cmd.Env = env
	// The block's commands are bash's children: stop them all with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(10 * time.Millisecond)
	if err == nil {
		t.Logf("%s: ran sh block (%s):\n%s", b.where(0), took, indent(b.text))
		return
	}
	where := b.where(0)
	line := ""
	if data, rerr := os.ReadFile(failedAt); rerr == nil {
		if n, cerr := strconv.Atoi(strings.TrimSpace(string(data))); cerr == nil && n > 1 {
			// Script line n is block line n-1, whose file line is the
			// fence's plus n-1.
			where = b.where(n - 1)
			if lines := strings.Split(b.text, "\n"); n-2 < len(lines) {
				line = lines[n-2]
			}
		}
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && blockCtx.Err() == nil {
		err = fmt.Errorf("exit status %d", exit.ExitCode())
	} else if blockCtx.Err() != nil {
		err = fmt.Errorf("did not end in time: %w", blockCtx.Err())
	}
	t.Errorf("%s: a documented command failed (%v) after %s:\n  %s\nthe block, as run:\n%s\nstdout:\n%s\nstderr:\n%s",
		where, err, took, line, indent(script), stdout.String(), stderr.String())
}

// findPsql is psql: on PATH, or where scripts/postgres.sh finds the
// server's programs (Debian's versioned folders, Homebrew's keg-only
// postgresql@N).
func findPsql(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin/psql", "/opt/homebrew/opt/postgresql@*/bin/psql", "/usr/local/opt/postgresql@*/bin/psql"} {
		if found, _ := filepath.Glob(pattern); len(found) > 0 {
			sort.Strings(found)
			return found[len(found)-1]
		}
	}
	t.Fatal("the documented queries need psql, which comes with PostgreSQL (scripts/setup.sh installs it)")
	return ""
}

// runSQL runs one sql block with psql on the database, read-only.
func runSQL(ctx context.Context, t *testing.T, b docBlock, psql, dbURL string, env []string) {
	t.Helper()
	sqlCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(sqlCtx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dbURL,
		"-c", "BEGIN READ ONLY", "-c", b.text, "-c", "ROLLBACK")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: a documented query failed (%v):\n%s\npsql:\n%s", b.where(0), err, indent(b.text), out)
		return
	}
	t.Logf("%s: ran sql block:\n%s", b.where(0), indent(b.text))
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
