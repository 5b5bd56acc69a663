//! The large-history generator: a data directory whose `steward.db` holds many
//! finished sessions, built as Steward writes them — every event through the
//! projection fold, so the tables equal a replay of the log and `steward doctor`
//! passes — but in large transactions, so that a million events take seconds.
//!
//! Each session is a `session.created` followed by turns of eleven events (a
//! prompt admitted and promoted, a step that reads a file, a step that answers),
//! three messages per turn. One session of the file is long: 2,000 messages. The
//! files are cached under `target/bench-history/` and built again only when
//! missing.

use std::path::{Path, PathBuf};

use rusqlite::params;
use serde_json::json;
use steward_engine::clock::ManualClock;
use steward_engine::events::{Delivery, Event, EventRecord, Origin};
use steward_engine::message::Finish;
use steward_engine::projection::{self, Projection};
use steward_engine::store::{self, Store, rows};

/// What to build.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    /// Sessions of ordinary length, besides the long one.
    pub sessions: usize,
    /// Turns of each ordinary session.
    pub turns: usize,
    /// Messages of the long session.
    pub long_messages: usize,
}

/// What was built.
#[derive(Debug, Clone)]
#[allow(dead_code)] // each bench reads what it reports
pub struct History {
    pub data_dir: PathBuf,
    pub database: PathBuf,
    pub events: u64,
    pub sessions: u64,
    pub long_session: String,
    pub bytes: u64,
}

const T0: i64 = 1_780_000_000_000;
/// Bump when what is generated changes: cached files are built again.
const VERSION: u32 = 1;

/// The data directory for `spec`, built when it is not cached yet.
pub fn data_dir(target: &Path, spec: Spec) -> History {
    let data_dir = target
        .join("bench-history")
        .join(format!("{}-v{VERSION}", spec.name));
    let database = data_dir.join("steward.db");
    if !database.exists() {
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).unwrap();
        let partial = data_dir.join("steward.db.building");
        build(&partial, spec);
        std::fs::rename(&partial, &database).unwrap();
    }
    let conn = rusqlite::Connection::open(&database).unwrap();
    let count =
        |sql: &str| -> u64 { conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64 };
    History {
        events: count("SELECT count(*) FROM event"),
        sessions: count("SELECT count(*) FROM session"),
        long_session: session_id(0),
        bytes: std::fs::metadata(&database).unwrap().len(),
        data_dir,
        database,
    }
}

fn session_id(i: usize) -> String {
    format!("ses_01{i:030x}")
}

fn build(path: &Path, spec: Spec) {
    let clock = ManualClock::new(T0);
    let mut store = Store::open(path, &clock).unwrap();
    let conn = store.conn_mut();
    let long_turns = spec.long_messages.div_ceil(3);
    let mut ids = 0u64;
    let mut next_id = |prefix: &str| {
        ids += 1;
        format!("{prefix}_01{ids:030x}")
    };
    // Batches of sessions per transaction keep memory flat.
    let all: Vec<(usize, usize)> = std::iter::once((0, long_turns))
        .chain((1..=spec.sessions).map(|i| (i, spec.turns)))
        .collect();
    for chunk in all.chunks(200) {
        store::write(conn, |tx| {
            let mut insert = tx.prepare_cached(
                "INSERT INTO event (aggregate_id, seq, type, data, owner_id, execution_id, epoch, time_created)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for &(i, turns) in chunk {
                let session = session_id(i);
                let mut p = Projection::default();
                let mut seq = 0i64;
                let mut at = T0 + i as i64 * 10_000;
                let mut append = |event: Event, origin: Option<&Origin>| -> steward_engine::Result<()> {
                    at += 1;
                    insert.execute(params![
                        session,
                        seq,
                        event.kind(),
                        event.data_json(),
                        origin.map(|o| o.owner_id.as_str()),
                        origin.map(|o| o.execution_id.as_str()),
                        origin.map(|o| o.epoch),
                        at
                    ])?;
                    let record = EventRecord {
                        session_id: session.clone(),
                        seq,
                        time_created: at,
                        origin: origin.cloned(),
                        event,
                    };
                    projection::apply(&mut p, &record)
                        .map_err(|e| steward_engine::Error::Corrupt(e.to_string()))?;
                    seq += 1;
                    Ok(())
                };
                append(
                    Event::SessionCreated {
                        title: format!("bench session {i}"),
                        directory: "/home/user/project".into(),
                    },
                    None,
                )?;
                for turn in 0..turns {
                    let (input, user) = (next_id("inp"), next_id("msg"));
                    let (first, second) = (next_id("msg"), next_id("msg"));
                    let origin = Origin {
                        owner_id: "own_01bench".into(),
                        execution_id: next_id("exe"),
                        epoch: 0,
                    };
                    let o = Some(&origin);
                    let call = format!("call_{turn}");
                    append(
                        Event::InputAdmitted {
                            content: Vec::new(),
                            input_id: input.clone(),
                            prompt: format!("Turn {turn}: look at src/lib.rs and fix the test"),
                            delivery: Delivery::Queue,
                            wake_pending: true,
                            continuation_of: None,
                        },
                        None,
                    )?;
                    append(
                        Event::InputPromoted {
                            input_id: input,
                            message_id: user,
                        },
                        o,
                    )?;
                    for (message, last) in [(&first, false), (&second, true)] {
                        append(
                            Event::StepStarted {
                                tools: None,
                                message_id: message.clone(),
                                execution_id: origin.execution_id.clone(),
                                provider: "scripted".into(),
                                model: "bench".into(),
                            },
                            o,
                        )?;
                        append(
                            Event::StepText {
                                message_id: message.clone(),
                                part_id: next_id("prt"),
                                text: if last {
                                    "The test passes now: the fix was one line.".into()
                                } else {
                                    "Let me read the module first.".into()
                                },
                            },
                            o,
                        )?;
                        if !last {
                            append(
                                Event::ToolCalled {
                                    message_id: message.clone(),
                                    part_id: next_id("prt"),
                                    call_id: call.clone(),
                                    tool: "read_file".into(),
                                    input: json!({"path": "src/lib.rs"}),
                                },
                                o,
                            )?;
                        }
                        append(
                            Event::StepEnded {
                                warnings: Vec::new(),
                                message_id: message.clone(),
                                finish: if last { Finish::Stop } else { Finish::ToolCalls },
                                usage: None,
                            },
                            o,
                        )?;
                        if !last {
                            append(
                                Event::ToolStarted {
                                    mcp: None,
                                    message_id: message.clone(),
                                    call_id: call.clone(),
                                    process: None,
                                },
                                o,
                            )?;
                            append(
                                Event::ToolCompleted {
                                    message_id: message.clone(),
                                    call_id: call.clone(),
                                    output: "pub fn answer() -> u32 { 42 }\n".into(),
                                    structured: None,
                                },
                                o,
                            )?;
                        }
                    }
                }
                rows::persist(tx, &mut p, &rows::Stored::default())?;
            }
            Ok(())
        })
        .unwrap();
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
}
