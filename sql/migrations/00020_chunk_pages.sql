-- +goose Up

-- The pages a chunk's text is from, for documents made of a PDF's pages
-- (textchunk.JoinPages' markers); 0 when the text has none. Search results
-- say them.
ALTER TABLE document_chunks
    ADD COLUMN first_page integer NOT NULL DEFAULT 0,
    ADD COLUMN last_page  integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE document_chunks DROP COLUMN first_page, DROP COLUMN last_page;
