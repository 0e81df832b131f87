package manifest

import (
	"encoding/json"
	"io"
	"strconv"
)

// StreamWriter writes a manifest's JSON one directory group and one file at
// a time, byte for byte what json.Marshal gives for the equivalent Manifest.
// The final manifest of a 100,000-file batch is tens of MB: built as structs
// and then marshalled it existed three times over (files, groups, JSON);
// streamed, only the JSON is ever whole.
//
// The caller must give each group's files right after its StartGroup, with
// the group's FileCount and TotalBytes (the file list's, as Build would
// compute them), and must not start a group twice: StreamWriter does not
// merge groups the way Build does.
type StreamWriter struct {
	w          io.Writer
	err        error
	groups     int
	groupFiles int // files written in the current group
	totalFiles int64
	totalBytes int64
}

// NewStreamWriter starts the manifest of batchID on w.
func NewStreamWriter(w io.Writer, batchID string) *StreamWriter {
	s := &StreamWriter{w: w}
	s.raw(`{"batch_id":`)
	s.value(batchID)
	s.raw(`,"directories":[`)
	return s
}

// StartGroup ends the current directory group, if any, and starts the next.
func (s *StreamWriter) StartGroup(directoryPath string, cfg ProcessingConfig, fileCount, totalBytes int64) {
	if s.groups > 0 {
		s.raw(`]},`)
	}
	s.groups++
	s.groupFiles = 0
	s.totalFiles += fileCount
	s.totalBytes = addSaturating(s.totalBytes, totalBytes)
	s.raw(`{"directory_path":`)
	s.value(directoryPath)
	s.raw(`,"processing_config":`)
	s.value(cfg)
	s.raw(`,"file_count":` + strconv.FormatInt(fileCount, 10) + `,"total_bytes":` + strconv.FormatInt(totalBytes, 10) + `,"files":[`)
}

// File writes one file of the current group. Like json.Marshal, it writes
// nil PreprocessorTags as null: give an empty slice for [].
func (s *StreamWriter) File(f FileInfo) {
	if s.groupFiles > 0 {
		s.raw(`,`)
	}
	s.groupFiles++
	s.value(f)
}

// Close ends the manifest with its totals (the sums of the groups') and
// returns the first error met while writing.
func (s *StreamWriter) Close() error {
	if s.groups > 0 {
		s.raw(`]}`)
	}
	s.raw(`],"total_files":` + strconv.FormatInt(s.totalFiles, 10) + `,"total_bytes":` + strconv.FormatInt(s.totalBytes, 10) + `}`)
	return s.err
}

func (s *StreamWriter) raw(text string) {
	if s.err == nil {
		_, s.err = io.WriteString(s.w, text)
	}
}

func (s *StreamWriter) value(v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	_, s.err = s.w.Write(b)
}
