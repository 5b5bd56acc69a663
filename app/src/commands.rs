//! One file per subcommand.

pub mod doctor;
pub mod run;
pub mod sessions;
pub mod show;
