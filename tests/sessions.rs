//! Session housekeeping on the real binary (protocol §3.6): `steward rename`,
//! `archive` and `delete`, each refused — exit 1, the reason, nothing changed —
//! while the session runs in another process or holds a claim, a pending wake or a
//! quarantined row; and `--session` naming a session that does not exist.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::recovery::events_of;
use crate::run::{only_session, work_dir, write_script};
use crate::support::{Env, code, helper_bin, stderr, stdout};

fn listed(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["sessions", "--json"];
    all.extend_from_slice(args);
    let output = env.run(&all);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str::<Value>(&stdout(&output))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn titles(env: &Env) -> Vec<String> {
    listed(env, &["--archived"])
        .iter()
        .map(|s| s["title"].as_str().unwrap().to_string())
        .collect()
}

fn run_prompt(env: &Env, prompt: &str) {
    let work = work_dir(env);
    let script = write_script(env, "hello.toml", "[[step]]\ntext = [\"Hello.\"]\n");
    let output = env.run(&["--script", &script, "run", "--dir", &work, prompt]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

fn helper(env: &Env, args: &[&str]) {
    let output = Command::new(helper_bin())
        .args(args)
        .env("HOME", &env.home)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
}

fn doctor_passes(env: &Env) {
    let doctor = env.run(&["doctor", "--json"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
    let report: Value = serde_json::from_str(&stdout(&doctor)).unwrap();
    assert_eq!(report["ok"], true, "{report}");
}

#[test]
fn r3_6_rename_archive_and_delete_a_session_from_the_command_line() {
    let env = Env::new();
    run_prompt(&env, "first session");
    let session = only_session(&env);
    run_prompt(&env, "second session");

    let renamed = env.run(&["rename", &session, "the", "new", "title"]);
    assert_eq!(code(&renamed), 0, "{}", stderr(&renamed));
    assert!(titles(&env).contains(&"the new title".to_string()));
    // The most recently active first: the rename counts as activity.
    assert_eq!(listed(&env, &[])[0]["id"], session.as_str());

    let archived = env.run(&["archive", &session]);
    assert_eq!(code(&archived), 0, "{}", stderr(&archived));
    let shown = listed(&env, &[]);
    assert_eq!(shown.len(), 1, "archived sessions are hidden: {shown:?}");
    assert_ne!(shown[0]["id"], session.as_str());
    let all = listed(&env, &["--archived"]);
    assert_eq!(all.len(), 2);
    assert!(
        all.iter()
            .any(|s| s["id"] == session.as_str() && s["archived"] == true)
    );
    let text = stdout(&env.run(&["sessions", "--archived"]));
    assert!(
        text.contains("the new title") && text.contains("archived"),
        "{text}"
    );
    let undone = env.run(&["archive", "--undo", &session]);
    assert_eq!(code(&undone), 0, "{}", stderr(&undone));
    assert_eq!(listed(&env, &[]).len(), 2);
    doctor_passes(&env);

    let deleted = env.run(&["delete", &session]);
    assert_eq!(code(&deleted), 0, "{}", stderr(&deleted));
    assert!(stdout(&deleted).contains(&format!("deleted {session}")));
    assert_eq!(listed(&env, &["--archived"]).len(), 1);
    let gone = env.run(&["show", &session]);
    assert_ne!(code(&gone), 0);
    doctor_passes(&env);
    // Every row of it went: the log too.
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn = rusqlite::Connection::open_with_flags(env.db(), flags).unwrap();
    for (table, column) in [
        ("event", "aggregate_id"),
        ("session", "id"),
        ("session_message", "session_id"),
        ("session_input", "session_id"),
        ("session_execution", "session_id"),
        ("session_recovery", "session_id"),
    ] {
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} = ?1"),
                [&session],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "{table} kept rows of the deleted session");
    }
}

#[test]
fn r3_6_an_unknown_session_is_a_clear_error() {
    let env = Env::new();
    for args in [
        vec!["rename", "ses_nope", "x"],
        vec!["archive", "ses_nope"],
        vec!["delete", "ses_nope"],
        vec!["--session", "ses_nope"],
    ] {
        let output = env.run(&args);
        assert_eq!(code(&output), 1, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("ses_nope"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let output = env.run(&["--continue", "sessions"]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    let output = env.run(&["rename", "ses_nope"]);
    assert_eq!(code(&output), 2, "a title is required: {}", stderr(&output));
}

/// Each of rename, archive and delete is refused with `reason`, exit 1, and
/// nothing is written.
fn refused(env: &Env, session: &str, reason: &str) {
    let before = events_of(env);
    let title_before = titles(env);
    for args in [
        vec!["rename", session, "renamed"],
        vec!["archive", session],
        vec!["delete", session],
    ] {
        let output = env.run(&args);
        let err = stderr(&output);
        assert_eq!(code(&output), 1, "{args:?} was not refused: {err}");
        assert!(
            err.contains(&format!("cannot {} session {session}: it ", args[0]))
                && err.contains(reason),
            "{args:?}: {err}"
        );
    }
    assert_eq!(events_of(env), before, "a refusal wrote");
    assert_eq!(titles(env), title_before);
}

#[test]
fn r3_6_a_session_running_in_another_process_is_refused() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let mut holder = Command::new(helper_bin())
        .args([
            "hold-claim",
            env.data.to_str().unwrap(),
            "ses_held",
            "30000",
        ])
        .env("HOME", &env.home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("holding "), "{line}");
    refused(&env, "ses_held", "it is running: it holds a live claim");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn r3_6_a_claim_a_pending_wake_and_a_quarantined_row_are_each_refused() {
    let env = Env::new();
    let work = work_dir(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    // A claim left by a process that died while a tool ran.
    helper(
        &env,
        &["interrupted", env.data.to_str().unwrap(), "1", &work],
    );
    let session = only_session(&env);
    refused(&env, &session, "holds a live claim");
    // Reconciled, its continuation waits as a pending recovery wake.
    let output = env.run(&["recover", "--json", "--no-wake"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let execution = report["recovered"][0]["execution_id"]
        .as_str()
        .unwrap()
        .to_string();
    refused(
        &env,
        &session,
        &format!("pending wake (execution {execution})"),
    );
    // The wake quarantined.
    helper(
        &env,
        &[
            "quarantine",
            env.data.to_str().unwrap(),
            &execution,
            "cannot continue",
        ],
    );
    refused(
        &env,
        &session,
        &format!("quarantined row (execution {execution})"),
    );
    // Discarded, nothing holds the session any more.
    let output = env.run(&["discard", &execution]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let output = env.run(&["delete", &session]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    doctor_passes(&env);

    // An input admitted by another process, its wake not yet run.
    run_prompt(&env, "idle session");
    let idle = only_session(&env);
    helper(&env, &["admit", env.data.to_str().unwrap(), &idle, "later"]);
    refused(&env, &idle, "pending wake (input");
}
