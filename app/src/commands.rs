//! One file per subcommand.

pub mod chat;
pub mod discard;
pub mod doctor;
pub mod housekeeping;
pub mod inspect;
pub mod recover;
pub mod run;
pub mod sessions;
pub mod show;
pub mod wake;
