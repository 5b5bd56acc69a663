//! Protocol §3.6: renaming, archiving and deleting a session, and their refusals.

use pretty_assertions::assert_eq;

use super::*;
use crate::clock::ManualClock;
use crate::events::Delivery;
use crate::store::Store;
use crate::store::sessions;

fn store() -> (Store, String) {
    let clock = ManualClock::new(1_000);
    let mut store = Store::open_in_memory(&clock).unwrap();
    let id = store
        .write(|tx| sessions::create(tx, "first title", "/work", 1_000))
        .unwrap()
        .id;
    (store, id)
}

fn doctor_ok(store: &Store) {
    let report = crate::doctor::check(store.conn(), 10_000).unwrap();
    assert!(report.ok, "{:?}", report.invariants);
}

#[test]
fn r3_6_rename_and_archive_are_events_the_replay_reproduces() {
    let (mut store, id) = store();
    store
        .write(|tx| rename(tx, &id, "  new title ", 2_000))
        .unwrap();
    assert!(store.write(|tx| archive(tx, &id, true, 3_000)).unwrap());
    assert!(!store.write(|tx| archive(tx, &id, true, 3_500)).unwrap());
    let row = rows::session(store.conn(), &id).unwrap().unwrap();
    assert_eq!(row.title, "new title");
    assert!(row.archived);
    assert_eq!(row.time_updated, 3_000);
    let kinds: Vec<&str> = crate::store::events::load(store.conn(), &id)
        .unwrap()
        .iter()
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(
        kinds,
        ["session.created", "session.renamed", "session.archived"]
    );
    doctor_ok(&store);
    assert!(store.write(|tx| archive(tx, &id, false, 4_000)).unwrap());
    assert!(!rows::session(store.conn(), &id).unwrap().unwrap().archived);
    doctor_ok(&store);
}

#[test]
fn r3_6_a_title_is_kept_to_one_clean_line_of_bounded_length() {
    let (mut store, id) = store();
    let hostile = "evil\u{1b}]0;pwned\u{7}\u{1b}[31mred\u{1b}[0m\nnewline\ttab\r";
    store.write(|tx| rename(tx, &id, hostile, 2_000)).unwrap();
    let title = rows::session(store.conn(), &id).unwrap().unwrap().title;
    assert_eq!(title, "evilred newline tab");
    assert!(!title.chars().any(char::is_control), "{title:?}");
    let long = "x".repeat(100_000);
    store.write(|tx| rename(tx, &id, &long, 3_000)).unwrap();
    let title = rows::session(store.conn(), &id).unwrap().unwrap().title;
    assert_eq!(title.chars().count(), sessions::MAX_TITLE_CHARS);
    assert!(title.ends_with('…'));
    // A new session's title, as `run --title` or a client gives it, the same.
    let created = store
        .write(|tx| sessions::create(tx, "two\nlines", "/work", 4_000))
        .unwrap();
    assert_eq!(created.title, "two lines");
    // Control characters alone leave nothing: refused as empty.
    let empty = store
        .write(|tx| rename(tx, &id, "\u{1b}\u{7}\n", 5_000))
        .unwrap_err();
    assert!(empty.to_string().contains("cannot be empty"), "{empty}");
    doctor_ok(&store);
}

#[test]
fn r3_6_an_empty_title_and_an_unknown_session_are_refused() {
    let (mut store, id) = store();
    let empty = store.write(|tx| rename(tx, &id, "  ", 2_000)).unwrap_err();
    assert!(empty.to_string().contains("cannot be empty"), "{empty}");
    let missing = store.write(|tx| delete(tx, "ses_nope", 2_000)).unwrap_err();
    assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
}

