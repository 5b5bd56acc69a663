//! Store tests on temp files and in-memory databases.

use pretty_assertions::assert_eq;
use rusqlite::params;

use super::*;
use crate::clock::ManualClock;
use crate::events::{Delivery, Event};
use crate::store::events::{append_unowned, replay};
use crate::store::migrate::applied;

fn clock() -> ManualClock {
    ManualClock::new(1_700_000_000_000)
}

fn names(conn: &Connection, kind: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = ?1 AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    stmt.query_map([kind], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn r2_5_the_migrations_create_every_table_and_index() {
    let store = Store::open_in_memory(&clock()).unwrap();
    let conn = store.conn();
    assert_eq!(
        names(conn, "table"),
        vec![
            "event",
            "owner",
            "schema_migration",
            "session",
            "session_execution",
            "session_input",
            "session_message",
            "session_recovery",
            "tool_list"
        ]
    );
    assert_eq!(
        names(conn, "index"),
        vec![
            "session_execution_created_idx",
            "session_execution_owner_idx",
            "session_execution_session_idx",
            "session_input_session_admitted_seq_idx",
            "session_input_session_pending_delivery_seq_idx",
            "session_input_wake_pending_promoted_time_created_id_idx",
            "session_message_session_seq_idx",
            "session_message_session_time_created_id_idx",
            "session_message_session_type_seq_idx",
            "session_recovery_continuation_message_idx",
            "session_recovery_session_idx",
            "session_recovery_wake_pending_time_created_execution_idx",
            "session_time_updated_id_idx",
        ]
    );
    // Every table is STRICT, and nothing indexes expires_at.
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'index') AND sql IS NOT NULL")
        .unwrap();
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (name, sql) in rows {
        if sql.starts_with("CREATE TABLE") {
            assert!(sql.trim_end().ends_with("STRICT"), "{name} is not STRICT");
        } else {
            assert!(!sql.contains("expires_at"), "{name} indexes expires_at");
        }
    }
}

#[test]
fn r2_5_unique_indexes_are_unique() {
    let store = Store::open_in_memory(&clock()).unwrap();
    let unique: Vec<String> = store
        .conn()
        .prepare(
            "SELECT il.name FROM sqlite_master m, pragma_index_list(m.name) il
             WHERE m.type = 'table' AND il.\"unique\" = 1 AND il.origin = 'c' ORDER BY il.name",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        unique,
        vec![
            "session_execution_session_idx",
            "session_input_session_admitted_seq_idx",
            "session_message_session_seq_idx",
            "session_recovery_continuation_message_idx",
        ]
    );
}

#[test]
fn r2_5_primary_keys_are_as_specified() {
    let store = Store::open_in_memory(&clock()).unwrap();
    let pk = |table: &str| -> Vec<String> {
        store
            .conn()
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') WHERE pk > 0 ORDER BY pk"
            ))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(pk("session"), vec!["id"]);
    assert_eq!(pk("event"), vec!["aggregate_id", "seq"]);
    assert_eq!(pk("session_message"), vec!["id"]);
    assert_eq!(pk("session_input"), vec!["id"]);
    assert_eq!(pk("session_execution"), vec!["id"]);
    assert_eq!(pk("session_recovery"), vec!["execution_id"]);
    assert_eq!(pk("owner"), vec!["id"]);
    assert_eq!(pk("schema_migration"), vec!["id"]);
}

