// Package gcgoal tightens the garbage collector's goal while the process
// holds a large buffer. By default (GOGC=100) the collector lets the heap
// grow to twice what is live before it runs: a process that holds a
// manifest of tens of megabytes while it parses it, making garbage as it
// goes, peaks at twice the manifest. With a lower percentage for that
// while, the collector runs more often and the peak is lower.
package gcgoal

import (
	"runtime/debug"
	"sync"
)

var (
	mu      sync.Mutex
	holders int
	saved   int // the percentage before the first holder
)

// Tighten sets the collector's percentage (GOGC) to percent, unless it is
// lower already (or off), until every caller has called the function it
// returns (calling it again does nothing).
func Tighten(percent int) (restore func()) {
	mu.Lock()
	defer mu.Unlock()
	if holders == 0 {
		saved = debug.SetGCPercent(percent)
		if saved < percent { // lower already, or off (negative)
			debug.SetGCPercent(saved)
		}
	}
	holders++
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if holders--; holders == 0 {
				debug.SetGCPercent(saved)
			}
		})
	}
}
