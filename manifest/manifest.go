package manifest

import (
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"path"
	"slices"
	"strings"
	"unsafe"
)

// Manifest is the batch's file list, stored in the staging bucket at the
// queue message's ManifestR2Key. The same shape, with PreprocessorTags set,
// is the final manifest handed on to ingest once preprocessing is done.
type Manifest struct {
	// BatchID must equal the queue message's, proving the manifest belongs
	// to the batch that named it.
	BatchID string `json:"batch_id"`
	// Directories groups the files by directory, each with its processing
	// switches. Never nil after ParseManifest or Build.
	Directories []DirectoryGroup `json:"directories"`
	// TotalFiles and TotalBytes are the counts over all directories.
	TotalFiles int64 `json:"total_files"`
	TotalBytes int64 `json:"total_bytes"`
}

// DirectoryGroup is the files of one directory, which share their processing
// switches (the uploader sets them per directory).
type DirectoryGroup struct {
	// DirectoryPath is the directory of the files' logical paths, e.g.
	// "/documents".
	DirectoryPath string `json:"directory_path"`
	// ProcessingConfig is what downstream does with these files.
	ProcessingConfig ProcessingConfig `json:"processing_config"`
	// FileCount and TotalBytes must agree with Files; they are redundant
	// but consumers of the manifest read them.
	FileCount  int64 `json:"file_count"`
	TotalBytes int64 `json:"total_bytes"`
	// Files never nil after ParseManifest or Build, so it encodes as [].
	Files []FileInfo `json:"files"`
}

// ProcessingConfig holds the downstream processing switches of a directory.
// Pinax is on unless turned off explicitly (spec 001); OCR and Describe are
// off unless turned on, since they cost money per file.
type ProcessingConfig struct {
	OCR      bool `json:"ocr"`
	Describe bool `json:"describe"`
	Pinax    bool `json:"pinax"`
}

// UnmarshalJSON applies the spec's defaults (pinax true, the others false)
// for keys that are absent or null, so that code decoding a manifest
// directly gets the same switches as ParseManifest.
func (c *ProcessingConfig) UnmarshalJSON(data []byte) error {
	type plain ProcessingConfig // without this method, to avoid recursion
	v := plain{Pinax: true}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*c = ProcessingConfig(v)
	return nil
}

// FileInfo is one file of the batch.
type FileInfo struct {
	// R2Key is the file's key in the staging bucket, under the batch prefix.
	R2Key string `json:"r2_key"`
	// LogicalPath is the file's path relative to the batch root, with a
	// leading slash and the file name, e.g. "/documents/report.pdf".
	LogicalPath string `json:"logical_path"`
	// FileName is the last element of LogicalPath.
	FileName string `json:"file_name"`
	// FileSize is in bytes.
	FileSize int64 `json:"file_size"`
	// ContentType is the file's MIME type.
	ContentType string `json:"content_type"`
	// CID is the file's content identifier, when the uploader computed one.
	CID string `json:"cid,omitempty"`
	// PreprocessorTags record what preprocessing did to the file (e.g. a
	// TIFF kept as source of a converted JPEG). Absent from the uploaded
	// manifest; set on the final manifest so that ingest can tell originals
	// from derived files.
	PreprocessorTags []string `json:"preprocessor_tags"`
	// DocumentID is the document the file was indexed as (the batch's
	// DOCUMENT_INDEXING phase, for a directory with describe on), absent
	// when it was not, or its indexing failed. Set on the final manifest.
	DocumentID int64 `json:"document_id,omitzero"`
	// DocumentTags are that document's tags, beside DocumentID: [] for
	// none, absent (nil) when DocumentID is.
	DocumentTags []string `json:"document_tags,omitzero"`
}

