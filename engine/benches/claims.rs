//! Claims benchmark, at the store's `synchronous` setting, rounds interleaved:
//! - a fenced event commit (fence check + `step.text` append + projection) against a
//!   raw single-row insert, one transaction each (target ratio >= 0.6);
//! - heartbeat renewals per second;
//! - acquire + clear cycles per second.
//!
//! `cargo bench -p steward-engine --bench claims`.

#![allow(clippy::print_stdout)]

#[path = "support/table.rs"]
mod table;

use std::time::{Duration, Instant};

use steward_engine::claim::{self, Acquire, Claim, Fenced};
use steward_engine::clock::ManualClock;
use steward_engine::events::Event;
use steward_engine::store::events::append_unowned;
use steward_engine::store::{self, Store};

const ROUNDS: usize = 7;
const OPS: usize = 300;
const LEASE: i64 = 30_000;

fn setup(dir: &std::path::Path) -> (Store, Claim) {
    let clock = ManualClock::new(1_700_000_000_000);
    let mut store = Store::open(&dir.join("claims.db"), &clock).unwrap();
    store
        .conn()
        .execute_batch("CREATE TABLE raw (id INTEGER PRIMARY KEY, data TEXT NOT NULL) STRICT;")
        .unwrap();
    let claim = store
        .write(|tx| {
            for session in ["ses_fenced", "ses_cycle"] {
                append_unowned(
                    tx,
                    session,
                    0,
                    Event::SessionCreated {
                        title: "bench".into(),
                        directory: "/".into(),
                    },
                )?;
            }
            match claim::acquire(tx, "ses_fenced", "own_bench", 0, LEASE)? {
                Acquire::Acquired(c) => Ok(c),
                other => panic!("{other:?}"),
            }
        })
        .unwrap();
    (store, claim)
}

fn fenced_commits(store: &mut Store, claim: &Claim, next: &mut i64) -> Duration {
    let start = Instant::now();
    for _ in 0..OPS {
        *next += 1;
        let n = *next;
        let message = format!("msg_{}", n / 25);
        let event = if n % 25 == 0 || n == 1 {
            Event::StepStarted {
                tools: None,
                message_id: message,
                execution_id: claim.execution_id.clone(),
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
        store
            .write(|tx| Fenced::check(tx, claim, 1)?.append(event))
            .unwrap();
    }
    start.elapsed()
}

fn raw_inserts(store: &mut Store) -> Duration {
    let start = Instant::now();
    for _ in 0..OPS {
        store
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

fn renewals(store: &mut Store, claim: &Claim) -> Duration {
    let start = Instant::now();
    for i in 0..OPS {
        store
            .write(|tx| claim::renew(tx, claim, 2 + i as i64, LEASE))
            .unwrap();
    }
    start.elapsed()
}

fn acquire_clear_cycles(store: &mut Store) -> Duration {
    let start = Instant::now();
    for _ in 0..OPS {
        let claim = match store
            .write(|tx| claim::acquire(tx, "ses_cycle", "own_bench", 1, LEASE))
            .unwrap()
        {
            Acquire::Acquired(c) => c,
            other => panic!("{other:?}"),
        };
        store
            .write(|tx| Fenced::check(tx, &claim, 1)?.clear())
            .unwrap();
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rate(d: Duration) -> f64 {
    OPS as f64 / d.as_secs_f64()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, claim) = setup(dir.path());
    let (mut fenced, mut raw, mut renew, mut cycle) = (vec![], vec![], vec![], vec![]);
    let mut next = 0;
    for _ in 0..ROUNDS {
        fenced.push(fenced_commits(&mut store, &claim, &mut next));
        raw.push(raw_inserts(&mut store));
        renew.push(renewals(&mut store, &claim));
        cycle.push(acquire_clear_cycles(&mut store));
    }
    let (fenced, raw, renew, cycle) = (median(fenced), median(raw), median(renew), median(cycle));
    println!(
        "claims at synchronous={}: {OPS} ops x {ROUNDS} interleaved rounds (medians)",
        store::SYNCHRONOUS
    );
    println!("fenced event commits/s   {:>10.0}", rate(fenced));
    println!("raw single-row inserts/s {:>10.0}", rate(raw));
    println!(
        "fenced/raw ratio         {:>10.2}   (target >= 0.6)",
        raw.as_secs_f64() / fenced.as_secs_f64()
    );
    println!("heartbeat renewals/s     {:>10.0}", rate(renew));
    println!("acquire+clear cycles/s   {:>10.0}", rate(cycle));
    let us = |d: Duration| d.as_secs_f64() * 1e6 / OPS as f64;
    let raw_us = us(raw);
    for (what, d) in [
        ("fenced event commit", fenced),
        ("heartbeat renewal", renew),
        ("acquire + clear", cycle),
    ] {
        table::row(
            "claims",
            what,
            us(d),
            "µs/op",
            Some(("raw single-row insert", raw_us)),
            if what == "fenced event commit" {
                // raw/fenced ≥ 0.6
                table::Limit::RatioAtMost(1.67)
            } else {
                table::Limit::None
            },
        );
    }
}
