//! Workspace integration tests: the real `steward` binary, real files, real crashes.

mod support;

mod claims;
mod recovery;
mod run;
mod store_refusals;
mod tool_processes;
