//! Nothing lost with every front end open: each long-lived face (the terminal
//! interface, `steward acp`, `steward inspect`) beside a foreign SQLite reader
//! (protocol §2.8), a damaged continuation row (§5.7), and a full disk (§4.14, §5.2).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::acp::{Driver, argv};
use crate::run::{work_dir, write_script};
use crate::support::{Env, code, eventually, helper_bin, holds_posix_lock, stderr, stdout};
use crate::tui::Tui;

/// What `sqlite3 steward.db "select count(*) from session"` does: opens the file
/// with SQLite, reads, and closes — the last connection to close checkpoints and
/// deletes the log, unless another process's lock says it is still in use.
pub(crate) fn foreign_read(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    let n = conn
        .query_row("SELECT count(*) FROM session", [], |r| r.get(0))
        .unwrap();
    conn.close().unwrap();
    n
}

pub(crate) fn log_of(db: &Path) -> (PathBuf, PathBuf) {
    let name = db.file_name().unwrap().to_string_lossy().into_owned();
    (
        db.with_file_name(format!("{name}-wal")),
        db.with_file_name(format!("{name}-shm")),
    )
}

/// Asserts the face (process `pid`) still holds its SQLite lock on the database,
/// and that a foreign reader's close leaves the log it is using in place. The lock
/// is what protects the log: a SQLite older than the one bundled here (Debian 12's
/// `sqlite3`, 3.40) deletes the log of a process that has lost it.
fn read_beside(env: &Env, face: &str, pid: u32) {
    let (wal, shm) = log_of(&env.db());
    assert!(wal.exists(), "{face}: no log to protect");
    assert!(
        holds_posix_lock(pid, &env.db()),
        "{face} dropped its SQLite lock on the database"
    );
    foreign_read(&env.db());
    assert!(
        wal.exists() && shm.exists(),
        "{face}: a foreign reader's close deleted the log the face is using"
    );
    assert!(
        holds_posix_lock(pid, &env.db()),
        "{face} dropped its SQLite lock on the database"
    );
}

/// The user prompts of every session, in order.
fn prompts(env: &Env) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(env.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT json_extract(data, '$.text') FROM session_message
             WHERE type = 'user' ORDER BY time_created, seq",
        )
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn doctor_passes(env: &Env) {
    let doctor = env.run(&["doctor", "--json"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

const TWO_ANSWERS: &str = r#"
[[step]]
text = ["Answer ", "one."]
[[step]]
text = ["Answer ", "two."]
"#;

#[test]
fn r2_8_a_foreign_reader_s_close_never_deletes_the_log_of_the_terminal_interface() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "two.toml", TWO_ANSWERS);
    let mut tui = Tui::start(&env, Path::new(&work), &["--script", &script]);
    tui.expect("No session open", Duration::from_secs(10));
    tui.keys("first prompt\r");
    tui.expect("Answer one.", Duration::from_secs(10));
    read_beside(&env, "steward", tui.child.id());
    tui.keys("second prompt\r");
    tui.expect("Answer two.", Duration::from_secs(10));
    read_beside(&env, "steward", tui.child.id());
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    // Every turn the screen showed is in the file, once.
    assert_eq!(prompts(&env), vec!["first prompt", "second prompt"]);
    doctor_passes(&env);
}

#[test]
fn r2_8_a_foreign_reader_s_close_never_deletes_the_log_of_steward_acp() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "two.toml", TWO_ANSWERS);
    let mut editor = Driver::spawn(&env, &argv(&env, &script, None));
    editor.request("initialize", json!({"protocolVersion": 1}));
    let created = editor.request("session/new", json!({"cwd": work, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    let listed = editor.request("session/list", json!({}));
    assert!(listed.get("result").is_some(), "{listed}");
    for (i, prompt) in ["first prompt", "second prompt"].iter().enumerate() {
        read_beside(&env, "steward acp", editor.pid());
        let answer = editor.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}),
        );
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{i}: {answer}");
    }
    read_beside(&env, "steward acp", editor.pid());
    assert!(editor.close().success());
    // Both acknowledged turns are in the file, once each.
    assert_eq!(prompts(&env), vec!["first prompt", "second prompt"]);
    doctor_passes(&env);
}

