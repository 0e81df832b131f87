package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/arke-institute/orchestrator/blob"
)

// Download copies an object into a new file in dir and returns the file's
// path and size. Workers decode from files, not memory: libvips reads a
// large TIFF strip by strip, and a file keeps it out of the Go heap.
func Download(ctx context.Context, store blob.Store, bucket, key, dir string) (string, int64, error) {
	body, _, err := store.Open(ctx, bucket, key)
	if err != nil {
		if errors.Is(err, blob.ErrNotFound) {
			return "", 0, fmt.Errorf("input s3://%s/%s does not exist", bucket, key)
		}
		return "", 0, fmt.Errorf("downloading input: %w", err)
	}
	defer body.Close()
	f, err := os.CreateTemp(dir, "input-*")
	if err != nil {
		return "", 0, fmt.Errorf("creating download file: %w", err)
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("downloading s3://%s/%s: %w", bucket, key, err)
	}
	return f.Name(), n, nil
}

// maxNameTries bounds the search for a free key in PutUnique.
const maxNameTries = 1000

// PutUnique uploads data at key, or, if an object with other content is
// already there, at the first free key of key's stem with "-1", "-2", ...
// appended ("photo.jpg", "photo-1.jpg", ...). It never overwrites an
// object: each attempt is a conditional write (blob.Store.PutIfAbsent).
//
// An existing object with exactly the same content counts as this upload:
// a retried task that converts the same file again gets its first run's key
// back instead of a copy under a new name, and so does an upload whose
// success the SDK's retry misreported as ErrExists.
//
// It returns the key written (or found).
func PutUnique(ctx context.Context, store blob.Store, bucket, key string, data []byte, contentType string) (string, error) {
	ext := path.Ext(key)
	stem := strings.TrimSuffix(key, ext)
	for i := range maxNameTries {
		candidate := key
		if i > 0 {
			candidate = stem + "-" + strconv.Itoa(i) + ext
		}
		err := store.PutIfAbsent(ctx, bucket, candidate, bytes.NewReader(data), int64(len(data)), contentType)
		if err == nil {
			return candidate, nil
		}
		if !errors.Is(err, blob.ErrExists) {
			return "", fmt.Errorf("uploading %s: %w", candidate, err)
		}
		existing, err := store.Get(ctx, bucket, candidate)
		if err == nil && bytes.Equal(existing, data) {
			return candidate, nil
		}
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return "", fmt.Errorf("comparing with existing %s: %w", candidate, err)
		}
	}
	return "", fmt.Errorf("uploading %s: it and %d other names of its stem are taken", key, maxNameTries-1)
}

// TempDir makes a directory for one task's files under the system's
// temporary directory (TMPDIR). The caller removes it.
func TempDir(kind Kind) (string, error) {
	dir, err := os.MkdirTemp("", "worker-"+string(kind)+"-")
	if err != nil {
		return "", fmt.Errorf("creating work directory: %w", err)
	}
	return filepath.Clean(dir), nil
}

// FetchInput downloads the task's input (INPUT_R2_KEY) into a fresh
// temporary directory, timing it into timer.Download, and returns the
// directory (the caller removes it), the file and its size.
func FetchInput(ctx context.Context, cfg Config, store blob.Store, kind Kind, timer *Timer, log *slog.Logger) (dir, file string, size int64, err error) {
	dir, err = TempDir(kind)
	if err != nil {
		return "", "", 0, err
	}
	t := time.Now()
	file, size, err = Download(ctx, store, cfg.Bucket, cfg.Input.Key, dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", 0, err
	}
	timer.Download = time.Since(t)
	log.Info("downloaded input", "r2_key", cfg.Input.Key, "bytes", size, "ms", timer.Download.Milliseconds())
	return dir, file, size, nil
}
