package phases

import (
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
)

// Bucket is a bucket a batch's workers reach, by its role; the
// configuration names each (R2_BUCKET, ARCHIVE_BUCKET, CDN_BUCKET).
type Bucket string

// The buckets' roles.
const (
	// StagingBucket holds a batch's inputs and the objects its workers
	// make beside them (pages, ref.json files).
	StagingBucket Bucket = "staging"
	// ArchiveBucket keeps the originals of processed images, under their
	// staging keys.
	ArchiveBucket Bucket = "archive"
	// CDNBucket holds the image variants.
	CDNBucket Bucket = "cdn"
)

// Buckets are the roles, in a fixed order.
var Buckets = []Bucket{StagingBucket, ArchiveBucket, CDNBucket}

// BatchPrefix is the prefix of every object a worker of batchID may read or
// write in a bucket of role b: "staging/{batch_id}/" in the staging and
// archive buckets, "variants/{batch_id}/" in the CDN bucket.
func BatchPrefix(b Bucket, batchID string) string {
	if b == CDNBucket {
		return "variants/" + batchID + "/"
	}
	return "staging/" + batchID + "/"
}

// CheckKey refuses a key outside prefix, or with a path segment or
// character that could make it name something else: an empty, "." or ".."
// segment, or a control character.
func CheckKey(key, prefix string) error {
	if !strings.HasPrefix(key, prefix) {
		return fmt.Errorf("key %q is not under the batch's prefix %q", key, prefix)
	}
	if strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return fmt.Errorf("key %q holds a control character", key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("key %q has an empty, \".\" or \"..\" path segment", key)
		}
	}
	return nil
}

// Attempts' staging areas.
//
// A worker's writes that replace (blob.MethodPut) do not go to their final
// keys: each attempt of a task writes them under a staging area of its
// own, AttemptKey, and the orchestrator copies them to their final keys
// (promotes them) once that attempt's success is applied. Two attempts of
// one task never overwrite each other, and an attempt whose success is not
// the one applied changes nothing the batch keeps; what it staged is
// deleted when its phase ends. Writes that never replace
// (blob.MethodPutIfAbsent) go to their final keys: an attempt cannot undo
// another's, and a worker reuses an object with identical bytes.

// attemptsDir is the folder of the staging areas under a batch's prefix.
const attemptsDir = ".attempts/"

// AttemptID names an attempt of task taskID by its callback token's
// SHA-256: the task's id, ".", and the first 8 bytes of the hash in hex.
// The token itself is never stored; its hash is the task's while the
// attempt runs and after its success, so the orchestrator finds the task
// of a staging area by its name and tells whether its attempt is the one
// whose success was applied (AttemptTask).
func AttemptID(taskID string, tokenHash []byte) string {
	return taskID + "." + hex.EncodeToString(tokenHash[:min(8, len(tokenHash))])
}

// StagingAttempt is the attempt's name (AttemptID) for an attempt of a
// phase that stages its outputs (Spec.StagesOutputs), "" for one of any
// other phase: its writes go to their keys.
func StagingAttempt(p Phase, taskID string, tokenHash []byte) string {
	if p == nil || !p.Spec().StagesOutputs {
		return ""
	}
	return AttemptID(taskID, tokenHash)
}

// AttemptTask is the task an attempt's name (AttemptID) is of; false for a
// name no attempt has.
func AttemptTask(attempt string) (string, bool) {
	taskID, _, ok := strings.Cut(attempt, ".")
	return taskID, ok && taskID != ""
}

// AttemptsPrefix is the folder of every attempt's staging area in a
// bucket of role b, for cleaning them all up.
func AttemptsPrefix(b Bucket, batchID string) string {
	return BatchPrefix(b, batchID) + attemptsDir
}

// AttemptPrefix is attempt's staging area in a bucket of role b.
func AttemptPrefix(b Bucket, batchID, attempt string) string {
	return AttemptsPrefix(b, batchID) + attempt + "/"
}

// AttemptKey is where attempt writes key, a key under a batch's prefix
// ("staging/{batch_id}/..." or "variants/{batch_id}/...", two segments):
// in its staging area, ".attempts/{attempt}/" after the prefix. A key with
// fewer segments, or already in a staging area, is returned as it is.
func AttemptKey(key, attempt string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '/')
	if j < 0 {
		return key
	}
	at := i + 1 + j + 1
	if strings.HasPrefix(key[at:], attemptsDir) {
		return key
	}
	return key[:at] + attemptsDir + attempt + "/" + key[at:]
}

// FinalKey is the key an object of attempt's staging area, in a bucket of
// role b, is promoted to; false for a key outside that area.
func FinalKey(b Bucket, batchID, attempt, staged string) (string, bool) {
	rest, ok := strings.CutPrefix(staged, AttemptPrefix(b, batchID, attempt))
	if !ok || rest == "" {
		return "", false
	}
	return BatchPrefix(b, batchID) + rest, true
}

// Output is an object a worker writes.
type Output struct {
	Bucket Bucket
	Key    string
	// IfAbsent is a write that must not replace an existing object
	// (blob.Store.PutIfAbsent); otherwise the write replaces.
	IfAbsent bool
}

// OutputPlanner is a Machine phase whose worker's outputs, or the usual
// ones, follow from the input's key alone. The launcher presigns them into
// the machine's environment, so the worker need not ask for their URLs; a
// worker that writes anything else (a page of a multi-page file, a name
// taken) asks then.
type OutputPlanner interface {
	PlanOutputs(input string) []Output
}

// ImageVariants are the names of the image worker's variants, smallest
// first: each is written as "<name>.jpg" under VariantPrefix.
var ImageVariants = []string{"thumbnail", "medium", "large"}

// VariantPrefix is the folder of an image's variants in the CDN bucket:
// the input's key with "variants/" in place of "staging/", so every input
// has its own folder and a rerun rewrites the same objects.
func VariantPrefix(input string) string {
	return "variants/" + strings.TrimPrefix(input, "staging/")
}

// RefJSONKey is the key of an image's .ref.json, beside the image.
func RefJSONKey(input string) string { return input + ".ref.json" }

// PlanOutputs are every object the image worker writes (OutputPlanner):
// the variants, the archive copy and the ref.json, each replaced on rerun.
func (imageProcessing) PlanOutputs(input string) []Output {
	out := make([]Output, 0, len(ImageVariants)+2)
	for _, v := range ImageVariants {
		out = append(out, Output{Bucket: CDNBucket, Key: VariantPrefix(input) + "/" + v + ".jpg"})
	}
	return append(out,
		Output{Bucket: ArchiveBucket, Key: input},
		Output{Bucket: StagingBucket, Key: RefJSONKey(input)})
}

// TIFFPageKey is the JPEG's key for page (1-based) of n of the TIFF at
// input, next to it: photo.tif becomes photo.jpg, or photo-p1.jpg ... for
// several pages.
func TIFFPageKey(input string, page, n int) string {
	dir, base := path.Split(input)
	stem := strings.TrimSuffix(base, path.Ext(base))
	if stem == "" {
		stem = base
	}
	if n > 1 {
		stem += "-p" + strconv.Itoa(page)
	}
	return dir + stem + ".jpg"
}

// PlanOutputs is the JPEG of a one-page TIFF, the usual case
// (OutputPlanner); the worker asks for the keys of more pages once it has
// counted them.
func (tiffConversion) PlanOutputs(input string) []Output {
	return []Output{{Bucket: StagingBucket, Key: TIFFPageKey(input, 1, 1), IfAbsent: true}}
}
