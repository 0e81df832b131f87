package jobs

// FinalManifest is processedManifest, for tests.
var FinalManifest = processedManifest

// NewDocumentStepWorker is a document step worker with providers of the
// test's choosing and no rate limiter, for tests that work one job.
func NewDocumentStepWorker(deps Deps, docs Documents) *DocumentStepWorker {
	return &DocumentStepWorker{deps: deps, docs: docs}
}

// MaxUnlaunched is maxUnlaunched, for tests.
const MaxUnlaunched = maxUnlaunched
