//! Standard output that tolerates a reader going away: `steward show … | head` ends
//! the output quietly instead of panicking on a broken pipe, and the command still
//! finishes its work (a session keeps running to idle, a recovery completes).

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes one line to stdout unless the reader has gone.
pub fn line(args: fmt::Arguments<'_>) {
    write(format_args!("{args}\n"));
}

/// Writes to stdout (and flushes) unless the reader has gone.
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
