//! `steward-test-helper`: drives the engine in ways the real binary never does, for
//! the integration tests (custom migration lists, a bare claim holder). Failpoints
//! apply.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod mcp_server;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use steward_engine::claim::heartbeat::{Heartbeat, HeartbeatParams};
use steward_engine::claim::{self, Acquire, SelfFence};
use steward_engine::clock::{Clock, SharedClock, SystemClock};
use steward_engine::db::Db;
use steward_engine::events::Event;
use steward_engine::owner::Owner;
use steward_engine::store::Store;
use steward_engine::store::events::append_unowned;
use steward_engine::store::migrate::{MIGRATIONS, Migration};

/// The first real migration followed by two test-only ones.
fn test_migrations() -> Vec<Migration> {
    let mut list = MIGRATIONS[..1].to_vec();
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
        ["hold-claim", data_dir, session, lease_ms] => hold_claim(
            PathBuf::from(data_dir),
            session,
            lease_ms.parse().expect("lease"),
        ),
        ["admit", data_dir, session, prompt] => admit(PathBuf::from(data_dir), session, prompt),
        ["interrupted", data_dir, count, dir] => interrupted(
            PathBuf::from(data_dir),
            count.parse().expect("count"),
            dir,
            "demo",
        ),
        // The scripted model the fixture's steps ran on: the process that continues
        // them must have it (protocol §4.17).
        ["interrupted", data_dir, count, dir, model] => interrupted(
            PathBuf::from(data_dir),
            count.parse().expect("count"),
            dir,
            model,
        ),
        ["quarantine", data_dir, execution, reason] => {
            quarantine(PathBuf::from(data_dir), execution, reason)
        }
        ["mcp-server", dir] => mcp_server::serve(PathBuf::from(dir), ""),
        ["mcp-server", dir, modes] => mcp_server::serve(PathBuf::from(dir), modes),
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

/// Registers an owner, claims `session` (creating it) and heartbeats forever at a
/// third of `lease_ms`, printing `holding <owner> <execution>` once the claim is held.
fn hold_claim(data_dir: PathBuf, session: &str, lease_ms: u64) -> Result<(), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let clock: SharedClock = SystemClock::shared();
        let db =
            Db::open(&data_dir.join("steward.db"), clock.as_ref()).map_err(|e| e.to_string())?;
        let owners = steward_engine::owner::Owners::new(data_dir.join("owners"));
        let now = clock.now_ms();
        let session = session.to_string();
        let lease = i64::try_from(lease_ms).unwrap();
        let started = clock.monotonic();
        let (owner, claim) = db
            .write(move |tx| {
                let owner = Owner::register(tx, &owners, now)?;
                if steward_engine::store::rows::session(tx, &session)?.is_none() {
                    append_unowned(
                        tx,
                        &session,
                        now,
                        Event::SessionCreated {
                            title: "held".into(),
                            directory: "/".into(),
                        },
                    )?;
                }
                match claim::acquire(tx, &session, &owner.id, now, lease)? {
                    Acquire::Acquired(c) => Ok((owner, c)),
                    other => Err(steward_engine::Error::Invalid(format!("{other:?}"))),
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        println!("holding {} {}", owner.id, claim.execution_id);
        std::io::stdout().flush().unwrap();
        let lease = Duration::from_millis(lease_ms);
        let lost = tokio_util::sync::CancellationToken::new();
        let _beat = Heartbeat::spawn(HeartbeatParams {
            db,
            claim,
            clock: clock.clone(),
            lease,
            interval: lease / 3,
            self_fence: Arc::new(SelfFence::new(clock, lease, started)),
            lost: lost.clone(),
        });
        lost.cancelled().await;
        Err("lost the claim".to_string())
    })
}

/// Leaves `count` sessions (working in `dir`) whose executions were interrupted while
/// a tool ran, owned by this process — which then exits, so its owner is provably dead.
fn interrupted(data_dir: PathBuf, count: usize, dir: &str, model: &str) -> Result<(), String> {
    use steward_engine::claim::Fenced;
    use steward_engine::events::Delivery;
    use steward_engine::phase::PhaseChange;
    let clock = SystemClock::new();
    let mut store = Store::open(&data_dir.join("steward.db"), &clock).map_err(|e| e.to_string())?;
    let now = clock.now_ms();
    store
        .write(|tx| {
            let owner = Owner::register(
                tx,
                &steward_engine::owner::Owners::new(data_dir.join("owners")),
                now,
            )?;
            for i in 0..count {
                let session = steward_engine::store::sessions::create(tx, &format!("interrupted {i}"), dir, now)?;
                let (input, _) = steward_engine::store::sessions::admit(tx, &session.id, &format!("fixture prompt {i}"), Delivery::Queue, now)?;
                let Acquire::Acquired(claim) = claim::acquire(tx, &session.id, &owner.id, now, 30_000)? else {
                    return Err(steward_engine::Error::Invalid("not acquired".into()));
                };
                let mut f = Fenced::check(tx, &claim, now)?;
                let message = steward_engine::ids::new(steward_engine::ids::MESSAGE, now);
                f.append(Event::InputPromoted { input_id: input.id, message_id: steward_engine::ids::new(steward_engine::ids::MESSAGE, now) })?;
                f.append(Event::StepStarted { message_id: message.clone(), execution_id: claim.execution_id.clone(), tools: None, provider: "scripted".into(), model: model.into() })?;
                f.set_assistant(&message)?;
                f.change_phase(PhaseChange::WorkStarted)?;
                f.append(Event::StepEnded { message_id: message.clone(), finish: steward_engine::message::Finish::ToolCalls, usage: None, warnings: Vec::new() })?;
                f.append(Event::ToolCalled {
                    message_id: message.clone(),
                    part_id: format!("prt_fixture_{i}"),
                    call_id: format!("call_fixture_{i}"),
                    tool: "run_command".into(),
                    input: serde_json::json!({"command": format!("echo fixture-{i} >> effects.txt")}),
                })?;
                f.append(Event::ToolStarted { message_id: message, call_id: format!("call_fixture_{i}"), process: None, mcp: None })?;
            }
            // The process exits holding every claim: its lock dies with it.
            std::mem::forget(owner);
            Ok(())
        })
        .map_err(|e| e.to_string())
}

/// Admits `prompt` (queued) into `session` as another process would, and exits
/// without waking anything.
fn admit(data_dir: PathBuf, session: &str, prompt: &str) -> Result<(), String> {
    let clock = SystemClock::new();
    let mut store = Store::open(&data_dir.join("steward.db"), &clock).map_err(|e| e.to_string())?;
    let now = clock.now_ms();
    store
        .write(|tx| {
            steward_engine::store::sessions::admit(
                tx,
                session,
                prompt,
                steward_engine::events::Delivery::Queue,
                now,
            )
        })
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Quarantines the recovery row of `execution` with `reason`, as a redrive that
/// could not go on would.
fn quarantine(data_dir: PathBuf, execution: &str, reason: &str) -> Result<(), String> {
    let clock = SystemClock::new();
    let mut store = Store::open(&data_dir.join("steward.db"), &clock).map_err(|e| e.to_string())?;
    store
        .write(|tx| {
            let n = tx.execute(
                "UPDATE session_recovery SET recovery_error = ?2, wake_pending = 0
                 WHERE execution_id = ?1",
                [execution, reason],
            )?;
            if n == 1 {
                Ok(())
            } else {
                Err(steward_engine::Error::Invalid(format!(
                    "no recovery row {execution}"
                )))
            }
        })
        .map_err(|e| e.to_string())
}
