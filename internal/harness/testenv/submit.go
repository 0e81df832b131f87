package testenv

import (
	"context"
	"encoding/json"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/manifest"
)

// File is one file of a batch made up for a test.
type File struct {
	LogicalPath string // "/scans/a.tif"
	Size        int64
	ContentType string
	// Config is its directory's processing config (zero: pinax only).
	Config manifest.ProcessingConfig
}

// Submit uploads a manifest listing files under staging/{batchID}/, posts
// the matching queue message, requires a 202, and returns the manifest.
// Files are grouped by directory, in the order given.
func (e *Env) Submit(t *testing.T, batchID string, files []File) manifest.Manifest {
	t.Helper()
	return e.SubmitWith(t, batchID, files, nil)
}

// SubmitWith is Submit with the queue message changed by edit (when not
// nil) before it is posted: custom prompts, metadata.
func (e *Env) SubmitWith(t *testing.T, batchID string, files []File, edit func(*manifest.QueueMessage)) manifest.Manifest {
	t.Helper()
	m, msg := e.Prepare(t, batchID, files)
	if edit != nil {
		edit(&msg)
	}
	acc, err := e.Client.Submit(context.Background(), msg)
	require.NoError(t, err, "submitting %s", batchID)
	require.True(t, acc.Created, "submitting %s: the batch was known already (status %s)", batchID, acc.Status)
	return m
}

// Prepare uploads a manifest listing files under staging/{batchID}/ and
// returns it with the queue message that announces it, not posted.
func (e *Env) Prepare(t *testing.T, batchID string, files []File) (manifest.Manifest, manifest.QueueMessage) {
	t.Helper()
	prefix := "staging/" + batchID + "/"
	groups := make([]manifest.DirectoryGroup, 0, len(files))
	for _, f := range files {
		cfg := f.Config
		if cfg == (manifest.ProcessingConfig{}) {
			cfg.Pinax = true
		}
		groups = append(groups, manifest.DirectoryGroup{
			DirectoryPath:    path.Dir(f.LogicalPath),
			ProcessingConfig: cfg,
			Files: []manifest.FileInfo{{
				R2Key: prefix + f.LogicalPath[1:], LogicalPath: f.LogicalPath, FileName: path.Base(f.LogicalPath),
				FileSize: f.Size, ContentType: f.ContentType,
			}},
		})
	}
	m := manifest.Build(batchID, groups)
	body, err := json.Marshal(m)
	require.NoError(t, err)
	e.PutObject(t, prefix+"_manifest.json", body)

	now := time.Now().UTC()
	msg := manifest.QueueMessage{
		BatchID: batchID, ManifestR2Key: prefix + "_manifest.json", R2Prefix: prefix,
		Uploader: "tester@arke.institute", RootPath: "/tests", ParentPI: "00000000000000000000000000",
		TotalFiles: m.TotalFiles, TotalBytes: m.TotalBytes, UploadedAt: now, FinalizedAt: now,
		Metadata: map[string]any{"test": t.Name()},
	}
	return m, msg
}
