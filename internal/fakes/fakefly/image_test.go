package fakefly

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseImage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]imageRef{
		"registry.fly.io/arke-tiff-worker:v1.0.0": {Registry: "registry.fly.io", Repository: "arke-tiff-worker", Tag: "v1.0.0"},
		"library/nginx:latest":                    {Registry: "docker.io", Repository: "library/nginx", Tag: "latest"},
		"localhost:5000/worker":                   {Registry: "localhost:5000", Repository: "worker"},
		"registry.fly.io/w@sha256:abc":            {Registry: "registry.fly.io", Repository: "w", Digest: "sha256:abc"},
		"img":                                     {Registry: "docker.io", Repository: "img"},
	} {
		require.Equal(t, want, parseImage(in), in)
	}
}

func TestTombstoneMetadata(t *testing.T) {
	t.Parallel()
	ids := &machine{taskID: "t", batchID: "b", metadata: map[string]string{"task_id": "t", "batch_id": "b"}}
	require.True(t, onlyIDs(ids))
	extra := &machine{taskID: "t", metadata: map[string]string{"task_id": "t", "kind": "tiff"}}
	require.False(t, onlyIDs(extra))
	envIDs := &machine{taskID: "t", batchID: "from-env", metadata: map[string]string{"task_id": "t"}}
	require.False(t, onlyIDs(envIDs), "batch id came from env, not metadata")

	dropped := &machine{taskID: "t", batchID: "b"}
	require.Equal(t, "t", dropped.meta("task_id"))
	require.Equal(t, "b", dropped.meta("batch_id"))
	require.Empty(t, dropped.meta("kind"))
}
