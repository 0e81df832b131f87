package phases

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
)

// ImageResult is the image worker's success callback body. RefData is kept
// raw: per spec 000 it holds url, ipfs_cid, type, size and filename, and any
// extra fields the worker adds must reach the ingest worker untouched.
type ImageResult struct {
	RefJSONR2Key string          `json:"ref_json_r2_key"`
	RefData      json.RawMessage `json:"ref_data"`
	ArchiveR2Key string          `json:"archive_r2_key"`
	RefJSONSize  int64           `json:"ref_json_size,omitempty"` // size of the ref.json object when the worker reports it
}

// imageContentTypes are the media types the image worker can decode.
var imageContentTypes = []string{"image/jpeg", "image/png", "image/webp"}

// imageProcessing makes CDN variants of each image. Its transform replaces:
// the image becomes a .ref.json pointing at the CDN, the original having
// been archived by the worker.
type imageProcessing struct{}

var _ Phase = imageProcessing{}

// Spec: one machine per image running `worker image`, which also needs
// the archive and CDN buckets (spec 000's defaults).
func (imageProcessing) Spec() Spec {
	return Spec{
		Name:       ImageProcessing,
		TaskPrefix: "image",
		Short:      "IMAGE",
		Title:      "image processing",
		Executor:   "pool",
		Worker:     "image",
		Defaults: Defaults{
			FlyAppName:       "arke-image-processor",
			WorkerImage:      "registry.fly.io/arke-image-processor:latest",
			BatchSize:        1000,
			AlarmDelay:       5 * time.Second,
			TaskTimeout:      120 * time.Second,
			TaskTimeoutPerGB: 60 * time.Second,
			Guest:            Guest{MemoryMB: 2048, CPUs: 2, CPUKind: "shared"},
		},
		SharedEnv:     []string{"ARCHIVE_BUCKET", "CDN_BUCKET", "CDN_PUBLIC_URL"},
		StagesOutputs: true,
	}
}

// Discover finds images by content type, skipping TIFF sources: only their
// converted JPEGs are processed, the TIFFs are kept as they are for the
// archive.
func (i imageProcessing) Discover(files []File) []File { return filter(files, i.MayWork) }

// MayWork is an image that is not a converted TIFF's source (Screener).
func (imageProcessing) MayWork(f File) bool {
	return isImage(f.ContentType) && !hasTag(f, TagTIFFSource)
}

// Transform replaces the image by its .ref.json when the task completed, and
// returns the file unchanged otherwise.
func (imageProcessing) Transform(file File, task *Task) ([]File, error) {
	var res ImageResult
	ok, err := completedResult(task, &res)
	if !ok {
		return []File{file}, nil
	}
	if err != nil {
		return nil, err
	}
	if res.RefJSONR2Key == "" {
		return nil, errors.New("completed image result lacks ref_json_r2_key")
	}
	size := res.RefJSONSize
	if size <= 0 {
		size = int64(len(res.RefData))
	}
	return []File{{
		R2Key:            res.RefJSONR2Key,
		LogicalPath:      file.LogicalPath + ".ref.json",
		FileName:         file.FileName + ".ref.json",
		FileSize:         size,
		ContentType:      "application/json",
		ProcessingConfig: file.ProcessingConfig,
		DirectoryPath:    file.DirectoryPath,
		Tags:             []string{TagImageProcessor},
	}}, nil
}

// ResultKeys are the ref's key and the archive copy's (KeyedResult).
func (imageProcessing) ResultKeys(result json.RawMessage) ([]string, error) {
	var res ImageResult
	if err := json.Unmarshal(result, &res); err != nil {
		return nil, err
	}
	keys := []string{res.RefJSONR2Key}
	if res.ArchiveR2Key != "" {
		keys = append(keys, res.ArchiveR2Key)
	}
	return keys, nil
}

// isImage reports whether a content type is one the image worker handles,
// ignoring case and parameters such as "; charset=binary".
func isImage(contentType string) bool {
	media, _, _ := strings.Cut(contentType, ";")
	media = strings.ToLower(strings.TrimSpace(media))
	return slices.Contains(imageContentTypes, media)
}

// SampleResult is the ref.json of a processed image, next to the image.
func (imageProcessing) SampleResult(in File) json.RawMessage {
	ref, _ := json.Marshal(map[string]any{"url": "https://cdn.test/" + in.R2Key, "type": "image/jpeg", "size": in.FileSize, "filename": in.FileName})
	b, _ := json.Marshal(ImageResult{
		RefJSONR2Key: in.R2Key + ".ref.json",
		RefData:      ref,
		ArchiveR2Key: in.R2Key, // the archive bucket keeps the original under its own key
		RefJSONSize:  321,
	})
	return b
}
