//! The hardening rules end to end on the real binary: no command abandons a wake it
//! consumed, no tool hangs an execution, no row makes Steward touch a file outside
//! its data directory, reads outside the session directory ask, files are private,
//! keys stay secret, a refused prompt admits nothing, and a refused file is
//! explained.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::recovery::events_of;
use crate::run::{show, work_dir, write_script};
use crate::support::{Env, code, eventually, helper_bin, signal, snapshot, stderr, stdout};

fn sql<T: rusqlite::types::FromSql>(env: &Env, query: &str) -> T {
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.query_row(query, [], |r| r.get(0)).unwrap()
}

fn execute(env: &Env, statement: &str) {
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.execute_batch(statement).unwrap();
}

/// `count` sessions interrupted while a tool ran, their owner dead (the helper exits).
/// `count` sessions interrupted while a tool ran, their steps on the scripted
/// `model`.
fn interrupted(env: &Env, count: usize, work: &str, model: &str) {
    std::fs::create_dir_all(&env.data).unwrap();
    let out = Command::new(helper_bin())
        .args([
            "interrupted",
            env.data.to_str().unwrap(),
            &count.to_string(),
            work,
            model,
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

fn wait_with_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn inspect(env: &Env) -> Value {
    let output = env.run(&["inspect", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

#[test]
fn r5_7_waking_one_execution_leaves_every_other_sessions_continuation_pending() {
    let env = Env::new();
    let work = work_dir(&env);
    // Session B: interrupted, reconciled, its continuation waiting for a wake.
    interrupted(&env, 1, &work, "slow");
    let output = env.run(&["recover", "--no-wake"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let b: String = sql(&env, "SELECT session_id FROM session_recovery");
    // Session A: interrupted too, its claim quarantined for the user.
    interrupted(&env, 1, &work, "slow");
    let exe_a: String = sql(&env, "SELECT id FROM session_execution");
    execute(
        &env,
        "UPDATE session_execution SET recovery_error = 'held for a look'",
    );
    // Every next step is slow: a continuation started by mistake would still run
    // when `wake` shuts down.
    let script = write_script(
        &env,
        "slow.toml",
        r#"
        [[step]]
        text = ["slow ", "continuation"]
        delay_ms = 1500
    "#,
    );
    let output = env
        .cmd()
        .args(["--script", &script, "wake", &exe_a])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // A continued; B's continuation was neither promoted nor cancelled.
    let b_wake: i64 = sql(
        &env,
        &format!("SELECT wake_pending FROM session_recovery WHERE session_id = '{b}'"),
    );
    assert_eq!(b_wake, 1, "B's wake was consumed");
    let interrupted_b: i64 = sql(
        &env,
        &format!(
            "SELECT count(*) FROM event WHERE aggregate_id = '{b}' AND type = 'step.interrupted'"
        ),
    );
    assert_eq!(interrupted_b, 0, "B was cancelled");
    let shown = show(&env, &b);
    assert_eq!(shown["pending_inputs"].as_array().unwrap().len(), 1);
    let doctor = env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r4_13_a_fifo_read_fails_at_once_and_sigint_still_cancels_within_two_seconds() {
    let env = Env::new();
    let work = work_dir(&env);
    let fifo = Path::new(&work).join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let script = write_script(
        &env,
        "fifo.toml",
        r#"
        [[step]]
        tool_calls = [{ tool = "read_file", input = { path = "pipe" } }]
        [[step]]
        text = ["a ", "long ", "answer"]
        delay_ms = 10000
    "#,
    );
    let mut child = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "read the pipe"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || events_of(&env)
            .contains(&"tool.failed".to_string())),
        "the FIFO read never came back"
    );
    let interrupted_at = Instant::now();
    signal(child.id(), "INT");
    let status = wait_with_timeout(&mut child, Duration::from_secs(2));
    let Some(status) = status else {
        child.kill().unwrap();
        panic!("SIGINT did not end the run within 2 s");
    };
    assert_eq!(status.code(), Some(130));
    assert!(interrupted_at.elapsed() < Duration::from_secs(2));
    assert!(events_of(&env).contains(&"step.interrupted".to_string()));
    let session: String = sql(&env, "SELECT id FROM session");
    let shown = show(&env, &session);
    let tool = &shown["messages"][1]["data"]["parts"][0]["state"];
    assert_eq!(tool["status"], "error");
    assert!(tool["error"].as_str().unwrap().contains("FIFO"), "{tool}");
    let doctor = env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r4_11_a_hostile_lock_path_never_makes_recovery_delete_or_lock_a_users_file() {
    let env = Env::new();
    let work = work_dir(&env);
    assert_eq!(code(&env.run(&["sessions"])), 0);
    let victim = env.root.path().join("thesis.txt");
    std::fs::write(&victim, "years of work").unwrap();
    let host = steward_engine::owner::hostname();
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.execute(
        "INSERT INTO owner (id, pid, hostname, time_started, lock_path) VALUES ('own_hostile', 1, ?1, 0, ?2)",
        rusqlite::params![host, victim.to_string_lossy()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO owner (id, pid, hostname, time_started, lock_path) VALUES ('own_../../thesis', 1, ?1, 0, ?2)",
        rusqlite::params![host, victim.to_string_lossy()],
    )
    .unwrap();
    drop(conn);
    let _ = work;
    let output = env.run(&["recover", "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["dead_owners"], serde_json::json!([]));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "years of work");
    let owners = inspect(&env)["owners"].clone();
    for owner in owners.as_array().unwrap() {
        assert_eq!(owner["alive"], Value::Null, "{owner}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "years of work");
}

#[test]
fn r4_13_a_read_outside_the_session_directory_is_denied_headless_without_yes() {
    let env = Env::new();
    let work = work_dir(&env);
    let secret = env.root.path().join("id_rsa");
    std::fs::write(&secret, "PRIVATE-KEY-MATERIAL").unwrap();
    let script = write_script(
        &env,
        "outside.toml",
        &format!(
            r#"
            [[step]]
            tool_calls = [{{ tool = "read_file", input = {{ path = "{}" }} }}]
            [[step]]
            text = ["done"]
        "#,
            secret.display()
        ),
    );
    let output = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "read it"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session: String = sql(&env, "SELECT id FROM session");
    let tool = show(&env, &session)["messages"][1]["data"]["parts"][0]["state"].clone();
    assert_eq!(tool["status"], "error");
    assert!(
        tool["error"]
            .as_str()
            .unwrap()
            .contains("outside the session directory"),
        "{tool}"
    );
    let everything = snapshot(&env.data);
    assert!(
        !everything
            .values()
            .any(|bytes| String::from_utf8_lossy(bytes).contains("PRIVATE-KEY-MATERIAL")),
        "the secret reached the data directory"
    );
    // With --yes the user allowed it.
    let output = env
        .cmd()
        .args([
            "--script", &script, "run", "--yes", "--dir", &work, "read it",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let sessions: Vec<String> = {
        let conn = rusqlite::Connection::open(env.db()).unwrap();
        let mut stmt = conn
            .prepare("SELECT id FROM session ORDER BY time_created DESC, id DESC")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let tool = show(&env, &sessions[0])["messages"][1]["data"]["parts"][0]["state"].clone();
    assert_eq!(tool["output"], "PRIVATE-KEY-MATERIAL");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn files_steward_creates_are_readable_by_their_owner_only() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        r#"
        [[step]]
        text = ["slowly ", "now"]
        delay_ms = 700
    "#,
    );
    let mut child = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "hello"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wal = env.data.join("steward.db-wal");
    assert!(eventually(Duration::from_secs(10), || wal.exists()));
    let owners = env.data.join("owners");
    assert!(eventually(Duration::from_secs(5), || std::fs::read_dir(
        &owners
    )
    .map(|d| d.count() > 0)
    .unwrap_or(false)));
    let mut modes = vec![
        ("data dir", mode(&env.data), 0o700),
        ("database", mode(&env.db()), 0o600),
        ("wal", mode(&wal), 0o600),
        ("shm", mode(&env.data.join("steward.db-shm")), 0o600),
        ("owners dir", mode(&owners), 0o700),
        ("logs dir", mode(&env.data.join("logs")), 0o700),
    ];
    for entry in std::fs::read_dir(&owners).unwrap().flatten() {
        modes.push(("lock file", mode(&entry.path()), 0o600));
    }
    for entry in std::fs::read_dir(env.data.join("logs")).unwrap().flatten() {
        modes.push(("log file", mode(&entry.path()), 0o600));
    }
    assert!(child.wait().unwrap().success());
    for (what, actual, expected) in modes {
        assert_eq!(format!("{what} {actual:o}"), format!("{what} {expected:o}"));
    }
}

/// An OpenAI-compatible server that answers every request 401, echoing the request
/// (its `Authorization` header included) in the error body.
fn echoing_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            stream
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                if request.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&request).replace(['"', '\r', '\n'], " ");
            let body = format!("{{\"error\": \"unauthorized: {head}\"}}");
            let reply = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
        }
    });
    url
}

#[test]
fn an_api_key_never_reaches_output_logs_or_the_database() {
    let env = Env::new();
    let work = work_dir(&env);
    let key = "sk-steward-test-5e1f0c7a9b3d";
    let url = echoing_server();
    let config = env.root.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nname = \"openai\"\nbase_url = \"{url}\"\nmodel = \"m\"\napi_key_env = \"STEWARD_TEST_API_KEY\"\n"
        ),
    )
    .unwrap();
    let mut outputs = Vec::new();
    for json in [false, true] {
        let mut cmd = env.cmd();
        cmd.env("STEWARD_TEST_API_KEY", key)
            .env("STEWARD_LOG", "trace")
            .arg("--config")
            .arg(&config)
            .args(["run", "--dir", &work]);
        if json {
            cmd.arg("--json");
        }
        let output = cmd.arg("hello").output().unwrap();
        assert_eq!(code(&output), 1, "{}", stderr(&output));
        outputs.push(output);
    }
    // The server did see the key: the failure must mention the echo, redacted.
    assert!(
        stderr(&outputs[0]).contains("401"),
        "{}",
        stderr(&outputs[0])
    );
    for output in &outputs {
        assert!(!stdout(output).contains(key), "stdout: {}", stdout(output));
        assert!(!stderr(output).contains(key), "stderr: {}", stderr(output));
    }
    let show_json = stdout(&env.run(&["sessions", "--json"]));
    assert!(!show_json.contains(key));
    for (name, bytes) in snapshot(&env.data) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(key),
            "the key is in {name}"
        );
    }
    let session: String = sql(&env, "SELECT id FROM session LIMIT 1");
    let shown = stdout(&env.run(&["show", &session, "--json"]));
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn i3_two_runs_racing_for_one_session_either_run_the_prompt_or_admit_nothing() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "race.toml",
        r#"
        [[step]]
        text = ["busy ", "for ", "a ", "moment"]
        delay_ms = 200
    "#,
    );
    let output = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "first"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session: String = sql(&env, "SELECT id FROM session");
    let mut ran = Vec::new();
    let mut refused = Vec::new();
    for round in 0..6 {
        // In odd rounds the first process pauses right after its admission commits,
        // widening the window in which the second one could slip in between.
        let children: Vec<(String, Child)> = (0..2)
            .map(|i| {
                let prompt = format!("prompt-{round}-{i}");
                let mut cmd = env.cmd();
                if round % 2 == 1 && i == 0 {
                    cmd.env("FAILPOINTS", "input.after_admit=sleep(400)");
                }
                let child = cmd
                    .args(["--script", &script, "run", "--session", &session, &prompt])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                if round % 2 == 1 {
                    std::thread::sleep(Duration::from_millis(100));
                }
                (prompt, child)
            })
            .collect();
        for (prompt, child) in children {
            let output = child.wait_with_output().unwrap();
            match code(&output) {
                0 => ran.push(prompt),
                4 => {
                    assert!(
                        stderr(&output).contains("held by owner"),
                        "{}",
                        stderr(&output)
                    );
                    refused.push(prompt)
                }
                other => panic!("{prompt} exited {other}: {}", stderr(&output)),
            }
        }
    }
    assert!(
        !refused.is_empty(),
        "no run was ever refused: the race was not run"
    );
    let shown = show(&env, &session);
    let users: Vec<String> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "user")
        .map(|m| m["data"]["text"].as_str().unwrap().to_string())
        .collect();
    for prompt in &ran {
        assert_eq!(
            users.iter().filter(|u| *u == prompt).count(),
            1,
            "{prompt} ran, but the transcript has it {users:?}"
        );
    }
    for prompt in &refused {
        assert!(
            !users.contains(prompt),
            "{prompt} exited 4 but was admitted and run"
        );
    }
    assert_eq!(shown["pending_inputs"], serde_json::json!([]));
    assert_eq!(users.len(), ran.len() + 1);
}

#[test]
fn impossible_lease_settings_are_refused_with_the_key_named_before_anything_is_created() {
    let env = Env::new();
    let config = env.root.path().join("config.toml");
    std::fs::write(&config, "[lease]\nlease_ms = 0\n").unwrap();
    let output = env
        .cmd()
        .arg("--config")
        .arg(&config)
        .args(["run", "hello"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("lease.lease_ms = 0"),
        "{}",
        stderr(&output)
    );
    assert!(!env.data.exists());
    std::fs::write(&config, "[lease]\nlease_ms = 30000\nheartbeat_ms = 30000\n").unwrap();
    let output = env
        .cmd()
        .arg("--config")
        .arg(&config)
        .args(["sessions"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("lease.heartbeat_ms = 30000"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn r2_3_doctor_explains_a_refused_file_and_writes_nothing() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    drop(conn);
    let before = snapshot(&env.data);
    let output = env.run(&["doctor"]);
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let text = stdout(&output);
    for expected in [
        "refused     Database is not empty and has no session table",
        "failed      it is not a Steward database",
        "tables      notes",
        "--data-dir",
        "doctor wrote nothing",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let output = env.run(&["doctor", "--json"]);
    assert_eq!(code(&output), 3);
    let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["failed"], "foreign");
    assert_eq!(snapshot(&env.data), before, "doctor changed the directory");
}

#[test]
fn r5_1_a_long_run_recovers_a_dead_owners_claims_on_its_timer_and_leaves_their_wakes() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "long.toml",
        r#"
        [[step]]
        text = ["a ", "long ", "steady ", "answer ", "that ", "takes ", "its ", "time"]
        delay_ms = 500
    "#,
    );
    let mut child = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "take your time"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || events_of(&env)
        .contains(&"step.text".to_string())));
    // Another process dies holding two claims while the run goes on.
    interrupted(&env, 2, &work, "demo");
    let recovered = eventually(Duration::from_secs(3), || {
        let snapshot = inspect(&env);
        snapshot["recoveries"].as_array().unwrap().len() == 2
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the check"
    );
    assert!(
        recovered,
        "the running `run` did not recover the dead owner's claims"
    );
    assert!(child.wait().unwrap().success());
    let snapshot = inspect(&env);
    for recovery in snapshot["recoveries"].as_array().unwrap() {
        assert_eq!(recovery["wake_pending"], true, "{recovery}");
    }
    assert_eq!(snapshot["claims"], serde_json::json!([]));
}
