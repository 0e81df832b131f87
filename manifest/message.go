// Package manifest holds the intake contract of the orchestrator (spec 001):
// the queue message that announces a batch (the body of POST /batches) and
// the batch manifest it points to in the staging bucket, with the validation
// that both must pass before any work is scheduled. Rejecting a bad batch at
// the door, with messages that name each field and file at fault, is much
// cheaper for the uploader than a phase failing halfway through.
//
// The package is pure: it takes bytes and values and returns values, so every
// rule is covered by table tests. Fetching the manifest and reading limits
// from the environment are the callers' business.
package manifest

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// QueueMessage announces a finalized batch. It is deliberately small (the
// file list lives in the manifest at ManifestR2Key) so that it stays under
// the 128 KB queue limit whatever the batch size.
type QueueMessage struct {
	// BatchID identifies the batch (a ULID upstream). It is used in URL paths
	// and object keys, hence the restricted alphabet.
	BatchID string `json:"batch_id"`
	// ManifestR2Key is the staging-bucket key of the batch manifest.
	ManifestR2Key string `json:"manifest_r2_key"`
	// R2Prefix is the staging-bucket prefix every file of the batch is under.
	R2Prefix string `json:"r2_prefix"`
	// Uploader identifies who uploaded the batch, for audit.
	Uploader string `json:"uploader"`
	// RootPath is the logical root the files' logical paths hang from.
	RootPath string `json:"root_path"`
	// ParentPI is the persistent identifier the batch is ingested under.
	ParentPI string `json:"parent_pi"`
	// TotalFiles and TotalBytes must match the manifest; a mismatch means the
	// message and manifest do not describe the same upload.
	TotalFiles int64 `json:"total_files"`
	TotalBytes int64 `json:"total_bytes"`
	// UploadedAt and FinalizedAt are when the batch was created and closed.
	UploadedAt  time.Time `json:"uploaded_at"`
	FinalizedAt time.Time `json:"finalized_at"`
	// Metadata is the uploader's free-form metadata, passed on untouched.
	// Never nil after ParseQueueMessage.
	Metadata map[string]any `json:"metadata"`
	// CustomPrompts tunes the AI phases downstream; nil when not given.
	CustomPrompts *CustomPrompts `json:"custom_prompts,omitempty"`
	// Priority orders the batch's work against other batches': from
	// MinPriority to MaxPriority, higher first; DefaultPriority (0, so
	// the zero value, left out of the JSON) when not given.
	Priority int `json:"priority,omitempty"`
}

// CustomPrompts are batch-specific instructions for the AI services of the
// ingest pipeline. The orchestrator only checks their size and passes them
// on; an empty field means "no custom prompt for that phase".
type CustomPrompts struct {
	// General applies to every AI call.
	General string `json:"general,omitempty"`
	// Reorganization applies to file reorganization.
	Reorganization string `json:"reorganization,omitempty"`
	// Pinax applies to PINAX metadata extraction.
	Pinax string `json:"pinax,omitempty"`
	// Description applies to description generation.
	Description string `json:"description,omitempty"`
	// Cheimarros applies to knowledge graph extraction.
	Cheimarros string `json:"cheimarros,omitempty"`
}

// Limits from spec 001. Prompt lengths are counted in Unicode characters
// (runes), not bytes, so that non-Latin prompts get the same allowance.
const (
	// MaxBatchIDLength bounds a batch id, which is ASCII: in characters
	// and bytes alike.
	MaxBatchIDLength  = 128
	maxPromptChars    = 10_000
	maxPromptsChars   = 20_000
	batchIDCharacters = `letters, digits, ".", "_" and "-"`
)

// promptFields are the keys custom_prompts may hold, in spec order.
var promptFields = []string{"general", "reorganization", "pinax", "description", "cheimarros"}

// field returns the CustomPrompts field for a key of promptFields.
func (c *CustomPrompts) field(name string) *string {
	switch name {
	case "general":
		return &c.General
	case "reorganization":
		return &c.Reorganization
	case "pinax":
		return &c.Pinax
	case "description":
		return &c.Description
	case "cheimarros":
		return &c.Cheimarros
	}
	return nil
}

