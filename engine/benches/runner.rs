//! Runner benchmark: 10,000 text deltas streamed through a real execution (scripted
//! provider, no delay, a temp database at the store's `synchronous`): deltas per
//! second, commits per second, deltas per commit (target >= 20), and the longest time
//! any delta waited before it was durable. `cargo bench -p steward-engine --bench runner`.

#![allow(clippy::print_stdout)]

#[path = "support/table.rs"]
mod table;

use std::sync::Arc;
use std::time::Instant;

use steward_engine::clock::{SharedClock, SystemClock};
use steward_engine::config::Config;
use steward_engine::db::Db;
use steward_engine::events::Delivery;
use steward_engine::provider::scripted::{Entry, Script, ScriptedProvider};
use steward_engine::store::Store;
use steward_engine::tools::{Headless, ToolRegistry};
use steward_engine::{Engine, EngineOptions};

const DELTAS: usize = 10_000;
/// A paced stream as well: one delta per millisecond, like a fast model.
const PACED_DELTAS: usize = 2_000;
const ROUNDS: usize = 3;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("runner: streamed text through a real execution, {ROUNDS} runs of each");
    println!(
        "{:<22} {:>12} {:>10} {:>12} {:>14} {:>16}",
        "stream", "deltas/s", "commits", "commits/s", "deltas/commit", "max wait (ms)"
    );
    let (mut fast, mut paced) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        fast.push(runtime.block_on(run("10,000 at once", DELTAS, 0)));
        paced.push(runtime.block_on(run("2,000 at 1 per ms", PACED_DELTAS, 1)));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    table::row(
        "runner",
        "10,000 deltas at once: deltas per commit",
        median(fast),
        "deltas",
        None,
        table::Limit::AtLeast(20.0),
    );
    table::row(
        "runner",
        "2,000 deltas at 1 per ms: deltas per commit",
        median(paced),
        "deltas",
        None,
        table::Limit::None,
    );
}

/// One streamed run; returns its deltas per commit.
async fn run(label: &str, deltas: usize, delay_ms: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let clock: SharedClock = SystemClock::shared();
    let db = Db::start(Store::open(&dir.path().join("steward.db"), clock.as_ref()).unwrap());
    let script = Script {
        steps: vec![Entry {
            text: (0..deltas).map(|i| format!("w{i} ")).collect(),
            delay_ms,
            tool_calls: vec![],
            finish: None,
            error: None,
        }],
    };
    let engine = Engine::start(EngineOptions {
        db,
        owners_dir: dir.path().join("owners"),
        clock,
        config: Config::default(),
        provider: Arc::new(ScriptedProvider::new(script, "bench".into())),
        tools: ToolRegistry::standard(),
        permission: Arc::new(Headless { allow_all: true }),
    })
    .await
    .unwrap();
    let session = engine
        .create_session("bench", &dir.path().to_string_lossy())
        .await
        .unwrap();
    let start = Instant::now();
    engine
        .admit(&session.id, "stream", Delivery::Queue)
        .await
        .unwrap();
    engine.wait_idle(&session.id).await;
    let elapsed = start.elapsed().as_secs_f64();
    let stats = engine.runner_stats();
    assert_eq!(stats.deltas as usize, deltas);
    println!(
        "{:<22} {:>12.0} {:>10} {:>12.1} {:>14.1} {:>16.1}",
        label,
        stats.deltas as f64 / elapsed,
        stats.text_commits,
        stats.text_commits as f64 / elapsed,
        stats.deltas as f64 / stats.text_commits as f64,
        stats.max_delta_wait.as_secs_f64() * 1e3
    );
    engine.shutdown().await.unwrap();
    stats.deltas as f64 / stats.text_commits as f64
}
