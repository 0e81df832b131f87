package manifest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseQueueMessageExample(t *testing.T) {
	msg, err := ParseQueueMessage(readTestdata(t, "queue_message.json"))
	requireNoError(t, err)

	requireEqual(t, QueueMessage{
		BatchID:       "01K8RNKN488RQCG3YGG72QBZS5",
		ManifestR2Key: "staging/01K8RNKN488RQCG3YGG72QBZS5/_manifest.json",
		R2Prefix:      "staging/01K8RNKN488RQCG3YGG72QBZS5/",
		Uploader:      "john.doe@arke.institute",
		RootPath:      "/archives/2025/collection-01",
		ParentPI:      "00000000000000000000000000",
		TotalFiles:    3,
		TotalBytes:    3145728,
		UploadedAt:    time.Date(2025, 10, 29, 19, 15, 30, 123_000_000, time.UTC),
		FinalizedAt:   time.Date(2025, 10, 29, 19, 20, 45, 456_000_000, time.UTC),
		Metadata: map[string]any{
			"project":       "archival-2025",
			"source":        "scanner-01",
			"collection_id": "col_12345",
		},
		CustomPrompts: &CustomPrompts{
			General:        "All content is from 18th century scientific manuscripts.",
			Reorganization: "Group documents by subject matter rather than author.",
			Pinax:          "Use Library of Congress Subject Headings when possible.",
		},
	}, msg)
}

// renameBatch gives the message batch id, with the prefix and manifest key
// that go with it.
func renameBatch(m map[string]any, id string) {
	m["batch_id"], m["r2_prefix"], m["manifest_r2_key"] = id, StagingPrefix(id), StagingPrefix(id)+"_manifest.json"
}

func TestParseQueueMessageAccepts(t *testing.T) {
	example := readTestdata(t, "queue_message.json")

	tests := []struct {
		name   string
		mutate func(m map[string]any)
		check  func(t *testing.T, msg QueueMessage)
	}{
		{
			name:   "UnknownFieldsIgnored",
			mutate: func(m map[string]any) { m["urgency"] = "high"; m["files"] = []any{1, 2} },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, "01K8RNKN488RQCG3YGG72QBZS5", msg.BatchID) },
		},
		{
			name:   "PriorityAbsent",
			mutate: func(m map[string]any) { delete(m, "priority") },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, DefaultPriority, msg.Priority) },
		},
		{
			name:   "PriorityNull",
			mutate: func(m map[string]any) { m["priority"] = nil },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, 0, msg.Priority) },
		},
		{
			name:   "PriorityInteger",
			mutate: func(m map[string]any) { m["priority"] = 7 },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, 7, msg.Priority) },
		},
		{
			name:   "PriorityLowest",
			mutate: func(m map[string]any) { m["priority"] = -10 },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, -10, msg.Priority) },
		},
		{
			name:   "PriorityName",
			mutate: func(m map[string]any) { m["priority"] = "high" },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, 5, msg.Priority) },
		},
		{
			name:   "EmptyMetadata",
			mutate: func(m map[string]any) { m["metadata"] = map[string]any{} },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, map[string]any{}, msg.Metadata) },
		},
		{
			name:   "NestedMetadata",
			mutate: func(m map[string]any) { m["metadata"] = map[string]any{"tags": []any{"a"}, "n": 2, "ok": true} },
			check: func(t *testing.T, msg QueueMessage) {
				requireEqual(t, map[string]any{"tags": []any{"a"}, "n": float64(2), "ok": true}, msg.Metadata)
			},
		},
		{
			name:   "CustomPromptsAbsent",
			mutate: func(m map[string]any) { delete(m, "custom_prompts") },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, (*CustomPrompts)(nil), msg.CustomPrompts) },
		},
		{
			name:   "CustomPromptsNull",
			mutate: func(m map[string]any) { m["custom_prompts"] = nil },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, (*CustomPrompts)(nil), msg.CustomPrompts) },
		},
		{
			name:   "CustomPromptsEmpty",
			mutate: func(m map[string]any) { m["custom_prompts"] = map[string]any{} },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, &CustomPrompts{}, msg.CustomPrompts) },
		},
		{
			name: "CustomPromptValueNull",
			mutate: func(m map[string]any) {
				m["custom_prompts"] = map[string]any{"general": nil, "cheimarros": "people", "description": "tone"}
			},
			check: func(t *testing.T, msg QueueMessage) {
				requireEqual(t, &CustomPrompts{Cheimarros: "people", Description: "tone"}, msg.CustomPrompts)
			},
		},
		{
			// 10,000 two-byte characters are 20,000 bytes but within the
			// 10,000-character limit; with 10,000 more the total is exactly
			// at its limit.
			name: "CustomPromptsAtLimitsMultiByte",
			mutate: func(m map[string]any) {
				m["custom_prompts"] = map[string]any{
					"general": strings.Repeat("é", 10_000),
					"pinax":   strings.Repeat("📜", 10_000),
				}
			},
			check: func(t *testing.T, msg QueueMessage) {
				requireEqual(t, 20_000, len(msg.CustomPrompts.General))
				requireEqual(t, 40_000, len(msg.CustomPrompts.Pinax))
			},
		},
		{
			name:   "BatchIDAtLengthLimit",
			mutate: func(m map[string]any) { renameBatch(m, strings.Repeat("A", 128)) },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, 128, len(msg.BatchID)) },
		},
		{
			name:   "BatchIDPunctuation",
			mutate: func(m map[string]any) { renameBatch(m, "batch_2025.10-29") },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, "batch_2025.10-29", msg.BatchID) },
		},
		{
			name:   "ZeroTotals",
			mutate: func(m map[string]any) { m["total_files"] = 0; m["total_bytes"] = 0 },
			check: func(t *testing.T, msg QueueMessage) {
				requireEqual(t, int64(0), msg.TotalFiles)
				requireEqual(t, int64(0), msg.TotalBytes)
			},
		},
		{
			name:   "LargeTotalBytes",
			mutate: func(m map[string]any) { m["total_bytes"] = json.RawMessage("107374182400") },
			check:  func(t *testing.T, msg QueueMessage) { requireEqual(t, int64(107374182400), msg.TotalBytes) },
		},
		{
			name: "TimestampsWithOffsetAndWithoutFraction",
			mutate: func(m map[string]any) {
				m["uploaded_at"] = "2025-10-29T21:15:30+02:00"
				m["finalized_at"] = "2025-10-29T19:20:45Z"
			},
			check: func(t *testing.T, msg QueueMessage) {
				requireEqual(t, true, msg.UploadedAt.Equal(time.Date(2025, 10, 29, 19, 15, 30, 0, time.UTC)))
				requireEqual(t, true, msg.FinalizedAt.Equal(time.Date(2025, 10, 29, 19, 20, 45, 0, time.UTC)))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := ParseQueueMessage(mutateJSON(t, example, tt.mutate))
			requireNoError(t, err)
			tt.check(t, msg)
		})
	}
}

