package manifest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Paths into the spec's example manifest, for mutations.
func dirAt(m map[string]any, d int) map[string]any {
	return m["directories"].([]any)[d].(map[string]any)
}

func fileAt(m map[string]any, d, f int) map[string]any {
	return dirAt(m, d)["files"].([]any)[f].(map[string]any)
}

const allowedList = "(allowed: .tiff, .tif, .jpg, .jpeg, .png, .gif, .bmp, .json, .xml, .txt, .csv, .pdf, .md)"

// exampleDirectories is what the spec's example manifest holds.
func exampleDirectories() []DirectoryGroup {
	return []DirectoryGroup{
		{
			DirectoryPath:    "/",
			ProcessingConfig: ProcessingConfig{Pinax: true},
			FileCount:        1,
			TotalBytes:       524288,
			Files: []FileInfo{{
				R2Key:       "staging/01K8RNKN488RQCG3YGG72QBZS5/metadata.json",
				LogicalPath: "/metadata.json",
				FileName:    "metadata.json",
				FileSize:    524288,
				ContentType: "application/json",
			}},
		},
		{
			DirectoryPath:    "/documents",
			ProcessingConfig: ProcessingConfig{OCR: true, Describe: true, Pinax: true},
			FileCount:        1,
			TotalBytes:       1048576,
			Files: []FileInfo{{
				R2Key:       "staging/01K8RNKN488RQCG3YGG72QBZS5/documents/report.pdf",
				LogicalPath: "/documents/report.pdf",
				FileName:    "report.pdf",
				FileSize:    1048576,
				ContentType: "application/pdf",
				CID:         "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
			}},
		},
		{
			DirectoryPath:    "/images",
			ProcessingConfig: ProcessingConfig{OCR: true, Describe: true, Pinax: false},
			FileCount:        1,
			TotalBytes:       1572864,
			Files: []FileInfo{{
				R2Key:       "staging/01K8RNKN488RQCG3YGG72QBZS5/images/photo1.tiff",
				LogicalPath: "/images/photo1.tiff",
				FileName:    "photo1.tiff",
				FileSize:    1572864,
				ContentType: "image/tiff",
				CID:         "bafybeihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
			}},
		},
	}
}

func TestParseManifestExample(t *testing.T) {
	m, err := parseBoth(t, readTestdata(t, "manifest.json"), exampleMessage(t), DefaultLimits())
	requireNoError(t, err)
	requireEqual(t, Manifest{
		BatchID:     "01K8RNKN488RQCG3YGG72QBZS5",
		Directories: exampleDirectories(),
		TotalFiles:  3,
		TotalBytes:  3145728,
	}, m)
}

