package repocheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// queryName finds the name of each sqlc query ("-- name: X :kind") in a
// query file.
var queryName = regexp.MustCompile(`(?m)^-- name: (\S+) :\S+`)

// misplaced is the index of the first query name that sorts before the
// one above it (byte order, the order sqlc gives the generated methods),
// or -1.
func misplaced(names []string) int {
	for i := 1; i < len(names); i++ {
		if names[i] < names[i-1] {
			return i
		}
	}
	return -1
}

// TestQueriesSortedByName: the named queries of each sql/queries file are
// in the order of their names, so that a query is found where its name
// says, a new one has one place to go, and two branches adding queries to
// a file rarely touch the same lines.
func TestQueriesSortedByName(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../sql/queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no query files found")
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		var names []string
		for _, m := range queryName.FindAllSubmatch(text, -1) {
			names = append(names, string(m[1]))
		}
		require.NotEmpty(t, names, "%s has no named queries", f)
		if i := misplaced(names); i >= 0 {
			t.Errorf("%s: %s comes after %s: sort the file's queries by name, each with its leading comment", f, names[i], names[i-1])
		}
	}
}

// TestMisplaced checks the order check itself.
func TestMisplaced(t *testing.T) {
	t.Parallel()
	require.Equal(t, -1, misplaced([]string{"BatchGet", "BatchGetByID", "BatchList"}), "a prefix sorts first")
	require.Equal(t, -1, misplaced([]string{"DocumentChunkTags", "DocumentChunksByKeys"}), "byte order: upper case sorts first")
	require.Equal(t, 2, misplaced([]string{"BatchGet", "BatchList", "BatchInsert", "BatchTouch"}))
}
