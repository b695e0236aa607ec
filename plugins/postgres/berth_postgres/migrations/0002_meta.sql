-- The meta store: the conversation index (titles and who set them), feedback and usage records.
-- Every key and index starts with the scope columns: every query filters on them.
CREATE TABLE meta_conversations (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    title TEXT,
    title_source TEXT CHECK (title_source IN ('user', 'summary', 'message')),
    bundle TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id)
);
CREATE INDEX meta_conversations_recent ON meta_conversations (tenant, project, user_id, updated_at DESC);

CREATE TABLE meta_feedback (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ('user', 'machine')),
    reaction TEXT NOT NULL CHECK (reaction IN ('ok', 'not_ok', 'neutral')),
    text TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, turn_id, origin)
);
CREATE INDEX meta_feedback_period ON meta_feedback (tenant, project, created_at);

CREATE TABLE meta_usage (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    bundle TEXT NOT NULL,
    model TEXT NOT NULL,
    purpose TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cache_read_input_tokens BIGINT NOT NULL,
    cache_creation_input_tokens BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION,
    at TIMESTAMPTZ NOT NULL
);
CREATE INDEX meta_usage_period ON meta_usage (tenant, project, at);
CREATE INDEX meta_usage_spent ON meta_usage (at, tenant, project, user_id);