func TestParseManifestAccepts(t *testing.T) {
	example := readTestdata(t, "manifest.json")

	tests := []struct {
		name   string
		mutate func(m map[string]any)
		msg    func(msg *QueueMessage)
		limits Limits
		check  func(t *testing.T, m Manifest)
	}{
		{
			name:   "ProcessingConfigDefaults",
			mutate: func(m map[string]any) { dirAt(m, 0)["processing_config"] = map[string]any{} },
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, ProcessingConfig{Pinax: true}, m.Directories[0].ProcessingConfig)
			},
		},
		{
			name: "ProcessingConfigNulls",
			mutate: func(m map[string]any) {
				dirAt(m, 2)["processing_config"] = map[string]any{"ocr": nil, "describe": true, "pinax": nil}
			},
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, ProcessingConfig{Describe: true, Pinax: true}, m.Directories[2].ProcessingConfig)
			},
		},
		{
			name: "UpperCaseExtension",
			mutate: func(m map[string]any) {
				f := fileAt(m, 2, 0)
				f["r2_key"] = "staging/01K8RNKN488RQCG3YGG72QBZS5/images/PHOTO1.TIF"
				f["logical_path"] = "/images/PHOTO1.TIF"
				f["file_name"] = "PHOTO1.TIF"
			},
			check: func(t *testing.T, m Manifest) { requireEqual(t, "PHOTO1.TIF", m.Directories[2].Files[0].FileName) },
		},
		{
			name: "EmptyBatch",
			mutate: func(m map[string]any) {
				m["directories"] = []any{}
				m["total_files"] = 0
				m["total_bytes"] = 0
			},
			msg: func(msg *QueueMessage) { msg.TotalFiles, msg.TotalBytes = 0, 0 },
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, []DirectoryGroup{}, m.Directories)
			},
		},
		{
			name: "EmptyDirectory",
			mutate: func(m map[string]any) {
				m["directories"] = append(m["directories"].([]any), map[string]any{
					"directory_path":    "/empty",
					"processing_config": map[string]any{},
					"file_count":        0,
					"total_bytes":       0,
					"files":             []any{},
				})
			},
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, []FileInfo{}, m.Directories[3].Files)
			},
		},
		{
			name:   "NullCID",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["cid"] = nil },
			check:  func(t *testing.T, m Manifest) { requireEqual(t, "", m.Directories[1].Files[0].CID) },
		},
		{
			name: "UnknownFieldsIgnored",
			mutate: func(m map[string]any) {
				m["version"] = 2
				dirAt(m, 0)["note"] = "x"
				fileAt(m, 0, 0)["status"] = "completed"
			},
			check: func(t *testing.T, m Manifest) { requireEqual(t, 3, len(m.Directories)) },
		},
		{
			name:   "PreprocessorTags",
			mutate: func(m map[string]any) { fileAt(m, 2, 0)["preprocessor_tags"] = []any{"TiffConverter:source"} },
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, []string{"TiffConverter:source"}, m.Directories[2].Files[0].PreprocessorTags)
			},
		},
		{
			name: "FileAndBatchAtLimits",
			limits: Limits{
				MaxFileSize:  1572864,
				MaxBatchSize: 3145728,
			},
			check: func(t *testing.T, m Manifest) { requireEqual(t, int64(3145728), m.TotalBytes) },
		},
		{
			name:   "EmptyR2PrefixAllowsAnyKey",
			mutate: func(m map[string]any) { fileAt(m, 0, 0)["r2_key"] = "elsewhere/metadata.json" },
			msg:    func(msg *QueueMessage) { msg.R2Prefix = "" },
			check: func(t *testing.T, m Manifest) {
				requireEqual(t, "elsewhere/metadata.json", m.Directories[0].Files[0].R2Key)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := exampleMessage(t)
			if tt.msg != nil {
				tt.msg(&msg)
			}
			m, err := parseBoth(t, mutateJSON(t, example, tt.mutate), msg, tt.limits)
			requireNoError(t, err)
			tt.check(t, m)
		})
	}
}

