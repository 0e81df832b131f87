package phases

import (
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
