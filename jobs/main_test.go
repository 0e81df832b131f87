package jobs_test

import "flag"

// noGuard runs the fan-in test without the fan-in's lock, to show that the
// test catches the race the lock prevents.
var noGuard = flag.Bool("fanin.noguard", false, "run the fan-in test without the fan-in lock (it should fail)")
