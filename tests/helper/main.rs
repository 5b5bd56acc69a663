//! `steward-test-helper`: drives the engine in ways the real binary never does, for
//! the integration tests (custom migration lists, crafted rows). Failpoints apply.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use steward_engine::clock::SystemClock;
use steward_engine::store::Store;
use steward_engine::store::migrate::{MIGRATIONS, Migration};

/// The real migrations followed by two test-only ones.
fn test_migrations() -> Vec<Migration> {
    let mut list = MIGRATIONS.to_vec();
    list.push(Migration {
        id: "9002_test_notes",
        sql: "CREATE TABLE test_note (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT;
              INSERT INTO test_note (body) VALUES ('from 9002');",
    });
    list.push(Migration {
        id: "9003_test_note_tags",
        sql: "ALTER TABLE test_note ADD COLUMN tag TEXT;
              INSERT INTO test_note (body, tag) VALUES ('from 9003', 't');",
    });
    list
}

fn main() -> ExitCode {
    let _failpoints = steward_engine::failpoint::setup();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["migrate", db, count] => migrate(PathBuf::from(db), count.parse().expect("count")),
        _ => Err(format!("unknown helper command {args:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("helper: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens `db` with the first `count` test migrations.
fn migrate(db: PathBuf, count: usize) -> Result<(), String> {
    let list = test_migrations();
    let store =
        Store::open_with(&db, &list[..count], &SystemClock::new()).map_err(|e| e.to_string())?;
    drop(store);
    Ok(())
}
