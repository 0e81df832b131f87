package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
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

	msg, err := json.Marshal(map[string]any{
		"batch_id": batchID, "manifest_r2_key": prefix + "_manifest.json", "r2_prefix": prefix,
		"uploader": "tester@arke.institute", "root_path": "/tests", "parent_pi": "00000000000000000000000000",
		"total_files": m.TotalFiles, "total_bytes": m.TotalBytes,
		"uploaded_at": time.Now().UTC().Format(time.RFC3339), "finalized_at": time.Now().UTC().Format(time.RFC3339),
		"metadata": map[string]any{"test": t.Name()},
	})
	require.NoError(t, err)
	code, resp := e.Do(t, http.MethodPost, "/batches", bytes.NewReader(msg))
	require.Equal(t, http.StatusAccepted, code, "submitting %s: %s", batchID, resp)
	return m
}
