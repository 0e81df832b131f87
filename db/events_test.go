package db_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/db"
)

// TestSQLNamesOnlyKnownEvents: the queries write and read event types
// through parameters (db's constants), never as literals; the reports,
// which people read and run as they are, may name them, but only types
// that are db's constants. A renamed or mistyped event would otherwise
// make a query or a report silently match nothing.
func TestSQLNamesOnlyKnownEvents(t *testing.T) {
	t.Parallel()
	literal := regexp.MustCompile(`'([a-z_]+\.[a-z_]+)'`)
	types := db.EventTypes()
	for _, dir := range []string{"queries", "reports"} {
		files, err := filepath.Glob(filepath.Join("..", "sql", dir, "*.sql"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
				if dir == "queries" {
					t.Errorf("%s names the event %s: pass db's constant as a parameter", f, m[1])
					continue
				}
				require.True(t, slices.Contains(types, m[1]), "%s names %s, which is no event type (db.EventTypes)", f, m[1])
			}
		}
	}
}
