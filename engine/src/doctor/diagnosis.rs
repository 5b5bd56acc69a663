//! What `doctor` says about a file Steward refuses to open (protocol §2.3): which check
//! failed, what it found — the header, the tables, the migration table, the first
//! integrity errors — and what the user can do. Reading only: the file is opened
//! read-only (`immutable=1` when it has no log), nothing is created, moved or
//! written.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::store::migrate::{self, Migration};
use crate::store::open::{self, sidecar};

/// The check a refused file failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failed {
    /// Not a file (a directory), or unreadable.
    NotAFile,
    /// The header: not SQLite, a bad page size, empty, or truncated.
    Header,
    /// SQLite could not open or read it.
    Open,
    /// `PRAGMA quick_check` found damage.
    Integrity,
    /// Not Steward's: no `session` table, or no migration table.
    Foreign,
    /// Its migrations do not fit this build (newer, or edited).
    Migrations,
    /// Nothing failed this time (the refusal did not reproduce).
    Nothing,
}

/// The file's header, as read from its first 100 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Header {
    pub is_sqlite: bool,
    pub page_size: Option<u64>,
    pub page_count: u64,
    /// `page_size * page_count`, what a complete file holds.
    pub expected_bytes: Option<u64>,
}

/// One row of `schema_migration`, judged against this build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationFinding {
    pub id: String,
    /// `known`, `unknown` (a newer build wrote it) or `checksum_mismatch`.
    pub status: &'static str,
}

/// Everything `doctor` found about a refused file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    pub path: PathBuf,
    /// The one line every command prints.
    pub refusal: String,
    pub failed: Failed,
    pub bytes: Option<u64>,
    pub header: Option<Header>,
    /// Bytes in the `-wal` beside it, when there is one.
    pub wal_bytes: Option<u64>,
    pub tables: Vec<String>,
    pub migrations: Vec<MigrationFinding>,
    /// The first errors `PRAGMA quick_check` reports.
    pub integrity_errors: Vec<String>,
    /// What the user can do.
    pub advice: Vec<String>,
}

/// How many integrity errors are shown.
const FIRST_ERRORS: usize = 10;

/// Looks at a file that was refused with `refusal`, reading only.
pub fn diagnose(path: &Path, refusal: &str, known: &[Migration]) -> Diagnosis {
    let mut d = Diagnosis {
        path: path.to_path_buf(),
        refusal: refusal.to_string(),
        failed: Failed::Nothing,
        bytes: None,
        header: None,
        wal_bytes: std::fs::metadata(sidecar(path, "-wal"))
            .ok()
            .map(|m| m.len()),
        tables: Vec::new(),
        migrations: Vec::new(),
        integrity_errors: Vec::new(),
        advice: Vec::new(),
    };
    d.failed = look(path, known, &mut d);
    d.advice = advice(&d);
    d
}

/// Runs the checks in the order opening runs them; returns the first that fails.
fn look(path: &Path, known: &[Migration], d: &mut Diagnosis) -> Failed {
    let meta = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => meta,
        _ => return Failed::NotAFile,
    };
    d.bytes = Some(meta.len());
    let header = read_header(path);
    let complete = match (&header, d.wal_bytes) {
        (Some(h), None | Some(0)) => h
            .expected_bytes
            .is_none_or(|expected| expected == 0 || meta.len() >= expected),
        _ => true,
    };
    let sound = header
        .as_ref()
        .is_some_and(|h| h.is_sqlite && h.page_size.is_some());
    d.header = header;
    if !sound || !complete || meta.len() == 0 {
        return Failed::Header;
    }
    let Ok(conn) = open::open_read_only(path) else {
        return Failed::Open;
    };
    match integrity_errors(&conn) {
        Ok(errors) if errors.is_empty() => {}
        Ok(errors) => {
            d.integrity_errors = errors;
            return Failed::Integrity;
        }
        Err(e) => {
            d.integrity_errors = vec![e.to_string()];
            return Failed::Integrity;
        }
    }
    d.tables = tables(&conn).unwrap_or_default();
    if !d.tables.iter().any(|t| t == "session") || !d.tables.iter().any(|t| t == "schema_migration")
    {
        return Failed::Foreign;
    }
    let Ok(applied) = migrate::applied(&conn) else {
        return Failed::Foreign;
    };
    d.migrations = applied
        .iter()
        .map(|row| MigrationFinding {
            id: row.id.clone(),
            status: match known.iter().find(|m| m.id == row.id) {
                None => "unknown",
                Some(m) if m.checksum() != row.checksum => "checksum_mismatch",
                Some(_) => "known",
            },
        })
        .collect();
    if d.migrations.iter().any(|m| m.status != "known") {
        return Failed::Migrations;
    }
    Failed::Nothing
}

