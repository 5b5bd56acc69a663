//! Logs go to a daily file, never to the terminal (the TUI owns it, and under `acp`
//! stdout carries only protocol messages). Level from `STEWARD_LOG`.
//!
//! Transcripts hold file contents and command output, and so may the logs: the log
//! directory is created `0700` and every log file `0600`. The files are
//! `steward.<YYYY-MM-DD>.log` (UTC); the newest [`KEEP`] are kept.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use steward_engine::clock::{Clock, SystemClock};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Log files kept.
const KEEP: usize = 7;

/// Starts file logging in `dir`. The guard flushes on drop; hold it for the
/// process's life. Without a writable `dir`, logging is off rather than fatal.
pub fn init(dir: &Path) -> Option<WorkerGuard> {
    let writer = DailyFile::open(dir).ok()?;
    let (writer, guard) = tracing_appender::non_blocking(writer);
    let filter = EnvFilter::try_from_env("STEWARD_LOG")
        // The MCP client logs what servers send at `info`: a server must not fill
        // the disk through Steward's log.
        .unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .ok()?;
    Some(guard)
}

/// A log file per UTC day, private to its user.
struct DailyFile {
    dir: PathBuf,
    clock: SystemClock,
    day: i64,
    file: File,
}

impl DailyFile {
    fn open(dir: &Path) -> io::Result<DailyFile> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let clock = SystemClock::new();
        let day = clock.now_ms().div_euclid(86_400_000);
        let file = open_day(dir, day)?;
        prune(dir);
        Ok(DailyFile {
            dir: dir.to_path_buf(),
            clock,
            day,
            file,
        })
    }
}

impl Write for DailyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let day = self.clock.now_ms().div_euclid(86_400_000);
        if day != self.day
            && let Ok(file) = open_day(&self.dir, day)
        {
            self.file = file;
            self.day = day;
            prune(&self.dir);
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Opens (appending, creating `0600`) the file of `day` (days since the epoch).
fn open_day(dir: &Path, day: i64) -> io::Result<File> {
    let path = dir.join(format!("steward.{}.log", date(day)));
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)?;
    // A file an older build created keeps its mode: tighten it.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// Removes all but the newest [`KEEP`] log files.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("steward.") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    let excess = logs.len().saturating_sub(KEEP);
    for old in &logs[..excess] {
        let _ = std::fs::remove_file(old);
    }
}

/// `YYYY-MM-DD` of `day` days since 1970-01-01 (the proleptic Gregorian calendar).
fn date(day: i64) -> String {
    // Howard Hinnant's days-to-civil.
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_named_by_their_utc_date() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(19_723), "2024-01-01");
        assert_eq!(date(19_782), "2024-02-29");
        assert_eq!(date(20_788), "2026-12-01");
        assert_eq!(date(-1), "1969-12-31");
    }

    #[test]
    fn log_files_are_private_and_only_the_newest_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        for day in 0..10 {
            drop(open_day_for_test(&logs, day));
        }
        let mut writer = DailyFile::open(&logs).unwrap();
        writer.write_all(b"hello\n").unwrap();
        let names: Vec<String> = std::fs::read_dir(&logs)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), KEEP, "{names:?}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&logs), 0o700);
        for name in names {
            assert_eq!(mode(&logs.join(name)), 0o600);
        }
    }

    fn open_day_for_test(dir: &Path, day: i64) -> File {
        std::fs::create_dir_all(dir).unwrap();
        open_day(dir, day).unwrap()
    }
}
