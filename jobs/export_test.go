package jobs

// MaxLaunchAttempts is maxLaunchAttempts, for tests.
const MaxLaunchAttempts = maxLaunchAttempts

// FinalManifest is processedManifest, for tests.
var FinalManifest = processedManifest
