//! Named fault-injection points, for the fault campaign (`tests/campaign.rs`).
//!
//! Built with the `failpoints` feature, `failpoint!("name")` consults tikv `fail`
//! (configured from `FAILPOINTS` at start). `name=return` aborts the process on the
//! spot — no unwinding, no clean close — so a test sees exactly what a crash at that
//! instant leaves on disk. `sleep(ms)` and `pause` behave as in `fail`. Without the
//! feature the macro compiles to nothing.

/// Every named point. Each appears in the code exactly where its name says.
pub const NAMES: &[&str] = &[
    "migrate.after_apply",
    "claim.after_acquire",
    "input.after_admit",
    "runner.after_promote",
    "runner.before_provider_dispatch",
    "runner.after_provider_dispatch",
    "runner.after_text_commit",
    "runner.after_tool_called",
    "runner.after_tool_dispatch",
    "tools.before_replace",
    "runner.after_tool_completed",
    "mcp.after_call_sent",
    "runner.before_clear",
    "compaction.before_ended",
    "cancel.before_commit",
    "recovery.after_takeover",
    "recovery.after_commit",
    "recovery.between_batches",
    "wake.after_promote",
];

/// Evaluates the named failpoint.
#[macro_export]
macro_rules! failpoint {
    ($name:literal) => {{
        #[cfg(feature = "failpoints")]
        {
            if $crate::failpoint::fail::eval($name, |_| ()).is_some() {
                $crate::failpoint::abort_at($name);
            }
        }
    }};
}

#[cfg(feature = "failpoints")]
#[doc(hidden)]
pub use fail;

/// Aborts the process at failpoint `name`.
#[cfg(feature = "failpoints")]
#[doc(hidden)]
#[allow(clippy::print_stderr)]
pub fn abort_at(name: &str) -> ! {
    eprintln!("steward: failpoint {name} hit: aborting");
    std::process::abort()
}

/// Reads `FAILPOINTS` from the environment. The returned guard must live as long
/// as the process runs; a no-op without the `failpoints` feature.
pub fn setup() -> Guard {
    #[cfg(feature = "failpoints")]
    {
        Guard(Some(fail::FailScenario::setup()))
    }
    #[cfg(not(feature = "failpoints"))]
    {
        Guard(None)
    }
}

/// Keeps the configured failpoints alive.
pub struct Guard(#[allow(dead_code)] Option<GuardInner>);

#[cfg(feature = "failpoints")]
type GuardInner = fail::FailScenario<'static>;
#[cfg(not(feature = "failpoints"))]
type GuardInner = ();

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failpoint::Guard")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Every `failpoint!("…")` in the engine's sources.
    fn used() -> BTreeSet<String> {
        fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("failpoint.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for piece in text.split("failpoint!(\"").skip(1) {
                        out.insert(piece.split('"').next().unwrap().to_string());
                    }
                }
            }
        }
        let mut out = BTreeSet::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut out,
        );
        out
    }

    #[test]
    fn every_named_failpoint_exists_in_the_code_and_no_other() {
        let named: BTreeSet<String> = super::NAMES.iter().map(|s| s.to_string()).collect();
        assert_eq!(used(), named);
    }
}
