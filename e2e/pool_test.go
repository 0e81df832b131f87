package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPoolOfThreeThroughRealWorkers: a pool of 3 local machines (the real
// worker, each leasing in its loop) takes 50 photos through
// IMAGE_PROCESSING: every task leased once, no more than the pool's 3
// machines ever started, each holding its pool credential only.
func TestPoolOfThreeThroughRealWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs real workers; make test runs it")
	}
	orchestrator, worker := bins(t)
	envDir := t.TempDir()
	recorder := filepath.Join(t.TempDir(), "worker")
	require.NoError(t, os.WriteFile(recorder, []byte("#!/bin/sh\nenv > '"+envDir+"'/\"$FLY_MACHINE_ID.env\"\nexec '"+worker+"' \"$@\"\n"), 0o755))
	srv := serve(t, orchestrator, recorder, "EXECUTOR_IMAGE_PROCESSING=pool", "POOL_SIZE_IMAGE_PROCESSING=3", "LOCAL_MAX_MACHINES=3")

	const photos = 50
	dir := filepath.Join(t.TempDir(), "photos")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for i := range photos {
		img := image.NewRGBA(image.Rect(0, 0, 96, 64))
		for p := 0; p < len(img.Pix); p += 4 {
			img.Pix[p], img.Pix[p+1], img.Pix[p+2], img.Pix[p+3] = uint8(i*5), uint8(p), 128, 255
		}
		img.Set(i, i%64, color.White)
		var b bytes.Buffer
		require.NoError(t, jpeg.Encode(&b, img, nil))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("photo-%02d.jpg", i)), b.Bytes(), 0o644))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const id = "01POOLOFTHREEE2E0000000000"
	submit := exec.CommandContext(ctx, orchestrator, "submit", "-url", srv.base, "-batch-id", id, dir)
	submit.Env = srv.env
	var stdout, stderr bytes.Buffer
	submit.Stdout, submit.Stderr = &stdout, &stderr
	require.NoError(t, submit.Run(), "submit failed\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Equal(t, photos, strings.Count(stdout.String(), "ImageProcessor"), stdout.String())

	metrics := srv.metricsWhen(t, `orchestrator_batches_finished_total{status="DONE"} 1`)
	for _, line := range []string{
		fmt.Sprintf(`orchestrator_pool_leases_total{phase="IMAGE_PROCESSING"} %d`, photos),
		fmt.Sprintf(`orchestrator_tasks_finished_total{outcome="completed",phase="IMAGE_PROCESSING"} %d`, photos),
	} {
		require.Contains(t, metrics, line)
	}
	require.NotContains(t, metrics, `orchestrator_tasks_finished_total{outcome="timed_out"`, "no lease was lost")

	envs, err := filepath.Glob(filepath.Join(envDir, "*.env"))
	require.NoError(t, err)
	require.NotEmpty(t, envs)
	require.LessOrEqual(t, len(envs), 3, "the pool's machines took every task, in their loops")
	for _, f := range envs {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, k := range []string{"R2_SECRET_ACCESS_KEY", "CALLBACK_TOKEN", "INPUT_URL", "TASK_ID="} {
			require.NotContains(t, string(b), k, f)
		}
		require.Contains(t, string(b), "POOL_TOKEN=", f)
	}
}
