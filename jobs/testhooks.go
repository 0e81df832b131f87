package jobs

import "context"

// TestHooks let a test watch and steer the workers of one client
// (ClientConfig.TestHooks), as River hangs its test signals off the client
// instance: tests that use them stay parallel. Production sets none; a nil
// *TestHooks, or a nil func in it, does nothing.
type TestHooks struct {
	// NoFanInGuard leaves out the phase check's exclusive fan-in lock, so
	// that a test can show the lost wake-up the lock prevents.
	NoFanInGuard bool
	// WaitOutAbove, when not zero, replaces waitOutAbove, so that small
	// phases are waited out: negative waits out every open task.
	WaitOutAbove int64
	// AfterWaitOutCount runs in a phase check right after it read, without
	// any lock, how many tasks of its phase are open.
	AfterWaitOutCount func(batchID string, open int64)
	// AfterOpenCount runs inside a phase check's transaction right after it
	// looked for open tasks (open is 1 when there is any, else 0): the
	// moment at which an unguarded check is exposed to the lost wake-up.
	AfterOpenCount func(batchID string, open int64)
	// BeforeBuildWrite runs before each of a phase_build's writes (last:
	// the write that ends the build); an error fails the job there, as a
	// crash would.
	BeforeBuildWrite func(ctx context.Context, batchID string, last bool) error
}

func (h *TestHooks) fanInGuard() bool { return h == nil || !h.NoFanInGuard }

func (h *TestHooks) waitOutAbove() int64 {
	if h != nil && h.WaitOutAbove != 0 {
		return max(h.WaitOutAbove, 0)
	}
	return waitOutAbove
}

func (h *TestHooks) afterWaitOutCount(batchID string, open int64) {
	if h != nil && h.AfterWaitOutCount != nil {
		h.AfterWaitOutCount(batchID, open)
	}
}

func (h *TestHooks) afterOpenCount(batchID string, open int64) {
	if h != nil && h.AfterOpenCount != nil {
		h.AfterOpenCount(batchID, open)
	}
}

func (h *TestHooks) beforeBuildWrite(ctx context.Context, batchID string, last bool) error {
	if h != nil && h.BeforeBuildWrite != nil {
		return h.BeforeBuildWrite(ctx, batchID, last)
	}
	return nil
}
