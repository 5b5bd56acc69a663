//! Recovery benchmark: 10,000 and 100,000 interrupted sessions — each an assistant
//! with three tool calls, one of them running — recovered by one pass at the store's
//! `synchronous`. Reports wall time and bytes written per recovered session (from
//! `/proc/self/io`), and the ratio to a raw batched insert of the same row count
//! (batches of 100, one transaction each) measured in the same run.
//! `cargo bench -p steward-engine --bench recovery`.

#![allow(clippy::print_stdout)]

#[path = "support/table.rs"]
mod table;

use std::time::Instant;

use rusqlite::{Connection, params};
use serde_json::json;
use steward_engine::clock::ManualClock;
use steward_engine::recovery::{self, Params};
use steward_engine::store::{self, Store};

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 30_000;

fn write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines().find_map(|l| {
                l.strip_prefix("write_bytes:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

/// `n` sessions interrupted while a tool runs, written as the runner writes them.
fn populate(conn: &mut Connection, n: usize) {
    let assistant = |exe: &str| {
        json!({
            "execution_id": exe, "provider": "scripted", "model": "demo",
            "time": {"created": T0 + 3}, "finish": "tool-calls",
            "usage": {"input_tokens": 812, "output_tokens": 96},
            "parts": [
                {"id": "prt_text", "type": "text", "text": "Let me look at the failing test and the module it covers."},
                {"id": "prt_a", "type": "tool", "call_id": "call_0", "tool": "read_file",
                 "state": {"status": "completed", "input": {"path": "src/lib.rs"}, "output": "pub fn answer() -> u32 { 42 }\n",
                           "structured": {"bytes": 30, "truncated": false}, "time": {"start": T0 + 4, "end": T0 + 5}}},
                {"id": "prt_b", "type": "tool", "call_id": "call_1", "tool": "run_command",
                 "state": {"status": "running", "input": {"command": "cargo test -q"}, "time": {"start": T0 + 6},
                           "process": {"pid": 4242, "pgid": 4242, "start_time": 1, "boot_id": "bench-boot", "hostname": "bench-host"}}},
                {"id": "prt_c", "type": "tool", "call_id": "call_2", "tool": "list_dir",
                 "state": {"status": "pending", "input": {"path": "tests"}}}
            ]
        })
        .to_string()
    };
    store::write(conn, |tx| {
        let mut session = tx.prepare("INSERT INTO session (id, title, directory, time_created, time_updated) VALUES (?1, 'fix the failing test', '/home/user/project', ?2, ?2)")?;
        let mut message = tx.prepare("INSERT INTO session_message VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)")?;
        let mut input = tx.prepare("INSERT INTO session_input VALUES (?1, ?2, 'Fix the failing test in src/lib.rs', 'queue', 1, 2, 0, ?3)")?;
        let mut event = tx.prepare("INSERT INTO event VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7)")?;
        let mut claim = tx.prepare(
            "INSERT INTO session_execution (id, session_id, owner_id, epoch, assistant_message_id, phase, assistant_seq, time_created, expires_at)
             VALUES (?1, ?2, 'own_gone', 0, ?3, 'ready', -1, ?4, ?4 + 30000)",
        )?;
        for i in 0..n {
            let (s, exe) = (format!("ses_{i:08}"), format!("exe_{i:08}"));
            let (user, asst) = (format!("msg_u_{i:08}"), format!("msg_a_{i:08}"));
            let t = T0 + i as i64 / 100;
            session.execute(params![s, t])?;
            input.execute(params![format!("inp_{i:08}"), s, t])?;
            message.execute(params![user, s, "user", 2, t, json!({"input_id": format!("inp_{i:08}"), "text": "Fix the failing test in src/lib.rs"}).to_string()])?;
            message.execute(params![asst, s, "assistant", 3, t, assistant(&exe)])?;
            let events = [
                ("session.created", json!({"title": "fix the failing test", "directory": "/home/user/project"})),
                ("input.admitted", json!({"input_id": format!("inp_{i:08}"), "prompt": "Fix the failing test in src/lib.rs", "delivery": "queue", "wake_pending": true})),
                ("input.promoted", json!({"input_id": format!("inp_{i:08}"), "message_id": user})),
                ("step.started", json!({"message_id": asst, "execution_id": exe, "provider": "scripted", "model": "demo"})),
                ("step.text", json!({"message_id": asst, "part_id": "prt_text", "text": "Let me look at the failing test and the module it covers."})),
                ("step.ended", json!({"message_id": asst, "finish": "tool-calls"})),
                ("tool.called", json!({"message_id": asst, "part_id": "prt_a", "call_id": "call_0", "tool": "read_file", "input": {"path": "src/lib.rs"}})),
                ("tool.called", json!({"message_id": asst, "part_id": "prt_b", "call_id": "call_1", "tool": "run_command", "input": {"command": "cargo test -q"}})),
                ("tool.called", json!({"message_id": asst, "part_id": "prt_c", "call_id": "call_2", "tool": "list_dir", "input": {"path": "tests"}})),
                ("tool.started", json!({"message_id": asst, "call_id": "call_0"})),
                ("tool.completed", json!({"message_id": asst, "call_id": "call_0", "output": "pub fn answer() -> u32 { 42 }\n"})),
                ("tool.started", json!({"message_id": asst, "call_id": "call_1"})),
            ];
            for (seq, (kind, data)) in events.iter().enumerate() {
                let owned = seq >= 2;
                event.execute(params![s, seq as i64, kind, data.to_string(),
                    owned.then_some("own_gone"), owned.then_some(exe.as_str()), t])?;
            }
            claim.execute(params![exe, s, asst, t])?;
        }
        Ok(())
    })
    .unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
}

/// A raw batched insert of `rows` rows: 100 per transaction.
fn raw_insert(conn: &mut Connection, rows: usize) -> f64 {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, data TEXT NOT NULL) STRICT; DELETE FROM raw; PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    let start = Instant::now();
    for batch in 0..rows.div_ceil(100) {
        store::write(conn, |tx| {
            let mut stmt = tx.prepare_cached("INSERT INTO raw (data) VALUES (?1)")?;
            for i in 0..100.min(rows - batch * 100) {
                stmt.execute([format!(
                    "a raw row of about the size of a claim row, number {i:08}"
                )])?;
            }
            Ok(())
        })
        .unwrap();
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    println!("recovery: interrupted sessions (assistant + 3 tool calls, one running), one pass");
    println!(
        "{:>9} {:>10} {:>12} {:>13} {:>11} {:>10} {:>9}",
        "sessions", "wall (s)", "sessions/s", "bytes/session", "raw (s)", "raw bytes", "ratio"
    );
    // `STEWARD_BENCH_SIZES=2000` runs other sizes (e.g. under a profiler).
    let sizes: Vec<usize> = std::env::var("STEWARD_BENCH_SIZES")
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|_| vec![10_000, 100_000]);
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let mut store = Store::open(&dir.path().join("steward.db"), &clock).unwrap();
        populate(store.conn_mut(), n);
        let params = Params {
            owner_id: "own_bench".into(),
            owners: steward_engine::owner::Owners::new(dir.path().join("owners")),
            lease_ms: LEASE,
            slack_ms: recovery::CLOCK_SLACK_MS,
            killed: Default::default(),
        };
        let keep = std::env::var_os("STEWARD_BENCH_KEEP").map(std::path::PathBuf::from);
        if let Some(keep) = &keep {
            std::fs::copy(dir.path().join("steward.db"), keep.join("before.db")).unwrap();
        }
        let bytes_before = write_bytes();
        let start = Instant::now();
        let report = recovery::pass(store.conn_mut(), &params, T0 + 10 * LEASE).unwrap();
        let wall = start.elapsed().as_secs_f64();
        store
            .conn()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
        let bytes = write_bytes() - bytes_before;
        if let Some(keep) = &keep {
            std::fs::copy(dir.path().join("steward.db"), keep.join("after.db")).unwrap();
        }
        assert_eq!(report.recovered.len(), n);
        let raw_before = write_bytes();
        let raw = raw_insert(store.conn_mut(), n);
        let raw_bytes = write_bytes() - raw_before;
        println!(
            "{:>9} {:>10.3} {:>12.0} {:>13.0} {:>11.3} {:>10} {:>9.1}",
            n,
            wall,
            n as f64 / wall,
            bytes as f64 / n as f64,
            raw,
            raw_bytes,
            wall / raw
        );
        let label = format!("{n} interrupted sessions");
        table::row(
            "recovery",
            &format!("{label}: one pass"),
            wall,
            "s",
            Some(("raw insert, same rows", raw)),
            if n == 100_000 {
                table::Limit::Below {
                    target: 2.0,
                    bar: 5.0,
                }
            } else {
                table::Limit::None
            },
        );
        table::row(
            "recovery",
            &format!("{label}: written per session"),
            bytes as f64 / n as f64 / 1024.0,
            "KiB",
            Some(("raw insert, per row", raw_bytes as f64 / n as f64 / 1024.0)),
            if n == 100_000 {
                table::Limit::Below {
                    target: 4.0,
                    bar: 6.0,
                }
            } else {
                table::Limit::None
            },
        );
    }
}
