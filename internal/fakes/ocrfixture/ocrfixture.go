// Package ocrfixture makes what the OCR phase reads, for tests and the
// benchmark: a fake image worker (a fakefly Behave function) that writes,
// as the real one does, each image's CDN variants and its .ref.json, so
// that the refs the image phase hands to OCR exist and name variants that
// exist. The variants are small PNGs, distinct per image, which is all the
// fake OCR provider needs (its text is fakeocr.TextFor of the bytes).
package ocrfixture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"

	"github.com/arke-institute/orchestrator/blob"
	"github.com/arke-institute/orchestrator/internal/fakes/fakefly"
	"github.com/arke-institute/orchestrator/phases"
	"github.com/arke-institute/orchestrator/worker"
)

// Stores are where the fake image worker writes: the staging bucket (the
// refs) and the CDN bucket (the variants) with its public URL.
type Stores struct {
	// Store writes with credentials, to the final keys; nil writes as the
	// real worker does, through the launch's presigned URLs
	// (worker.URLStore), under the attempt's staging area, from which the
	// orchestrator promotes them.
	Store         blob.Store
	StagingBucket string
	CDNBucket     string
	CDNPublicURL  string
	// Edit, when set, may change an input's variant URLs before its ref is
	// written (hostile refs); false leaves the variants unwritten.
	Edit func(inputKey string, variants map[string]string) (writeVariants bool)
}

// ImageWorker is a fakefly Behave function: an image phase's launch
// writes the input's medium and large variants and its ref, then calls
// back as the image worker does; any other phase's launch succeeds with
// its sample result (fakefly.Succeed). A failed write answers an error
// callback that says so.
func ImageWorker(s Stores) func(fakefly.Launch) fakefly.Behavior {
	return func(l fakefly.Launch) fakefly.Behavior {
		if phases.OfTask(l.TaskID) != phases.ImageProcessing {
			return fakefly.Succeed(l)
		}
		body, err := s.writeRef(context.Background(), l)
		if err != nil {
			return fakefly.Behavior{Body: map[string]any{"task_id": l.TaskID, "batch_id": l.BatchID, "status": "error", "error": err.Error()}}
		}
		return fakefly.Behavior{Body: body}
	}
}

// VariantKey is where the fake worker writes input key's variant name in
// the CDN bucket, as the real one does.
func VariantKey(inputKey, name string) string {
	return "variants/" + strings.TrimPrefix(inputKey, "staging/") + "/" + name + ".jpg"
}

func (s Stores) writeRef(ctx context.Context, l fakefly.Launch) (map[string]any, error) {
	return s.write(ctx, l.Env, l.TaskID, l.BatchID)
}

// Write is what the image worker does for the task whose machine has
// environment env (INPUT_R2_KEY, INPUT_FILE_NAME, TASK_ID, BATCH_ID and,
// with Store nil, the presigned URLs and callback of worker.ParseEnv): it
// writes the input's variants and ref and returns the success callback's
// body. For a fakefly Work function, where the work runs on the machine
// before its callback rather than at launch as ImageWorker's does.
func (s Stores) Write(ctx context.Context, env map[string]string) (map[string]any, error) {
	return s.write(ctx, env, env["TASK_ID"], env["BATCH_ID"])
}

func (s Stores) write(ctx context.Context, env map[string]string, taskID, batchID string) (map[string]any, error) {
	if s.Store == nil {
		cfg, err := worker.ParseEnv(worker.KindImage, func(k string) string { return env[k] })
		if err != nil {
			return nil, err
		}
		s.Store = cfg.NewStore(nil)
	}
	key := env["INPUT_R2_KEY"]
	img := PageImage(key)
	variants := map[string]string{}
	for _, name := range []string{"medium", "large"} {
		variants[name] = s.CDNPublicURL + "/" + VariantKey(key, name)
	}
	if s.Edit == nil || s.Edit(key, variants) {
		for _, name := range []string{"medium", "large"} {
			vk := VariantKey(key, name)
			if err := s.Store.Put(ctx, s.CDNBucket, vk, bytes.NewReader(img), int64(len(img)), "image/png"); err != nil {
				return nil, err
			}
		}
	}
	refData, err := json.Marshal(map[string]any{
		"url": variants["large"], "type": "image/jpeg", "size": 4242, "filename": env["INPUT_FILE_NAME"],
		"width": 8, "height": 8, "variants": variants,
	})
	if err != nil {
		return nil, err
	}
	refKey := key + ".ref.json"
	if err := s.Store.Put(ctx, s.StagingBucket, refKey, bytes.NewReader(refData), int64(len(refData)), "application/json"); err != nil {
		return nil, err
	}
	return map[string]any{
		"task_id": taskID, "batch_id": batchID, "status": "success",
		"ref_json_r2_key": refKey, "ref_data": json.RawMessage(refData), "archive_r2_key": key, "ref_json_size": len(refData),
	}, nil
}

// PageImage is a small PNG whose pixels depend on seed, so every input has
// variants of its own bytes.
func PageImage(seed string) []byte {
	sum := sha256.Sum256([]byte(seed))
	m := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range 64 {
		m.Set(i%8, i/8, color.RGBA{R: sum[i%32], G: sum[(i+7)%32], B: byte(i), A: 255})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		panic(fmt.Sprintf("ocrfixture: encoding a PNG: %v", err))
	}
	return buf.Bytes()
}
