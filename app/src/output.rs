//! What the commands write for people: standard output that tolerates a reader going
//! away (`steward show … | head` ends the output quietly instead of panicking on a
//! broken pipe, and the command still finishes its work), and messages on standard
//! error. Every line passes through the terminal filter
//! ([`steward_engine::printable::clean`]) here, in this one place: whatever text
//! from outside it carries — a provider's error body, a tool's output, a row of the
//! database — can never drive the user's terminal.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes one line to stdout (filtered) unless the reader has gone.
pub fn line(args: fmt::Arguments<'_>) {
    let text = steward_engine::printable::clean(&args.to_string());
    write(format_args!("{text}\n"));
}

/// Writes one line to stderr, filtered.
pub fn error_line(args: fmt::Arguments<'_>) {
    let text = steward_engine::printable::clean(&args.to_string());
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Writes to stdout (and flushes) unless the reader has gone. The caller filters:
/// streamed text goes through a [`steward_engine::printable::Printable`] that keeps
/// its state across chunks.
pub fn write(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out.write_fmt(args).and_then(|()| out.flush()).is_err() {
        CLOSED.store(true, Ordering::Relaxed);
    }
}

/// `println!` for command output.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// `eprintln!` for messages, filtered.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::error_line(format_args!($($arg)*))
    };
}
pub(crate) use say;
