//! Steward's terminal interface: the chat (`steward`) and the read-only inspector
//! (`steward inspect`), ratatui views over the engine's read models.
//!
//! Shaped as one [`app::App`] state, one [`app::Msg`] enum, a pure
//! [`update::update`] that returns [`app::Effect`]s, a [`view::view`] that only
//! renders, and one event loop ([`runtime`]) that selects over terminal input, the
//! engine's events, the data-directory doorbell and a clock that ticks only while
//! something on screen counts down. Every key comes from one table ([`keymap`]),
//! which also writes the help.

pub mod app;
pub mod keymap;
pub mod loader;
pub mod permission;
pub mod runtime;
pub mod terminal;
pub mod theme;
pub mod update;
pub mod view;

pub use runtime::{Leave, Options, run_chat, run_inspector};

#[cfg(test)]
mod fixtures;