// Limits bounds what a batch may hold. The orchestrator's defaults match the
// upload worker's (spec 001 "Size Constraints"); cmd/ reads overrides from
// MAX_FILE_SIZE and MAX_BATCH_SIZE, and they should be kept in step with the
// worker's, or batches it accepted would be refused here.
type Limits struct {
	// MaxFileSize is the largest file allowed, in bytes; zero or less means
	// the default, 5 GiB.
	MaxFileSize int64
	// MaxBatchSize is the largest sum of file sizes allowed, in bytes; zero
	// or less means the default, 100 GiB.
	MaxBatchSize int64
	// MaxFiles is the most files a batch may list; zero or less means the
	// default, 200,000.
	MaxFiles int64
}

const (
	defaultMaxFileSize  int64 = 5 << 30   // 5368709120
	defaultMaxBatchSize int64 = 100 << 30 // 107374182400
	defaultMaxFiles     int64 = 200_000
)

// DefaultLimits returns the spec's limits: 5 GiB per file, 100 GiB per batch.
func DefaultLimits() Limits {
	return Limits{MaxFileSize: defaultMaxFileSize, MaxBatchSize: defaultMaxBatchSize, MaxFiles: defaultMaxFiles}
}

// withDefaults fills unset limits, so that a zero Limits is safe to pass.
func (l Limits) withDefaults() Limits {
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = defaultMaxFileSize
	}
	if l.MaxBatchSize <= 0 {
		l.MaxBatchSize = defaultMaxBatchSize
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = defaultMaxFiles
	}
	return l
}

// allowedExtensions are the file types the upload worker accepts (spec 001
// "Allowed Extensions"), images first, then documents. Anything else would
// have been refused at upload, so finding it here means the manifest was
// not produced by the worker.
var allowedExtensions = []string{
	".tiff", ".tif", ".jpg", ".jpeg", ".png", ".gif", ".bmp",
	".json", ".xml", ".txt", ".csv", ".pdf", ".md",
}

// AllowedExtensions returns the file extensions a batch may contain, lower
// case with the leading dot, so that tools building batches (the submit CLI)
// can skip files the orchestrator would refuse.
func AllowedExtensions() []string {
	return slices.Clone(allowedExtensions)
}

// HasAllowedExtension reports whether fileName ends in an allowed extension,
// ignoring case ("SCAN.TIF" is fine).
func HasAllowedExtension(fileName string) bool {
	return slices.Contains(allowedExtensions, strings.ToLower(path.Ext(fileName)))
}

// ParseManifest decodes and validates a manifest against the queue message
// that named it (batch ID, r2_prefix, totals) and the limits. Data that is not
// one well-formed JSON value yields an error matching ErrMalformedJSON;
// otherwise every problem found (up to 20) is returned together in a
// *ValidationError, each naming the directory or the file's r2_key.
func ParseManifest(data []byte, msg QueueMessage, limits Limits) (Manifest, error) {
	v := validator{msg: msg, limits: limits.withDefaults(), keep: true}
	return v.parse(data)
}

// Document is a valid manifest whose files stay in its JSON until they are
// read (Files). A 100,000-file manifest is some 20 MB of JSON and more than
// that again as FileInfos: a reader that handles a file at a time holds
// only the JSON.
type Document struct {
	// Manifest is the manifest without its files: each directory's Files
	// is nil.
	Manifest
	files []rawRef // each directory's "files" array, aliasing the document
	v     validator
}

// ValidateManifest checks a manifest as ParseManifest does, with the same
// errors, but keeps none of its files: Files decodes them again, one at a
// time. The Document aliases data, which must not change while it is used.
func ValidateManifest(data []byte, msg QueueMessage, limits Limits) (*Document, error) {
	v := validator{msg: msg, limits: limits.withDefaults()}
	m, err := v.parse(data)
	if err != nil {
		return nil, err
	}
	// Reading the files again needs no record of the keys seen: the
	// document was checked whole.
	return &Document{Manifest: m, files: v.files, v: validator{msg: v.msg, limits: v.limits}}, nil
}

