//! Embedding the engine, start to end, against a temporary data directory: open,
//! recover, create a session, submit a prompt, stream its events, inspect, cancel,
//! shut down. Run it with `cargo run -p steward-engine --example embed`.

#![allow(clippy::print_stdout)] // an example prints what it does

use std::sync::Arc;
use std::time::Duration;

use steward_engine::clock::SystemClock;
use steward_engine::config::Config;
use steward_engine::db::Db;
use steward_engine::events::Event;
use steward_engine::inspect::Reader;
use steward_engine::inspect::pages::PageRequest;
use steward_engine::provider::Provider;
use steward_engine::provider::scripted::{Script, ScriptedProvider};
use steward_engine::tools::{Headless, ToolRegistry};
use steward_engine::{Engine, EngineEvent, EngineOptions, Outcome, Redriving, SessionOutcome};

const SCRIPT: &str = r#"
[[step]]
text = ["Listing ", "the directory."]
tool_calls = [{ tool = "list_dir", input = { path = "." } }]
[[step]]
text = ["Done: ", "it holds one file."]
[[step]]
text = ["A slow ", "answer ", "that ", "will ", "be ", "cancelled."]
delay_ms = 200
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let data = tempfile::tempdir()?;
    let work = data.path().join("work");
    std::fs::create_dir_all(&work)?;
    std::fs::write(work.join("notes.txt"), "hello")?;
    let database = data.path().join("steward.db");
    let owners = data.path().join("owners");

    // 1. Open: a file Steward must not touch would be refused here, untouched.
    let clock = SystemClock::shared();
    let db = Db::open(&database, clock.as_ref())?;

    // 2. Start an engine: this process becomes an owner.
    let provider: Arc<dyn Provider> =
        Arc::new(ScriptedProvider::new(Script::parse(SCRIPT)?, "demo".into()));
    let engine = Engine::start(EngineOptions {
        db,
        owners_dir: owners.clone(),
        clock: clock.clone(),
        config: Config::default(),
        provider,
        tools: ToolRegistry::standard(),
        // A shell would ask its user; this one allows what tools.allow allows.
        permission: Arc::new(Headless { allow_all: false }),
    })
    .await?;

    // 3. Recover before anything runs, start what is due, keep recovering.
    let report = engine.recover().await?;
    println!(
        "recovered {} interrupted executions",
        report.recovered.len()
    );
    engine.redrive_wakes().await?;
    engine.start_background(Redriving::DueWakes);

    // 4. A session and a prompt, admitted together with the session's claim.
    let session = engine
        .create_session("embedded", &work.to_string_lossy())
        .await?;
    let mut events = engine.subscribe();
    engine.submit(&session.id, "what is in here?").await?;

    // 5. Stream events until the session is idle.
    let outcome = {
        let idle = engine.wait_idle(&session.id);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                outcome = &mut idle => break outcome,
                Ok(event) = events.recv() => show(&event),
            }
        }
    };
    println!("\nturn ended: {outcome:?}");
    assert_eq!(outcome, Some(SessionOutcome::Ran(Outcome::Idle)));

    // 6. Inspect, read-only, on a connection of its own.
    let mut reader = Reader::open(&database, &owners)?;
    let transcript = reader.transcript(&session.id, None, 50)?;
    println!("{} messages; sessions:", transcript.len());
    for s in reader.sessions(clock.now_ms(), &PageRequest::first(10))? {
        println!("  {} {} ({})", s.id, s.title, s.state.as_str());
    }

    // 7. Cancel a running turn, then shut down.
    engine.submit(&session.id, "and now slowly").await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.cancel(&session.id);
    let cancelled = engine.wait_idle(&session.id).await;
    println!("cancelled: {cancelled:?}");
    assert_eq!(cancelled, Some(SessionOutcome::Ran(Outcome::Cancelled)));
    let stopped = engine.shutdown().await?;
    println!(
        "shut down; {} running turns handed to recovery",
        stopped.len()
    );
    Ok(())
}

fn show(event: &EngineEvent) {
    match event {
        EngineEvent::Committed(record) => match &record.event {
            Event::StepText { text, .. } => print!("{text}"),
            Event::ToolCalled { tool, input, .. } => println!("\n→ {tool} {input}"),
            Event::ToolCompleted { output, .. } => println!("  ✓ {output}"),
            _ => {}
        },
        EngineEvent::Running { session_id } => println!("{session_id} runs"),
        EngineEvent::Idle {
            session_id,
            outcome,
        } => println!("\n{session_id} is idle ({outcome})"),
        EngineEvent::Retrying { error, at_ms, .. } => {
            println!("\n{error}: trying again at {at_ms}")
        }
        // Execution endings, and kinds of event added later.
        _ => {}
    }
}
