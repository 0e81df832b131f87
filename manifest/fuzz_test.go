package manifest

import (
	"errors"
	"strings"
	"testing"
)

// The fuzz targets: go test -fuzz=FuzzParseQueueMessage ./manifest (and
// FuzzParseManifest). `go test` runs their seed corpora. Whatever the
// input, parsing never panics, and a refusal is ErrMalformedJSON or a
// *ValidationError whose problems say what is wrong.

func requireRefusalExplained(t *testing.T, err error) {
	t.Helper()
	if err == nil || errors.Is(err, ErrMalformedJSON) {
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("refusal of an unexpected kind: %T %v", err, err)
	}
	if len(ve.Problems) == 0 {
		t.Fatal("a validation error without problems")
	}
	for _, p := range ve.Problems {
		if strings.TrimSpace(p) == "" {
			t.Fatal("an empty problem")
		}
	}
}

func FuzzParseQueueMessage(f *testing.F) {
	f.Add(readTestdata(f, "queue_message.json"))
	for _, s := range []string{"", "{}", "null", "[]", `{"batch_id":"..","r2_prefix":"staging/../"}`, "{\"uploader\":\"\x00\"}", "{\"batch_id\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg, err := ParseQueueMessage(body)
		requireRefusalExplained(t, err)
		if err == nil && !strings.HasPrefix(msg.ManifestR2Key, StagingPrefix(msg.BatchID)) {
			t.Fatalf("accepted a manifest key outside the batch's prefix: %q", msg.ManifestR2Key)
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	f.Add(readTestdata(f, "manifest.json"))
	for _, s := range []string{"", "{}", `{"directories":[{"files":[{}]}]}`, `{"directories":[{"files":[{"r2_key":"staging/01K8RNKN488RQCG3YGG72QBZS5/../x.pdf"}]}]}`} {
		f.Add([]byte(s))
	}
	msg, err := ParseQueueMessage(readTestdata(f, "queue_message.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data, msg, Limits{MaxFiles: 1000})
		requireRefusalExplained(t, err)
		if err != nil {
			return
		}
		for _, d := range m.Directories {
			for _, file := range d.Files {
				if !strings.HasPrefix(file.R2Key, msg.R2Prefix) || strings.Contains(file.R2Key, "/../") {
					t.Fatalf("accepted a file outside the batch's prefix: %q", file.R2Key)
				}
			}
		}
	})
}
