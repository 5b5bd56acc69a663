-- Steward's first schema (protocol §2.5). Every table is STRICT: a TEXT value in an
-- INTEGER column is refused instead of sorting after every number.

CREATE TABLE session (
    id TEXT PRIMARY KEY NOT NULL,
    title TEXT NOT NULL,
    directory TEXT NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL
) STRICT;

-- The durable, append-only log. `seq` counts from 0 per session.
CREATE TABLE event (
    aggregate_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    owner_id TEXT,
    execution_id TEXT,
    epoch INTEGER,
    time_created INTEGER NOT NULL,
    PRIMARY KEY (aggregate_id, seq)
) STRICT;
CREATE INDEX event_aggregate_type_seq_idx ON event (aggregate_id, type, seq);

CREATE TABLE session_message (
    id TEXT PRIMARY KEY NOT NULL,
    session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
    type TEXT NOT NULL CHECK (type IN ('user', 'assistant', 'synthetic')),
    seq INTEGER NOT NULL,
    time_created INTEGER NOT NULL,
    time_updated INTEGER NOT NULL,
    data TEXT NOT NULL
) STRICT;
CREATE UNIQUE INDEX session_message_session_seq_idx ON session_message (session_id, seq);
CREATE INDEX session_message_session_type_seq_idx ON session_message (session_id, type, seq);
CREATE INDEX session_message_session_time_created_id_idx ON session_message (session_id, time_created, id);

CREATE TABLE session_input (
    id TEXT PRIMARY KEY NOT NULL,
    session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
    prompt TEXT NOT NULL,
    delivery TEXT NOT NULL CHECK (delivery IN ('queue', 'admit')),
    admitted_seq INTEGER NOT NULL,
    promoted_seq INTEGER,
    wake_pending INTEGER NOT NULL DEFAULT 0,
    time_created INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX session_input_session_admitted_seq_idx ON session_input (session_id, admitted_seq);
CREATE INDEX session_input_session_promoted_seq_idx ON session_input (session_id, promoted_seq);
CREATE INDEX session_input_session_pending_delivery_seq_idx
    ON session_input (session_id, promoted_seq, delivery, admitted_seq);
CREATE INDEX session_input_wake_pending_promoted_time_created_id_idx
    ON session_input (wake_pending, promoted_seq, time_created, id);

-- The claim: "owner O runs session S as execution E until expires_at".
-- No index on expires_at: takeover rewrites it (protocol §2.5).
CREATE TABLE session_execution (
    id TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
    owner_id TEXT NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0,
    assistant_message_id TEXT,
    phase TEXT NOT NULL,
    assistant_seq INTEGER NOT NULL DEFAULT -1,
    time_created INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    recovery_error TEXT,
    CONSTRAINT session_execution_pk PRIMARY KEY (id),
    CONSTRAINT session_execution_phase_check CHECK (phase IN ('ready', 'safe', 'unknown'))
) STRICT;
CREATE UNIQUE INDEX session_execution_session_idx ON session_execution (session_id);
CREATE INDEX session_execution_owner_idx ON session_execution (owner_id);
CREATE INDEX session_execution_created_idx ON session_execution (time_created, id);

CREATE TABLE session_recovery (
    execution_id TEXT PRIMARY KEY NOT NULL,
    session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
    assistant_message_id TEXT REFERENCES session_message (id) ON DELETE CASCADE,
    continuation_message_id TEXT NOT NULL REFERENCES session_input (id) ON DELETE CASCADE,
    phase TEXT NOT NULL,
    wake_pending INTEGER NOT NULL DEFAULT 1,
    wake_attempts INTEGER NOT NULL DEFAULT 0,
    recovery_error TEXT,
    time_created INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX session_recovery_continuation_message_idx
    ON session_recovery (continuation_message_id);
CREATE INDEX session_recovery_wake_pending_time_created_execution_idx
    ON session_recovery (wake_pending, time_created, execution_id);

CREATE TABLE owner (
    id TEXT PRIMARY KEY NOT NULL,
    pid INTEGER NOT NULL,
    hostname TEXT NOT NULL,
    time_started INTEGER NOT NULL,
    lock_path TEXT
) STRICT;
