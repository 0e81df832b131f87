package manifest_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/manifest"
)

// TestStreamWriterMatchesMarshal: the streamed JSON is exactly what
// json.Marshal gives for the manifest Build makes of the same groups.
func TestStreamWriterMatchesMarshal(t *testing.T) {
	tests := map[string][]manifest.DirectoryGroup{
		"Empty": nil,
		"OneGroup": {{DirectoryPath: "/a", ProcessingConfig: manifest.ProcessingConfig{Pinax: true}, Files: []manifest.FileInfo{
			{R2Key: "staging/b/a/x.tif", LogicalPath: "/a/x.tif", FileName: "x.tif", FileSize: 10, ContentType: "image/tiff", PreprocessorTags: []string{"TiffConverter:source"}},
			{R2Key: "staging/b/a/<&>.jpg", LogicalPath: "/a/<&>.jpg", FileName: "<&>.jpg", FileSize: 5, ContentType: "image/jpeg", CID: "bafy"},
		}}},
		"TwoGroups": {
			{DirectoryPath: "/a", ProcessingConfig: manifest.ProcessingConfig{OCR: true}, Files: []manifest.FileInfo{{R2Key: "k1", LogicalPath: "/a/1.txt", FileName: "1.txt", FileSize: 1, ContentType: "text/plain"}}},
			{DirectoryPath: "/b", Files: []manifest.FileInfo{}},
			{DirectoryPath: "/c", Files: []manifest.FileInfo{{R2Key: "k2", LogicalPath: "/c/2.txt", FileName: "2.txt", ContentType: "text/plain", PreprocessorTags: []string{}}}},
		},
	}
	for name, groups := range tests {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(manifest.Build("B1", groups))
			require.NoError(t, err)
			var buf bytes.Buffer
			s := manifest.NewStreamWriter(&buf, "B1")
			for _, g := range manifest.Build("B1", groups).Directories {
				s.StartGroup(g.DirectoryPath, g.ProcessingConfig, g.FileCount, g.TotalBytes)
				for _, f := range g.Files {
					s.File(f)
				}
			}
			require.NoError(t, s.Close())
			require.Equal(t, string(want), buf.String())
		})
	}
}