// TestParseQueueMessageInvalidUTF8: a string field holding bytes that are
// not UTF-8 is refused by name, not turned into U+FFFD.
func TestParseQueueMessageInvalidUTF8(t *testing.T) {
	body := strings.Replace(string(readTestdata(t, "queue_message.json")), "john.doe@arke.institute", "john\xff@arke.institute", 1)
	_, err := ParseQueueMessage([]byte(body))
	_ = requireProblems(t, err, "batch message", "uploader is not valid UTF-8")
}

// priorityProblem starts the problem of a priority off the scale.
const priorityProblem = `priority must be an integer from -10 (lowest) to 10 (highest) or one of "lowest" (-10), "low" (-5), "normal" (0), "high" (5), got `

func TestParseQueueMessageRejects(t *testing.T) {
	example := readTestdata(t, "queue_message.json")
	const allowedPrompts = "(allowed: general, reorganization, pinax, description, cheimarros)"

	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   []string
	}{
		{"BatchIDMissing", func(m map[string]any) { delete(m, "batch_id") }, []string{"batch_id is required"}},
		{"PriorityTooHigh", func(m map[string]any) { m["priority"] = 11 }, []string{priorityProblem + "11"}},
		{"PriorityTooLow", func(m map[string]any) { m["priority"] = -11 }, []string{priorityProblem + "-11"}},
		{"PriorityFraction", func(m map[string]any) { m["priority"] = 2.5 }, []string{priorityProblem + "2.5"}},
		{"PriorityUnknownName", func(m map[string]any) { m["priority"] = "urgent" }, []string{priorityProblem + `"urgent"`}},
		{"PriorityBool", func(m map[string]any) { m["priority"] = true }, []string{priorityProblem + "true"}},
		{"BatchIDNull", func(m map[string]any) { m["batch_id"] = nil }, []string{"batch_id is required"}},
		{"BatchIDEmpty", func(m map[string]any) { m["batch_id"] = "" }, []string{"batch_id is required"}},
		{"BatchIDNotString", func(m map[string]any) { m["batch_id"] = 5 }, []string{"batch_id must be a string, got 5"}},
		{
			"BatchIDTooLong", func(m map[string]any) { m["batch_id"] = strings.Repeat("A", 129) },
			[]string{"batch_id is 129 characters, the limit is 128"},
		},
		{
			"BatchIDSlash", func(m map[string]any) { m["batch_id"] = "a/b" },
			[]string{`batch_id "a/b" may contain only letters, digits, ".", "_" and "-"`},
		},
		{
			"BatchIDNonASCII", func(m map[string]any) { m["batch_id"] = "lot-é" },
			[]string{`batch_id "lot-é" may contain only letters, digits, ".", "_" and "-"`},
		},
		{"BatchIDDotDot", func(m map[string]any) { m["batch_id"] = ".." }, []string{`batch_id must not be ".."`}},
		{"ManifestKeyMissing", func(m map[string]any) { delete(m, "manifest_r2_key") }, []string{"manifest_r2_key is required"}},
		{"ManifestKeyEmpty", func(m map[string]any) { m["manifest_r2_key"] = "" }, []string{"manifest_r2_key is required"}},
		{"R2PrefixEmpty", func(m map[string]any) { m["r2_prefix"] = "" }, []string{"r2_prefix is required"}},
		{"R2PrefixMissing", func(m map[string]any) { delete(m, "r2_prefix") }, []string{"r2_prefix is required"}},
		{
			"R2PrefixOtherBatch", func(m map[string]any) { m["r2_prefix"] = "staging/OTHER/" },
			[]string{
				`r2_prefix must be "staging/01K8RNKN488RQCG3YGG72QBZS5/", the batch's own, got "staging/OTHER/"`,
				`manifest_r2_key "staging/01K8RNKN488RQCG3YGG72QBZS5/_manifest.json" must lie under r2_prefix "staging/OTHER/"`,
			},
		},
		{
			"R2PrefixClimbsOut", func(m map[string]any) { m["r2_prefix"] = "staging/01K8RNKN488RQCG3YGG72QBZS5/../A/" },
			[]string{`r2_prefix "staging/01K8RNKN488RQCG3YGG72QBZS5/../A/" has an empty, "." or ".." path segment`},
		},
		{
			"R2PrefixNoSlash", func(m map[string]any) { m["r2_prefix"] = "staging/01K8RNKN488RQCG3YGG72QBZS5" },
			[]string{`r2_prefix "staging/01K8RNKN488RQCG3YGG72QBZS5" must end with "/"`},
		},
		{
			"ManifestKeyClimbsOut", func(m map[string]any) { m["manifest_r2_key"] = "staging/01K8RNKN488RQCG3YGG72QBZS5/../B/huge.tif" },
			[]string{`manifest_r2_key "staging/01K8RNKN488RQCG3YGG72QBZS5/../B/huge.tif" has an empty, "." or ".." path segment`},
		},
		{
			"ManifestKeyOutsidePrefix", func(m map[string]any) { m["manifest_r2_key"] = "staging/OTHER/_manifest.json" },
			[]string{`manifest_r2_key "staging/OTHER/_manifest.json" must lie under r2_prefix "staging/01K8RNKN488RQCG3YGG72QBZS5/"`},
		},
		{
			"ManifestKeyDoubleSlash", func(m map[string]any) { m["manifest_r2_key"] = "staging/01K8RNKN488RQCG3YGG72QBZS5//m.json" },
			[]string{`manifest_r2_key "staging/01K8RNKN488RQCG3YGG72QBZS5//m.json" has an empty, "." or ".." path segment`},
		},
		{"UploaderNUL", func(m map[string]any) { m["uploader"] = "a\x00b" }, []string{"uploader must not contain control characters (U+0000 at byte 1)"}},
		{"RootPathNewline", func(m map[string]any) { m["root_path"] = "/a\nb" }, []string{"root_path must not contain control characters (U+000A at byte 2)"}},
		{"UploaderNotString", func(m map[string]any) { m["uploader"] = []any{"x"} }, []string{`uploader must be a string, got ["x"]`}},
		{"RootPathNull", func(m map[string]any) { m["root_path"] = nil }, []string{"root_path is required"}},
		{"ParentPIMissing", func(m map[string]any) { delete(m, "parent_pi") }, []string{"parent_pi is required"}},
		{"TotalFilesMissing", func(m map[string]any) { delete(m, "total_files") }, []string{"total_files is required"}},
		{
			"TotalFilesString", func(m map[string]any) { m["total_files"] = "5" },
			[]string{`total_files must be a non-negative integer, got "5"`},
		},
		{
			"TotalFilesFraction", func(m map[string]any) { m["total_files"] = 3.5 },
			[]string{"total_files must be a non-negative integer, got 3.5"},
		},
		{
			"TotalFilesNegative", func(m map[string]any) { m["total_files"] = -1 },
			[]string{"total_files must be a non-negative integer, got -1"},
		},
		{
			"TotalFilesExponent", func(m map[string]any) { m["total_files"] = json.RawMessage("1e3") },
			[]string{"total_files must be a non-negative integer, got 1e3"},
		},
		{
			"TotalBytesBoolean", func(m map[string]any) { m["total_bytes"] = true },
			[]string{"total_bytes must be a non-negative integer, got true"},
		},
		{
			"TotalBytesTooLarge", func(m map[string]any) { m["total_bytes"] = json.RawMessage("99999999999999999999") },
			[]string{"total_bytes is too large, got 99999999999999999999"},
		},
		{"UploadedAtMissing", func(m map[string]any) { delete(m, "uploaded_at") }, []string{"uploaded_at is required"}},
		{
			"UploadedAtNotTimestamp", func(m map[string]any) { m["uploaded_at"] = "yesterday" },
			[]string{`uploaded_at must be an ISO 8601 timestamp, got "yesterday"`},
		},
		{
			"UploadedAtWithoutZone", func(m map[string]any) { m["uploaded_at"] = "2025-10-29T19:15:30" },
			[]string{`uploaded_at must be an ISO 8601 timestamp, got "2025-10-29T19:15:30"`},
		},
		{
			"FinalizedAtNumber", func(m map[string]any) { m["finalized_at"] = 1761765645 },
			[]string{"finalized_at must be an ISO 8601 timestamp, got 1761765645"},
		},
		{"MetadataMissing", func(m map[string]any) { delete(m, "metadata") }, []string{"metadata is required"}},
		{"MetadataNull", func(m map[string]any) { m["metadata"] = nil }, []string{"metadata is required"}},
		{
			"MetadataArray", func(m map[string]any) { m["metadata"] = []any{"a"} },
			[]string{`metadata must be a JSON object, got ["a"]`},
		},
		{
			"CustomPromptsNotObject", func(m map[string]any) { m["custom_prompts"] = "be nice" },
			[]string{`custom_prompts must be a JSON object, got "be nice"`},
		},
		{
			"CustomPromptsUnknownKeys",
			func(m map[string]any) { m["custom_prompts"] = map[string]any{"ocr": "x", "General": "y", "pinax": "z"} },
			[]string{
				`custom_prompts has unknown field "General" ` + allowedPrompts,
				`custom_prompts has unknown field "ocr" ` + allowedPrompts,
			},
		},
		{
			"CustomPromptNotString", func(m map[string]any) { m["custom_prompts"] = map[string]any{"general": 5} },
			[]string{"custom_prompts.general must be a string, got 5"},
		},
		{
			"CustomPromptTooLong",
			func(m map[string]any) { m["custom_prompts"] = map[string]any{"general": strings.Repeat("a", 10_001)} },
			[]string{"custom_prompts.general is 10001 characters, the limit is 10000"},
		},
		{
			// Characters are counted, not bytes: the message says 10001,
			// not 20002.
			"CustomPromptTooLongMultiByte",
			func(m map[string]any) {
				m["custom_prompts"] = map[string]any{"description": strings.Repeat("é", 10_001)}
			},
			[]string{"custom_prompts.description is 10001 characters, the limit is 10000"},
		},
		{
			"CustomPromptsTotalTooLong",
			func(m map[string]any) {
				m["custom_prompts"] = map[string]any{
					"general":        strings.Repeat("a", 10_000),
					"reorganization": strings.Repeat("b", 9_000),
					"cheimarros":     strings.Repeat("ж", 1_001),
				}
			},
			[]string{"custom_prompts total 20001 characters, the limit is 20000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := ParseQueueMessage(mutateJSON(t, example, tt.mutate))
			ve := requireProblems(t, err, "batch message", tt.want...)
			requireEqual(t, len(tt.want), len(ve.Problems))
			requireEqual(t, QueueMessage{}, msg)
		})
	}
}