#[test]
fn r2_8_a_foreign_reader_s_close_never_deletes_the_log_of_steward_inspect() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "two.toml", TWO_ANSWERS);
    let first = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "first prompt"])
        .output()
        .unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let mut tui = Tui::start(&env, Path::new(&work), &["inspect"]);
    tui.expect("Claims", Duration::from_secs(10));
    let listed: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    let session = listed[0]["id"].as_str().unwrap().to_string();
    let run = |prompt: &str| {
        let output = env
            .cmd()
            .args(["--script", &script, "run", "--session", &session, prompt])
            .output()
            .unwrap();
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    };
    // A writer's commits ring the inspector's doorbell: its read attaches it to the
    // log. The test holds the log open meanwhile — a reader that comes only after
    // the last writer's close checkpointed and removed it reads the file as it is,
    // with no log and no lock — and lets go once the inspector is attached.
    let holding = rusqlite::Connection::open(env.db()).unwrap();
    holding
        .query_row("SELECT count(*) FROM session", [], |r| r.get::<_, i64>(0))
        .unwrap();
    run("second prompt");
    assert!(
        eventually(Duration::from_secs(10), || holds_posix_lock(
            tui.child.id(),
            &env.db()
        )),
        "steward inspect never took its SQLite lock"
    );
    holding.close().unwrap();
    // Attached, it keeps the log in use: a writer's close must not take it, nor a
    // foreign reader's.
    run("third prompt");
    read_beside(&env, "steward inspect", tui.child.id());
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    assert_eq!(
        prompts(&env),
        vec!["first prompt", "second prompt", "third prompt"]
    );
    doctor_passes(&env);
}

/// `count` sessions whose executions were interrupted while a tool ran, left by a
/// process that is gone; their steps ran on the scripted model `on` (the script
/// these tests continue them with).
fn interrupted(env: &Env, count: usize, work: &str) {
    std::fs::create_dir_all(&env.data).unwrap();
    let fixture = Command::new(helper_bin())
        .args([
            "interrupted",
            env.data.to_str().unwrap(),
            &count.to_string(),
            work,
            "on",
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(fixture.status.success(), "{}", stderr(&fixture));
}

fn count(env: &Env, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn r5_7_one_damaged_continuation_keeps_no_other_session_from_waking() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "on.toml", "[[step]]\ntext = [\"Carried on.\"]\n");
    interrupted(&env, 3, &work);
    let reconciled = env
        .cmd()
        .args(["--script", &script, "recover", "--no-wake"])
        .output()
        .unwrap();
    assert_eq!(code(&reconciled), 0, "{}", stderr(&reconciled));
    // One continuation is damaged past what its CHECK constraint allows.
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.execute_batch(
        "PRAGMA ignore_check_constraints = ON;
         UPDATE session_input SET delivery = 'bogus' WHERE id = (
             SELECT continuation_message_id FROM session_recovery ORDER BY execution_id LIMIT 1);",
    )
    .unwrap();
    conn.close().unwrap();
    // The damaged row is quarantined; every other wake runs.
    let recover = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&recover), 0, "{}", stderr(&recover));
    let report: Value = serde_json::from_slice(&recover.stdout).unwrap();
    assert_eq!(
        report["wakes"],
        json!({"redriven": 2, "failed": 0, "quarantined": 1, "waiting": 0, "waiting_sessions": []}),
        "{report}"
    );
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM session_recovery WHERE recovery_error LIKE 'the wake cannot be checked: %'"
        ),
        1
    );
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM session_message WHERE data LIKE '%Carried on.%'"
        ),
        2
    );
}

