-- The memory index: one row per indexed text of a conversation, keyed by scope and path.
-- `document` is the text's tsvector ('simple': lower-cased words, no stemming, like the embedded FTS5 index) under a
-- GIN index for lexical ranking (ts_rank_cd); `vector` is the embedding as real[] (portable: cosine similarity is
-- computed by the runtime over the scope's rows; pgvector is future work).
CREATE TABLE memory_entries (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    path TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    turn_ordinal INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('user', 'assistant', 'attachment', 'summary')),
    ts TIMESTAMPTZ NOT NULL,
    text TEXT NOT NULL,
    vector REAL[] NOT NULL,
    document TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    PRIMARY KEY (tenant, project, user_id, conversation_id, path)
);
CREATE INDEX memory_entries_by_owner_time ON memory_entries (tenant, project, user_id, ts);
CREATE INDEX memory_entries_document ON memory_entries USING GIN (document);
