package main

import (
	"testing"

	"github.com/arke-institute/orchestrator/textchunk"
)

// TestDocumentText checks the steps' documents: a chunk a section at the
// default DOCUMENT_CHUNK_TOKENS, and the runs their steps take.
func TestDocumentText(t *testing.T) {
	for _, tc := range []struct{ sections, runs int }{
		{sections: 1, runs: 6},   // download, 1+1 embeddings, 1+1 tags, store
		{sections: 20, runs: 10}, // download, 2+1, 4+1, store
		{sections: 23, runs: 12}, // download, 3+1, 5+1, store
	} {
		chunks := textchunk.Split(documentText(7, tc.sections), textchunk.Options{})
		if len(chunks) != tc.sections {
			t.Errorf("%d sections make %d chunks", tc.sections, len(chunks))
		}
		for _, c := range chunks {
			if c.Tokens < 400 || c.Tokens > 500 {
				t.Errorf("a chunk of %d tokens", c.Tokens)
			}
		}
		if got := documentRuns(tc.sections); got != tc.runs {
			t.Errorf("documentRuns(%d) = %d, want %d", tc.sections, got, tc.runs)
		}
	}
	if documentText(1, 3) == documentText(2, 3) {
		t.Error("two documents alike")
	}
}
