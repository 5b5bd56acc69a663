//! Store benchmark: one event append per transaction at `synchronous=FULL` and
//! `NORMAL`, each as a ratio to a raw single-row insert per transaction measured in
//! the same rounds. Rounds interleave the four cases so that machine noise falls on
//! all of them alike. `cargo bench -p steward-engine --bench store`.

#![allow(clippy::print_stdout)]

#[path = "support/table.rs"]
mod table;

use std::time::{Duration, Instant};

use steward_engine::clock::ManualClock;
use steward_engine::events::Event;
use steward_engine::store::Store;
use steward_engine::store::events::append_unowned;

const ROUNDS: usize = 7;
const OPS: usize = 300;

struct Case {
    store: Store,
    next: i64,
}

impl Case {
    fn new(dir: &std::path::Path, name: &str, synchronous: &str) -> Case {
        let clock = ManualClock::new(1_700_000_000_000);
        let mut store = Store::open(&dir.join(name), &clock).unwrap();
        store
            .conn()
            .execute_batch(&format!(
                "PRAGMA synchronous = {synchronous};
                 CREATE TABLE raw (id INTEGER PRIMARY KEY, data TEXT NOT NULL) STRICT;"
            ))
            .unwrap();
        store
            .write(|tx| {
                append_unowned(
                    tx,
                    "ses_bench",
                    0,
                    Event::SessionCreated {
                        title: "bench".into(),
                        directory: "/".into(),
                    },
                )?;
                append_unowned(
                    tx,
                    "ses_bench",
                    0,
                    Event::StepStarted {
                        tools: None,
                        message_id: "msg_0".into(),
                        execution_id: "exe_bench".into(),
                        provider: "bench".into(),
                        model: "bench".into(),
                    },
                )
            })
            .unwrap();
        Case { store, next: 1 }
    }

    fn append_events(&mut self) -> Duration {
        let start = Instant::now();
        for _ in 0..OPS {
            self.next += 1;
            let now = self.next;
            // A new assistant message every 25 events keeps messages at a typical
            // size (~1 KiB) instead of growing one without bound.
            let message = format!("msg_{}", now / 25);
            let event = if now % 25 == 0 {
                Event::StepStarted {
                    tools: None,
                    message_id: message,
                    execution_id: "exe_bench".into(),
                    provider: "bench".into(),
                    model: "bench".into(),
                }
            } else {
                Event::StepText {
                    message_id: message,
                    part_id: "prt_bench".into(),
                    text: "forty-two bytes of streamed text, or so. ".into(),
                }
            };
            self.store
                .write(|tx| append_unowned(tx, "ses_bench", now, event))
                .unwrap();
        }
        start.elapsed()
    }

    fn insert_raw(&mut self) -> Duration {
        let start = Instant::now();
        for _ in 0..OPS {
            self.store
                .write(|tx| {
                    tx.execute(
                        "INSERT INTO raw (data) VALUES ('forty-two bytes of streamed text, or so. ')",
                        [],
                    )?;
                    Ok(())
                })
                .unwrap();
        }
        start.elapsed()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn per_op(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / OPS as f64
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut full = Case::new(dir.path(), "full.db", "FULL");
    let mut normal = Case::new(dir.path(), "normal.db", "NORMAL");
    let (mut fe, mut fr, mut ne, mut nr) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        fe.push(full.append_events());
        fr.push(full.insert_raw());
        ne.push(normal.append_events());
        nr.push(normal.insert_raw());
    }
    let rows = [
        ("FULL", median(fe), median(fr)),
        ("NORMAL", median(ne), median(nr)),
    ];
    println!(
        "store: one write transaction per operation, {OPS} ops x {ROUNDS} interleaved rounds (medians)"
    );
    println!(
        "{:<8} {:>14} {:>14} {:>12} {:>14}",
        "sync", "event µs/op", "raw µs/op", "events/s", "event/raw"
    );
    for (name, event, raw) in rows {
        println!(
            "{:<8} {:>14.1} {:>14.1} {:>12.0} {:>14.2}",
            name,
            per_op(event),
            per_op(raw),
            1e6 / per_op(event),
            raw.as_secs_f64() / event.as_secs_f64()
        );
    }
    println!(
        "NORMAL/FULL event throughput: {:.2}x",
        rows[0].1.as_secs_f64() / rows[1].1.as_secs_f64()
    );
    let fsync = raw_fsync(dir.path());
    println!("raw 4 KiB write + fsync: {fsync:.1} µs/op");
    for (name, event, raw) in rows {
        table::row(
            "store",
            &format!("event append, synchronous={name}"),
            per_op(event),
            "µs/op",
            Some(("raw single-row insert", per_op(raw))),
            table::Limit::None,
        );
    }
    table::row(
        "store",
        "raw single-row insert, synchronous=FULL",
        per_op(rows[0].2),
        "µs/op",
        Some(("raw 4 KiB write + fsync", fsync)),
        table::Limit::None,
    );
}

/// A 4 KiB write and an fsync of a plain file, per operation (µs; median round).
fn raw_fsync(dir: &std::path::Path) -> f64 {
    use std::io::Write;
    let mut file = std::fs::File::create(dir.join("fsync.bin")).unwrap();
    let page = [7u8; 4096];
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..OPS {
            file.write_all(&page).unwrap();
            file.sync_all().unwrap();
        }
        rounds.push(start.elapsed());
    }
    per_op(median(rounds))
}
