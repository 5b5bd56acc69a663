//! One file per subcommand.

pub mod doctor;
