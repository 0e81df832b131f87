// Package executor registers the kinds of executor (jobs.Executor), each a
// package of its own below this one: the one place a new kind is added.
package executor

import (
	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/executor/chunked/ocrrefs"
	"github.com/arke-institute/orchestrator/executor/documents"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/ocr"
)

// Options are the executors' outside parts a caller may choose; zero
// values take what deps.Config names.
type Options struct {
	// Presigner presigns the URLs machines reach storage with (they get no
	// credentials); nil uses deps.Store if it presigns.
	Presigner blob.Presigner
	// OCR transcribes the OCR phase's images; nil makes the one Config
	// asks for (ocrrefs.NewTranscriber).
	OCR ocr.Engine
	// Documents are the document steps' providers; nil makes the ones
	// Config asks for (docindex.NewProviders).
	Documents *docindex.Providers
}

// Queues names every River queue a process may work: the core's and the
// executors' (a chunked phase's, e.g. "ocr").
func Queues() []string { return append(jobs.CoreQueues(), chunked.Queues()...) }

// CheckQueues refuses a name that is not one of Queues.
func CheckQueues(names []string) error { return jobs.CheckQueues(Queues(), names) }

// Register makes every kind of executor over deps and registers them in
// deps.Executors, which it sets; the deps it returns carry them.
func Register(deps jobs.Deps, opts Options) (jobs.Deps, error) {
	x := &jobs.Executors{}
	deps.Executors = x
	providers := opts.Documents
	if providers == nil {
		p, err := docindex.NewProviders(deps.Config)
		if err != nil {
			return deps, err
		}
		providers = &p
	}
	m, err := machine.New(deps, opts.Presigner)
	if err != nil {
		return deps, err
	}
	d, err := documents.New(deps, *providers)
	if err != nil {
		return deps, err
	}
	ocrEngine := ocrrefs.New(deps.Config, deps.Store, opts.OCR, deps.Logger)
	return deps, x.Register(
		m,
		chunked.New(deps, ocrEngine),
		d,
	)
}
