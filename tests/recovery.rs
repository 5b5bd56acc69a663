//! Crash recovery end to end on the real binary: SIGKILL mid-tool and mid-stream,
//! relaunch, and check what the transcript, the files and `recover --json` say.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::run::{only_session, show, work_dir, write_script};
use crate::support::{Env, code, eventually, processes_in, signal, snapshot, stderr, stdout};

const INTERRUPTED: &str = "Session execution interrupted by server restart";
const UNKNOWN: &str = "Provider Step outcome unknown after server restart";
const TOOL_UNKNOWN: &str = "Tool execution outcome unknown after server restart";

fn spawn_run(env: &Env, script: &str, work: &str, prompt: &str) -> Child {
    env.cmd()
        .args(["--script", script, "run", "--yes", "--dir", work, prompt])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The event types in the file so far (read-only; empty before the file exists).
pub fn events_of(env: &Env) -> Vec<String> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let Ok(conn) = rusqlite::Connection::open_with_flags(env.db(), flags) else {
        return Vec::new();
    };
    let Ok(mut stmt) = conn.prepare("SELECT type FROM event ORDER BY aggregate_id, seq") else {
        return Vec::new();
    };
    stmt.query_map([], |r| r.get(0))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn recover_json(env: &Env, script: &str) -> Value {
    let output = env
        .cmd()
        .args(["--script", script, "recover", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn r5_sigkill_while_a_tool_sleeps_is_reconciled_and_continued_without_repeating_the_tool() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "tool.toml",
        r#"
        [[step]]
        text = ["Appending a line."]
        tool_calls = [{ tool = "run_command", input = { command = "echo line >> ../out.txt; sleep 300" } }]
        [[step]]
        text = ["Carrying on after the restart."]
    "#,
    );
    let out = env.root.path().join("out.txt");
    let mut child = spawn_run(&env, &script, &work, "append a line");
    assert!(
        eventually(Duration::from_secs(10), || out.exists()),
        "the tool never ran"
    );
    assert!(eventually(Duration::from_secs(5), || events_of(&env)
        .contains(&"tool.started".to_string())));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    // The tool's group dies with Steward (PR_SET_PDEATHSIG) — as soon as its
    // wrapper is scheduled, which a busy machine may delay: the relaunch waits, so
    // that recovery finds nothing left to stop.
    assert!(
        eventually(Duration::from_secs(10), || processes_in(Path::new(&work))
            .is_empty()),
        "the tool outlived Steward: {:?}",
        processes_in(Path::new(&work))
    );

    let relaunched = Instant::now();
    let report = recover_json(&env, &script);
    let wall = relaunched.elapsed();
    let session = only_session(&env);
    assert_eq!(report["scanned"], 1);
    assert_eq!(report["recovered"][0]["session_id"], session);
    assert_eq!(report["recovered"][0]["phase"], "ready");
    assert_eq!(
        report["wakes"],
        serde_json::json!({"redriven": 1, "failed": 0, "quarantined": 0, "waiting": 0, "waiting_sessions": []})
    );
    assert!(report["duration_ms"].as_u64().unwrap() < 1_000, "{report}");
    assert!(wall < Duration::from_secs(5), "relaunch took {wall:?}");

    let shown = show(&env, &session);
    let messages = shown["messages"].as_array().unwrap();
    let types: Vec<&str> = messages
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["user", "assistant", "synthetic", "assistant"]);
    let interrupted = &messages[1]["data"];
    assert_eq!(interrupted["finish"], "error");
    assert_eq!(interrupted["error"]["message"], INTERRUPTED);
    assert_eq!(interrupted["parts"][1]["state"]["status"], "error");
    assert_eq!(interrupted["parts"][1]["state"]["error"], TOOL_UNKNOWN);
    assert_eq!(messages[2]["data"]["label"], "Continuing after restart");
    assert_eq!(
        messages[3]["data"]["parts"][0]["text"],
        "Carrying on after the restart."
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "line\n",
        "the tool ran twice"
    );
    let text = stdout(&env.run(&["show", &session]));
    assert_eq!(text.matches(INTERRUPTED).count(), 1, "{text}");
    let doctor = env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r5_sigkill_during_the_provider_stream_says_the_outcome_is_unknown() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "stream.toml",
        r#"
        [[step]]
        text = ["Thinking", " slowly", " about", " it", " for", " a", " long", " time"]
        delay_ms = 300
        [[step]]
        text = ["Back again."]
    "#,
    );
    let mut child = spawn_run(&env, &script, &work, "think");
    assert!(eventually(Duration::from_secs(10), || events_of(&env)
        .contains(&"step.text".to_string())));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    let report = recover_json(&env, &script);
    assert_eq!(report["recovered"][0]["phase"], "unknown");
    let session = only_session(&env);
    let shown = show(&env, &session);
    let assistant = &shown["messages"][1]["data"];
    assert_eq!(assistant["error"]["message"], UNKNOWN);
    let parts = assistant["parts"].as_array().unwrap();
    assert!(parts[0]["text"].as_str().unwrap().starts_with("Thinking"));
    assert_eq!(parts.last().unwrap()["text"], UNKNOWN);
    assert_eq!(
        shown["messages"][3]["data"]["parts"][0]["text"],
        "Back again."
    );
}