fn read_header(path: &Path) -> Option<Header> {
    let mut bytes = [0u8; 100];
    // Through the pinned descriptor: the process may hold connections to the file
    // (protocol §2.8).
    let n = crate::store::pinned::read_at(path, &mut bytes, 0).ok()?;
    let is_sqlite = n >= 100 && &bytes[..16] == b"SQLite format 3\0";
    if !is_sqlite {
        return Some(Header {
            is_sqlite,
            page_size: None,
            page_count: 0,
            expected_bytes: None,
        });
    }
    let page_size = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => Some(65_536),
        n if n >= 512 && n.is_power_of_two() => Some(u64::from(n)),
        _ => None,
    };
    let page_count = u64::from(u32::from_be_bytes([
        bytes[28], bytes[29], bytes[30], bytes[31],
    ]));
    Some(Header {
        is_sqlite,
        page_size,
        page_count,
        expected_bytes: page_size.map(|size| size * page_count),
    })
}

fn integrity_errors(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA quick_check({FIRST_ERRORS})"))?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows.into_iter().filter(|r| r != "ok").collect())
}

fn tables(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

fn advice(d: &Diagnosis) -> Vec<String> {
    let path = d.path.display();
    let aside = format!(
        "To start fresh, move it aside (`mv {path} {path}.aside`, with its -wal and -shm if present) and run Steward again: it creates a new database."
    );
    let mut advice = match d.failed {
        Failed::NotAFile => vec![format!(
            "{path} is not a regular file Steward can read. Remove or rename what is there, or point Steward elsewhere with --data-dir."
        )],
        Failed::Header | Failed::Open | Failed::Foreign => vec![
            format!(
                "{path} is not a Steward database (or not a complete one). If it is someone else's file, keep it and point Steward elsewhere with --data-dir."
            ),
            aside,
        ],
        Failed::Integrity => vec![
            "Keep the file: copy it (with its -wal and -shm) somewhere safe before anything else.".into(),
            "`steward inspect --json` reads what it still can, read-only.".into(),
            "`sqlite3 <copy> .recover` may salvage its rows into a new file.".into(),
            aside,
        ],
        Failed::Migrations if d.migrations.iter().any(|m| m.status == "unknown") => vec![
            "A newer build of Steward wrote this file. Run that build; this one will not touch it.".into(),
        ],
        Failed::Migrations => vec![
            "A migration recorded in the file differs from the one this build carries. Run the build that created the file; this one will not touch it.".into(),
            aside,
        ],
        Failed::Nothing => vec![
            "The checks pass now: another process may have been writing the file. Run the command again.".into(),
        ],
    };
    advice.push(
        "Steward never moves, repairs or deletes the file by itself; doctor wrote nothing.".into(),
    );
    advice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::migrate::MIGRATIONS;

    #[test]
    fn r2_3_a_foreign_file_is_explained_not_just_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
        drop(conn);
        let before = std::fs::read(&path).unwrap();
        let d = diagnose(
            &path,
            "Database is not empty and has no session table",
            MIGRATIONS,
        );
        assert_eq!(d.failed, Failed::Foreign);
        assert_eq!(d.tables, vec!["notes".to_string()]);
        assert_eq!(d.header.as_ref().map(|h| h.is_sqlite), Some(true));
        assert!(
            d.advice.iter().any(|a| a.contains("--data-dir")),
            "{:?}",
            d.advice
        );
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "doctor left a file behind");
    }

    #[test]
    fn r2_3_a_newer_schema_names_the_unknown_migration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        drop(crate::store::Store::open(&path, &crate::clock::ManualClock::new(0)).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO schema_migration VALUES ('9999_future', 'x', 0)",
            [],
        )
        .unwrap();
        drop(conn);
        let d = diagnose(
            &path,
            "Database schema is newer than this build",
            MIGRATIONS,
        );
        assert_eq!(d.failed, Failed::Migrations);
        assert!(d.migrations.contains(&MigrationFinding {
            id: "9999_future".into(),
            status: "unknown"
        }));
        assert!(d.advice[0].contains("newer build"), "{:?}", d.advice);
    }

    #[test]
    fn r2_3_a_truncated_file_reports_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        drop(crate::store::Store::open(&path, &crate::clock::ManualClock::new(0)).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..4096]).unwrap();
        let d = diagnose(&path, "the file is truncated", MIGRATIONS);
        assert_eq!(d.failed, Failed::Header);
        let header = d.header.unwrap();
        assert_eq!(header.page_size, Some(4096));
        assert!(header.page_count > 1);
        assert_eq!(d.bytes, Some(4096));
    }
}
