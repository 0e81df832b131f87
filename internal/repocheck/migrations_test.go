package repocheck_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// incompatible are statements a migration's Up must not hold while the
// previous release may still run beside it (docs/operations.md, Upgrades):
// each removes, renames or retypes what that release reads or writes, or
// adds a constraint its writes may break (notNullWithoutDefault too).
// Such a change is split over two releases.
var incompatible = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`(?is)\bDROP\s+(TABLE|COLUMN|VIEW|FUNCTION|TYPE)\b`), "drops what the previous release may use"},
	{regexp.MustCompile(`(?is)\bRENAME\b`), "renames what the previous release uses by its old name"},
	{regexp.MustCompile(`(?is)\bALTER\s+COLUMN\b[^;]*\bTYPE\b`), "retypes a column the previous release writes"},
	{regexp.MustCompile(`(?is)\bSET\s+NOT\s+NULL\b`), "makes a column the previous release may leave null required"},
}

// notNullWithoutDefault finds an added column that is NOT NULL with no
// DEFAULT: the previous release's inserts leave it out and fail.
var (
	notNullWithoutDefault = regexp.MustCompile(`(?is)\bADD\s+COLUMN\s+[^,;]*?\bNOT\s+NULL\b[^,;]*`)
	hasDefault            = regexp.MustCompile(`(?i)\bDEFAULT\b`)
)

// upgradeProblems lists what in the Up part of a migration the previous
// release could not run beside.
func upgradeProblems(sql string) []string {
	up, _, _ := strings.Cut(sql, "-- +goose Down")
	var lines []string
	for l := range strings.SplitSeq(up, "\n") {
		if c := strings.Index(l, "--"); c >= 0 {
			l = l[:c]
		}
		lines = append(lines, l)
	}
	up = strings.Join(lines, "\n")
	var out []string
	for _, rule := range incompatible {
		if m := rule.re.FindString(up); m != "" {
			out = append(out, rule.why+": "+strings.Join(strings.Fields(m), " "))
		}
	}
	for _, m := range notNullWithoutDefault.FindAllString(up, -1) {
		if !hasDefault.MatchString(m) {
			out = append(out, "adds a required column without a default, which the previous release's inserts leave out: "+strings.Join(strings.Fields(m), " "))
		}
	}
	return out
}

// TestUpgradeProblems: the check of a migration finds each kind of change
// the previous release could not run beside, and passes additions.
func TestUpgradeProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, sql string
		bad       bool
	}{
		{"CreateTable", "CREATE TABLE pauses (scope text NOT NULL);\nCREATE INDEX x ON batches (uploader);", false},
		{"NullableColumn", "ALTER TABLE tasks ADD COLUMN lease_until timestamptz;", false},
		{"RequiredColumnWithDefault", "ALTER TABLE tasks ADD COLUMN unlaunched int NOT NULL DEFAULT 0;", false},
		{"DownMayDrop", "CREATE TABLE a (x int);\n-- +goose Down\nDROP TABLE a;", false},
		{"CommentMentionsDrop", "-- we never DROP TABLE here\nCREATE TABLE a (x int);", false},
		{"DropTable", "DROP TABLE pauses;", true},
		{"DropColumn", "ALTER TABLE tasks DROP COLUMN machine_id;", true},
		{"Rename", "ALTER TABLE tasks RENAME COLUMN machine_id TO machine;", true},
		{"Retype", "ALTER TABLE tasks ALTER COLUMN attempt TYPE bigint;", true},
		{"SetNotNull", "ALTER TABLE tasks ALTER COLUMN deadline SET NOT NULL;", true},
		{"RequiredColumn", "ALTER TABLE tasks ADD COLUMN owner text NOT NULL;", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.bad, len(upgradeProblems(tc.sql)) > 0, "%v", upgradeProblems(tc.sql))
		})
	}
}

// TestMigrationsCompatibleForOneRelease: the migrations added since the
// previous release (scripts/upgrade-from) leave what it uses in place, so
// that it runs beside them during a rolling upgrade. make upgrade-test
// runs the two; this finds the usual mistakes without them. It needs the
// release's commit in the clone (not a shallow one).
func TestMigrationsCompatibleForOneRelease(t *testing.T) {
	t.Parallel()
	root := "../.."
	rev := releaseCommit(t, filepath.Join(root, "scripts", "upgrade-from"))
	out, err := exec.Command("git", "-C", root, "ls-tree", "--name-only", rev+":sql/migrations").Output()
	require.NoError(t, err, "the previous release %s is not in this clone (a shallow clone? `git fetch --unshallow` brings it)", rev)
	released := map[string]bool{}
	for name := range strings.FieldsSeq(string(out)) {
		released[name] = true
	}
	entries, err := os.ReadDir(filepath.Join(root, "sql", "migrations"))
	require.NoError(t, err)
	var problems []string
	for _, e := range entries {
		if released[e.Name()] || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, "sql", "migrations", e.Name()))
		require.NoError(t, err)
		for _, p := range upgradeProblems(string(data)) {
			problems = append(problems, e.Name()+": "+p)
		}
	}
	require.Empty(t, problems, "split such a change over two releases (docs/operations.md, Upgrades)")
}

// releaseCommit is the first line of path that is not a comment.
func releaseCommit(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("%s names no commit", path)
	return ""
}