func TestParseManifestRejects(t *testing.T) {
	example := readTestdata(t, "manifest.json")
	const (
		prefix    = "staging/01K8RNKN488RQCG3YGG72QBZS5/"
		metaFile  = "file " + prefix + "metadata.json: "
		reportKey = prefix + "documents/report.pdf"
		report    = "file " + reportKey + ": "
		photo     = "file " + prefix + "images/photo1.tiff: "
	)

	tests := []struct {
		name   string
		mutate func(m map[string]any)
		msg    func(msg *QueueMessage)
		limits Limits
		want   []string
	}{
		{
			name:   "BatchIDMismatch",
			mutate: func(m map[string]any) { m["batch_id"] = "01OTHER" },
			want:   []string{`batch_id is "01OTHER" in the manifest but "01K8RNKN488RQCG3YGG72QBZS5" in the message`},
		},
		{
			name:   "BatchIDMissing",
			mutate: func(m map[string]any) { delete(m, "batch_id") },
			want:   []string{"batch_id is required"},
		},
		{
			name:   "DirectoriesMissing",
			mutate: func(m map[string]any) { delete(m, "directories") },
			want:   []string{"directories is required"},
		},
		{
			name:   "FileKeyClimbsOut",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["r2_key"] = prefix + "../OTHER/report.pdf" },
			want:   []string{`file staging/01K8RNKN488RQCG3YGG72QBZS5/../OTHER/report.pdf: r2_key "staging/01K8RNKN488RQCG3YGG72QBZS5/../OTHER/report.pdf" has an empty, "." or ".." path segment`},
		},
		{
			name:   "LogicalPathNUL",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["logical_path"] = "/documents/re\x00port.pdf" },
			want:   []string{report + "logical_path must not contain control characters (U+0000 at byte 13)"},
		},
		{
			name:   "TooManyFiles",
			limits: Limits{MaxFiles: 2},
			want:   []string{"the batch lists 3 files, more than MAX_FILES_PER_BATCH (2)"},
		},
		{
			name:   "DirectoriesNotArray",
			mutate: func(m map[string]any) { m["directories"] = map[string]any{} },
			want:   []string{"directories must be an array, got {}"},
		},
		{
			name:   "DirectoriesEmptyWithFiles",
			mutate: func(m map[string]any) { m["directories"] = []any{}; m["total_bytes"] = 0 },
			msg:    func(msg *QueueMessage) { msg.TotalBytes = 0 },
			want:   []string{"directories is empty but total_files is 3"},
		},
		{
			name:   "TotalFilesNotInteger",
			mutate: func(m map[string]any) { m["total_files"] = 3.5 },
			want:   []string{"total_files must be a non-negative integer, got 3.5"},
		},
		{
			name:   "TotalBytesMissing",
			mutate: func(m map[string]any) { m["total_bytes"] = nil },
			want:   []string{"total_bytes is required"},
		},
		{
			name:   "DirectoryNotObject",
			mutate: func(m map[string]any) { m["directories"].([]any)[0] = "/" },
			want: []string{
				`directories[0] must be a JSON object, got "/"`,
				"total_files is 3 but the manifest lists 2 files",
				"total_bytes is 3145728 but the files sum to 2621440",
			},
		},
		{
			name:   "DirectoryPathMissing",
			mutate: func(m map[string]any) { delete(dirAt(m, 1), "directory_path") },
			want:   []string{"directories[1]: directory_path is required"},
		},
		{
			name:   "ProcessingConfigMissing",
			mutate: func(m map[string]any) { delete(dirAt(m, 1), "processing_config") },
			want:   []string{`directory "/documents": processing_config is required`},
		},
		{
			name:   "ProcessingConfigNotObject",
			mutate: func(m map[string]any) { dirAt(m, 1)["processing_config"] = true },
			want:   []string{`directory "/documents": processing_config must be a JSON object, got true`},
		},
		{
			name:   "ProcessingConfigFlagNotBoolean",
			mutate: func(m map[string]any) { dirAt(m, 1)["processing_config"].(map[string]any)["ocr"] = "yes" },
			want:   []string{`directory "/documents": processing_config.ocr must be a boolean, got "yes"`},
		},
		{
			name:   "FilesMissing",
			mutate: func(m map[string]any) { delete(dirAt(m, 1), "files") },
			want: []string{
				`directory "/documents": files is required`,
				"total_files is 3 but the manifest lists 2 files",
				"total_bytes is 3145728 but the files sum to 2097152",
			},
		},
		{
			name:   "FileNotObject",
			mutate: func(m map[string]any) { dirAt(m, 1)["files"].([]any)[0] = "report.pdf" },
			want:   []string{`directory "/documents": files[0] must be a JSON object, got "report.pdf"`},
		},
		{
			name:   "FileCountMismatch",
			mutate: func(m map[string]any) { dirAt(m, 1)["file_count"] = 2 },
			want:   []string{`directory "/documents": file_count is 2 but it lists 1 files`},
		},
		{
			name:   "FileCountMissing",
			mutate: func(m map[string]any) { delete(dirAt(m, 1), "file_count") },
			want:   []string{`directory "/documents": file_count is required`},
		},
		{
			name:   "DirectoryTotalBytesMismatch",
			mutate: func(m map[string]any) { dirAt(m, 1)["total_bytes"] = 10 },
			want:   []string{`directory "/documents": total_bytes is 10 but its files sum to 1048576`},
		},
		{
			name:   "R2KeyMissing",
			mutate: func(m map[string]any) { delete(fileAt(m, 1, 0), "r2_key") },
			want:   []string{`directory "/documents": files[0]: r2_key is required`},
		},
		{
			name:   "R2KeyEmpty",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["r2_key"] = "" },
			want:   []string{`directory "/documents": files[0]: r2_key is required`},
		},
		{
			name:   "R2KeyOutsidePrefix",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["r2_key"] = "staging/OTHER/documents/report.pdf" },
			want: []string{
				`file staging/OTHER/documents/report.pdf: r2_key must start with the batch's r2_prefix "` + prefix + `"`,
			},
		},
		{
			name:   "R2KeyDuplicate",
			mutate: func(m map[string]any) { fileAt(m, 0, 0)["r2_key"] = reportKey },
			want:   []string{report + "r2_key is listed more than once"},
		},
		{
			name:   "LogicalPathMissing",
			mutate: func(m map[string]any) { delete(fileAt(m, 1, 0), "logical_path") },
			want:   []string{report + "logical_path is required"},
		},
		{
			name:   "LogicalPathRelative",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["logical_path"] = "documents/report.pdf" },
			want:   []string{report + `logical_path must start with "/", got "documents/report.pdf"`},
		},
		{
			name:   "FileNameMissing",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["file_name"] = "" },
			want:   []string{report + "file_name is required"},
		},
		{
			name:   "FileNameWithSlash",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["file_name"] = "documents/report.pdf" },
			want:   []string{report + `file_name must not contain "/", got "documents/report.pdf"`},
		},
		{
			name:   "FileNameMismatch",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["file_name"] = "summary.pdf" },
			want:   []string{report + `file_name "summary.pdf" does not match logical_path "/documents/report.pdf"`},
		},
		{
			name: "ExtensionNotAllowed",
			mutate: func(m map[string]any) {
				f := fileAt(m, 1, 0)
				f["r2_key"] = prefix + "documents/setup.EXE"
				f["logical_path"] = "/documents/setup.EXE"
				f["file_name"] = "setup.EXE"
			},
			want: []string{"file " + prefix + `documents/setup.EXE: extension ".EXE" is not allowed ` + allowedList},
		},
		{
			name: "NoExtension",
			mutate: func(m map[string]any) {
				f := fileAt(m, 1, 0)
				f["logical_path"] = "/documents/README"
				f["file_name"] = "README"
			},
			want: []string{report + `file_name "README" has no extension ` + allowedList},
		},
		{
			name:   "FileSizeNegative",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["file_size"] = -1 },
			want:   []string{report + "file_size must be a non-negative integer, got -1"},
		},
		{
			// With a size unreadable the sums are unknown, so only the size
			// itself is reported, not three follow-on total mismatches.
			name:   "FileSizeString",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["file_size"] = "1048576" },
			want:   []string{report + `file_size must be a non-negative integer, got "1048576"`},
		},
		{
			name: "FileTooLarge",
			mutate: func(m map[string]any) {
				fileAt(m, 2, 0)["file_size"] = 6000000000
				dirAt(m, 2)["total_bytes"] = 6000000000
				m["total_bytes"] = 6001572864
			},
			msg:  func(msg *QueueMessage) { msg.TotalBytes = 6001572864 },
			want: []string{photo + "6000000000 bytes exceeds the per-file limit of 5368709120"},
		},
		{
			name:   "ContentTypeMissing",
			mutate: func(m map[string]any) { delete(fileAt(m, 0, 0), "content_type") },
			want:   []string{metaFile + "content_type is required"},
		},
		{
			name:   "ContentTypeEmpty",
			mutate: func(m map[string]any) { fileAt(m, 0, 0)["content_type"] = "" },
			want:   []string{metaFile + "content_type is required"},
		},
		{
			name:   "CIDNotString",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["cid"] = 12 },
			want:   []string{report + "cid must be a string, got 12"},
		},
		{
			name:   "PreprocessorTagsNotStrings",
			mutate: func(m map[string]any) { fileAt(m, 1, 0)["preprocessor_tags"] = []any{1} },
			want:   []string{report + "preprocessor_tags must be an array of strings, got [1]"},
		},
		{
			name:   "TotalFilesMismatch",
			mutate: func(m map[string]any) { m["total_files"] = 4 },
			want: []string{
				"total_files is 4 but the manifest lists 3 files",
				"total_files is 3 in the message but 4 in the manifest",
			},
		},
		{
			name:   "TotalBytesMismatch",
			mutate: func(m map[string]any) { m["total_bytes"] = 20 },
			msg:    func(msg *QueueMessage) { msg.TotalBytes = 20 },
			want:   []string{"total_bytes is 20 but the files sum to 3145728"},
		},
		{
			name: "MessageTotalsDiffer",
			msg:  func(msg *QueueMessage) { msg.TotalFiles, msg.TotalBytes = 2, 10 },
			want: []string{
				"total_files is 2 in the message but 3 in the manifest",
				"total_bytes is 10 in the message but 3145728 in the manifest",
			},
		},
		{
			name:   "BatchTooLarge",
			limits: Limits{MaxBatchSize: 3145727},
			want:   []string{"the batch holds 3145728 bytes, which exceeds the batch limit of 3145727"},
		},
		{
			name:   "FileOverCustomLimit",
			limits: Limits{MaxFileSize: 1048575},
			want: []string{
				report + "1048576 bytes exceeds the per-file limit of 1048575",
				photo + "1572864 bytes exceeds the per-file limit of 1048575",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := exampleMessage(t)
			if tt.msg != nil {
				tt.msg(&msg)
			}
			m, err := parseBoth(t, mutateJSON(t, example, tt.mutate), msg, tt.limits)
			ve := requireProblems(t, err, "manifest", tt.want...)
			requireEqual(t, len(tt.want), len(ve.Problems))
			requireEqual(t, Manifest{}, m)
		})
	}
}

