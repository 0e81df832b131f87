// Package executor registers the kinds of executor (jobs.Executor), each a
// package of its own below this one: the one place a new kind is added.
package executor

import (
	"fmt"
	"slices"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/executor/chunked/ocrrefs"
	"github.com/arke-institute/orchestrator/executor/documents"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/executor/pool"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/ocr"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/setting"
)

// Config is the executors' configuration, each kind's own.
type Config struct {
	// Kinds are the executor kinds of the phases with a worker program
	// (EXECUTOR_<PHASE>: pool or machine).
	Kinds   map[phases.Name]string
	Machine machine.Config
	Pool    pool.Config
	Chunked chunked.Config
	// OCR is the OCR engine's, of the chunked OCR phase.
	OCR ocrrefs.Config
	// Documents is document indexing's, which the documents executor
	// runs.
	Documents docindex.Config
	// OCRLimit, EmbeddingsLimit and TagsLimit are the adaptive rate limits
	// of each role's provider, one bucket per role and provider host:
	// OCR's under spec 004's names, the others' under EMBEDDINGS_ and
	// TAGS_.
	OCRLimit, EmbeddingsLimit, TagsLimit ratelimit.Adaptive
	// SharedLimit names the roles that share one bucket per provider host
	// (PROVIDER_LIMIT_SHARED, one of ratelimit.SharedChoices).
	SharedLimit string
}

// Settings declares every kind's settings into c: each kind contributes
// its own.
func Settings(c *Config) []setting.Group {
	limit := setting.Group{
		Title: "External APIs",
		Doc: "The adaptive rate limit of each external API, by role: the OCR provider's under spec 004's names, the embeddings " +
			"provider's under `EMBEDDINGS_`, the tags provider's under `TAGS_`. Each role has one bucket per provider host in " +
			"Postgres (`rate_limits`, keys `ocr:<host>`, `embeddings:<host>`, `tags:<host>`), shared by every orchestrator " +
			"process (spec 004; see [the limiter](operations.md#the-ocr-rate-limiter) for where ours differs from spec 004).",
		Settings: slices.Concat(ratelimit.Settings(&c.OCRLimit, "", "the OCR provider's bucket"),
			ratelimit.Settings(&c.EmbeddingsLimit, "EMBEDDINGS_", "the embeddings provider's bucket"),
			ratelimit.Settings(&c.TagsLimit, "TAGS_", "the tags provider's bucket"),
			[]setting.Setting{setting.OneOf(&c.SharedLimit, "PROVIDER_LIMIT_SHARED", "", ratelimit.SharedChoices,
				"roles that share one bucket per provider host, e.g. `embeddings,tags` when one provider serves both under one quota: "+
					"the bucket is named after them all (`embeddings+tags:<host>`) and takes the first role's settings").Shown("none")}),
		Check: func() []string {
			return slices.Concat(c.OCRLimit.Problems(""), c.EmbeddingsLimit.Problems("EMBEDDINGS_"), c.TagsLimit.Problems("TAGS_"))
		},
	}
	return slices.Concat(kindSettings(c), machine.Settings(&c.Machine), pool.Settings(&c.Pool), chunked.Settings(&c.Chunked),
		ocrrefs.Settings(&c.OCR), docindex.Settings(&c.Documents), []setting.Group{limit})
}

// kindSettings declares EXECUTOR_<PHASE> for each phase that can run on
// more than one kind: a phase with a worker program runs on machines, a
// machine per task or a pool's.
func kindSettings(c *Config) []setting.Group {
	g := setting.Group{
		Title: "Executors",
		Doc: "How each phase with a worker program runs its tasks: `pool` (a few machines per phase lease its tasks one after another: " +
			"Fly creates about one machine a second, so a large batch needs pools) or `machine` (a machine of its own per task: " +
			"the strongest isolation between files, at one machine creation per task). See [Pools](architecture.md#pools).",
	}
	kinds := map[phases.Name]*string{}
	for _, p := range phases.All() {
		s := p.Spec()
		if s.Worker == "" {
			continue
		}
		kinds[s.Name] = new(string)
		if k, ok := c.Kinds[s.Name]; ok {
			*kinds[s.Name] = k // the declaration shows c's value
		}
		g.Settings = append(g.Settings, setting.OneOf(kinds[s.Name], "EXECUTOR_"+string(s.Name), s.Executor, []string{pool.Kind, machine.Kind},
			fmt.Sprintf("the executor of the `%s` phase's tasks", s.Name)))
	}
	g.Finish = func() {
		c.Kinds = make(map[phases.Name]string, len(kinds))
		for name, k := range kinds {
			c.Kinds[name] = *k
		}
	}
	return []setting.Group{g}
}

// Missing names the settings the executors lack to serve (a provider's
// key without which its URL is useless).
func (c Config) Missing() []string {
	return append(c.OCR.Missing(), c.Documents.Missing()...)
}

// WithLimits is c with each role's bucket in the kinds that call
// providers.
func (c Config) WithLimits() Config {
	b := c.buckets()
	c.OCR.Tuning.Limit, c.OCR.Bucket = b[ratelimit.RoleOCR].Limit, b[ratelimit.RoleOCR].Name
	c.Documents.Embeddings, c.Documents.Tags = b[ratelimit.RoleEmbeddings], b[ratelimit.RoleTags]
	return c
}

// RateFloors are the adaptive rate limits' least refill rates by bucket
// name (the roles', or a shared bucket's: PROVIDER_LIMIT_SHARED), for the
// metric of limits held at their floor.
func (c Config) RateFloors() map[string]float64 {
	out := map[string]float64{}
	for _, b := range c.buckets() {
		out[b.Name] = b.Limit.MinRefillRate
	}
	return out
}

// buckets are each role's rate limit bucket (ratelimit.Shared).
func (c Config) buckets() map[string]ratelimit.RoleBucket {
	return ratelimit.Shared(map[string]ratelimit.Adaptive{ratelimit.RoleOCR: c.OCRLimit,
		ratelimit.RoleEmbeddings: c.EmbeddingsLimit, ratelimit.RoleTags: c.TagsLimit}, c.SharedLimit)
}

// Options are the executors' outside parts a caller may choose; zero
// values take what the Config names.
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

// Register makes every kind of executor of cfg over deps and registers
// them in deps.Executors, which it sets; the deps it returns carry them.
func Register(deps jobs.Deps, cfg Config, opts Options) (jobs.Deps, error) {
	x := &jobs.Executors{}
	x.Choose(cfg.Kinds)
	deps.Executors = x
	cfg = cfg.WithLimits()
	providers := opts.Documents
	if providers == nil {
		p, err := docindex.NewProviders(cfg.Documents)
		if err != nil {
			return deps, err
		}
		providers = &p
	}
	m, err := machine.New(deps, cfg.Machine, opts.Presigner)
	if err != nil {
		return deps, err
	}
	pl, err := pool.New(deps, cfg.Pool, cfg.Machine, m.Fleet(), opts.Presigner)
	if err != nil {
		return deps, err
	}
	d, err := documents.New(deps, cfg.Documents, *providers)
	if err != nil {
		return deps, err
	}
	ocrEngine := ocrrefs.New(cfg.OCR, deps.Settings, deps.Store, opts.OCR, deps.Logger)
	return deps, x.Register(
		m,
		pl,
		chunked.New(deps, cfg.Chunked, ocrEngine),
		d,
	)
}
