//! The migration runner (protocol §2.2): plain `.sql` files from `migrations/`, embedded at
//! build time, applied in order, each in its own transaction together with its
//! `schema_migration` row and checksum. A failed migration rolls back unrecorded.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::error::{Error, Result};

/// One embedded migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The file name without `.sql`, e.g. `0001_init`.
    pub id: &'static str,
    pub sql: &'static str,
}

/// Every migration this build knows, oldest first. Append-only once landed.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        id: "0001_init",
        sql: include_str!("../../../migrations/0001_init.sql"),
    },
    Migration {
        id: "0002_session_recovery_session_idx",
        sql: include_str!("../../../migrations/0002_session_recovery_session_idx.sql"),
    },
    Migration {
        id: "0003_drop_unused_indexes",
        sql: include_str!("../../../migrations/0003_drop_unused_indexes.sql"),
    },
    Migration {
        id: "0004_owner_host",
        sql: include_str!("../../../migrations/0004_owner_host.sql"),
    },
    Migration {
        id: "0005_tool_list",
        sql: include_str!("../../../migrations/0005_tool_list.sql"),
    },
    Migration {
        id: "0006_session_housekeeping",
        sql: include_str!("../../../migrations/0006_session_housekeeping.sql"),
    },
];

const CREATE_SCHEMA_MIGRATION: &str = "CREATE TABLE IF NOT EXISTS schema_migration (
    id TEXT PRIMARY KEY,
    checksum TEXT NOT NULL,
    time_applied INTEGER NOT NULL
) STRICT";

impl Migration {
    /// A stable checksum of the file: 64-bit FNV-1a in hex. It guards against an
    /// edited migration, not against an adversary.
    pub fn checksum(&self) -> String {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.sql.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("fnv1a64:{hash:016x}")
    }
}

/// A row of `schema_migration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    pub id: String,
    pub checksum: String,
    pub time_applied: i64,
}

/// Reads `schema_migration`; empty when the table does not exist.
pub fn applied(conn: &Connection) -> Result<Vec<AppliedMigration>> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migration')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt =
        conn.prepare("SELECT id, checksum, time_applied FROM schema_migration ORDER BY id")?;
    let rows = stmt.query_map([], |r| {
        Ok(AppliedMigration {
            id: r.get(0)?,
            checksum: r.get(1)?,
            time_applied: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Why recorded migrations do not fit `known`, as the refusal reason of protocol §2.3.
pub fn check_applied(applied: &[AppliedMigration], known: &[Migration]) -> Option<String> {
    for row in applied {
        match known.iter().find(|m| m.id == row.id) {
            None => {
                return Some(format!(
                    "Database schema is newer than this build (migration {})",
                    row.id
                ));
            }
            Some(m) if m.checksum() != row.checksum => {
                return Some(format!(
                    "Migration {} checksum mismatch: the database recorded {}, this build has {}",
                    row.id,
                    row.checksum,
                    m.checksum()
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// Applies every migration of `known` not yet recorded, one transaction each.
/// `after_apply` runs after each commit (the `migrate.after_apply` failpoint).
/// Returns the ids applied by this call.
pub(crate) fn run(
    conn: &mut Connection,
    known: &[Migration],
    now_ms: i64,
    mut after_apply: impl FnMut(&Migration),
) -> Result<Vec<&'static str>> {
    let mut done = Vec::new();
    for migration in known {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(CREATE_SCHEMA_MIGRATION)?;
        // Re-read inside the write lock: another process may have migrated meanwhile.
        let recorded = applied(&tx)?;
        if let Some(reason) = check_applied(&recorded, known) {
            return Err(Error::Invalid(reason));
        }
        let present: Option<String> = tx
            .query_row(
                "SELECT id FROM schema_migration WHERE id = ?1",
                [migration.id],
                |r| r.get(0),
            )
            .optional()?;
        if present.is_some() {
            continue;
        }
        tx.execute_batch(migration.sql)?;
        tx.execute(
            "INSERT INTO schema_migration (id, checksum, time_applied) VALUES (?1, ?2, ?3)",
            (migration.id, migration.checksum(), now_ms),
        )?;
        tx.commit()?;
        tracing::info!(migration = migration.id, "applied migration");
        done.push(migration.id);
        after_apply(migration);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_2_checksums_are_stable_and_tell_files_apart() {
        let a = Migration {
            id: "0001_a",
            sql: "CREATE TABLE a (x INTEGER) STRICT;",
        };
        let b = Migration {
            id: "0001_a",
            sql: "CREATE TABLE a (y INTEGER) STRICT;",
        };
        assert_eq!(a.checksum(), a.checksum());
        assert_ne!(a.checksum(), b.checksum());
        assert!(a.checksum().starts_with("fnv1a64:"));
    }

    #[test]
    fn r2_2_a_failed_migration_rolls_back_unrecorded() {
        let mut conn = Connection::open_in_memory().unwrap();
        let list = [
            Migration {
                id: "0001_ok",
                sql: "CREATE TABLE ok (x INTEGER) STRICT;",
            },
            Migration {
                id: "0002_bad",
                sql: "CREATE TABLE half (x INTEGER) STRICT; THIS IS NOT SQL;",
            },
        ];
        assert!(run(&mut conn, &list, 5, |_| {}).is_err());
        let ids: Vec<String> = applied(&conn).unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, vec!["0001_ok".to_string()]);
        let half: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'half'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(half, 0);
    }

    #[test]
    fn r2_3_unknown_and_edited_migrations_are_named() {
        let known = [Migration {
            id: "0001_init",
            sql: "x",
        }];
        let newer = [AppliedMigration {
            id: "0002_future".into(),
            checksum: "c".into(),
            time_applied: 0,
        }];
        assert_eq!(
            check_applied(&newer, &known).as_deref(),
            Some("Database schema is newer than this build (migration 0002_future)")
        );
        let edited = [AppliedMigration {
            id: "0001_init".into(),
            checksum: "fnv1a64:0".into(),
            time_applied: 0,
        }];
        assert!(
            check_applied(&edited, &known)
                .unwrap()
                .contains("checksum mismatch")
        );
    }
}
