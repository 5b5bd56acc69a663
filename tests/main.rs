//! Workspace integration tests: the real `steward` binary, real files, real crashes.

mod support;

mod store_refusals;
