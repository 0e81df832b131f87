package executor_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/compute"
	"github.com/arke-institute/orchestrator/docindex"
	"github.com/arke-institute/orchestrator/embedding"
	"github.com/arke-institute/orchestrator/executor"
	"github.com/arke-institute/orchestrator/executor/chunked"
	"github.com/arke-institute/orchestrator/executor/documents"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/jobs"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/setting"
	"github.com/arke-institute/orchestrator/tagging"
)

// deps are the outside parts the executors are made with: nothing they
// reach before they run.
func deps(t *testing.T) jobs.Deps {
	t.Helper()
	store, err := blob.NewS3(blob.S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "k", SecretAccessKey: "s"})
	require.NoError(t, err)
	buckets := map[phases.Bucket]string{phases.StagingBucket: "staging", phases.ArchiveBucket: "archive", phases.CDNBucket: "cdn"}
	return jobs.Deps{Settings: jobs.Settings{Buckets: buckets}, Store: store, Compute: noCompute{}, Logger: slog.New(slog.DiscardHandler)}
}

// defaults is the executors' configuration with every default.
func defaults(t *testing.T) executor.Config {
	t.Helper()
	var c executor.Config
	require.NoError(t, setting.Load(func(string) (string, bool) { return "", false }, executor.Settings(&c)))
	return c
}

// TestRegisterRunsEveryPhase: every registered phase has its executor,
// which accepts it, and each kind's queues are known.
func TestRegisterRunsEveryPhase(t *testing.T) {
	t.Parallel()
	d, err := executor.Register(deps(t), defaults(t), executor.Options{})
	require.NoError(t, err)
	for _, p := range phases.All() {
		ex, _, ok := d.Executors.Of(string(p.Spec().Name))
		require.True(t, ok, p.Spec().Name)
		require.Equal(t, p.Spec().Executor, ex.Kind())
	}
	require.NoError(t, executor.CheckQueues([]string{"default", "phase_build", "ocr"}))
	require.ErrorContains(t, executor.CheckQueues([]string{"nope"}), `no job queue "nope"`)
}

// TestRegisterRefusesWhatNothingRuns: a phase whose kind is not
// registered, or a kind registered twice, is refused: a batch would enter
// a phase nothing advances.
func TestRegisterRefusesWhatNothingRuns(t *testing.T) {
	t.Parallel()
	d := deps(t)
	m, err := machine.New(d, defaults(t).Machine, nil)
	require.NoError(t, err)
	err = (&jobs.Executors{}).Register(m, m)
	require.ErrorContains(t, err, `executor "machine" is registered twice`)
	require.ErrorContains(t, err, `phase OCR runs on executor "chunked", which is not registered`)
}

// TestChecks: each kind refuses a phase it cannot run.
func TestChecks(t *testing.T) {
	t.Parallel()
	d := deps(t)
	image, _ := phases.Get(phases.ImageProcessing)
	ocr, _ := phases.Get(phases.OCR)
	docs, _ := phases.Get(phases.DocumentIndexing)

	m, err := machine.New(d, defaults(t).Machine, nil)
	require.NoError(t, err)
	require.NoError(t, m.Check(image))
	require.ErrorContains(t, m.Check(ocr), "a machine phase needs a worker")
	noTimeout := specOf{Phase: image, edit: func(s *phases.Spec) { s.Defaults.TaskTimeout = 0 }}
	require.ErrorContains(t, m.Check(noTimeout), "task timeout")

	c := chunked.New(d, defaults(t).Chunked, fakeEngine{})
	require.NoError(t, c.Check(ocr))
	require.ErrorContains(t, c.Check(image), "must make chunks")
	otherEngine := specOf{Phase: ocr, edit: func(s *phases.Spec) { s.Engine = "other" }}
	require.ErrorContains(t, c.Check(chunkerOf{otherEngine, ocr.(phases.Chunker)}), `no engine "other"`)

	dx, err := documents.New(d, defaults(t).Documents, docindex.Providers{Embedder: embedding.NewLocal(8), Tagger: tagging.Local{}})
	require.NoError(t, err)
	require.NoError(t, dx.Check(docs))
	require.ErrorContains(t, dx.Check(image), "must make documents")
}

// specOf is a phase with its spec edited.
type specOf struct {
	phases.Phase
	edit func(*phases.Spec)
}

func (s specOf) Spec() phases.Spec {
	sp := s.Phase.Spec()
	s.edit(&sp)
	return sp
}

// chunkerOf is a phase that makes chunks as c does.
type chunkerOf struct {
	specOf
	c phases.Chunker
}

func (c chunkerOf) Chunks(files []phases.File, size phases.ChunkSize) []phases.Chunk {
	return c.c.Chunks(files, size)
}

// fakeEngine is the "ocr" engine in name only.
type fakeEngine struct{ chunked.Engine }

func (fakeEngine) Name() string { return "ocr" }

// noCompute is a backend nothing calls here.
type noCompute struct{ compute.Backend }