// Files are the files of directory i, decoded one at a time into what
// ParseManifest gives.
func (d *Document) Files(i int) iter.Seq[FileInfo] {
	return func(yield func(FileInfo) bool) {
		files, ok := splitArray(json.RawMessage(d.files[i]))
		if !ok {
			return // not an array: ValidateManifest would have refused it
		}
		v := d.v
		for j, raw := range files {
			f, _ := v.file("", j, json.RawMessage(raw))
			if !yield(f) {
				return
			}
		}
	}
}

// validator carries what the manifest's checks need across directories.
type validator struct {
	p      problems
	msg    QueueMessage
	limits Limits
	seen   map[string]int // how often each r2_key has been listed; nil: not counted
	// keep: ParseManifest's, which keeps the files; ValidateManifest's
	// keeps each directory's files array instead (files).
	keep  bool
	files []rawRef
	// fileObj is decoded into for each file in turn: a map of its own per
	// file was most of the parse's garbage.
	fileObj object
}

// parse validates data as a manifest.
func (v *validator) parse(data []byte) (Manifest, error) {
	raw, err := decodeOne(data, "manifest")
	if err != nil {
		return Manifest{}, err
	}
	v.seen = make(map[string]int)
	obj, ok := asObject(raw)
	if !ok {
		v.p.addf("manifest must be a JSON object, got %s", show(raw))
		return Manifest{}, v.p.err(subjectManifest)
	}
	m := v.manifest(obj)
	if err := v.p.err(subjectManifest); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func (v *validator) manifest(obj object) Manifest {
	p := &v.p
	var m Manifest
	if id, ok := p.text("", obj, "batch_id"); ok {
		if id != v.msg.BatchID {
			p.addf("batch_id is %s in the manifest but %s in the message", quote(id), quote(v.msg.BatchID))
		}
		m.BatchID = id
	}
	totalFiles, totalFilesOK := p.count("", obj, "total_files")
	totalBytes, totalBytesOK := p.count("", obj, "total_bytes")
	dirs, dirsOK := p.array("", obj, "directories")

	m.Directories = make([]DirectoryGroup, 0, len(dirs))
	var files, size int64
	sizeKnown := true // every file's size was readable, so size is the real sum
	for i, raw := range dirs {
		g, sum := v.directory(i, raw)
		m.Directories = append(m.Directories, g)
		files += sum.files
		size = addSaturating(size, sum.bytes)
		sizeKnown = sizeKnown && sum.bytesKnown
	}

	switch {
	case !dirsOK || !totalFilesOK:
	case len(dirs) == 0 && totalFiles > 0:
		p.addf("directories is empty but total_files is %d", totalFiles)
	case totalFiles != files:
		p.addf("total_files is %d but the manifest lists %d files", totalFiles, files)
	}
	if dirsOK && totalBytesOK && sizeKnown && totalBytes != size {
		p.addf("total_bytes is %d but the files sum to %d", totalBytes, size)
	}
	// size is a lower bound when some sizes were unreadable, so exceeding
	// the limit is certain either way.
	if size > v.limits.MaxBatchSize {
		p.addf("the batch holds %d bytes, which exceeds the batch limit of %d", size, v.limits.MaxBatchSize)
	}
	if files > v.limits.MaxFiles {
		p.addf("the batch lists %d files, more than MAX_FILES_PER_BATCH (%d)", files, v.limits.MaxFiles)
	}
	if totalFilesOK && totalFiles != v.msg.TotalFiles {
		p.addf("total_files is %d in the message but %d in the manifest", v.msg.TotalFiles, totalFiles)
	}
	if totalBytesOK && totalBytes != v.msg.TotalBytes {
		p.addf("total_bytes is %d in the message but %d in the manifest", v.msg.TotalBytes, totalBytes)
	}
	m.TotalFiles, m.TotalBytes = totalFiles, totalBytes
	return m
}

// dirSum is what a directory's files add up to.
type dirSum struct {
	files, bytes int64
	// bytesKnown is false when some file size was unreadable, so that
	// bytes is not to be trusted.
	bytesKnown bool
}

// directory validates directories[i].
func (v *validator) directory(i int, raw json.RawMessage) (DirectoryGroup, dirSum) {
	p := &v.p
	g := DirectoryGroup{}
	if v.keep {
		g.Files = []FileInfo{}
	}
	sum := dirSum{bytesKnown: true}
	obj, ok := asObject(raw)
	if !ok {
		p.addf("directories[%d] must be a JSON object, got %s", i, show(raw))
		v.files = append(v.files, nil)
		return g, sum
	}
	at := fmt.Sprintf("directories[%d]: ", i)
	if dp, ok := p.str(at, obj, "directory_path"); ok {
		g.DirectoryPath = dp
		at = fmt.Sprintf("directory %s: ", quote(dp))
	}
	if cfg, ok := p.obj(at, obj, "processing_config"); ok {
		cat := at + "processing_config."
		g.ProcessingConfig = ProcessingConfig{
			OCR:      p.optBool(cat, cfg, "ocr", false),
			Describe: p.optBool(cat, cfg, "describe", false),
			Pinax:    p.optBool(cat, cfg, "pinax", true),
		}
	}
	fileCount, fileCountOK := p.count(at, obj, "file_count")
	dirBytes, dirBytesOK := p.count(at, obj, "total_bytes")
	files, filesOK := p.array(at, obj, "files")
	if !v.keep {
		v.files = append(v.files, obj["files"])
	}

	if v.keep {
		g.Files = make([]FileInfo, 0, len(files)) // one array, not a series of ever larger copies
	}
	for j, raw := range files {
		f, ok := v.file(at, j, raw)
		if v.keep {
			g.Files = append(g.Files, f)
		}
		sum.bytes = addSaturating(sum.bytes, f.FileSize)
		sum.bytesKnown = sum.bytesKnown && ok
	}
	sum.files = int64(len(files))
	if fileCountOK && filesOK && fileCount != int64(len(files)) {
		p.addf("%sfile_count is %d but it lists %d files", at, fileCount, len(files))
	}
	if dirBytesOK && filesOK && sum.bytesKnown && dirBytes != sum.bytes {
		p.addf("%stotal_bytes is %d but its files sum to %d", at, dirBytes, sum.bytes)
	}
	g.FileCount, g.TotalBytes = fileCount, dirBytes
	return g, sum
}

// seenKey is key as the seen map holds it. ValidateManifest's keeps no
// file, and copies of the keys would be most of what it holds (some 6 MB
// at 100,000 files): its map holds the document's own bytes, raw less its
// quotes, when they are the key (no escape in it). The map lives no longer
// than the parse, and the document outlives the parse unchanged.
func (v *validator) seenKey(key string, raw rawRef) string {
	if v.keep || len(raw) != len(key)+2 || string(raw[1:len(raw)-1]) != key {
		return key
	}
	return unsafe.String(&raw[1], len(key))
}

// file validates files[j] of the directory located by at. It reports false
// when the file's size was unreadable.
func (v *validator) file(at string, j int, raw json.RawMessage) (FileInfo, bool) {
	p := &v.p
	var f FileInfo
	if !decodeObject(raw, &v.fileObj) {
		p.addf("%sfiles[%d] must be a JSON object, got %s", at, j, show(raw))
		return f, false
	}
	obj := v.fileObj
	at = fmt.Sprintf("%sfiles[%d]: ", at, j)
	if key, ok := p.text(at, obj, "r2_key"); ok {
		f.R2Key = key
		at = "file " + key + ": "
		if v.seen != nil {
			k := v.seenKey(key, obj["r2_key"])
			v.seen[k]++
			if v.seen[k] == 2 {
				p.addf("%sr2_key is listed more than once", at)
			}
		}
		if p.key(at, "r2_key", key, false) && !strings.HasPrefix(key, v.msg.R2Prefix) {
			p.addf("%sr2_key must start with the batch's r2_prefix %s", at, quote(v.msg.R2Prefix))
		}
	}

	logicalPath, logicalOK := p.str(at, obj, "logical_path")
	if logicalOK && !strings.HasPrefix(logicalPath, "/") {
		p.addf("%slogical_path must start with \"/\", got %s", at, quote(logicalPath))
		logicalOK = false
	}
	f.LogicalPath = logicalPath

	if name, ok := p.text(at, obj, "file_name"); ok {
		f.FileName = name
		switch {
		case strings.Contains(name, "/"):
			p.addf("%sfile_name must not contain \"/\", got %s", at, quote(name))
		case logicalOK && name != path.Base(logicalPath):
			p.addf("%sfile_name %s does not match logical_path %s", at, quote(name), quote(logicalPath))
		}
		switch ext := path.Ext(name); {
		case ext == "":
			p.addf("%sfile_name %s has no extension (allowed: %s)", at, quote(name), strings.Join(allowedExtensions, ", "))
		case !HasAllowedExtension(name):
			p.addf("%sextension %s is not allowed (allowed: %s)", at, quote(ext), strings.Join(allowedExtensions, ", "))
		}
	}

	size, sizeOK := p.count(at, obj, "file_size")
	if sizeOK && size > v.limits.MaxFileSize {
		p.addf("%s%d bytes exceeds the per-file limit of %d", at, size, v.limits.MaxFileSize)
	}
	f.FileSize = size

	f.ContentType, _ = p.text(at, obj, "content_type")
	f.CID = p.optStr(at, obj, "cid")
	if raw, ok := lookup(obj, "preprocessor_tags"); ok {
		if err := json.Unmarshal(raw, &f.PreprocessorTags); err != nil || raw[0] != '[' {
			p.addf("%spreprocessor_tags must be an array of strings, got %s", at, show(raw))
			f.PreprocessorTags = nil
		}
	}
	return f, sizeOK
}

// Build assembles a manifest from directory groups, for the final manifest
// sent on to ingest and for the submit CLI. Groups with the same path and
// processing config are merged into the first one seen, keeping directories
// in first-seen order and files in the order given; groups with the same path
// but different configs stay apart so that no file changes processing.
// FileCount, TotalBytes and the manifest totals are recomputed from the files,
// so callers cannot hand on stale counts. The input is not modified and the
// result shares no slices with it.
func Build(batchID string, dirs []DirectoryGroup) Manifest {
	type groupKey struct {
		path   string
		config ProcessingConfig
	}
	index := make(map[groupKey]int, len(dirs))
	m := Manifest{BatchID: batchID, Directories: make([]DirectoryGroup, 0, len(dirs))}
	for _, d := range dirs {
		k := groupKey{d.DirectoryPath, d.ProcessingConfig}
		i, ok := index[k]
		if !ok {
			i = len(m.Directories)
			index[k] = i
			m.Directories = append(m.Directories, DirectoryGroup{
				DirectoryPath:    d.DirectoryPath,
				ProcessingConfig: d.ProcessingConfig,
				Files:            make([]FileInfo, 0, len(d.Files)),
			})
		}
		for _, f := range d.Files {
			f.PreprocessorTags = slices.Clone(f.PreprocessorTags)
			m.Directories[i].Files = append(m.Directories[i].Files, f)
		}
	}
	for i := range m.Directories {
		g := &m.Directories[i]
		g.FileCount = int64(len(g.Files))
		g.TotalBytes = sumSizes(g.Files)
		m.TotalFiles += g.FileCount
		m.TotalBytes = addSaturating(m.TotalBytes, g.TotalBytes)
	}
	return m
}

// sumSizes adds the files' sizes.
func sumSizes(files []FileInfo) int64 {
	var sum int64
	for _, f := range files {
		sum = addSaturating(sum, f.FileSize)
	}
	return sum
}

// addSaturating adds two non-negative sizes, sticking at MaxInt64 instead of
// wrapping: a hostile manifest must not overflow its way under the limit.
func addSaturating(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
