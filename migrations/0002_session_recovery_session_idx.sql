-- The recovery rows of one session, found by index: the session list and the
-- inspector show each session's state a page at a time, and deleting a session
-- cascades to its recovery rows.
CREATE INDEX session_recovery_session_idx ON session_recovery (session_id);
