package phases

import (
	"fmt"
	"path"
	"strings"
)

// Area is a part of the store a task's worker may reach beyond its input:
// the keys of Bucket that are Key (Exact) or start with it and end with one
// of Exts (case aside). The worker may read them, and write them with
// Write: a write that never replaces (PutIfAbsent), or one that does.
type Area struct {
	Bucket Bucket
	Key    string
	Exact  bool
	Exts   []string
	// Replaces is true when the area is written with writes that replace,
	// false when only with writes that never do.
	Replaces bool
}

// Holds tells whether key of bucket b lies in the area.
func (a Area) Holds(b Bucket, key string) bool {
	switch {
	case b != a.Bucket:
		return false
	case a.Exact:
		return key == a.Key
	case !strings.HasPrefix(key, a.Key):
		return false
	}
	ext := strings.ToLower(path.Ext(key))
	for _, e := range a.Exts {
		if ext == e {
			return true
		}
	}
	return len(a.Exts) == 0
}

// Reacher is a Machine phase that names the areas its task's worker may
// reach, from the task's input key. A worker of a phase that is not one
// reaches its input alone.
type Reacher interface {
	Reach(input string) []Area
}

// Reach checks that a task of phase p whose input is input may reach key
// of bucket b, with a write if write (replacing if replaces): its input
// (read only), or a key of one of its phase's areas written the area's way.
// The error names the key and what the task may reach.
func Reach(p Phase, input string, b Bucket, key string, write, replaces bool) error {
	if b == StagingBucket && key == input {
		if write {
			return fmt.Errorf("key %q is the task's input, which it may read, not write", key)
		}
		return nil
	}
	var areas []Area
	if r, ok := p.(Reacher); ok {
		areas = r.Reach(input)
	}
	for _, a := range areas {
		if !a.Holds(b, key) {
			continue
		}
		if write && replaces != a.Replaces {
			if a.Replaces {
				return fmt.Errorf("key %q is written with PUT (to the attempt's staging area), not PUT_IF_ABSENT", key)
			}
			return fmt.Errorf("key %q may only be written with PUT_IF_ABSENT, which never replaces", key)
		}
		return nil
	}
	var may []string
	for _, a := range areas {
		may = append(may, a.String())
	}
	if len(may) == 0 {
		return fmt.Errorf("key %q of %s is not the task's input %q, the only object a %s task reaches", key, b, input, p.Spec().Name)
	}
	return fmt.Errorf("key %q of %s is neither the task's input %q nor one of its outputs (%s)", key, b, input, strings.Join(may, "; "))
}

// String describes the area, for a refusal.
func (a Area) String() string {
	switch {
	case a.Exact:
		return fmt.Sprintf("%s %q", a.Bucket, a.Key)
	case len(a.Exts) > 0:
		return fmt.Sprintf("%s %q...%s", a.Bucket, a.Key, strings.Join(a.Exts, "|"))
	}
	return fmt.Sprintf("%s %q...", a.Bucket, a.Key)
}

// besideInput is the area of the files a worker writes next to its input,
// named from its stem: dir/stem*.ext.
func besideInput(input, stem string, exts ...string) Area {
	return Area{Bucket: StagingBucket, Key: path.Dir(input) + "/" + stem, Exts: exts}
}

// Reach is a TIFF's JPEGs, beside it and named from its stem
// (TIFFPageKey, with worker.PutUnique's "-1", "-2" ... when a name is
// taken), never replaced.
func (tiffConversion) Reach(input string) []Area {
	base := path.Base(input)
	stem := strings.TrimSuffix(base, path.Ext(base))
	if stem == "" {
		stem = base
	}
	return []Area{besideInput(input, stem, ".jpg")}
}

// Reach is a PDF's page JPEGs and text files, beside it and named from its
// stem (PDFPageName), never replaced.
func (pdfPages) Reach(input string) []Area {
	return []Area{besideInput(input, PDFStem(path.Base(input)), ".jpg", ".txt")}
}

// Reach is an image's variants in its own variant folder, its archive copy
// and its ref.json (PlanOutputs), each replaced on rerun.
func (imageProcessing) Reach(input string) []Area {
	return []Area{
		{Bucket: CDNBucket, Key: VariantPrefix(input) + "/", Exts: []string{".jpg"}, Replaces: true},
		{Bucket: ArchiveBucket, Key: input, Exact: true, Replaces: true},
		{Bucket: StagingBucket, Key: RefJSONKey(input), Exact: true, Replaces: true},
	}
}
