package jobs

import "context"

// SetFanInGuard switches the fan-in's exclusive lock, so a test can show the
// race it prevents. It returns a func restoring the previous value.
func SetFanInGuard(on bool) (restore func()) {
	prev := fanInGuard
	fanInGuard = on
	return func() { fanInGuard = prev }
}

// SetWaitOutAbove sets how many open tasks make a phase check snooze
// instead of looking under the lock. It returns a func restoring the
// previous value.
func SetWaitOutAbove(n int64) (restore func()) {
	prev := waitOutAbove
	waitOutAbove = n
	return func() { waitOutAbove = prev }
}

// SetAfterWaitOutCount installs a hook run in every phase check right after
// it read, without a lock, how many tasks of its phase are open. It returns
// a func removing it.
func SetAfterWaitOutCount(f func(batchID string, open int64)) (restore func()) {
	prev := afterWaitOutCount
	afterWaitOutCount = f
	return func() { afterWaitOutCount = prev }
}

// SetAfterOpenCount installs a hook run inside every phase check right
// after it counted the open tasks. It returns a func removing it.
func SetAfterOpenCount(f func(batchID string, open int64)) (restore func()) {
	prev := afterOpenCount
	afterOpenCount = f
	return func() { afterOpenCount = prev }
}

// SetBeforeBuildWrite installs a hook run before each write of a
// phase_build (last: the write that ends the build); an error fails the
// job there. It returns a func removing it.
func SetBeforeBuildWrite(f func(ctx context.Context, batchID string, last bool) error) (restore func()) {
	prev := beforeBuildWrite
	beforeBuildWrite = f
	return func() { beforeBuildWrite = prev }
}

// MaxLaunchAttempts is maxLaunchAttempts, for tests.
const MaxLaunchAttempts = maxLaunchAttempts
