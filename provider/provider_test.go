package provider_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/provider"
)

func TestErrorText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "embeddings permanent error (HTTP 400): bad input",
		(&provider.Error{Service: "embeddings", Class: provider.Permanent, Status: 400, Message: "bad input"}).Error())
	require.Equal(t, "provider transient error: connection reset",
		(&provider.Error{Class: provider.Transient, Err: errors.New("connection reset")}).Error())
	require.Equal(t, "Class(9)", provider.Class(9).String())
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, provider.Class(0), provider.ClassOf(nil))
	require.Equal(t, provider.Transient, provider.ClassOf(errors.New("unclassified")))
	wrapped := fmt.Errorf("step: %w", &provider.Error{Class: provider.RateLimited})
	require.Equal(t, provider.RateLimited, provider.ClassOf(wrapped))
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	h := http.Header{"Retry-After": {"4"}}
	for _, tc := range []struct {
		status     int
		body       string
		class      provider.Class
		message    string
		retryAfter time.Duration
	}{
		{400, `{"error": {"message": "input too long"}}`, provider.Permanent, "input too long", 0},
		{401, `{"error": "bad key"}`, provider.Auth, "bad key", 0},
		{403, `{"message": "suspended"}`, provider.Auth, "suspended", 0},
		{404, `{"detail": "no such model"}`, provider.Permanent, "no such model", 0},
		{408, ``, provider.Transient, "Request Timeout", 0},
		{429, `{}`, provider.RateLimited, "Too Many Requests", 4 * time.Second},
		{500, "upstream died\n", provider.Transient, "upstream died", 0},
		{502, "<html>bad gateway</html>", provider.Transient, "Bad Gateway", 0},
		{503, ``, provider.Transient, "Service Unavailable", 4 * time.Second},
	} {
		e := provider.StatusError("tags", tc.status, h, []byte(tc.body))
		require.Equal(t, tc.class, e.Class, "%d", tc.status)
		require.Equal(t, tc.message, e.Message, "%d", tc.status)
		require.Equal(t, tc.retryAfter, e.RetryAfter, "%d", tc.status)
		require.Equal(t, "tags", e.Service)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	require.Equal(t, 5*time.Second, provider.ParseRetryAfter("5", now))
	require.Equal(t, 24*time.Hour, provider.ParseRetryAfter("999999999", now))
	require.Equal(t, 30*time.Second, provider.ParseRetryAfter("Tue, 24 Nov 2026 12:00:30 GMT", now))
	require.Equal(t, time.Duration(0), provider.ParseRetryAfter("soon", now))
}

func TestNewClientValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []provider.Config{
		{APIKey: "k"},
		{URL: "ftp://example.com", APIKey: "k"},
		{URL: "https://", APIKey: "k"},
	} {
		_, err := provider.NewClient("embeddings", cfg)
		require.ErrorContains(t, err, "embeddings: ", "%+v", cfg.URL)
	}
	c, err := provider.NewClient("embeddings", provider.Config{URL: "https://api.example.com:8443/v1/", APIKey: "k"})
	require.NoError(t, err)
	require.Equal(t, "api.example.com:8443", c.Host())
	require.Equal(t, provider.DefaultTimeout, c.Timeout())

	_, err = provider.NewClient("embeddings", provider.Config{URL: "http://localhost:11434/v1"})
	require.NoError(t, err, "a local server may take no key")
	require.True(t, provider.KeyMissing("https://api.example.com/v1", ""))
	require.True(t, provider.KeyMissing("HTTPS://api.example.com/v1", ""))
	require.False(t, provider.KeyMissing("https://api.example.com/v1", "k"))
	require.False(t, provider.KeyMissing("http://localhost:11434/v1", ""))
}

func TestRefused(t *testing.T) {
	t.Parallel()
	refusal := &provider.Error{Class: provider.Permanent, Status: 400, Message: "This model does not support 'dimensions'"}
	require.True(t, provider.Refused(refusal, "dimensions"))
	require.True(t, provider.Refused(fmt.Errorf("wrapped: %w", refusal), "Dimensions"))
	require.False(t, provider.Refused(refusal, "response_format"))
	require.False(t, provider.Refused(&provider.Error{Class: provider.Permanent, Status: 422, Message: "dimensions"}, "dimensions"))
	require.False(t, provider.Refused(errors.New("dimensions"), "dimensions"))
	require.False(t, provider.Refused(nil, "dimensions"))
}

// TestRetryDecide: transient failures and 429s are retried by time, from
// the first failure in a row, never for ever: a transient one with
// backoff (using a retry, MinRetries granted whatever the window), a 429
// after its Retry-After (using none); past the window each ends with the
// reason. Other failures end at once.
func TestRetryDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	rule := provider.Retry{Window: 30 * time.Minute, MinRetries: 3, MaxBackoff: time.Minute}
	transient := &provider.Error{Service: "ocr", Class: provider.Transient, Status: 503, Message: "busy"}
	limited := &provider.Error{Service: "ocr", Class: provider.RateLimited, Status: 429, Message: "slow down", RetryAfter: 7 * time.Second}
	permanent := &provider.Error{Service: "ocr", Class: provider.Permanent, Status: 422, Message: "bad image"}

	require.Equal(t, provider.Decision{Retry: true, Counted: true, Wait: time.Second}, rule.Decide(transient, 0, time.Time{}, now))
	require.Equal(t, provider.Decision{Retry: true, Counted: true, Wait: 8 * time.Second}, rule.Decide(transient, 3, now.Add(-time.Minute), now))
	require.Equal(t, provider.Decision{Retry: true, Counted: true, Wait: time.Minute}, rule.Decide(transient, 12, now.Add(-29*time.Minute), now), "backoff capped")
	d := rule.Decide(transient, 12, now.Add(-31*time.Minute), now)
	require.False(t, d.Retry)
	require.Equal(t, "gave up after 12 retries in 31m0s: ocr transient error (HTTP 503): busy", d.Reason)
	require.True(t, rule.Decide(transient, 2, now.Add(-time.Hour), now).Retry, "MinRetries granted past the window")

	require.Equal(t, provider.Decision{Retry: true, Wait: 7 * time.Second}, rule.Decide(limited, 0, now.Add(-10*time.Minute), now))
	d = rule.Decide(limited, 0, now.Add(-45*time.Minute), now)
	require.False(t, d.Retry)
	require.Equal(t, "provider quota exhausted for 45 min: ocr rate_limited error (HTTP 429): slow down", d.Reason)

	require.Equal(t, provider.Decision{Reason: "ocr permanent error (HTTP 422): bad image"}, rule.Decide(permanent, 0, time.Time{}, now))
}