#[test]
fn r2_5_foreign_keys_cascade_from_session() {
    let store = Store::open_in_memory(&clock()).unwrap();
    let fks: Vec<(String, String, String, String)> = store
        .conn()
        .prepare(
            "SELECT m.name, f.\"from\", f.\"table\", f.on_delete FROM sqlite_master m,
             pragma_foreign_key_list(m.name) f WHERE m.type = 'table' ORDER BY m.name, f.\"from\"",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expect = |a: &str, b: &str, c: &str| {
        (
            a.to_string(),
            b.to_string(),
            c.to_string(),
            "CASCADE".to_string(),
        )
    };
    assert_eq!(
        fks,
        vec![
            expect("session_execution", "session_id", "session"),
            expect("session_input", "session_id", "session"),
            expect("session_message", "session_id", "session"),
            expect(
                "session_recovery",
                "assistant_message_id",
                "session_message"
            ),
            expect(
                "session_recovery",
                "continuation_message_id",
                "session_input"
            ),
            expect("session_recovery", "session_id", "session"),
        ]
    );

    let conn = store.conn();
    conn.execute_batch(
        "INSERT INTO session (id, title, directory, time_created, time_updated) VALUES ('ses_1', 't', '/', 0, 0);
         INSERT INTO session_message VALUES ('msg_1', 'ses_1', 'user', 0, 0, 0, '{}');
         INSERT INTO session_input VALUES ('inp_1', 'ses_1', 'p', 'queue', 0, NULL, 1, 0);
         INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
             VALUES ('exe_1', 'ses_1', 'own_1', 'ready', 0, 0);
         INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created)
             VALUES ('exe_1', 'ses_1', 'inp_1', 'ready', 0);
         DELETE FROM session WHERE id = 'ses_1';",
    )
    .unwrap();
    for table in [
        "session_message",
        "session_input",
        "session_execution",
        "session_recovery",
    ] {
        let n: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "{table} kept rows of a deleted session");
    }
    let orphan = conn.execute(
        "INSERT INTO session_message VALUES ('msg_2', 'ses_missing', 'user', 0, 0, 0, '{}')",
        [],
    );
    assert!(orphan.is_err(), "foreign keys are not enforced");
}

#[test]
fn r2_5_phase_and_types_are_checked() {
    let store = Store::open_in_memory(&clock()).unwrap();
    let conn = store.conn();
    conn.execute("INSERT INTO session (id, title, directory, time_created, time_updated) VALUES ('ses_1', 't', '/', 0, 0)", [])
        .unwrap();
    let insert = |phase: &str, expires: &dyn rusqlite::ToSql| {
        conn.execute(
            "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
             VALUES ('exe_1', 'ses_1', 'own_1', ?1, 0, ?2)",
            params![phase, expires],
        )
    };
    let invalid = insert("invalid", &0).unwrap_err();
    assert!(
        invalid
            .to_string()
            .contains("session_execution_phase_check"),
        "{invalid}"
    );
    let text_expiry = insert("ready", &"soon").unwrap_err();
    assert!(
        text_expiry
            .to_string()
            .contains("cannot store TEXT value in INTEGER column"),
        "{text_expiry}"
    );
    insert("ready", &0).unwrap();
    let bad_type = conn.execute(
        "INSERT INTO session_message VALUES ('msg_1', 'ses_1', 'robot', 0, 0, 0, '{}')",
        [],
    );
    assert!(bad_type.is_err());
}

#[test]
fn r2_1_connections_use_wal_foreign_keys_and_the_chosen_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("steward.db"), &clock()).unwrap();
    let conn = store.conn();
    let get = |pragma: &str| -> String {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |r| {
            r.get::<_, rusqlite::types::Value>(0)
        })
        .map(|v| format!("{v:?}"))
        .unwrap()
    };
    assert_eq!(get("journal_mode"), "Text(\"wal\")");
    assert_eq!(get("foreign_keys"), "Integer(1)");
    assert_eq!(get("busy_timeout"), "Integer(5000)");
    assert_eq!(get("synchronous"), "Integer(2)"); // FULL
}

#[test]
fn r2_2_each_migration_is_recorded_once_with_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = clock();
    drop(Store::open(&path, &clock).unwrap());
    clock.advance_ms(10);
    let store = Store::open(&path, &clock).unwrap();
    let rows = applied(store.conn()).unwrap();
    assert_eq!(rows.len(), MIGRATIONS.len());
    assert_eq!(rows[0].id, "0001_init");
    assert_eq!(rows[0].checksum, MIGRATIONS[0].checksum());
    assert_eq!(rows[0].time_applied, 1_700_000_000_000);
}