#[test]
fn r3_6_delete_removes_every_row_of_the_session_and_no_other() {
    let (mut store, id) = store();
    let other = store
        .write(|tx| sessions::create(tx, "other", "/work", 1_500))
        .unwrap()
        .id;
    // An input that ran: a message, a promoted input and a finished recovery row.
    store
        .write(|tx| {
            let (input, _) = sessions::admit(tx, &id, "hello", Delivery::Admit, 2_000)?;
            append_unowned(
                tx,
                &id,
                2_100,
                Event::InputPromoted {
                    input_id: input.id.clone(),
                    message_id: "msg_1".into(),
                },
            )?;
            tx.execute(
                "INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created, wake_pending)
                 VALUES ('exe_done', ?1, ?2, 'ready', 0, 0)",
                rusqlite::params![id, input.id],
            )?;
            Ok(())
        })
        .unwrap();
    let events = store.write(|tx| delete(tx, &id, 3_000)).unwrap();
    assert_eq!(events, 3);
    for table in [
        "session",
        "session_message",
        "session_input",
        "session_recovery",
    ] {
        let column = if table == "session" {
            "id"
        } else {
            "session_id"
        };
        let n: i64 = store
            .conn()
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} = ?1"),
                [&id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{table} kept rows of the deleted session");
    }
    let left: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM event WHERE aggregate_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    assert!(rows::session(store.conn(), &other).unwrap().is_some());
    doctor_ok(&store);
}

/// Every refusal reason, for each of the three operations: nothing changes.
#[test]
fn r3_6_a_session_held_by_anything_is_refused_with_the_reason() {
    let holds: [(&str, &str, &str); 6] = [
        (
            "live claim",
            "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
             VALUES ('exe_1', ?1, 'own_1', 'ready', 0, 999999999)",
            "is running",
        ),
        (
            "expired claim",
            "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
             VALUES ('exe_1', ?1, 'own_1', 'ready', 0, 5)",
            "holds a claim recovery has not reconciled",
        ),
        (
            "quarantined claim",
            "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at, recovery_error)
             VALUES ('exe_1', ?1, 'own_1', 'ready', 0, 5, 'broken')",
            "quarantined claim",
        ),
        (
            "pending recovery wake",
            "INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created, wake_pending)
             VALUES ('exe_1', ?1, ?2, 'ready', 0, 1)",
            "pending wake (execution exe_1)",
        ),
        (
            "quarantined recovery row",
            "INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created, wake_pending, recovery_error)
             VALUES ('exe_1', ?1, ?2, 'ready', 0, 0, 'broken')",
            "quarantined row (execution exe_1)",
        ),
        ("pending input wake", "", "pending wake (input"),
    ];
    for (what, sql, reason) in holds {
        let (mut store, id) = store();
        let delivery = if sql.is_empty() {
            Delivery::Queue
        } else {
            Delivery::Admit
        };
        store
            .write(|tx| {
                let (input, _) = sessions::admit(tx, &id, "p", delivery, 1_500)?;
                if !sql.is_empty() {
                    let mut stmt = tx.prepare(sql)?;
                    let n = stmt.parameter_count();
                    if n == 2 {
                        stmt.execute(rusqlite::params![id, input.id])?;
                    } else {
                        stmt.execute([&id])?;
                    }
                }
                Ok(())
            })
            .unwrap();
        let before = crate::store::events::load(store.conn(), &id).unwrap().len();
        let refusals = [
            store.write(|tx| rename(tx, &id, "x", 2_000)).unwrap_err(),
            store
                .write(|tx| archive(tx, &id, true, 2_000).map(|_| ()))
                .unwrap_err(),
            store
                .write(|tx| delete(tx, &id, 2_000).map(|_| ()))
                .unwrap_err(),
        ];
        for (verb, error) in ["rename", "archive", "delete"].iter().zip(refusals) {
            let text = error.to_string();
            assert!(
                text.starts_with(&format!("cannot {verb} session {id}: it "))
                    && text.contains(reason),
                "{what}: {text}"
            );
        }
        let row = rows::session(store.conn(), &id).unwrap().unwrap();
        assert_eq!(
            (row.title.as_str(), row.archived),
            ("first title", false),
            "{what}"
        );
        assert_eq!(
            crate::store::events::load(store.conn(), &id).unwrap().len(),
            before,
            "{what}"
        );
    }
}
