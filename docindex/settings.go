package docindex

import (
	"time"

	"github.com/arke-institute/orchestrator/provider"
	"github.com/arke-institute/orchestrator/ratelimit"
	"github.com/arke-institute/orchestrator/setting"
)

// Config configures document indexing (spec 003): what may be indexed
// and the embeddings and tags providers. Without an API URL the local
// providers are used: a feature-hashing embedder and a TF-IDF tagger.
type Config struct {
	// Prefix is where in R2_BUCKET documents may be (DOCUMENTS_PREFIX).
	Prefix string
	// ScanInterval is how often the prefix is scanned for new objects
	// (DOCUMENTS_SCAN_INTERVAL_MS; 0: never); ScanSuffixes are the names
	// a scan picks up (DOCUMENTS_SCAN_SUFFIXES).
	ScanInterval time.Duration
	ScanSuffixes string
	// MaxBytes bounds a document's size (DOCUMENT_MAX_BYTES).
	MaxBytes int64
	// ChunkTokens is the chunks' target size (DOCUMENT_CHUNK_TOKENS).
	ChunkTokens int
	// EmbeddingsAPIURL, EmbeddingsAPIKey, EmbeddingsModel and
	// EmbeddingsDimensions are the embeddings provider's.
	EmbeddingsAPIURL     string
	EmbeddingsAPIKey     string
	EmbeddingsModel      string
	EmbeddingsDimensions int
	// TagsAPIURL, TagsAPIKey and TagsModel are the tags provider's.
	TagsAPIURL string
	TagsAPIKey string
	TagsModel  string
	// Timeout bounds one call to either provider (DOCUMENT_TIMEOUT_MS). A
	// step's run lasts a little longer, and River rescues a crashed
	// process's step jobs once that has passed.
	Timeout time.Duration
	// SearchTextConfig is the text search configuration chunks' text is
	// parsed with for full-text search, and queries too
	// (SEARCH_TEXT_CONFIG).
	SearchTextConfig string
	// SearchIndexMaxChunks bounds each process's in-memory index of
	// vector signatures (SEARCH_INDEX_MAX_CHUNKS).
	SearchIndexMaxChunks int
	// Embeddings and Tags are the buckets each role's calls draw on, one
	// per provider host, which the executors' registry fills in.
	Embeddings, Tags ratelimit.RoleBucket
}

// Settings declares document indexing's settings into c.
func Settings(c *Config) []setting.Group {
	return []setting.Group{{
		Title: "Documents",
		Doc:   "Document indexing (spec 003): what may be indexed, and the embeddings and tags providers (see [Documents](api.md#documents-documents)).",
		Settings: []setting.Setting{
			setting.String(&c.Prefix, "DOCUMENTS_PREFIX", "documents/", "where in `R2_BUCKET` documents to index may be"),
			setting.MillisOrZero(&c.ScanInterval, "DOCUMENTS_SCAN_INTERVAL_MS", time.Minute, "how often `DOCUMENTS_PREFIX` is listed for objects to index (0: never; `POST /documents` only): each pass queues those whose key and ETag no document has yet, a pass cut short goes on where it was"),
			setting.String(&c.ScanSuffixes, "DOCUMENTS_SCAN_SUFFIXES", ".md,.markdown,.txt,.text", "the names a scan of `DOCUMENTS_PREFIX` picks up, by their ends, comma-separated (`POST /documents` takes any key under it)"),
			setting.PositiveInt64(&c.MaxBytes, "DOCUMENT_MAX_BYTES", 20_000_000, "a larger document fails at download (a batch's file passes through without document fields)"),
			setting.Int(&c.ChunkTokens, "DOCUMENT_CHUNK_TOKENS", 500, 50, 8000, "target size of a document's chunks, in (estimated) tokens"),
			setting.URL(&c.EmbeddingsAPIURL, "EMBEDDINGS_API_URL", "", "OpenAI-compatible `/embeddings` API").Shown("(local embedder)"),
			setting.Secret(&c.EmbeddingsAPIKey, "EMBEDDINGS_API_KEY", "its key, required with an `https://` URL, optional with an `http://` one (a server of your own: Ollama, vLLM, llama.cpp); never logged"),
			setting.String(&c.EmbeddingsModel, "EMBEDDINGS_MODEL", "text-embedding-3-small", "the embeddings model"),
			setting.Int(&c.EmbeddingsDimensions, "EMBEDDINGS_DIMENSIONS", 512, 8, 4096, "the vectors' length (the model's `dimensions` parameter)"),
			setting.URL(&c.TagsAPIURL, "TAGS_API_URL", "", "OpenAI-compatible chat completions that tag chunks and documents").Shown("(local tagger)"),
			setting.Secret(&c.TagsAPIKey, "TAGS_API_KEY", "its key, required with an `https://` URL, optional with an `http://` one; never logged"),
			setting.String(&c.TagsModel, "TAGS_MODEL", "gpt-4o-mini", "the tags model"),
			setting.String(&c.SearchTextConfig, "SEARCH_TEXT_CONFIG", "simple", "the Postgres text search configuration chunks and queries are parsed with for full-text search (`simple`: no stemming, no stopwords, for any language; e.g. `english` for English archives); chunks written under another are parsed again by a re-index"),
			setting.Int(&c.SearchIndexMaxChunks, "SEARCH_INDEX_MAX_CHUNKS", 4_000_000, 0, 1_000_000_000, "most chunks each process holds in its in-memory index of vector signatures (76 bytes a chunk: 76 MB a million); with more, or 0, vector candidates come from a scan in Postgres (slower)"),
			setting.Millis(&c.Timeout, "DOCUMENT_TIMEOUT_MS", 45*time.Second, "bound on one embeddings or tags call; a step's run lasts at most this plus 15 s, which is also how soon a dead process's steps are picked up again (plus River's 30 s rescue interval)"),
		},
	}}
}

// Missing names the settings document indexing lacks to serve: a key
// for each https provider given.
func (c Config) Missing() []string {
	var missing []string
	if provider.KeyMissing(c.EmbeddingsAPIURL, c.EmbeddingsAPIKey) {
		missing = append(missing, "EMBEDDINGS_API_KEY (EMBEDDINGS_API_URL is set)")
	}
	if provider.KeyMissing(c.TagsAPIURL, c.TagsAPIKey) {
		missing = append(missing, "TAGS_API_KEY (TAGS_API_URL is set)")
	}
	return missing
}
