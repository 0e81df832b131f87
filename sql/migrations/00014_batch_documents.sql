-- +goose Up

-- A batch's DOCUMENT_INDEXING phase (issue 18) indexes files of the batch.
-- files.document_id is the document a file was indexed as: it travels with
-- the file through later generations, and the final manifest reads the
-- document's id and tags through it.
ALTER TABLE files ADD COLUMN document_id bigint;

-- documents.source says how a document's text is assembled when it is not
-- one object's content: a PDF's pages ({"pages": [key, ...]}, page 1 first,
-- "" for a page without text) or an OCR'd ref ({"ocr_ref": true}). NULL:
-- the text is the object at r2_key.
ALTER TABLE documents ADD COLUMN source jsonb;

-- The documents of a batch's phase are counted (is the phase over?) by the
-- files of the generation they index.
CREATE INDEX documents_file_idx ON documents (file_id) WHERE file_id IS NOT NULL;

-- +goose Down
DROP INDEX documents_file_idx;
ALTER TABLE documents DROP COLUMN source;
ALTER TABLE files DROP COLUMN document_id;
