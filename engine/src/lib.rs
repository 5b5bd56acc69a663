//! Steward's engine: a crash-safe local agent runtime, as a library.
//!
//! A *session* is a conversation with an LLM agent that calls tools. Every execution
//! of a session holds a lease (a claim row) in one SQLite file, renewed by a
//! heartbeat and checked (fenced) on every durable write. When the process dies, the
//! next launch *recovers*: it reconciles each interrupted execution into the
//! transcript ("Session execution interrupted by server restart", "Tool execution
//! outcome unknown after server restart"), never replays a provider or tool call,
//! and continues the agent through a durable, exactly-once wake. The protocol is
//! `docs/protocol.md` in the repository; this crate has no terminal and never writes
//! to stdout.
//!
//! # Lifecycle
//!
//! A desktop shell or an editor plugin embeds the engine like this (the whole
//! program is `examples/embed.rs`):
//!
//! 1. **Open** the database ([`db::Db::open`]): a file Steward must not touch is
//!    refused ([`Error::DatabaseRefused`]) and left byte-for-byte as it was.
//! 2. **Start** an [`Engine`] ([`Engine::start`]): this process becomes an owner,
//!    with a provider ([`provider::from_config`] or your own [`provider::Provider`]),
//!    tools ([`tools::ToolRegistry::standard`]) and a permission policy
//!    ([`tools::Permission`]: ask your user, or [`tools::Headless`]).
//! 3. **Recover** ([`Engine::recover`]) before running anything, then start what
//!    is due ([`Engine::redrive_wakes`]) and keep recovering on a timer
//!    ([`Engine::start_background`]).
//! 4. **Create a session** ([`Engine::create_session`]) and **submit a prompt**
//!    ([`Engine::submit`]): it is admitted together with the session's claim, or
//!    refused with nothing admitted ([`Error::SessionBusy`] when another process
//!    holds the session).
//! 5. **Stream events** ([`Engine::subscribe`]): every committed [`events::Event`]
//!    and when sessions run and go idle ([`EngineEvent`]); wait for the end with
//!    [`Engine::wait_idle`].
//! 6. **Inspect** through a read-only [`inspect::Reader`]: sessions, transcripts a
//!    page at a time, claims, quarantined rows, wakes and recoveries; act on what
//!    recovery left with [`Engine::continue_execution`] and
//!    [`Engine::discard_execution`].
//! 7. **Cancel** a running turn ([`Engine::cancel`]: recorded as the user's
//!    cancellation) and **shut down** ([`Engine::shutdown`]): whatever still runs is
//!    stopped without writing and reconciled like a crash, so it continues at the
//!    next launch.
//!
//! Time comes from an injectable [`clock::Clock`]; tests drive it with
//! [`clock::ManualClock`].

pub mod clock;
pub mod config;
pub mod db;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod events;
pub mod inspect;
pub mod mcp;
pub mod message;
pub mod printable;
pub mod projection;
pub mod provider;
pub mod tools;

// The machinery below is public for Steward's own binaries, benchmarks and tests;
// it is not the embedding API and may change at any time.
#[doc(hidden)]
pub mod claim;
#[doc(hidden)]
pub mod coordinator;
#[doc(hidden)]
pub mod doorbell;
#[doc(hidden)]
pub mod failpoint;
#[doc(hidden)]
pub mod host;
#[doc(hidden)]
pub mod housekeeping;
#[doc(hidden)]
pub mod ids;
#[doc(hidden)]
pub mod inspector;
#[doc(hidden)]
pub mod invariants;
#[doc(hidden)]
pub mod owner;
#[doc(hidden)]
pub mod phase;
#[doc(hidden)]
pub mod recovery;
#[doc(hidden)]
pub mod runner;
#[doc(hidden)]
pub mod store;

pub use coordinator::SessionOutcome;
pub use engine::{Continued, Engine, EngineOptions, Redrive, Redriving};
pub use error::{Error, Result};
pub use phase::Phase;
pub use recovery::{
    QuarantinedRow, Recovered, RecoveryReport, StoppedProcess, WaitingSession, WakeReport,
};
pub use runner::{EngineEvent, Outcome};

#[cfg(test)]
pub(crate) mod testing;
