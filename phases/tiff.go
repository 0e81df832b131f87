package phases

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
)

// TIFFResult is the TIFF worker's success callback body (spec 000 §4.4),
// plus Outputs for multi-page TIFFs. Fields the transform does not need
// (task_id, status, ...) are ignored when decoding.
type TIFFResult struct {
	OutputR2Key    string         `json:"output_r2_key"`
	OutputFileName string         `json:"output_file_name"`
	OutputFileSize int64          `json:"output_file_size"`
	Outputs        []TIFFOutput   `json:"outputs,omitempty"`
	Performance    map[string]any `json:"performance,omitempty"`
}

// TIFFOutput is one JPEG of a multi-page TIFF. Page orders the outputs, so
// the converted pages appear in the file list in reading order whatever
// order the worker reported them in.
type TIFFOutput struct {
	R2Key    string `json:"r2_key"`
	FileName string `json:"file_name"`
	FileSize int64  `json:"file_size"`
	Page     int    `json:"page"`
}

// tiffName matches the file names the TIFF phase converts (.tif, .TIFF, ...).
var tiffName = regexp.MustCompile(`(?i)\.tiff?$`)

// tiffConversion converts TIFF scans to JPEG. Its transform augments: the
// TIFF stays for the archive, tagged so that no phase processes it again.
type tiffConversion struct{}

var _ Phase = tiffConversion{}

// Spec: one machine per TIFF running `worker tiff` (spec 000's defaults).
func (tiffConversion) Spec() Spec {
	return Spec{
		Name:       TIFFConversion,
		TaskPrefix: "tiff",
		Short:      "TIFF",
		Title:      "TIFF conversion",
		Executor:   "pool",
		Worker:     "tiff",
		Defaults: Defaults{
			FlyAppName:       "arke-tiff-worker",
			WorkerImage:      "registry.fly.io/arke-tiff-worker:v1.0.0",
			BatchSize:        1000,
			AlarmDelay:       5 * time.Second,
			TaskTimeout:      60 * time.Second,
			TaskTimeoutPerGB: 120 * time.Second,
			Guest:            Guest{MemoryMB: 1024, CPUs: 2, CPUKind: "shared"},
		},
	}
}

// Discover finds TIFFs by file name, skipping any already converted, so a
// re-run over a later generation never converts a TIFF twice.
func (t tiffConversion) Discover(files []File) []File { return filter(files, t.MayWork) }

// MayWork is a TIFF not converted yet (Screener).
func (tiffConversion) MayWork(f File) bool {
	return tiffName.MatchString(f.FileName) && !hasTag(f, TagTIFFSource)
}

// Transform returns the tagged source followed by its JPEG(s) when the task
// completed, and the file unchanged otherwise.
func (tiffConversion) Transform(file File, task *Task) ([]File, error) {
	var res TIFFResult
	ok, err := completedResult(task, &res)
	if !ok {
		return []File{file}, nil
	}
	if err != nil {
		return nil, err
	}

	outputs := res.Outputs
	if len(outputs) == 0 {
		outputs = []TIFFOutput{{R2Key: res.OutputR2Key, FileName: res.OutputFileName, FileSize: res.OutputFileSize}}
	} else {
		outputs = slices.Clone(outputs)
		slices.SortStableFunc(outputs, func(a, b TIFFOutput) int { return a.Page - b.Page })
	}

	source := file
	source.Tags = withTag(file.Tags, TagTIFFSource)
	result := []File{source}
	dir := path.Dir(file.LogicalPath)
	for i, o := range outputs {
		if o.R2Key == "" || o.FileName == "" {
			if len(res.Outputs) == 0 {
				return nil, errors.New("completed TIFF result lacks output_r2_key or output_file_name")
			}
			return nil, fmt.Errorf("completed TIFF result: output %d (page %d) lacks r2_key or file_name", i, o.Page)
		}
		if err := checkJPEGName(o.FileName); err != nil {
			return nil, fmt.Errorf("completed TIFF result: output %d (page %d): %w", i, o.Page, err)
		}
		result = append(result, File{
			R2Key:            o.R2Key,
			LogicalPath:      path.Join(dir, o.FileName),
			FileName:         o.FileName,
			FileSize:         o.FileSize,
			ContentType:      "image/jpeg",
			ProcessingConfig: file.ProcessingConfig,
			DirectoryPath:    file.DirectoryPath,
			Tags:             []string{TagTIFFConverter},
		})
	}
	return result, nil
}

// ResultKeys are the JPEGs' keys (KeyedResult).
func (tiffConversion) ResultKeys(result json.RawMessage) ([]string, error) {
	var res TIFFResult
	if err := json.Unmarshal(result, &res); err != nil {
		return nil, err
	}
	if len(res.Outputs) == 0 {
		return []string{res.OutputR2Key}, nil
	}
	keys := make([]string, len(res.Outputs))
	for i, o := range res.Outputs {
		keys[i] = o.R2Key
	}
	return keys, nil
}

// SampleResult is a one-page conversion: the JPEG next to the TIFF.
func (tiffConversion) SampleResult(in File) json.RawMessage {
	name := strings.TrimSuffix(in.FileName, path.Ext(in.FileName)) + ".jpg"
	b, _ := json.Marshal(TIFFResult{
		OutputR2Key:    path.Join(path.Dir(in.R2Key), name),
		OutputFileName: name,
		OutputFileSize: 4242,
	})
	return b
}

// checkJPEGName refuses an output name a worker chose that is not a plain
// JPEG file name: it becomes the output's logical path beside its TIFF.
func checkJPEGName(name string) error {
	switch {
	case strings.ContainsAny(name, "/\\") || name == "." || name == "..":
		return fmt.Errorf("file_name %q must be a plain name", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("file_name %q holds a control character", name)
	case !strings.EqualFold(path.Ext(name), ".jpg") && !strings.EqualFold(path.Ext(name), ".jpeg"):
		return fmt.Errorf("file_name %q must end in .jpg", name)
	}
	return nil
}