#[test]
fn r2_4_upgrading_a_populated_database_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = clock();
    let first = &MIGRATIONS[..1];
    {
        let mut store = Store::open_with(&path, first, &clock).unwrap();
        crate::testing::on_old_schema(&mut store, |store| {
            store
                .write(|tx| {
                    for i in 0..50 {
                        let session = format!("ses_{i:03}");
                        append_unowned(
                            tx,
                            &session,
                            1,
                            Event::SessionCreated {
                                title: format!("t{i}"),
                                directory: "/w".into(),
                            },
                        )?;
                        append_unowned(
                            tx,
                            &session,
                            2,
                            Event::InputAdmitted {
                                input_id: format!("inp_{i:03}"),
                                prompt: "hello".into(),
                                content: Vec::new(),
                                delivery: Delivery::Queue,
                                wake_pending: true,
                                continuation_of: None,
                            },
                        )?;
                    }
                    Ok(())
                })
                .unwrap()
        });
    }
    let snapshot = |conn: &Connection| -> Vec<String> {
        let mut out = Vec::new();
        for table in ["session", "event", "session_input"] {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                .unwrap();
            let n = stmt.column_count();
            let rows = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            r.get::<_, rusqlite::types::Value>(i)
                                .map(|v| format!("{v:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap();
            for row in rows {
                out.push(format!("{table}: {}", row.unwrap().join(", ")));
            }
        }
        out
    };
    let before = snapshot(&Connection::open(&path).unwrap());
    assert_eq!(before.len(), 50 * 4);
    let upgraded: Vec<Migration> = first
        .iter()
        .copied()
        .chain([Migration {
            id: "0002_session_pinned",
            sql: "ALTER TABLE session ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
                  CREATE INDEX session_pinned_idx ON session (pinned);",
        }])
        .collect();
    let store = Store::open_with(&path, &upgraded, &clock).unwrap();
    let after = snapshot(store.conn());
    let stripped: Vec<String> = after
        .iter()
        .map(|row| {
            if row.starts_with("session: ") {
                row.trim_end_matches(", Integer(0)").to_string()
            } else {
                row.clone()
            }
        })
        .collect();
    assert_eq!(stripped, before);
    let ids: Vec<String> = applied(store.conn())
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, vec!["0001_init", "0002_session_pinned"]);
    // And the older build now refuses the newer file.
    drop(store);
    let refused = Store::open_with(&path, first, &clock).unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "refusing to open {}: Database schema is newer than this build (migration 0002_session_pinned)",
            path.display()
        )
    );
}

#[test]
fn r3_1_append_numbers_events_per_session_and_projects_in_the_same_transaction() {
    let mut store = Store::open_in_memory(&clock()).unwrap();
    let result = store.write(|tx| {
        append_unowned(
            tx,
            "ses_a",
            5,
            Event::SessionCreated {
                title: "a".into(),
                directory: "/".into(),
            },
        )?;
        append_unowned(
            tx,
            "ses_b",
            6,
            Event::SessionCreated {
                title: "b".into(),
                directory: "/".into(),
            },
        )?;
        let admitted = append_unowned(
            tx,
            "ses_a",
            7,
            Event::InputAdmitted {
                content: Vec::new(),
                input_id: "inp_1".into(),
                prompt: "x".into(),
                delivery: Delivery::Admit,
                wake_pending: false,
                continuation_of: None,
            },
        )?;
        Ok(admitted.seq)
    });
    assert_eq!(result.unwrap(), 1);
    // A projection failure rolls the whole transaction back, event included.
    let failed = store.write(|tx| {
        append_unowned(
            tx,
            "ses_a",
            8,
            Event::InputPromoted {
                input_id: "inp_missing".into(),
                message_id: "msg_1".into(),
            },
        )
    });
    assert!(matches!(failed, Err(Error::Corrupt(_))), "{failed:?}");
    let count: i64 = store
        .conn()
        .query_row("SELECT count(*) FROM event", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 3);
    let replayed = replay(store.conn(), "ses_a").unwrap();
    assert_eq!(replayed, rows::load_all(store.conn(), "ses_a").unwrap());
}

