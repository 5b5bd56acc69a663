-- Session housekeeping (protocol §3.6): an archived session is kept whole but left
-- out of the lists unless asked for; the lists order sessions by recent activity
-- (`time_updated`, then id), a page at a time, by this index.
ALTER TABLE session ADD COLUMN archived INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1));
CREATE INDEX session_time_updated_id_idx ON session (time_updated, id);