func TestParseQueueMessageReportsAllProblems(t *testing.T) {
	body := mutateJSON(t, readTestdata(t, "queue_message.json"), func(m map[string]any) {
		delete(m, "batch_id")
		m["total_files"] = "5"
		m["uploaded_at"] = "yesterday"
		m["custom_prompts"] = map[string]any{"general": strings.Repeat("a", 10_001)}
	})
	_, err := ParseQueueMessage(body)
	_ = requireProblems(t, err, "batch message")
	requireEqual(t, `invalid batch message: batch_id is required; `+
		`total_files must be a non-negative integer, got "5"; `+
		`uploaded_at must be an ISO 8601 timestamp, got "yesterday"; `+
		`custom_prompts.general is 10001 characters, the limit is 10000`, err.Error())
}

func TestParseQueueMessageMalformed(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"Empty", ""},
		{"Whitespace", " \n\t"},
		{"Truncated", `{"batch_id": "x"`},
		{"Syntax", `{"batch_id": }`},
		{"SingleQuotes", `{'batch_id': 'x'}`},
		{"TwoObjects", `{} {}`},
		{"TrailingGarbage", `{"batch_id": "x"} x`},
		{"TrailingBrace", `{"batch_id": "x"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseQueueMessage([]byte(tt.body))
			requireMalformed(t, err, "body is not valid JSON: ")
		})
	}
}

func TestParseQueueMessageNotObject(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string
	}{
		{"Array", `[{"batch_id": "x"}]`, `body must be a JSON object, got [{"batch_id":"x"}]`},
		{"Null", `null`, "body must be a JSON object, got null"},
		{"String", `"hello"`, `body must be a JSON object, got "hello"`},
		{"Number", `42`, "body must be a JSON object, got 42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseQueueMessage([]byte(tt.body))
			_ = requireProblems(t, err, "batch message", tt.want)
		})
	}
}

func TestParseQueueMessageTrailingWhitespace(t *testing.T) {
	body := append(readTestdata(t, "queue_message.json"), "\n\n  \t\n"...)
	_, err := ParseQueueMessage(body)
	requireNoError(t, err)
}

func TestParseQueueMessageTruncatesShownValues(t *testing.T) {
	body := mutateJSON(t, readTestdata(t, "queue_message.json"), func(m map[string]any) {
		m["uploaded_at"] = strings.Repeat("x", 100)
	})
	_, err := ParseQueueMessage(body)
	_ = requireProblems(t, err, "batch message",
		`uploaded_at must be an ISO 8601 timestamp, got "`+strings.Repeat("x", 60)+`..."`)
}

func TestQueueMessageJSONRoundTrip(t *testing.T) {
	msg := exampleMessage(t)
	data, err := json.Marshal(msg)
	requireNoError(t, err)
	again, err := ParseQueueMessage(data)
	requireNoError(t, err)
	requireEqual(t, msg, again)
}

func TestValidationErrorError(t *testing.T) {
	tests := []struct {
		name string
		err  *ValidationError
		want string
	}{
		{"Message", &ValidationError{Subject: "batch message", Problems: []string{"a", "b"}}, "invalid batch message: a; b"},
		{"Manifest", &ValidationError{Subject: "manifest", Problems: []string{"a"}}, "invalid manifest: a"},
		{"NoSubject", &ValidationError{Problems: []string{"a"}}, "invalid input: a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireEqual(t, tt.want, tt.err.Error())
		})
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]int{"high": 5, "HIGH": 5, " low ": -5, "normal": 0, "lowest": -10, "10": 10, "-10": -10, "3": 3} {
		got, err := ParsePriority(in)
		requireNoError(t, err)
		requireEqual(t, want, got)
	}
	for _, in := range []string{"11", "-11", "urgent", "", "1.5"} {
		if _, err := ParsePriority(in); err == nil || !strings.Contains(err.Error(), "from -10 (lowest) to 10 (highest)") {
			t.Errorf("ParsePriority(%q): want a range error, got %v", in, err)
		}
	}
}
