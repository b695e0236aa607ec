-- The conversation store (berth_postgres.conversations): conversations, turns, the turn log, the committed
-- timeline, the sources pool and artifacts. Every table is keyed by the scope (tenant, project, user_id,
-- conversation_id) first, and every query of the store names the whole scope in its WHERE clause.
-- JSON is kept as TEXT, byte for byte as the runtime wrote it (jsonb would reorder keys).

CREATE TABLE berth_conversations (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    title TEXT,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,      -- how many commits made the timeline
    turn_count INTEGER NOT NULL DEFAULT 0,   -- turns recorded (also each new turn's seq)
    PRIMARY KEY (tenant, project, user_id, conversation_id)
);
CREATE INDEX berth_conversations_by_owner ON berth_conversations (tenant, project, user_id, updated_at DESC);

CREATE TABLE berth_turns (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('accepted', 'running', 'completed', 'interrupted', 'failed', 'cancelled')),
    committed BOOLEAN NOT NULL DEFAULT FALSE,
    committed_version INTEGER,               -- the conversation version its commit made (retries check it)
    started_at TIMESTAMPTZ NOT NULL,
    ended_at TIMESTAMPTZ,
    generation TEXT,
    rounds INTEGER NOT NULL DEFAULT 0,       -- recorded at the commit; until then the log's last round counts
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_input_tokens BIGINT NOT NULL DEFAULT 0,
    cache_creation_input_tokens BIGINT NOT NULL DEFAULT 0,
    exit_reason TEXT,
    owner BIGINT NOT NULL,                   -- the advisory-lock key of the store instance that accepted or began it
    PRIMARY KEY (tenant, project, user_id, conversation_id, turn_id),
    FOREIGN KEY (tenant, project, user_id, conversation_id) REFERENCES berth_conversations
);
CREATE INDEX berth_turns_unfinished ON berth_turns (owner) WHERE NOT committed AND state IN ('accepted', 'running');

CREATE TABLE berth_turn_log (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    position INTEGER NOT NULL,
    path TEXT NOT NULL,
    type TEXT NOT NULL,
    block TEXT NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, turn_id, round, position),
    FOREIGN KEY (tenant, project, user_id, conversation_id, turn_id) REFERENCES berth_turns
);

CREATE TABLE berth_timeline (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    path TEXT NOT NULL,
    type TEXT NOT NULL,
    log_round INTEGER,                       -- with log_position: the turn-log entry holding the block, when block IS NULL
    log_position INTEGER,
    block TEXT,
    PRIMARY KEY (tenant, project, user_id, conversation_id, position),
    CHECK ((block IS NULL) = (log_round IS NOT NULL AND log_position IS NOT NULL))
);

CREATE TABLE berth_sources (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    sid INTEGER NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, sid)
);

-- Artifact contents live in the row for now; an object store (S3) will hold them in distributed installs.
CREATE TABLE berth_artifacts (
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size BIGINT NOT NULL,
    turn_id TEXT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (tenant, project, user_id, conversation_id, path)
);