func TestParseManifestCapsProblems(t *testing.T) {
	const prefix = "staging/B/"
	files := make([]any, 30)
	for i := range files {
		name := fmt.Sprintf("tool%02d.exe", i)
		files[i] = map[string]any{
			"r2_key":       prefix + name,
			"logical_path": "/" + name,
			"file_name":    name,
			"file_size":    1,
			"content_type": "application/octet-stream",
		}
	}
	data, err := json.Marshal(map[string]any{
		"batch_id":    "B",
		"total_files": 30,
		"total_bytes": 30,
		"directories": []any{map[string]any{
			"directory_path":    "/",
			"processing_config": map[string]any{},
			"file_count":        30,
			"total_bytes":       30,
			"files":             files,
		}},
	})
	requireNoError(t, err)
	msg := QueueMessage{BatchID: "B", R2Prefix: prefix, TotalFiles: 30, TotalBytes: 30}

	_, err = parseBoth(t, data, msg, DefaultLimits())
	ve := requireProblems(t, err, "manifest",
		`file staging/B/tool00.exe: extension ".exe" is not allowed `+allowedList,
		`file staging/B/tool19.exe: extension ".exe" is not allowed `+allowedList,
		"... and 10 more",
	)
	requireEqual(t, 21, len(ve.Problems))
	requireEqual(t, "... and 10 more", ve.Problems[20])
	if !strings.HasPrefix(err.Error(), "invalid manifest: file staging/B/tool00.exe: ") {
		t.Fatalf("unexpected error text: %v", err)
	}
}

