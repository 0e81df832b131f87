package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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
		m, err := parseBoth(t, data, msg, Limits{MaxFiles: 1000})
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

// FuzzScan: on valid JSON, the scanner splits objects and arrays, and
// unquote decodes strings, as json.Unmarshal does.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, ` { "a" : [1, {"b": "}"}] , "a\u0062": "\"" , "c":null} `, `["x", 1.5e3, true, {"y": []}]`,
		`{"\u00e9": 1, "r2_key": "k", "r2_key": "l"}`, "{\"\xff\": 2}", `"a\"b"`, "\"\xff\"", `"\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		raw := bytes.TrimSpace(data)
		var want object
		wantOK := raw[0] == '{' && json.Unmarshal(raw, &want) == nil
		var got object
		if gotOK := decodeObject(raw, &got); gotOK != wantOK || wantOK && !reflect.DeepEqual(want, got) {
			t.Fatalf("object %q: want %v %q, got %v %q", raw, wantOK, want, gotOK, got)
		}
		var wantRefs []rawRef
		wantOK = raw[0] == '[' && json.Unmarshal(raw, &wantRefs) == nil
		if gotRefs, gotOK := splitArray(raw); gotOK != wantOK || wantOK && !reflect.DeepEqual(wantRefs, gotRefs) {
			t.Fatalf("array %q: want %v %q, got %v %q", raw, wantOK, wantRefs, gotOK, gotRefs)
		}
		var wantS string
		wantOK = raw[0] == '"' && json.Unmarshal(raw, &wantS) == nil
		if gotS, gotOK := unquote(raw); gotOK != wantOK || gotS != wantS {
			t.Fatalf("string %q: want %v %q, got %v %q", raw, wantOK, wantS, gotOK, gotS)
		}
	})
}
