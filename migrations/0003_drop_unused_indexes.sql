-- Two indexes no query uses, each written on every event or input append
-- (protocol §2.5 lists the ones that remain):
-- - event (aggregate_id, type, seq): every query of the log filters by session and
--   orders by seq, which the primary key's index serves; none filters by type
--   within a session.
-- - session_input (session_id, promoted_seq): a prefix of
--   session_input_session_pending_delivery_seq_idx, which serves every query it
--   could.
DROP INDEX event_aggregate_type_seq_idx;
DROP INDEX session_input_session_promoted_seq_idx;