#[test]
fn inspect_never_writes_and_shows_claims_of_a_crashed_file() {
    let env = Env::new();
    // On a data directory that does not exist, nothing is created.
    let output = env.run(&["inspect", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&output)).unwrap(),
        serde_json::json!({"owners": [], "claims": [], "quarantine": [], "wakes": [], "recoveries": []})
    );
    assert!(!env.data.exists());

    let work = work_dir(&env);
    let script = write_script(
        &env,
        "tool.toml",
        r#"
        [[step]]
        tool_calls = [{ tool = "run_command", input = { command = "sleep 300" } }]
    "#,
    );
    let mut child = spawn_run(&env, &script, &work, "sleep");
    assert!(eventually(Duration::from_secs(10), || events_of(&env)
        .contains(&"tool.started".to_string())));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    let before = snapshot(&env.data);
    let output = env.run(&["inspect", "--json"]);
    let after = snapshot(&env.data);
    let strip = |s: std::collections::BTreeMap<String, Vec<u8>>| {
        s.into_iter()
            .filter(|(k, _)| !k.ends_with("-shm"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(after),
        strip(before),
        "inspect changed the data directory"
    );
    let snap: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(snap["owners"][0]["alive"], false);
    assert_eq!(snap["claims"][0]["phase"], "ready");
    assert_eq!(snap["claims"][0]["state"], "live");
    assert_eq!(snap["recoveries"], Value::Array(vec![]));
    // `sessions`, `show` and `doctor` do not recover either.
    for args in [vec!["sessions"], vec!["doctor"]] {
        env.run(&args);
    }
    let snap: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    assert_eq!(snap["claims"].as_array().unwrap().len(), 1);
    // `recover --no-wake` reconciles and leaves the wake pending.
    let output = env.run(&["recover", "--json", "--no-wake"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let snap: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    assert_eq!(snap["claims"], Value::Array(vec![]));
    assert_eq!(snap["wakes"][0]["kind"], "recovery");
    assert_eq!(snap["recoveries"][0]["wake_pending"], true);
    assert_eq!(
        snap["owners"],
        Value::Array(vec![]),
        "the dead owner was not forgotten"
    );
}

#[test]
fn r5_8_a_parked_wake_is_continued_by_steward_wake_and_a_discarded_one_never_runs() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "crashy.toml",
        r#"
        [[step]]
        text = ["Working", " on", " it", " very", " slowly", " indeed"]
        delay_ms = 300
    "#,
    );
    // Three crashes in a row, each recovered without running the continuation.
    let mut session = String::new();
    for round in 0..3 {
        let mut child = if round == 0 {
            spawn_run(&env, &script, &work, "go")
        } else {
            env.cmd()
                .args(["--script", &script, "run", "--session", &session, "again"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let before = events_of(&env).iter().filter(|t| *t == "step.text").count();
        assert!(eventually(Duration::from_secs(10), || {
            events_of(&env).iter().filter(|t| *t == "step.text").count() > before
        }));
        signal(child.id(), "KILL");
        child.wait().unwrap();
        let output = env.run(&["recover", "--json", "--no-wake"]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        session = only_session(&env);
    }
    let snap: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    let parked: Vec<&Value> = snap["quarantine"].as_array().unwrap().iter().collect();
    assert_eq!(parked.len(), 1, "{snap}");
    assert_eq!(parked[0]["kind"], "recovery");
    assert_eq!(
        parked[0]["reason"],
        "Execution was interrupted repeatedly and will not be resumed automatically."
    );
    let listed: Value = serde_json::from_str(&stdout(&env.run(&["sessions", "--json"]))).unwrap();
    assert_eq!(listed[0]["state"], "quarantined");
    let execution = parked[0]["execution_id"].as_str().unwrap().to_string();
    // The user continues it from the inspector's action (with a quicker script of
    // the same name: the session's model is its script's, protocol §4.17).
    std::fs::create_dir_all(env.root.path().join("quick")).unwrap();
    let fast = write_script(
        &env,
        "quick/crashy.toml",
        "[[step]]\ntext = [\"Resumed.\"]\n",
    );
    let output = env
        .cmd()
        .args(["--script", &fast, "wake", &execution])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let shown = show(&env, &session);
    let last = shown["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["data"]["parts"][0]["text"], "Resumed.");
    // One more crash, reconciled without waking; discarding its wake means it never
    // runs: a later `recover` finds nothing to redrive.
    let mut child = env
        .cmd()
        .args([
            "--script",
            &script,
            "run",
            "--session",
            &session,
            "once more",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let before = events_of(&env).iter().filter(|t| *t == "step.text").count();
    assert!(eventually(Duration::from_secs(10), || {
        events_of(&env).iter().filter(|t| *t == "step.text").count() > before
    }));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    assert_eq!(code(&env.run(&["recover", "--no-wake"])), 0);
    let snap: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    assert_eq!(snap["wakes"].as_array().unwrap().len(), 1, "{snap}");
    let pending = snap["wakes"][0]["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    let output = env.run(&["discard", &pending]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report = recover_json(&env, &fast);
    assert_eq!(report["wakes"]["redriven"], 0, "{report}");
    let snap: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    assert_eq!(snap["wakes"], Value::Array(vec![]));
    let output = env.run(&["discard", "exe_unknown"]);
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("exe_unknown"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn r5_3_a_crash_after_promoting_the_next_input_leaves_the_finished_answer_alone() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "two.toml",
        r#"
        [[step]]
        text = ["A ", "complete ", "first ", "answer."]
        delay_ms = 150
        [[step]]
        text = ["Answering the late prompt."]
    "#,
    );
    let mut child = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "first prompt"])
        .env("FAILPOINTS", "runner.after_promote=1*off->return")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || events_of(&env)
        .contains(&"step.text".to_string())));
    // Another process queues a prompt while the first answer streams.
    let session = only_session(&env);
    let admitted = std::process::Command::new(crate::support::helper_bin())
        .args(["admit", env.data.to_str().unwrap(), &session, "late prompt"])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(admitted.status.success(), "{}", stderr(&admitted));
    // The run finishes its answer, promotes the late prompt, and dies right there.
    let status = child.wait().unwrap();
    assert!(!status.success());
    let report = recover_json(&env, &script);
    assert_eq!(
        report["recovered"][0]["assistant_message_id"],
        Value::Null,
        "{report}"
    );
    let shown = show(&env, &session);
    let messages = shown["messages"].as_array().unwrap();
    let first = &messages[1]["data"];
    assert_eq!(
        first["finish"], "stop",
        "a finished answer was rewritten: {first}"
    );
    assert_eq!(first["error"], Value::Null);
    let kinds: Vec<String> = messages
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["type"].as_str().unwrap(),
                m["data"]["kind"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "user:",
            "assistant:",
            "user:",
            "synthetic:recovery",
            "synthetic:continuation",
            "assistant:"
        ]
    );
    assert_eq!(messages[3]["data"]["text"], INTERRUPTED);
    assert_eq!(
        messages[5]["data"]["parts"][0]["text"],
        "Answering the late prompt."
    );
}

/// `steward recover` leaves no wake it made itself: a claim that expires while the
/// sessions it woke still run is taken by its background pass, and that wake is
/// continued before the report too (protocol §5.7). Here session A's owner is dead
/// (recovered by the first pass, continued slowly) while B's owner is stopped, not
/// dead: its claim is skipped by the first pass and expires during A's continuation.
#[test]
fn r5_7_recover_continues_a_claim_that_expired_while_its_woken_sessions_ran() {
    let env = Env::new();
    let work = work_dir(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    // Each step streams for about 2.8 s: longer than B's 1.5 s lease.
    let script = write_script(
        &env,
        "slow.toml",
        &"[[step]]\ntext = [\"a \", \"b \", \"c \", \"d\"]\ndelay_ms = 700\n".repeat(8),
    );
    // B's lease is short; `recover` keeps the default (30 s), so its own claims
    // outlast a loaded machine's pauses.
    let short = env.root.path().join("short-lease.toml");
    std::fs::write(&short, "[lease]\nlease_ms = 1500\n").unwrap();
    let model = Path::new(&script)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let fixture = std::process::Command::new(crate::support::helper_bin())
        .args([
            "interrupted",
            env.data.to_str().unwrap(),
            "1",
            &work,
            &model,
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(fixture.status.success(), "{}", stderr(&fixture));
    let steward = |args: &[&str]| {
        let mut cmd = env.cmd();
        cmd.args(["--script", &script]).args(args);
        cmd
    };
    let inspect = || -> Value {
        let out = steward(&["inspect", "--json"]).output().unwrap();
        serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null)
    };
    // B's launch reconciles A (its owner is dead); A's wake waits for `recover`.
    let mut b = steward(&["--config", short.to_str().unwrap()])
        .args(["run", "--yes", "--dir", &work, "B's prompt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let holds = |seen: &Value| {
        let Some(owner) = seen["owners"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["pid"] == b.id())
        else {
            return false;
        };
        seen["claims"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["owner_id"] == owner["id"] && c["state"] == "live")
    };
    assert!(
        eventually(Duration::from_secs(10), || holds(&inspect())),
        "B never claimed its session: {}",
        inspect()
    );
    // Stopped outside a write (a heartbeat's transaction would hold the file).
    let writable = || {
        let conn = rusqlite::Connection::open_with_flags(
            env.db(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
        )
        .unwrap();
        conn.busy_timeout(Duration::from_millis(100)).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_ok()
    };
    assert!(
        eventually(Duration::from_secs(10), || {
            signal(b.id(), "STOP");
            writable() || {
                signal(b.id(), "CONT");
                false
            }
        }),
        "B was always mid-write"
    );
    let b_session = inspect()["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["state"] == "live")
        .map(|c| c["session_id"].clone())
        .unwrap();
    let recover = steward(&["recover", "--json"]).output().unwrap();
    signal(b.id(), "KILL");
    b.wait().unwrap();
    assert_eq!(code(&recover), 0, "{}", stderr(&recover));
    let report: Value = serde_json::from_str(&stdout(&recover)).unwrap();
    assert_eq!(report["wakes"]["redriven"], 2, "{report}");
    // The late pass's row is in the report with the first pass's.
    let recovered: Vec<&Value> = report["recovered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["session_id"])
        .collect();
    assert_eq!(recovered, vec![&b_session], "{report}");
    let after = steward(&["inspect", "--json"]).output().unwrap();
    let seen: Value = serde_json::from_str(&stdout(&after)).unwrap();
    assert_eq!(seen["wakes"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["claims"], serde_json::json!([]), "{seen}");
}

/// `n` interrupted sessions on `model`, their wakes left pending (`recover
/// --no-wake`), and a helper process holding the first wake's session with a
/// `lease_ms` lease: that session and the holder.
fn a_held_wake(
    env: &Env,
    work: &str,
    script: &str,
    model: &str,
    n: usize,
    lease_ms: u64,
) -> (String, Child) {
    use std::io::BufRead;
    let fixture = std::process::Command::new(crate::support::helper_bin())
        .args([
            "interrupted",
            env.data.to_str().unwrap(),
            &n.to_string(),
            work,
            model,
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(fixture.status.success(), "{}", stderr(&fixture));
    let left = env.run(&["--script", script, "recover", "--no-wake"]);
    assert_eq!(code(&left), 0, "{}", stderr(&left));
    let seen: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    let session = seen["wakes"][0]["session_id"].as_str().unwrap().to_string();
    let mut holder = std::process::Command::new(crate::support::helper_bin())
        .args([
            "hold-claim",
            env.data.to_str().unwrap(),
            &session,
            &lease_ms.to_string(),
        ])
        .env_remove("FAILPOINTS")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("holding"), "{line}");
    (session, holder)
}

/// A wake whose session another process holds is tried once: `recover` reports it
/// and ends, leaving the wake for the holder or the next launch (protocol §5.7),
/// instead of waking it again and again while the holder lives.
#[test]
fn r5_7_recover_tries_a_held_sessions_wake_once_and_ends() {
    let env = Env::new();
    let work = work_dir(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    let script = write_script(&env, "quick.toml", "[[step]]\ntext = [\"Carried on.\"]\n");
    let (_, mut holder) = a_held_wake(&env, &work, &script, "quick", 1, 3000);
    let mut recover = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ended = eventually(Duration::from_secs(20), || {
        recover.try_wait().unwrap().is_some()
    });
    if !ended {
        recover.kill().unwrap();
    }
    let output = recover.wait_with_output().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(ended, "recover never ended: {}", stderr(&output).len());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["wakes"]["redriven"], 1, "{report}");
}

/// A wake `recover` found held by another process is tried again once a later pass
/// of its own takes that process's claim (its holder died while another woken
/// session ran): no wake is left behind (protocol §5.7).
#[test]
fn r5_7_recover_retries_a_held_sessions_wake_once_its_holder_is_gone() {
    use std::io::BufRead;
    let env = Env::new();
    let work = work_dir(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    // Each continuation streams for about 2.8 s.
    let script = write_script(
        &env,
        "slow.toml",
        &"[[step]]\ntext = [\"a \", \"b \", \"c \", \"d\"]\ndelay_ms = 700\n".repeat(8),
    );
    let (held, mut holder) = a_held_wake(&env, &work, &script, "slow", 2, 30000);
    let mut recover = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The held session is tried first and found busy; the other one runs on.
    let mut progress = std::io::BufReader::new(recover.stderr.take().unwrap());
    let mut said = String::new();
    while !said.starts_with(&format!("{held}: ")) {
        said.clear();
        assert!(
            progress.read_line(&mut said).unwrap() > 0,
            "recover ended early"
        );
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    std::thread::spawn(move || std::io::copy(&mut progress, &mut std::io::sink()));
    let output = recover.wait_with_output().unwrap();
    assert_eq!(code(&output), 0);
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let after: Value = serde_json::from_str(&stdout(&env.run(&["inspect", "--json"]))).unwrap();
    assert_eq!(after["wakes"], serde_json::json!([]), "{report}\n{after}");
    assert_eq!(after["claims"], serde_json::json!([]), "{report}\n{after}");
}
