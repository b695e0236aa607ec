-- Knowledge spaces: the persistent index of each space of each bundle, shared by every host of a deployment.
-- `knowledge_spaces` holds a space's version and meta values (embedder, last error, a running refresh's progress);
-- `knowledge_files` each file's change key, content hash, status and reason; `knowledge_chunks` the chunks with
-- their embeddings (real[]; cosine similarity is computed by the host over the space's rows, pgvector is not
-- assumed) and a weighted tsvector (title A, path B, text D; 'english' stems like the embedded Porter index).
CREATE TABLE knowledge_spaces (
    id BIGSERIAL PRIMARY KEY,
    bundle_id TEXT NOT NULL,
    space TEXT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0,
    meta JSONB NOT NULL DEFAULT '{}'::jsonb,
    UNIQUE (bundle_id, space)
);
CREATE TABLE knowledge_files (
    space_id BIGINT NOT NULL REFERENCES knowledge_spaces (id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    stat TEXT NOT NULL,
    sha TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('indexed', 'degraded', 'skipped')),
    reason TEXT,
    chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, path)
);
CREATE TABLE knowledge_chunks (
    id BIGSERIAL PRIMARY KEY,
    space_id BIGINT NOT NULL REFERENCES knowledge_spaces (id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    anchor TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    first_line INTEGER NOT NULL,
    last_line INTEGER NOT NULL,
    kind TEXT NOT NULL,
    vector REAL[],
    document TSVECTOR NOT NULL,
    UNIQUE (space_id, path, anchor)
);
CREATE INDEX knowledge_chunks_by_path ON knowledge_chunks (space_id, path, first_line);
CREATE INDEX knowledge_chunks_document ON knowledge_chunks USING GIN (document);
