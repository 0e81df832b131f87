package fanin

import (
	"testing"

	"github.com/arke-institute/orchestrator/phases"
)

// FuzzParseCallback: make fuzz; `go test` runs the seed corpus. Whatever a
// worker posts, the callback's parse and every machine phase's result
// check never panic, a body is either refused with a reason or read as a
// success or an error, and every key of a result a phase accepts for a
// batch, its outputs' included, lies under that batch's prefix.
func FuzzParseCallback(f *testing.F) {
	for _, s := range []string{
		`{"task_id":"tiff_1","batch_id":"B","status":"success","output_r2_key":"staging/B/a.jpg","output_file_name":"a.jpg","output_file_size":10}`,
		`{"task_id":"image_1","batch_id":"B","status":"success","ref_json_r2_key":"staging/B/a.jpg.ref.json","ref_data":{"url":"https://cdn/a.jpg"},"archive_r2_key":"a.jpg"}`,
		`{"status":"success","outputs":[{"r2_key":"staging/B/a-1.jpg","file_name":"a-1.jpg","file_size":1,"page":1}]}`,
		`{"status":"success","pages":[{"page":1,"file_size":3,"text_file_size":4}]}`,
		`{"status":"error","error":"Failed to decode TIFF"}`,
		`{"status":"success","output_file_name":"../../x"}`,
		`{"status":"\u0000"}`, `[]`, `null`, ``, `{"status":5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		status, _, errMsg, _, invalid := parseCallback("tiff_1", "B", body)
		switch {
		case invalid != "":
			if status != "" {
				t.Fatalf("a refused body with status %q", status)
			}
		case status == phases.TaskFailed:
			if errMsg == "" {
				t.Fatal("an error callback without a message")
			}
		case status == phases.TaskCompleted:
			for _, p := range phases.All() {
				if p.Spec().Worker == "" {
					continue
				}
				_ = phases.ValidateResult(p.Spec().Name, body)
				if phases.ValidateBatchResult(p.Spec().Name, "B", body, 1<<20) != nil {
					continue
				}
				in := phases.File{R2Key: "staging/B/d/in.bin", FileName: "in.bin", LogicalPath: "/d/in.bin"}
				files, err := p.Transform(in, &phases.Task{Status: phases.TaskCompleted, Result: body})
				if err != nil {
					t.Fatalf("%s accepted a result its transform refuses: %v", p.Spec().Name, err)
				}
				for _, f := range files {
					if err := phases.CheckKey(f.R2Key, "staging/B/"); err != nil {
						t.Fatalf("%s accepted a result that puts a file outside the batch: %v", p.Spec().Name, err)
					}
				}
			}
		default:
			t.Fatalf("neither refused nor read: status %q", status)
		}
	})
}
