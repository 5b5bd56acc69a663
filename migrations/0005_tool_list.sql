-- The tool lists steps offered the model (protocol §4.16), kept once per hash:
-- `step.started` names the hash, so a transcript can be replayed against exactly
-- what the model saw, MCP servers' tools included.
CREATE TABLE tool_list (
    hash TEXT PRIMARY KEY,
    tools TEXT NOT NULL,
    time_created INTEGER NOT NULL
) STRICT;