#[test]
fn r5_7_acp_continues_a_healthy_session_it_loads_beside_a_damaged_one() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "on.toml", "[[step]]\ntext = [\"Carried on.\"]\n");
    interrupted(&env, 2, &work);
    let reconciled = env
        .cmd()
        .args(["--script", &script, "recover", "--no-wake"])
        .output()
        .unwrap();
    assert_eq!(code(&reconciled), 0, "{}", stderr(&reconciled));
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let (damaged, healthy): (String, String) = conn
        .query_row(
            "SELECT (SELECT session_id FROM session_recovery ORDER BY execution_id LIMIT 1),
                    (SELECT session_id FROM session_recovery ORDER BY execution_id DESC LIMIT 1)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.execute("PRAGMA ignore_check_constraints = ON", [])
        .unwrap();
    conn.execute(
        "UPDATE session_input SET delivery = 'bogus' WHERE id LIKE 'inp_rec_%' AND session_id = ?1",
        [&damaged],
    )
    .unwrap();
    conn.close().unwrap();
    let mut editor = Driver::spawn(&env, &argv(&env, &script, None));
    editor.request("initialize", json!({"protocolVersion": 1}));
    let loaded = editor.request(
        "session/load",
        json!({"sessionId": healthy, "cwd": work, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let continued = editor.wait_for(Duration::from_secs(15), |m| {
        m["params"]["sessionId"] == healthy.as_str()
            && m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("Carried on."))
    });
    assert!(continued, "{:#?}", editor.updates(&healthy));
    assert!(editor.close().success());
}

/// Caps the database at the pages it has now (`[store] max_pages`): every write
/// that needs a new page fails as on a full disk.
fn full_disk_config(env: &Env) -> String {
    let pages = count(env, "PRAGMA page_count");
    let config = env.root.path().join("full.toml");
    std::fs::write(&config, format!("[store]\nmax_pages = {pages}\n")).unwrap();
    config.display().to_string()
}

/// The owner rows and lock files: what a start registers and a clean exit removes.
fn owners(env: &Env) -> (i64, Vec<String>) {
    let mut files: Vec<String> = std::fs::read_dir(env.data.join("owners"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    (count(env, "SELECT count(*) FROM owner"), files)
}

#[test]
fn r5_2_a_full_disk_is_reported_as_such_every_face_starts_and_nothing_is_left_behind() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "on.toml", "[[step]]\ntext = [\"Carried on.\"]\n");
    interrupted(&env, 150, &work);
    let config = full_disk_config(&env);
    let before = owners(&env);

    // `recover` says the disk is full, writes nothing, and leaves no owner behind.
    let recover = env
        .cmd()
        .args(["--config", &config, "--script", &script, "recover"])
        .output()
        .unwrap();
    assert_eq!(code(&recover), 1, "{}", stderr(&recover));
    assert!(
        stderr(&recover).contains("steward: the disk is full: "),
        "{}",
        stderr(&recover)
    );
    assert_eq!(owners(&env), before, "a failed start left an owner behind");
    assert_eq!(
        count(
            &env,
            "SELECT count(*) FROM session_execution WHERE recovery_error IS NOT NULL"
        ),
        0,
        "a claim was quarantined for the disk's sake"
    );
    assert_eq!(count(&env, "SELECT count(*) FROM session_recovery"), 0);

    // The terminal interface starts, says why recovery stopped, shows what it
    // reads, and refuses a first prompt without leaving a session behind.
    let mut tui = Tui::start(
        &env,
        Path::new(&work),
        &["--config", &config, "--script", &script],
    );
    tui.expect("recovery did not finish", Duration::from_secs(10));
    tui.expect("the disk is full", Duration::from_secs(2));
    tui.keys("\x1b");
    assert!(
        crate::support::eventually(Duration::from_secs(5), || !tui
            .text()
            .contains("Recovered at launch")),
        "{}",
        tui.text()
    );
    tui.expect("Sessions 150", Duration::from_secs(5));
    // Pasted, as a long prompt is (bracketed paste).
    tui.keys(&format!("\x1b[200~{}\x1b[201~", "p".repeat(3000)));
    tui.expect("pppppppppp", Duration::from_secs(5));
    tui.keys("\r");
    tui.expect("error: the disk is full", Duration::from_secs(10));
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    assert_eq!(count(&env, "SELECT count(*) FROM session"), 150);
    assert_eq!(
        owners(&env),
        before,
        "the terminal interface left an owner behind"
    );

    // `steward acp` starts and lists what it can read.
    let mut editor = Driver::spawn(&env, &argv(&env, &script, Some(Path::new(&config))));
    editor.request("initialize", json!({"protocolVersion": 1}));
    let listed = editor.request("session/list", json!({}));
    assert!(
        listed["result"]["sessions"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{listed}"
    );
    assert!(editor.close().success());
    assert_eq!(owners(&env), before, "steward acp left an owner behind");

    // With room again, the next pass completes everything.
    let recover = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&recover), 0, "{}", stderr(&recover));
    let report: Value = serde_json::from_slice(&recover.stdout).unwrap();
    assert_eq!(report["recovered"].as_array().map(Vec::len), Some(150));
    assert_eq!(report["wakes"]["redriven"], 150);
    doctor_passes(&env);
}

#[test]
fn r4_14_a_first_prompt_refused_on_a_full_disk_leaves_no_session_behind() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "two.toml", TWO_ANSWERS);
    let first = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "first prompt"])
        .output()
        .unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let config = full_disk_config(&env);
    let refused = env
        .cmd()
        .args([
            "--config", &config, "--script", &script, "run", "--dir", &work,
        ])
        .arg("q".repeat(20_000))
        .output()
        .unwrap();
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("the disk is full: "),
        "{}",
        stderr(&refused)
    );
    assert_eq!(count(&env, "SELECT count(*) FROM session"), 1);
    doctor_passes(&env);
}

