//! Workspace integration tests: the real `steward` binary, real files, real crashes.

#![allow(clippy::print_stderr)] // the campaign prints its summary line

mod support;

mod acp;
mod acp_daily;
mod acp_raw;
mod campaign;
mod claims;
mod crowd;
mod docs;
mod editing;
mod faults;
mod hardening;
mod mcp;
mod nothing_lost;
mod powercut;
mod providers;
mod recovery;
mod run;
mod sessions;
mod store_refusals;
mod tool_processes;
mod tui;
