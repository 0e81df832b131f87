package gcgoal

import (
	"runtime/debug"
	"testing"
)

// current is the collector's percentage, read without changing it.
func current() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTightenNests: the percentage is lowered from the first Tighten to
// the last restore, then set back; a lower setting is kept, and a restore
// called twice counts once.
func TestTightenNests(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	a := Tighten(25)
	if got := current(); got != 25 {
		t.Fatalf("tightened: GOGC %d, want 25", got)
	}
	b := Tighten(25)
	a()
	a() // again: no effect
	if got := current(); got != 25 {
		t.Fatalf("one holder left: GOGC %d, want 25", got)
	}
	b()
	if got := current(); got != 100 {
		t.Fatalf("restored: GOGC %d, want 100", got)
	}

	debug.SetGCPercent(10)
	c := Tighten(25)
	if got := current(); got != 10 {
		t.Fatalf("a lower setting: GOGC %d, want 10 kept", got)
	}
	c()
	if got := current(); got != 10 {
		t.Fatalf("after: GOGC %d, want 10", got)
	}
}
