-- Distributed mode: the request of a queued turn, and artifacts kept in an object store.

-- What a worker needs to run a turn the API accepted (bundle, message, time zone, attachments), stored in the
-- accept's transaction, so a turn whose queue entry is lost (a Redis restart) can be queued again from here.
ALTER TABLE berth_turns ADD COLUMN request BYTEA;

-- An artifact's bytes are in this row (data) or in the object store (location: the object's key).
ALTER TABLE berth_artifacts ALTER COLUMN data DROP NOT NULL;
ALTER TABLE berth_artifacts ADD COLUMN location TEXT;
ALTER TABLE berth_artifacts ADD CONSTRAINT berth_artifacts_stored CHECK (data IS NOT NULL OR location IS NOT NULL);
