package jobs

// FinalManifest is processedManifest, for tests.
var FinalManifest = processedManifest
