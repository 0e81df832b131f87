package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/arke-institute/orchestrator/phases"
)

// TestCallbackCapFitsResults: the callback body cap leaves room for the
// largest result a worker sends, a PDF of PDF_MAX_PAGES pages whose every
// file has a name of its own (a name taken), and is at most MaxBodyBytes.
func TestCallbackCapFitsResults(t *testing.T) {
	const maxPages = 2000 // PDF_MAX_PAGES' default
	stem := strings.Repeat("a-long-document-name", 3)
	res := phases.PDFResult{PageCount: maxPages, Pages: make([]phases.PDFPage, maxPages)}
	for i := range res.Pages {
		n := i + 1
		res.Pages[i] = phases.PDFPage{Page: n, FileSize: 1 << 30, FileName: phases.PDFPageName(stem+".pdf", n, "-1.jpg"),
			TextFileSize: 1 << 20, TextFileName: phases.PDFPageName(stem+".pdf", n, "-1.txt")}
	}
	result, err := json.Marshal(res)
	require.NoError(t, err)
	body := `{"status": "success", "task_id": "pdf_01k8rnkn488rqcg3ygg72qbzs5", "batch_id": "` + strings.Repeat("b", 128) + `", ` +
		string(result[1:])
	limit := callbackMaxBytes(phases.DefaultMaxOutputs)
	require.Less(t, int64(len(body)), limit, "a %d-page PDF's result", maxPages)
	require.Less(t, limit, int64(MaxBodyBytes))
	require.Equal(t, int64(MaxBodyBytes), callbackMaxBytes(20001), "never more than MaxBodyBytes")
	require.Equal(t, limit, callbackMaxBytes(0), "the default outputs' when unset")
}
