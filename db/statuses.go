package db

// The statuses of rows whose status is one of a few words (each column's
// CHECK constraint lists them): sqlc types the columns with these
// (sqlc.yaml's overrides), so code compares and sets them by name.

// DocumentStatus is a document version's status (documents.status;
// spec 003's).
type DocumentStatus string

// Document statuses.
const (
	DocumentNotStarted DocumentStatus = "not_started"
	DocumentProcessing DocumentStatus = "processing"
	DocumentCompleted  DocumentStatus = "completed"
	DocumentFailed     DocumentStatus = "failed"
)

// DocumentStatuses are the document statuses, in processing order.
func DocumentStatuses() []DocumentStatus {
	return []DocumentStatus{DocumentNotStarted, DocumentProcessing, DocumentCompleted, DocumentFailed}
}

// Open reports whether a document in s still has steps to run.
func (s DocumentStatus) Open() bool { return s == DocumentNotStarted || s == DocumentProcessing }

// DocumentChunkStatus is how far a document's chunk is (document_chunks.status).
type DocumentChunkStatus string

// Document chunk statuses, in the order a chunk goes through them.
const (
	DocumentChunkPending       DocumentChunkStatus = "pending"
	DocumentChunkEmbeddingDone DocumentChunkStatus = "embedding_done"
	DocumentChunkTagsDone      DocumentChunkStatus = "tags_done"
	DocumentChunkStored        DocumentChunkStatus = "stored"
)

// ChunkState is spec 004's phase of a chunk (chunks.state; "phase" is the
// pipeline's word here).
type ChunkState string

// Chunk states.
const (
	ChunkPending    ChunkState = "PENDING"
	ChunkFetching   ChunkState = "FETCHING"
	ChunkProcessing ChunkState = "PROCESSING"
	ChunkPublishing ChunkState = "PUBLISHING"
	ChunkDone       ChunkState = "DONE"
	ChunkError      ChunkState = "ERROR"
)

// ItemStatus is the state of one item of a chunk (chunk_items.status;
// spec 004's). Only ItemDone changes the file list.
type ItemStatus string

// Item statuses.
const (
	// ItemPending waits for a chunk job to claim it.
	ItemPending ItemStatus = "pending"
	// ItemProcessing is claimed by a chunk job.
	ItemProcessing ItemStatus = "processing"
	// ItemDone has its outcome recorded.
	ItemDone ItemStatus = "done"
	// ItemSkipped needs no processing (e.g. a PDF page with a text layer).
	ItemSkipped ItemStatus = "skipped"
	// ItemError failed for good.
	ItemError ItemStatus = "error"
)