func TestParseManifestMalformed(t *testing.T) {
	msg := exampleMessage(t)
	tests := []struct {
		name string
		data string
	}{
		{"Empty", ""},
		{"Truncated", `{"batch_id": "01K8RNKN488RQCG3YGG72QBZS5", "directories": [`},
		{"TrailingData", `{"batch_id": "x"} {"batch_id": "y"}`},
		{"HTML", `<Error><Code>NoSuchKey</Code></Error>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBoth(t, []byte(tt.data), msg, DefaultLimits())
			requireMalformed(t, err, "manifest is not valid JSON: ")
		})
	}
}

func TestParseManifestNotObject(t *testing.T) {
	_, err := parseBoth(t, []byte(`[]`), exampleMessage(t), DefaultLimits())
	_ = requireProblems(t, err, "manifest", "manifest must be a JSON object, got []")
}

func TestParseManifestZeroLimitsMeanDefaults(t *testing.T) {
	data := mutateJSON(t, readTestdata(t, "manifest.json"), func(m map[string]any) {
		fileAt(m, 2, 0)["file_size"] = 5368709121
		dirAt(m, 2)["total_bytes"] = 5368709121
		m["total_bytes"] = 5370281985
	})
	msg := exampleMessage(t)
	msg.TotalBytes = 5370281985
	_, err := parseBoth(t, data, msg, Limits{})
	ve := requireProblems(t, err, "manifest",
		"file staging/01K8RNKN488RQCG3YGG72QBZS5/images/photo1.tiff: 5368709121 bytes exceeds the per-file limit of 5368709120")
	requireEqual(t, 1, len(ve.Problems))
}

func TestParseManifestSizesDoNotOverflow(t *testing.T) {
	// Two sizes whose sum wraps int64 must not slip under the batch limit.
	data := mutateJSON(t, readTestdata(t, "manifest.json"), func(m map[string]any) {
		fileAt(m, 1, 0)["file_size"] = json.RawMessage("9223372036854775807")
		fileAt(m, 2, 0)["file_size"] = json.RawMessage("9223372036854775807")
	})
	limits := Limits{MaxFileSize: 1 << 62, MaxBatchSize: 1 << 62}
	_, err := parseBoth(t, data, exampleMessage(t), limits)
	_ = requireProblems(t, err, "manifest",
		"the batch holds 9223372036854775807 bytes, which exceeds the batch limit of 4611686018427387904")
}

func TestDefaultLimits(t *testing.T) {
	requireEqual(t, Limits{MaxFileSize: 5368709120, MaxBatchSize: 107374182400, MaxFiles: 200_000}, DefaultLimits())
}

func TestProcessingConfigUnmarshalJSON(t *testing.T) {
	tests := []struct {
		name string
		data string
		want ProcessingConfig
	}{
		{"Empty", `{}`, ProcessingConfig{Pinax: true}},
		{"PinaxNull", `{"pinax": null}`, ProcessingConfig{Pinax: true}},
		{"PinaxOff", `{"pinax": false}`, ProcessingConfig{}},
		{"AllOn", `{"ocr": true, "describe": true, "pinax": true}`, ProcessingConfig{OCR: true, Describe: true, Pinax: true}},
		{"OCROnly", `{"ocr": true}`, ProcessingConfig{OCR: true, Pinax: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got ProcessingConfig
			requireNoError(t, json.Unmarshal([]byte(tt.data), &got))
			requireEqual(t, tt.want, got)
		})
	}

	t.Run("InsideDirectoryGroup", func(t *testing.T) {
		var g DirectoryGroup
		requireNoError(t, json.Unmarshal([]byte(`{"directory_path": "/", "processing_config": {"ocr": true}}`), &g))
		requireEqual(t, ProcessingConfig{OCR: true, Pinax: true}, g.ProcessingConfig)
	})
	t.Run("WrongType", func(t *testing.T) {
		var got ProcessingConfig
		if err := json.Unmarshal([]byte(`{"ocr": "yes"}`), &got); err == nil {
			t.Fatal("want an error for a non-boolean switch")
		}
	})
}

func TestHasAllowedExtension(t *testing.T) {
	tests := []struct {
		name     string
		fileName string
		want     bool
	}{
		{"Tiff", "scan.tiff", true},
		{"UpperCase", "SCAN.TIF", true},
		{"MixedCase", "Photo.JpEg", true},
		{"RefJSON", "photo.ref.json", true},
		{"Markdown", "notes.md", true},
		{"Executable", "setup.exe", false},
		{"NoExtension", "README", false},
		{"DotFile", ".pdf", true},
		{"TrailingDot", "report.", false},
		{"DoubleExtension", "report.pdf.zip", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireEqual(t, tt.want, HasAllowedExtension(tt.fileName))
		})
	}
}

func TestAllowedExtensionsIsACopy(t *testing.T) {
	exts := AllowedExtensions()
	requireEqual(t, 13, len(exts))
	exts[0] = ".exe"
	requireEqual(t, false, HasAllowedExtension("x.exe"))
}

func TestBuild(t *testing.T) {
	file := func(key string, size int64) FileInfo {
		return FileInfo{R2Key: "staging/B" + key, LogicalPath: key, FileName: key[strings.LastIndex(key, "/")+1:], FileSize: size, ContentType: "image/jpeg"}
	}
	ocr := ProcessingConfig{OCR: true, Pinax: true}
	plain := ProcessingConfig{Pinax: true}

	tests := []struct {
		name string
		dirs []DirectoryGroup
		want Manifest
	}{
		{
			name: "Empty",
			dirs: nil,
			want: Manifest{BatchID: "B", Directories: []DirectoryGroup{}},
		},
		{
			name: "RecomputesStaleCounts",
			dirs: []DirectoryGroup{
				{DirectoryPath: "/a", ProcessingConfig: ocr, FileCount: 99, TotalBytes: 99, Files: []FileInfo{file("/a/1.jpg", 10), file("/a/2.jpg", 20)}},
				{DirectoryPath: "/b", ProcessingConfig: plain, Files: []FileInfo{file("/b/3.jpg", 5)}},
			},
			want: Manifest{BatchID: "B", TotalFiles: 3, TotalBytes: 35, Directories: []DirectoryGroup{
				{DirectoryPath: "/a", ProcessingConfig: ocr, FileCount: 2, TotalBytes: 30, Files: []FileInfo{file("/a/1.jpg", 10), file("/a/2.jpg", 20)}},
				{DirectoryPath: "/b", ProcessingConfig: plain, FileCount: 1, TotalBytes: 5, Files: []FileInfo{file("/b/3.jpg", 5)}},
			}},
		},
		{
			name: "MergesSamePathAndConfigInFirstSeenOrder",
			dirs: []DirectoryGroup{
				{DirectoryPath: "/b", ProcessingConfig: plain, Files: []FileInfo{file("/b/1.jpg", 1)}},
				{DirectoryPath: "/a", ProcessingConfig: plain, Files: []FileInfo{file("/a/2.jpg", 2)}},
				{DirectoryPath: "/b", ProcessingConfig: plain, Files: []FileInfo{file("/b/3.jpg", 3)}},
			},
			want: Manifest{BatchID: "B", TotalFiles: 3, TotalBytes: 6, Directories: []DirectoryGroup{
				{DirectoryPath: "/b", ProcessingConfig: plain, FileCount: 2, TotalBytes: 4, Files: []FileInfo{file("/b/1.jpg", 1), file("/b/3.jpg", 3)}},
				{DirectoryPath: "/a", ProcessingConfig: plain, FileCount: 1, TotalBytes: 2, Files: []FileInfo{file("/a/2.jpg", 2)}},
			}},
		},
		{
			name: "KeepsDifferentConfigsApart",
			dirs: []DirectoryGroup{
				{DirectoryPath: "/a", ProcessingConfig: plain, Files: []FileInfo{file("/a/1.jpg", 1)}},
				{DirectoryPath: "/a", ProcessingConfig: ocr, Files: []FileInfo{file("/a/2.jpg", 2)}},
			},
			want: Manifest{BatchID: "B", TotalFiles: 2, TotalBytes: 3, Directories: []DirectoryGroup{
				{DirectoryPath: "/a", ProcessingConfig: plain, FileCount: 1, TotalBytes: 1, Files: []FileInfo{file("/a/1.jpg", 1)}},
				{DirectoryPath: "/a", ProcessingConfig: ocr, FileCount: 1, TotalBytes: 2, Files: []FileInfo{file("/a/2.jpg", 2)}},
			}},
		},
		{
			name: "KeepsEmptyDirectory",
			dirs: []DirectoryGroup{{DirectoryPath: "/empty", ProcessingConfig: plain}},
			want: Manifest{BatchID: "B", Directories: []DirectoryGroup{
				{DirectoryPath: "/empty", ProcessingConfig: plain, Files: []FileInfo{}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireEqual(t, tt.want, Build("B", tt.dirs))
		})
	}

	t.Run("EncodesEmptyListsAsArrays", func(t *testing.T) {
		data, err := json.Marshal(Build("B", []DirectoryGroup{{DirectoryPath: "/", ProcessingConfig: plain}}))
		requireNoError(t, err)
		requireEqual(t, `{"batch_id":"B","directories":[{"directory_path":"/","processing_config":{"ocr":false,"describe":false,"pinax":true},"file_count":0,"total_bytes":0,"files":[]}],"total_files":0,"total_bytes":0}`, string(data))
	})

	t.Run("DoesNotShareSlicesWithInput", func(t *testing.T) {
		in := []DirectoryGroup{{DirectoryPath: "/a", Files: []FileInfo{{R2Key: "k", PreprocessorTags: []string{"TiffConverter"}}}}}
		out := Build("B", in)
		out.Directories[0].Files[0].R2Key = "changed"
		out.Directories[0].Files[0].PreprocessorTags[0] = "changed"
		requireEqual(t, "k", in[0].Files[0].R2Key)
		requireEqual(t, "TiffConverter", in[0].Files[0].PreprocessorTags[0])
	})

	t.Run("RoundTripsThroughParseManifest", func(t *testing.T) {
		dirs := exampleDirectories()
		dirs[2].Files[0].PreprocessorTags = []string{"TiffConverter:source"}
		built := Build("01K8RNKN488RQCG3YGG72QBZS5", dirs)
		data, err := json.Marshal(built)
		requireNoError(t, err)
		parsed, err := parseBoth(t, data, exampleMessage(t), DefaultLimits())
		requireNoError(t, err)
		requireEqual(t, built, parsed)
	})
}
