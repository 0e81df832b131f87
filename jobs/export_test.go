package jobs

// MaxLaunchAttempts is maxLaunchAttempts, for tests.
const MaxLaunchAttempts = maxLaunchAttempts
