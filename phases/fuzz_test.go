package phases_test

import (
	"path"
	"strings"
	"testing"

	"github.com/arke-institute/orchestrator/phases"
)

// FuzzCheckKey: make fuzz; `go test` runs the seed corpus. A key CheckKey
// accepts lies under its prefix and names what it says: cleaning it
// changes nothing, so no segment climbs out.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{"staging/B/a.jpg", "staging/B/../C/a", "staging/B//a", "staging/B/./a", "staging/B/a\x00", "staging/Ba", "staging/B/"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if phases.CheckKey(key, "staging/B/") != nil {
			return
		}
		if !strings.HasPrefix(key, "staging/B/") || path.Clean(key) != key {
			t.Fatalf("accepted %q", key)
		}
	})
}
