// Package eventually waits in tests for a condition to hold: the one
// polling loop the tests share instead of sleeping a guess.
package eventually

import (
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = 10 * time.Millisecond

// True polls cond every Interval until it holds, and fails the test, naming
// what it waited for, once within has passed.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("waited %s for %s", within, what)
	}
}

// Within polls cond every Interval until it holds or within has passed,
// and reports whether it held: for a caller that does not fail at once.
func Within(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}
