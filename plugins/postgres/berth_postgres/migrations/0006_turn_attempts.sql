-- Distributed mode: how many times workers began a turn, and why its last attempt ended without it.

-- `attempts` counts the claims of a turn by a worker (each new owner is one attempt); a turn claimed again after
-- `max_attempts` (a worker died every time, or it failed every time) is parked: stored `failed` with the exit
-- reason `turn_poisoned` and `last_error`, so its conversation takes new turns again.
ALTER TABLE berth_turns ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE berth_turns ADD COLUMN last_error TEXT;
