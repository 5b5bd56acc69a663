//! Workspace integration tests: the real `steward` binary, real files, real crashes.

mod support;

mod claims;
mod run;
mod store_refusals;
