//! A doorbell on the data directory: any change to the database files (another
//! process committed) rings it. `notify`, debounced; callers also poll slowly as a
//! fallback, since file events are a hint, never the source of truth.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use tokio::sync::Notify;

/// Rings `bell` when a file of the database in `dir` changes. Keep the returned
/// watcher alive for as long as the bell should ring; `None` when the platform
/// cannot watch (the fallback poll then does the work).
pub fn watch(
    dir: &Path,
    bell: Arc<Notify>,
) -> Option<Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>> {
    let handler = move |result: DebounceEventResult| {
        if let Ok(events) = result
            && events.iter().any(|e| {
                e.path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("steward.db"))
            })
        {
            bell.notify_one();
        }
    };
    let mut debouncer = new_debouncer(Duration::from_millis(100), handler)
        .map_err(|e| tracing::warn!(error = %e, "cannot watch the data directory"))
        .ok()?;
    debouncer
        .watcher()
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|e| tracing::warn!(error = %e, "cannot watch the data directory"))
        .ok()?;
    Some(debouncer)
}
