//! MCP tool servers (protocol §4.16), with the crash guarantees of Steward's own
//! tools.
//!
//! A session's servers — `[mcp.servers]` and those a front end gives it (ACP's
//! `mcpServers`) — are started on its first step in this process ([`McpHub`]): a
//! stdio server under Steward's process code (a process group of its own that dies
//! with Steward, its identity recorded), an HTTP one over Streamable HTTP. Their
//! tools are offered as `SERVER__TOOL` and ask before they run unless `tools.allow`
//! names them (exactly, or `SERVER__*`); a server's annotations never skip asking.
//!
//! A call is readied first — handed to the transport and held at its gate
//! (`mcp/gate.rs`) — so its request id is known; `tool.started` records the server, its
//! settings' fingerprint, the tool, the arguments and the request id; only then is
//! the request let out. It is never sent twice: not after a crash (recovery records
//! its outcome as unknown), a transport error or a timeout. A call that times out or
//! is cancelled is cancelled at the server (`notifications/cancelled`), recorded as
//! an error whose outcome is unknown, and its stdio server is stopped so nothing
//! keeps running behind the user; the next call starts it again.

mod gate;
mod hub;
mod server;

pub use hub::{MAX_TOOL_NAME, McpHub, Offer, RunningServer, allows, offered_name};
pub use server::fingerprint;
