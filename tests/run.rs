//! `steward run`, `sessions` and `show` on the real binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{Env, code, helper_bin, stderr, stdout};

pub fn write_script(env: &Env, name: &str, toml: &str) -> String {
    let path = env.root.path().join(name);
    std::fs::write(&path, toml).unwrap();
    path.to_string_lossy().into_owned()
}

pub fn work_dir(env: &Env) -> String {
    let work = env.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    work.to_string_lossy().into_owned()
}

pub fn show(env: &Env, session: &str) -> Value {
    let output = env.run(&["show", session, "--json"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str(&stdout(&output)).unwrap()
}

pub fn only_session(env: &Env) -> String {
    let output = env.run(&["sessions", "--json"]);
    let list: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    list[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn r4_run_with_a_command_tool_works_from_a_fresh_data_dir() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "script.toml",
        r#"
        [[step]]
        text = ["Running it."]
        tool_calls = [{ tool = "run_command", input = { command = "echo from-the-tool; pwd" } }]
        [[step]]
        text = ["Done."]
    "#,
    );
    let output = env
        .cmd()
        .args([
            "--script", &script, "run", "--yes", "--dir", &work, "please", "run", "it",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "Running it.\nDone.\n");
    assert!(
        stderr(&output).contains("→ run_command"),
        "{}",
        stderr(&output)
    );
    let session = only_session(&env);
    let shown = show(&env, &session);
    assert_eq!(shown["session"]["title"], "please run it");
    assert_eq!(shown["session"]["directory"], work);
    let messages = shown["messages"].as_array().unwrap();
    let types: Vec<&str> = messages
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["user", "assistant", "assistant"]);
    let tool = &messages[1]["data"]["parts"][1];
    assert_eq!(tool["tool"], "run_command");
    assert_eq!(tool["state"]["status"], "completed");
    assert_eq!(tool["state"]["output"], format!("from-the-tool\n{work}\n"));
    assert_eq!(tool["state"]["structured"]["exit_code"], 0);
    assert!(tool["state"]["process"]["pid"].as_i64().unwrap() > 0);
    assert_eq!(shown["pending_inputs"], Value::Array(vec![]));
    let listed: Value = serde_json::from_str(&stdout(&env.run(&["sessions", "--json"]))).unwrap();
    assert_eq!(listed[0]["state"], "idle");
    let doctor = env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r4_run_json_prints_one_event_per_line() {
    let env = Env::new();
    let work = work_dir(&env);
    let output = env
        .cmd()
        .args(["run", "--json", "--dir", &work, "hello"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types[..2].to_vec(),
        vec!["input.admitted", "input.promoted"]
    );
    assert!(types.contains(&"tool.completed"), "{types:?}");
    assert_eq!(
        lines.last().unwrap(),
        &serde_json::json!({
            "type": "run.finished", "session_id": lines[0]["session_id"], "outcome": "idle", "error": null
        })
    );
    let seqs: Vec<i64> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[test]
fn r4_3_run_on_a_session_held_by_another_live_owner_exits_4_and_admits_nothing() {
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let mut holder = Command::new(helper_bin())
        .args([
            "hold-claim",
            env.data.to_str().unwrap(),
            "ses_held",
            "30000",
        ])
        .env_remove("FAILPOINTS")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let owner = line.split_whitespace().nth(1).unwrap().to_string();
    let output = env.run(&["run", "--session", "ses_held", "are you there?"]);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(code(&output), 4, "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("busy") && err.contains(&owner), "{err}");
    let shown = show(&env, "ses_held");
    assert_eq!(shown["pending_inputs"], Value::Array(vec![]));
    assert_eq!(shown["messages"], Value::Array(vec![]));
}

#[test]
fn r4_ctrl_c_during_run_cancels_records_it_and_exits_130() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        r#"
        [[step]]
        text = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight "]
        delay_ms = 400
    "#,
    );
    let child = env
        .cmd()
        .args(["--script", &script, "run", "--dir", &work, "count slowly"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the session has streamed something.
    let started = Instant::now();
    loop {
        let listed = env.run(&["sessions", "--json"]);
        let list: Value = serde_json::from_str(&stdout(&listed)).unwrap_or(Value::Null);
        if list[0]["state"] == "running" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(600));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    let session = only_session(&env);
    let shown = show(&env, &session);
    let assistant = &shown["messages"][1]["data"];
    assert_eq!(assistant["finish"], "error");
    assert_eq!(
        assistant["error"]["message"],
        "Session execution interrupted"
    );
    assert!(
        assistant["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("one ")
    );
    let listed: Value = serde_json::from_str(&stdout(&env.run(&["sessions", "--json"]))).unwrap();
    assert_eq!(listed[0]["state"], "idle");
    let inspect = env.run(&["doctor", "--json"]);
    assert_eq!(code(&inspect), 0, "{}", stdout(&inspect));
}

#[test]
fn a_prompt_of_whitespace_alone_is_refused_before_anything_runs() {
    let env = Env::new();
    let work = work_dir(&env);
    let output = env.run(&["run", "--dir", &work, "  ", "\n"]);
    assert_eq!(code(&output), 1, "{}", stdout(&output));
    assert_eq!(stderr(&output), "steward: the prompt is empty\n");
    assert!(
        json_sessions(&env).is_empty(),
        "a refused prompt left a session"
    );
}

#[test]
fn show_of_an_unknown_session_fails_clearly() {
    let env = Env::new();
    let output = env.run(&["show", "ses_nope"]);
    assert_eq!(code(&output), 1);
    assert_eq!(stderr(&output), "steward: session ses_nope not found\n");
}

fn json_sessions(env: &Env) -> Vec<Value> {
    let listed: Value = serde_json::from_str(&stdout(&env.run(&["sessions", "--json"]))).unwrap();
    listed.as_array().unwrap().clone()
}

#[test]
fn sessions_lists_the_most_recent_page_and_says_how_many_more_there_are() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "hello.toml", "[[step]]\ntext = [\"Hello.\"]\n");
    for title in ["first", "second", "third"] {
        let output = env.run(&[
            "--script", &script, "run", "--dir", &work, "--title", title, "hi",
        ]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let page = stdout(&env.run(&["sessions", "--limit", "2"]));
    let lines: Vec<&str> = page.lines().collect();
    assert_eq!(lines.len(), 3, "{page}");
    assert!(
        lines[0].contains("third") && lines[1].contains("second"),
        "{page}"
    );
    assert!(lines[2].contains("1 less recent"), "{page}");
    let all = stdout(&env.run(&["sessions", "--all"]));
    assert_eq!(all.lines().count(), 3, "{all}");
    let json: Value =
        serde_json::from_str(&stdout(&env.run(&["sessions", "--json", "--limit", "1"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["title"], "third");
    // Used again, the oldest comes first; --json lists every session by default.
    let first = json_sessions(&env)
        .into_iter()
        .find(|s| s["title"] == "first")
        .unwrap();
    let id = first["id"].as_str().unwrap().to_string();
    let output = env.run(&["--script", &script, "run", "--session", &id, "again"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let page = stdout(&env.run(&["sessions", "--limit", "1"]));
    assert!(page.lines().next().unwrap().contains("first"), "{page}");
    assert_eq!(json_sessions(&env).len(), 3);
    let refused = env.run(&["sessions", "--limit", "0"]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
}

#[test]
fn text_from_the_model_never_reaches_the_terminal_as_control_sequences() {
    let env = Env::new();
    let work = work_dir(&env);
    // A title sequence split across two chunks, one left open at the end of a
    // step, and a screen clear.
    let script = write_script(
        &env,
        "escapes.toml",
        "[[step]]\ntext = [\"\\u001b[2Jone \\u001b]0;PWN\", \"ED\\u0007two \\u001b]0;open\"]\n\
         tool_calls = [{ tool = \"list_dir\", input = { path = \".\" } }]\n\
         [[step]]\ntext = [\"three\"]\n",
    );
    let output = env.run(&[
        "--script",
        &script,
        "run",
        "--yes",
        "--dir",
        &work,
        "--title",
        "t\u{1b}]0;X\u{7}itle",
        "go",
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let shown = stdout(&output);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(
        shown.contains("one two") && shown.contains("three"),
        "{shown:?}"
    );
    let listed = stdout(&env.run(&["sessions"]));
    assert!(!listed.contains('\u{1b}'), "{listed:?}");
    assert!(listed.contains("title"), "{listed:?}");
    let session = json_sessions(&env)[0]["id"].as_str().unwrap().to_string();
    let transcript = stdout(&env.run(&["show", &session]));
    assert!(!transcript.contains('\u{1b}'), "{transcript:?}");
}

#[test]
fn text_from_outside_never_reaches_stderr_as_control_sequences() {
    let env = Env::new();
    let work = work_dir(&env);
    // A provider error, and a row of the database, carrying terminal sequences.
    let script = write_script(
        &env,
        "failing.toml",
        "[[step]]\nerror = \"boom \\u001b]0;PWNED\\u0007 \\u001b[2J\"\n",
    );
    let failed = env.run(&["--script", &script, "run", "--dir", &work, "go"]);
    assert_eq!(code(&failed), 1, "{}", stderr(&failed));
    let said = stderr(&failed);
    assert!(said.contains("boom"), "{said:?}");
    assert!(
        !said.contains('\u{1b}') && !said.contains('\u{7}'),
        "{said:?}"
    );
    // An error naming what the user typed (or a row) goes through the filter too.
    let unknown = env.run(&["run", "--session", "ses_\u{1b}[31mred", "x"]);
    assert_eq!(code(&unknown), 1);
    assert!(
        !stderr(&unknown).contains('\u{1b}'),
        "{:?}",
        stderr(&unknown)
    );
    // A quarantine reason from the file, printed by `recover`.
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let session: String = conn
        .query_row("SELECT id FROM session LIMIT 1", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("PRAGMA ignore_check_constraints = ON")
        .unwrap();
    conn.execute(
        "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
         VALUES ('exe_x', ?1, 'own_gone', 'bad\u{1b}]0;T\u{7}', 0, 0)",
        [&session],
    )
    .unwrap();
    drop(conn);
    let recovered = env.run(&["--script", &script, "recover", "--no-wake"]);
    let printed = format!("{}{}", stdout(&recovered), stderr(&recovered));
    assert!(printed.contains("quarantined exe_x"), "{printed:?}");
    assert!(!printed.contains('\u{1b}'), "{printed:?}");
}