#[test]
fn r2_3_a_healthy_file_is_never_refused_while_another_process_starts_writing() {
    // Writers come and go (each leaves no log behind when it closes), while
    // preflights look at the file: every look must find it healthy.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    drop(Store::open(&path, &clock()).unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut store = Store::open(&path, &clock()).unwrap();
                for _ in 0..2 {
                    i += 1;
                    store
                        .write(|tx| {
                            crate::store::sessions::create(tx, &"x".repeat(40_000), "/", i)
                                .map(drop)
                        })
                        .unwrap();
                }
                drop(store);
            }
        })
    };
    let until = std::time::Instant::now() + std::time::Duration::from_millis(1_500);
    let mut looks = 0;
    while std::time::Instant::now() < until {
        let verdict = open::preflight(&path, MIGRATIONS);
        assert!(
            matches!(
                verdict,
                Ok(open::Preflight::Steward { .. }) | Err(Error::StoreBusy)
            ),
            "look {looks}: {verdict:?}"
        );
        looks += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().unwrap();
    assert!(looks > 10);
}

#[test]
fn r2_4_the_session_recovery_index_migration_keeps_every_row_and_is_used() {
    use crate::testing::{Stage, interrupted};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = clock();
    let dump = |conn: &Connection| -> Vec<String> {
        let mut out = Vec::new();
        for table in [
            crate::testing::SESSION_BEFORE_0006,
            "event",
            "session_message",
            "session_input",
            "session_execution",
            "session_recovery",
        ] {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                .unwrap();
            let n = stmt.column_count();
            let rows = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            r.get::<_, rusqlite::types::Value>(i)
                                .map(|v| format!("{v:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap();
            for row in rows {
                out.push(format!("{table}: {}", row.unwrap().join(", ")));
            }
        }
        out
    };
    {
        let mut store = Store::open_with(&path, &MIGRATIONS[..1], &clock).unwrap();
        crate::testing::on_old_schema(&mut store, |store| {
            for i in 0..30 {
                interrupted(store, &format!("ses_{i:02}"), Stage::Tools, 1_000);
            }
            let p = crate::recovery::Params {
                owner_id: "own_r".into(),
                owners: crate::owner::Owners::new(dir.path().join("owners")),
                lease_ms: 30_000,
                slack_ms: crate::recovery::CLOCK_SLACK_MS,
                killed: Default::default(),
            };
            // Half reconciled (recovery rows), half still claimed.
            let mut pass = crate::recovery::Pass::begin(store.conn_mut(), p, &|| 100_000).unwrap();
            pass.next_batch(store.conn_mut(), &|| 100_000).unwrap();
        });
    }
    let before = dump(&Connection::open(&path).unwrap());
    assert!(before.iter().any(|r| r.starts_with("session_recovery: ")));
    let store = Store::open(&path, &clock).unwrap();
    assert_eq!(dump(store.conn()), before);
    let plan: String = store
        .conn()
        .query_row(
            "EXPLAIN QUERY PLAN SELECT count(*) FROM session_recovery WHERE session_id = 'ses_01'",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("session_recovery_session_idx"), "{plan}");
}

/// The queries the engine runs on `event` and `session_input`, with whether each is
/// a whole-table read by nature (the invariant checker's).
const LOG_AND_INPUT_QUERIES: &[(&str, bool)] = &[
    (
        "SELECT COALESCE(MAX(seq), -1) + 1 FROM event WHERE aggregate_id = 'ses_1'",
        false,
    ),
    (
        "SELECT seq, type, data FROM event WHERE aggregate_id = 'ses_1' ORDER BY seq",
        false,
    ),
    (
        "SELECT EXISTS (SELECT 1 FROM event WHERE aggregate_id = 'ses_1' AND execution_id = 'exe_1')",
        false,
    ),
    (
        "SELECT type, execution_id FROM event WHERE aggregate_id = 'ses_1' ORDER BY seq DESC",
        false,
    ),
    (
        "SELECT execution_id FROM event WHERE aggregate_id = 'ses_1' AND execution_id IS NOT NULL ORDER BY seq LIMIT 1",
        false,
    ),
    (
        "SELECT aggregate_id, count(*), min(seq), max(seq) FROM event GROUP BY aggregate_id",
        true,
    ),
    (
        "SELECT aggregate_id, seq FROM event WHERE type = 'input.promoted'",
        true,
    ),
    (
        "SELECT aggregate_id, seq, execution_id, epoch FROM event WHERE execution_id IS NOT NULL ORDER BY aggregate_id, seq",
        true,
    ),
    ("SELECT * FROM session_input WHERE id = 'inp_1'", false),
    (
        "SELECT * FROM session_input WHERE session_id = 'ses_1' ORDER BY admitted_seq",
        false,
    ),
    (
        "SELECT * FROM session_input WHERE session_id = 'ses_1' AND promoted_seq IS NULL ORDER BY admitted_seq",
        false,
    ),
    (
        "SELECT 1 FROM session_input WHERE session_id = 'ses_1' AND wake_pending = 1 AND promoted_seq IS NULL",
        false,
    ),
    (
        "SELECT DISTINCT session_id FROM session_input WHERE wake_pending = 1 AND promoted_seq IS NULL ORDER BY session_id",
        false,
    ),
    (
        "SELECT id FROM session_input WHERE wake_pending = 1 AND promoted_seq IS NULL ORDER BY time_created, id",
        false,
    ),
];

fn plan(conn: &Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    stmt.query_map([], |r| r.get(3))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn r2_5_the_dropped_indexes_served_no_query_that_the_remaining_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = (dir.path().join("before.db"), dir.path().join("after.db"));
    let clock = clock();
    let old = Store::open_with(&before, &MIGRATIONS[..2], &clock).unwrap();
    let new = Store::open(&after, &clock).unwrap();
    let dropped = [
        "event_aggregate_type_seq_idx",
        "session_input_session_promoted_seq_idx",
    ];
    for (sql, whole_table) in LOG_AND_INPUT_QUERIES {
        let (was, is) = (plan(old.conn(), sql), plan(new.conn(), sql));
        let text = is.join(" | ");
        assert!(!dropped.iter().any(|d| text.contains(d)), "{sql}: {text}");
        if !whole_table {
            // Found by an index, as before: no full scan, no sort it did not need.
            let scans_a_table = |s: &String| {
                (s.starts_with("SCAN event") || s.starts_with("SCAN session_input"))
                    && !s.contains("INDEX")
            };
            assert!(!is.iter().any(scans_a_table), "{sql}: {is:?} (was {was:?})");
        }
        let sorts = |p: &[String]| p.iter().filter(|s| s.contains("TEMP B-TREE")).count();
        assert!(sorts(&is) <= sorts(&was), "{sql}: {is:?} (was {was:?})");
    }
}

#[test]
fn r2_2_migration_0003_keeps_every_row_of_a_populated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = clock();
    {
        use crate::testing::{Stage, interrupted};
        let mut store = Store::open_with(&path, &MIGRATIONS[..2], &clock).unwrap();
        crate::testing::on_old_schema(&mut store, |store| {
            for i in 0..20 {
                interrupted(store, &format!("ses_{i:02}"), Stage::Tools, 1_000);
            }
        });
    }
    let dump = |conn: &Connection| -> Vec<String> {
        let mut out = Vec::new();
        for table in [
            crate::testing::SESSION_BEFORE_0006,
            "event",
            "session_message",
            "session_input",
        ] {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                .unwrap();
            let n = stmt.column_count();
            let rows = stmt
                .query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            r.get::<_, rusqlite::types::Value>(i)
                                .map(|v| format!("{v:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap();
            for row in rows {
                out.push(format!("{table}: {}", row.unwrap().join(", ")));
            }
        }
        out
    };
    let before = dump(&Connection::open(&path).unwrap());
    assert!(before.len() > 100);
    let store = Store::open(&path, &clock).unwrap();
    assert_eq!(dump(store.conn()), before);
    let report = crate::doctor::check(store.conn(), 2_000).unwrap();
    assert!(report.ok, "{report:?}");
}

#[test]
fn r2_3_the_whole_file_check_runs_only_where_a_power_cut_or_a_copy_may_have_torn_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steward.db");
    let clock = clock();
    let owners = crate::owner::Owners::new(dir.path().join("owners"));
    let mut store = Store::open(&path, &clock).unwrap();
    let due = |store: &Store| open::whole_file_check_due(store.conn(), &path);
    // Nobody ever ran, or everyone left cleanly.
    assert!(!due(&store));
    // A live owner: its lock is held.
    let live = store
        .write(|tx| crate::owner::Owner::register(tx, &owners, 1_000))
        .unwrap();
    assert!(!due(&store));
    // An owner of this boot killed while it ran on this very file: its lock is free
    // and its lock file names this file. SQLite's log makes each commit atomic
    // against a crash of the process, so the file is as sound as before it ran:
    // its relaunch does not read the whole file.
    let killed = crate::owner::Owner::lock(&owners, 2_000).unwrap();
    killed.record_database(&path).unwrap();
    let row = killed.row(2_000);
    store.write(|tx| crate::owner::insert(tx, &row)).unwrap();
    drop(killed); // as a kill does: the lock goes, the lock file stays
    assert_eq!(
        crate::owner::probe(&owners, &row),
        crate::owner::Liveness::Dead
    );
    assert_eq!(due(&store), crate::host::boot_id().is_empty());
    // The same owner with a lock file that names another file: the data directory
    // was copied or restored since, maybe mid-write.
    let lock = owners.lock_path(&row.id).unwrap();
    std::fs::write(&lock, "database 1 2\n").unwrap();
    assert!(due(&store));
    // Or that names none (an older build wrote it): checked, as before.
    std::fs::write(&lock, "").unwrap();
    assert!(due(&store));
    // Once recovery forgets it, launches are quick again.
    store
        .conn()
        .execute("DELETE FROM owner WHERE id = ?1", [&row.id])
        .unwrap();
    assert!(!due(&store));
    // An owner of another machine or an earlier boot — a data directory copied or
    // restored here, or a power cut — is a crash this launch cannot see: the file is
    // checked until recovery has handled it (and forgotten the row).
    store
        .conn()
        .execute(
            "INSERT INTO owner VALUES ('own_away', 1, ?1, 1000, NULL, 'another-machine', 'another-boot')",
            [crate::owner::hostname()],
        )
        .unwrap();
    assert!(due(&store));
    // Recovery forgets it once its claims are handled: launches are quick again.
    store
        .conn()
        .execute("DELETE FROM owner WHERE id = 'own_away'", [])
        .unwrap();
    assert!(!due(&store));
    // No owner table to tell.
    store.conn().execute_batch("DROP TABLE owner").unwrap();
    assert!(due(&store));
    drop(live);
}

#[test]
fn r2_9_the_data_directory_is_created_private_with_its_missing_parents() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a/b/steward");
    create_dir_synced(&dir).unwrap();
    for d in [root.path().join("a"), root.path().join("a/b"), dir.clone()] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    // An existing directory is left as it is, and syncs.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
    create_dir_synced(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
    sync_dir(&dir).unwrap();
    assert!(sync_dir(&root.path().join("missing")).is_err());
}

/// A temporary a build left behind — a power cut after its link was synced, or a
/// process that died while another linked first — is removed by the next open, not
/// only by the next creation; one whose process still runs, or that is younger than
/// a build could take, is left (protocol §2.9).
#[test]
fn r2_9_a_dead_builds_temporary_is_removed_when_the_database_is_next_opened() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("steward.db");
    drop(Store::open(&path, &clock()).unwrap());
    // No process has this pid (above the kernel's limit); this process is alive.
    let dead = root.path().join(".steward.db.creating-4294967");
    let dead_log = root.path().join(".steward.db.creating-4294967-wal");
    let alive = root
        .path()
        .join(format!(".steward.db.creating-{}", std::process::id()));
    let young = root.path().join(".steward.db.creating-4294968");
    // A file last written in 2001.
    let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    for file in [&dead, &dead_log, &alive, &young] {
        std::fs::write(file, b"half built").unwrap();
        if file != &young {
            std::fs::File::options()
                .write(true)
                .open(file)
                .unwrap()
                .set_modified(long_ago)
                .unwrap();
        }
    }
    drop(Store::open(&path, &clock()).unwrap());
    assert!(
        !dead.exists() && !dead_log.exists(),
        "the dead build's files stayed"
    );
    assert!(alive.exists(), "a running build's file was removed");
    assert!(
        young.exists(),
        "a build that may still run elsewhere lost its file"
    );
}