// ParseQueueMessage decodes and validates a POST /batches body. A body that
// is not one well-formed JSON value yields an error matching
// ErrMalformedJSON; otherwise every problem found is returned together in a
// *ValidationError. Unknown top-level fields are ignored so that the
// producer can add fields before the orchestrator knows them.
func ParseQueueMessage(body []byte) (QueueMessage, error) {
	raw, err := decodeOne(body, "body")
	if err != nil {
		return QueueMessage{}, err
	}
	var p problems
	obj, ok := asObject(raw)
	if !ok {
		p.addf("body must be a JSON object, got %s", show(raw))
		return QueueMessage{}, p.err(subjectMessage)
	}

	var m QueueMessage
	idOK := false
	if id, ok := p.text("", obj, "batch_id"); ok {
		idOK = checkBatchID(&p, id)
		m.BatchID = id
	}
	manifestOK, prefixOK := false, false
	if m.ManifestR2Key, manifestOK = p.text("", obj, "manifest_r2_key"); manifestOK {
		manifestOK = p.key("", "manifest_r2_key", m.ManifestR2Key, false)
	}
	// Empty would switch off the check that files lie under it.
	if m.R2Prefix, prefixOK = p.text("", obj, "r2_prefix"); prefixOK {
		prefixOK = p.key("", "r2_prefix", m.R2Prefix, true)
	}
	if want := StagingPrefix(m.BatchID); prefixOK && idOK && m.R2Prefix != want {
		p.addf("r2_prefix must be %s, the batch's own, got %s", quote(want), quote(m.R2Prefix))
	}
	if manifestOK && prefixOK && !strings.HasPrefix(m.ManifestR2Key, m.R2Prefix) {
		p.addf("manifest_r2_key %s must lie under r2_prefix %s", quote(m.ManifestR2Key), quote(m.R2Prefix))
	}
	m.Uploader, _ = p.str("", obj, "uploader")
	m.RootPath, _ = p.str("", obj, "root_path")
	m.ParentPI, _ = p.str("", obj, "parent_pi")
	m.TotalFiles, _ = p.count("", obj, "total_files")
	m.TotalBytes, _ = p.count("", obj, "total_bytes")
	m.UploadedAt, _ = p.timestamp("", obj, "uploaded_at")
	m.FinalizedAt, _ = p.timestamp("", obj, "finalized_at")
	if md, ok := p.obj("", obj, "metadata"); ok {
		m.Metadata = make(map[string]any, len(md))
		for k, v := range md {
			var val any
			if err := json.Unmarshal(v, &val); err == nil {
				m.Metadata[k] = val
			}
		}
	}
	if raw, ok := lookup(obj, "custom_prompts"); ok {
		m.CustomPrompts = parsePrompts(&p, raw)
	}
	m.Priority = p.priority(obj, "priority")

	if err := p.err(subjectMessage); err != nil {
		return QueueMessage{}, err
	}
	return m, nil
}

// StagingPrefix is where a batch's files are staged: "staging/{batch_id}/",
// the only r2_prefix a queue message may name.
func StagingPrefix(batchID string) string { return "staging/" + batchID + "/" }

// checkBatchID enforces the batch_id alphabet, and reports whether id
// passed. The ID becomes a path segment
// of URLs and object keys, so "/", "?", "%" and friends would break or
// redirect those, and "." and ".." would escape the batch's prefix.
func checkBatchID(p *problems, id string) bool {
	ok := true
	if n := utf8.RuneCountInString(id); n > MaxBatchIDLength {
		p.addf("batch_id is %d characters, the limit is %d", n, MaxBatchIDLength)
		ok = false
	}
	valid := strings.IndexFunc(id, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '.' && r != '_' && r != '-'
	}) < 0
	switch {
	case !valid:
		p.addf("batch_id %s may contain only %s", quote(id), batchIDCharacters)
		return false
	case id == "." || id == "..":
		p.addf("batch_id must not be %q", id)
		return false
	}
	return ok
}

// parsePrompts validates a present, non-null custom_prompts value and
// returns it, or nil when it is not an object.
func parsePrompts(p *problems, raw json.RawMessage) *CustomPrompts {
	obj, ok := asObject(raw)
	if !ok {
		p.addf("custom_prompts must be a JSON object, got %s", show(raw))
		return nil
	}
	unknown := make([]string, 0)
	for k := range obj {
		if !slices.Contains(promptFields, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		p.addf("custom_prompts has unknown field %s (allowed: %s)", quote(k), strings.Join(promptFields, ", "))
	}

	var c CustomPrompts
	total := 0
	for _, name := range promptFields {
		s := p.optStr("custom_prompts.", obj, name)
		n := utf8.RuneCountInString(s)
		if n > maxPromptChars {
			p.addf("custom_prompts.%s is %d characters, the limit is %d", name, n, maxPromptChars)
		}
		total += n
		*c.field(name) = s
	}
	if total > maxPromptsChars {
		p.addf("custom_prompts total %d characters, the limit is %d", total, maxPromptsChars)
	}
	return &c
}