#[test]
fn r4_14_a_turn_the_store_stops_is_shown_stopped_with_its_reason() {
    let env = Env::new();
    let work = work_dir(&env);
    let small = write_script(&env, "small.toml", "[[step]]\ntext = [\"small\"]\n");
    let first = env
        .cmd()
        .args(["--script", &small, "run", "--dir", &work, "first prompt"])
        .output()
        .unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // Room for the prompt, not for the long answer.
    let pages = count(&env, "PRAGMA page_count");
    let config = env.root.path().join("tight.toml");
    std::fs::write(&config, format!("[store]\nmax_pages = {}\n", pages + 6)).unwrap();
    let chunk = format!("\"{}\"", "x".repeat(2_000));
    let big = write_script(
        &env,
        "big.toml",
        &format!(
            "[[step]]\ntext = [{}]\ndelay_ms = 5\n",
            vec![chunk; 60].join(", ")
        ),
    );
    let config = config.display().to_string();
    let mut tui = Tui::start(
        &env,
        Path::new(&work),
        &["--config", &config, "--script", &big],
    );
    tui.expect("No session open", Duration::from_secs(10));
    tui.keys("a long answer please\r");
    tui.expect(
        "the turn stopped: error: the disk is full",
        Duration::from_secs(15),
    );
    // The list says stopped, not running; the header says nothing runs.
    tui.expect("stopped", Duration::from_secs(2));
    let screen = tui.text();
    assert!(screen.contains("⚠ a long answer plea"), "{screen}");
    assert!(!screen.contains(" running"), "{screen}");
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    // With room again, recovery reconciles the stopped turn.
    let recover = env
        .cmd()
        .args(["--script", &small, "recover"])
        .output()
        .unwrap();
    assert_eq!(code(&recover), 0, "{}", stderr(&recover));
    doctor_passes(&env);
}
