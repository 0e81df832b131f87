package flycompute

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, tc := range map[string]struct {
		in   string
		want time.Duration
	}{
		"Empty":    {"", 0},
		"Seconds":  {"7", 7 * time.Second},
		"Spaces":   {" 2 ", 2 * time.Second},
		"Negative": {"-1", 0},
		"Date":     {now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		"PastDate": {now.Add(-time.Minute).Format(http.TimeFormat), 0},
		"Garbage":  {"soon", 0},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, parseRetryAfter(tc.in, now))
		})
	}
}

func TestAPIMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "nope", apiMessage([]byte(`{"error":"nope"}`)))
	require.Equal(t, "detail", apiMessage([]byte(`{"error":"nope","message":"detail"}`)))
	require.Equal(t, "<html>bad gateway</html>", apiMessage([]byte("<html>bad gateway</html>\n")))
	require.Len(t, apiMessage(make([]byte, 2000)), 515)
}
