//! Steward's engine: a crash-safe local agent runtime.
//!
//! Every execution of a session holds a lease (a claim row) in one SQLite file,
//! renewed by a heartbeat and checked (fenced) on every durable write. After a crash
//! the next launch reconciles each interrupted execution into the transcript, never
//! replays a provider or tool call, and continues the agent through a durable,
//! exactly-once wake. The protocol is `docs/protocol.md`; this crate has no terminal and never
//! writes to stdout.

pub mod claim;
pub mod clock;
pub mod config;
pub mod coordinator;
pub mod db;
pub mod doctor;
pub mod doorbell;
pub mod engine;
pub mod error;
pub mod events;
pub mod failpoint;
pub mod ids;
pub mod inspect;
pub mod inspector;
pub mod invariants;
pub mod message;
pub mod owner;
pub mod phase;
pub mod projection;
pub mod provider;
pub mod recovery;
pub mod runner;
pub mod store;
pub mod tools;

pub use engine::{Engine, EngineOptions};

#[cfg(test)]
pub(crate) mod testing;
pub use error::{Error, Result};
