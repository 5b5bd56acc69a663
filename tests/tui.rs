//! The terminal interface end to end: the real binary in a pseudo-terminal, its
//! screen read through a terminal emulator (`vt100`), driven by keys. No system tool
//! is needed.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;

use crate::recovery::events_of;
use crate::run::{work_dir, write_script};
use crate::support::{Env, eventually, signal, snapshot, stderr, steward_bin};

pub const ROWS: u16 = 32;
pub const COLS: u16 = 110;

/// `steward …` running in a pseudo-terminal, and what it shows.
pub struct Tui {
    pty: Arc<pty_process::blocking::Pty>,
    pub child: Child,
    screen: Arc<Mutex<vt100::Parser>>,
}

impl Tui {
    /// Starts `steward --data-dir … <args>` in `dir` on a `ROWS`×`COLS` terminal.
    pub fn start(env: &Env, dir: &Path, args: &[&str]) -> Tui {
        Tui::start_with(env, dir, args, &[])
    }

    /// [`Tui::start`] with `vars` set in Steward's environment.
    pub fn start_with(env: &Env, dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Tui {
        let (pty, pts) = pty_process::blocking::open().unwrap();
        pty.resize(pty_process::Size::new(ROWS, COLS)).unwrap();
        let mut cmd = pty_process::blocking::Command::new(steward_bin())
            .arg("--data-dir")
            .arg(&env.data)
            .args(args)
            .current_dir(dir)
            .env("HOME", &env.home)
            .env("TERM", "xterm-256color");
        for var in [
            "STEWARD_DATA_DIR",
            "STEWARD_CONFIG",
            "FAILPOINTS",
            "XDG_DATA_HOME",
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "NO_COLOR",
            "VISUAL",
            "EDITOR",
        ] {
            cmd = cmd.env_remove(var);
        }
        for (name, value) in vars {
            cmd = cmd.env(name, value);
        }
        let child = cmd.spawn(pts).unwrap();
        let pty = Arc::new(pty);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(
            std::num::NonZeroU16::new(ROWS).unwrap(),
            std::num::NonZeroU16::new(COLS).unwrap(),
            0,
        )));
        {
            let (pty, screen) = (pty.clone(), screen.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                // EIO once the child is gone ends the loop.
                while let Ok(n) = (&*pty).read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    screen.lock().unwrap().process(&buf[..n]);
                }
            });
        }
        Tui { pty, child, screen }
    }

    /// The screen's text, row by row.
    pub fn text(&self) -> String {
        let parser = self.screen.lock().unwrap();
        parser.screen().rows(0, COLS).collect::<Vec<_>>().join("\n")
    }

    /// Waits (up to `limit`) until the screen shows `needle`.
    pub fn wait_for(&self, needle: &str, limit: Duration) -> bool {
        eventually(limit, || self.text().contains(needle))
    }

    /// Asserts the screen shows `needle` within `limit`, printing it when not.
    pub fn expect(&self, needle: &str, limit: Duration) {
        assert!(
            self.wait_for(needle, limit),
            "the screen never showed {needle:?}:\n{}",
            self.text()
        );
    }

    pub fn keys(&self, bytes: &str) {
        (&*self.pty).write_all(bytes.as_bytes()).unwrap();
    }

    pub fn alternate_screen(&self) -> bool {
        self.screen.lock().unwrap().screen().alternate_screen()
    }

    pub fn cursor_hidden(&self) -> bool {
        self.screen.lock().unwrap().screen().hide_cursor()
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader take the last bytes.
                std::thread::sleep(Duration::from_millis(100));
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SLOW_TOOL: &str = r#"
[[step]]
text = ["Looking at ", "the files."]
tool_calls = [{ tool = "run_command", input = { command = "sleep 300" } }]
[[step]]
text = ["Carrying on ", "after the restart."]
[[step]]
text = ["A fresh ", "answer ", "streams ", "in."]
delay_ms = 150
"#;

/// A `steward run` killed with SIGKILL while its tool sleeps.
fn crashed_mid_tool(env: &Env, script: &str, work: &str) {
    let started = || {
        events_of(env)
            .iter()
            .filter(|e| *e == "tool.started")
            .count()
    };
    let before = started();
    let mut child = env
        .cmd()
        .args([
            "--script",
            script,
            "run",
            "--yes",
            "--dir",
            work,
            "look around",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || started() > before));
    signal(child.id(), "KILL");
    child.wait().unwrap();
}

/// The data directory without the shared-memory index (`-shm`), which a reader may
/// rebuild: the database, its log and every file name.
fn files(env: &Env) -> Vec<(String, Vec<u8>)> {
    snapshot(&env.data)
        .into_iter()
        .map(|(name, bytes)| {
            if name.ends_with("-shm") {
                (name, Vec::new())
            } else {
                (name, bytes)
            }
        })
        .collect()
}

/// Protocol §4 (quarantine): `steward show` says a call a quarantined execution left
/// open is of unknown outcome, with the quarantine's reason, not that it runs.
#[test]
fn show_says_a_quarantined_executions_open_call_is_of_unknown_outcome() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    crashed_mid_tool(&env, &script, &work);
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let session: String = conn
        .query_row("SELECT session_id FROM session_execution", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("UPDATE session_execution SET recovery_error = 'held for a look'")
        .unwrap();
    drop(conn);
    let output = env.run(&["show", &session]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(text.contains("[run_command outcome unknown]"), "{text}");
    assert!(!text.contains("running]"), "{text}");
    assert!(
        text.contains("outcome unknown: its execution is quarantined: held for a look"),
        "{text}"
    );
}

#[test]
fn after_a_crash_inspect_shows_the_dead_owners_claim_and_changes_nothing() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    crashed_mid_tool(&env, &script, &work);
    let before = files(&env);
    let mut tui = Tui::start(&env, Path::new(&work), &["inspect"]);
    tui.expect("owner dead: recoverable now", Duration::from_secs(10));
    tui.expect(
        "read-only: actions run from `steward`",
        Duration::from_secs(2),
    );
    // Its actions are disabled.
    tui.keys("w");
    tui.expect("read-only: wake from `steward`", Duration::from_secs(2));
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(5))
            .is_some_and(|s| s.success())
    );
    assert!(!tui.alternate_screen() && !tui.cursor_hidden());
    assert_eq!(files(&env), before, "inspect changed the data directory");
}

#[test]
fn steward_shows_the_after_crash_panel_the_recovered_transcript_and_streams_a_prompt() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    crashed_mid_tool(&env, &script, &work);
    let mut tui = Tui::start(&env, Path::new(&work), &["--script", &script]);
    tui.expect("Recovered at launch", Duration::from_secs(10));
    tui.expect("look around", Duration::from_secs(2));
    tui.expect(
        "Session execution interrupted by server restart",
        Duration::from_secs(2),
    );
    // Enter goes to the session: the transcript shows the recovery once.
    tui.keys("\r");
    tui.expect("Carrying on after the restart.", Duration::from_secs(10));
    let text = tui.text();
    assert!(
        text.contains("error (recovery): Tool execution outcome unknown after server restart"),
        "{text}"
    );
    assert_eq!(
        text.matches("Session execution interrupted by server restart")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("Continuing after restart"), "{text}");
    // A prompt typed into the editor streams an answer.
    tui.keys("and now?\r");
    tui.expect("A fresh answer", Duration::from_secs(10));
    tui.expect("A fresh answer streams in.", Duration::from_secs(10));
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    assert!(!tui.alternate_screen(), "the alternate screen was not left");
    assert!(!tui.cursor_hidden(), "the cursor was left hidden");
}

#[test]
fn a_session_changed_by_another_process_appears_without_a_key() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "hello.toml", "[[step]]\ntext = [\"Hello.\"]\n");
    let tui = Tui::start(&env, Path::new(&work), &["--script", &script]);
    tui.expect("No session open", Duration::from_secs(10));
    let output = env
        .cmd()
        .args([
            "--script",
            &script,
            "run",
            "--dir",
            &work,
            "from another window",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let shown = Instant::now();
    tui.expect("from another window", Duration::from_secs(2));
    assert!(shown.elapsed() < Duration::from_secs(2));
}

/// The fault campaign through the terminal interface: `steward` is killed with
/// SIGKILL while a turn streams (and while its tool runs), then relaunched.
#[test]
fn campaign_sigkill_of_the_terminal_interface_mid_turn_is_recovered_and_named_at_relaunch() {
    use crate::campaign::{Scenario, Tally};
    let mut tally = Tally::default();
    let rounds = [
        ("while it streams", "three "),
        ("while its tool runs", "◐ running"),
    ];
    for (i, (when, wait_for)) in rounds.iter().enumerate() {
        let scenario = Scenario::new(
            format!("tui {when}"),
            r#"
            [[step]]
            text = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight "]
            delay_ms = 250
            tool_calls = [{ tool = "run_command", input = { command = "echo ran >> ../effects.txt; sleep 300" } }]
            [[step]]
            text = ["Carried on."]
            "#,
        );
        let args = ["--config", &scenario.config, "--script", &scenario.script];
        let work = Path::new(&scenario.work);
        let tui = Tui::start(&scenario.env, work, &args);
        tally.check(
            &format!("{when}: opened"),
            tui.wait_for("No session open", Duration::from_secs(10)),
            || tui.text(),
        );
        let prompt = format!("campaign prompt {i}");
        tui.keys(&format!("{prompt}\r"));
        if i == 1 {
            // The command asks first (it is not in tools.allow).
            tui.wait_for("Permission", Duration::from_secs(10));
            // A key within 400 ms of a question appearing is taken for typing that
            // ran on, not an answer: answer as a person would, after reading it.
            std::thread::sleep(Duration::from_millis(600));
            tui.keys("y");
        }
        let reached = tui.wait_for(wait_for, Duration::from_secs(10));
        tally.check(&format!("{when}: reached"), reached, || tui.text());
        signal(tui.child.id(), "KILL");
        drop(tui);
        tally.fault(&format!("SIGKILL of steward {when}"));
        let mut relaunched = Tui::start(&scenario.env, work, &args);
        let panel = relaunched.wait_for("Recovered at launch", Duration::from_secs(10))
            && relaunched.wait_for(&prompt, Duration::from_secs(2));
        tally.check(
            &format!("{when}: the panel names the session"),
            panel,
            || relaunched.text(),
        );
        relaunched.keys("\r");
        let carried = relaunched.wait_for("Carried on.", Duration::from_secs(10));
        tally.check(&format!("{when}: the continuation ran"), carried, || {
            relaunched.text()
        });
        // The turn has ended once its session reads idle: `q` then quits without
        // asking first (it asks while a turn runs).
        relaunched.wait_for(" · idle ", Duration::from_secs(10));
        relaunched.keys("\t");
        relaunched.keys("q");
        let left = relaunched
            .wait(Duration::from_secs(10))
            .is_some_and(|s| s.success());
        tally.check(
            &format!("{when}: quit restores the terminal"),
            left && !relaunched.alternate_screen(),
            || relaunched.text(),
        );
        scenario.check(&mut tally, &[(prompt.as_str(), true)]);
    }
    tally.finish("tui");
}

#[test]
fn sigterm_during_a_turn_restores_the_terminal_and_leaves_no_claim_behind() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    let config = env.root.path().join("allow.toml");
    std::fs::write(&config, "[tools]\nallow = [\"run_command\"]\n").unwrap();
    let config = config.display().to_string();
    let mut tui = Tui::start(
        &env,
        Path::new(&work),
        &["--script", &script, "--config", &config],
    );
    tui.expect("No session open", Duration::from_secs(10));
    tui.keys("look around\r");
    assert!(eventually(Duration::from_secs(10), || events_of(&env)
        .contains(&"tool.started".to_string())));
    signal(tui.child.id(), "TERM");
    let status = tui.wait(Duration::from_secs(15));
    assert!(status.is_some(), "steward did not leave on SIGTERM");
    assert!(!tui.alternate_screen(), "the alternate screen was not left");
    assert!(!tui.cursor_hidden(), "the cursor was left hidden");
    // The turn was stopped and reconciled like a crash: no claim, a wake pending.
    let inspected: serde_json::Value =
        serde_json::from_slice(&env.run(&["inspect", "--json"]).stdout).unwrap();
    assert_eq!(inspected["claims"], serde_json::json!([]), "{inspected:#}");
    assert_eq!(
        inspected["wakes"].as_array().unwrap().len(),
        1,
        "{inspected:#}"
    );
    assert!(env.run(&["doctor"]).status.success());
}

#[test]
fn inspect_on_a_terminal_refuses_a_file_that_is_not_a_database_with_exit_3() {
    let env = Env::new();
    let work = work_dir(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    std::fs::write(env.db(), b"these are not the bytes of a database").unwrap();
    let before = files(&env);
    let mut tui = Tui::start(&env, Path::new(&work), &["inspect"]);
    let status = tui
        .wait(Duration::from_secs(10))
        .expect("inspect did not exit");
    assert_eq!(status.code(), Some(3), "{}", tui.text());
    assert_eq!(files(&env), before);
}

#[test]
fn r4_19_a_commands_output_shows_while_it_runs() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "ticks.toml",
        "[[step]]\ntext = [\"Counting.\"]\ntool_calls = [{ tool = \"run_command\", input = { command = \"printf 'tick %s\\\\n' one; sleep 3; printf 'tick %s\\\\n' two\" } }]\n[[step]]\ntext = [\"Counted.\"]\n",
    );
    let config = write_script(&env, "config.toml", "[tools]\nallow = [\"run_command\"]\n");
    let mut tui = Tui::start(
        &env,
        Path::new(&work),
        &["--config", &config, "--script", &script],
    );
    tui.expect("Write to the agent", Duration::from_secs(10));
    tui.keys("count\r");
    tui.expect("tick one", Duration::from_secs(10));
    let text = tui.text();
    assert!(
        !text.contains("tick two"),
        "the output showed only once the command ended:\n{text}"
    );
    tui.expect("Counted.", Duration::from_secs(15));
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
}

/// Three sessions made active in the order beta, gamma, alpha.
fn three_sessions(env: &Env, work: &str) -> std::collections::BTreeMap<String, String> {
    let script = write_script(env, "hello.toml", "[[step]]\ntext = [\"Hello.\"]\n");
    let run = |args: &[&str]| {
        let mut all = vec!["--script", script.as_str(), "run", "--dir", work];
        all.extend_from_slice(args);
        let output = env.run(&all);
        assert!(output.status.success(), "{output:?}");
    };
    for title in ["alpha", "beta", "gamma"] {
        run(&["--title", title, "hello"]);
    }
    let listed: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(
        &env.run(&["sessions", "--json"]).stdout,
    ))
    .unwrap();
    let ids: std::collections::BTreeMap<String, String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["title"].as_str().unwrap().to_string(),
                s["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The first one prompted again: the most recently active now.
    run(&["--session", &ids["alpha"], "again"]);
    ids
}

/// The session list's titles from top to bottom (the left pane).
fn list_order(tui: &Tui, titles: &[&str]) -> Vec<String> {
    let text = tui.text();
    let mut found: Vec<(usize, String)> = titles
        .iter()
        .filter_map(|t| {
            text.lines()
                .position(|line| line.get(..34).is_some_and(|left| left.contains(t)))
                .map(|row| (row, t.to_string()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, t)| t).collect()
}

/// Protocol §3.6: the list is most recently active first, and a session just
/// prompted (here by another process) moves to the top.
#[test]
fn the_session_list_is_most_recently_active_first_and_a_prompted_session_moves_up() {
    let env = Env::new();
    let work = work_dir(&env);
    let ids = three_sessions(&env, &work);
    let tui = Tui::start(&env, Path::new(&work), &[]);
    tui.expect("Sessions 3", Duration::from_secs(10));
    let titles = ["alpha", "beta", "gamma"];
    assert!(
        eventually(Duration::from_secs(5), || list_order(&tui, &titles)
            == ["alpha", "gamma", "beta"]),
        "{}",
        tui.text()
    );
    let script = write_script(&env, "hello.toml", "[[step]]\ntext = [\"Hello.\"]\n");
    let output = env.run(&[
        "--script",
        &script,
        "run",
        "--session",
        &ids["beta"],
        "more",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        eventually(Duration::from_secs(10), || list_order(&tui, &titles)
            == ["beta", "alpha", "gamma"]),
        "{}",
        tui.text()
    );
}

/// `steward --continue` opens the most recently active session; `--session ID`
/// that one.
#[test]
fn continue_opens_the_most_recently_active_session_and_session_opens_the_one_named() {
    let env = Env::new();
    let work = work_dir(&env);
    let ids = three_sessions(&env, &work);
    let mut tui = Tui::start(&env, Path::new(&work), &["--continue"]);
    tui.expect("alpha · ses_", Duration::from_secs(10));
    tui.expect("again", Duration::from_secs(5));
    assert!(!tui.text().contains("No session open"), "{}", tui.text());
    tui.keys("\x03");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    drop(tui);
    let tui = Tui::start(&env, Path::new(&work), &["--session", &ids["gamma"]]);
    tui.expect("gamma · ses_", Duration::from_secs(10));
    // With no session at all, it opens as without the flag and says why.
    let empty = Env::new();
    let tui = Tui::start(&empty, Path::new(&work), &["-c"]);
    tui.expect("No session open", Duration::from_secs(10));
    tui.expect("no session to continue yet", Duration::from_secs(5));
}

/// Ctrl-X Ctrl-E hands the prompt to `$EDITOR` and takes back what it wrote; an
/// editor that fails leaves the prompt as it was, and says so.
#[test]
fn ctrl_x_ctrl_e_edits_the_prompt_in_the_editor() {
    let env = Env::new();
    let work = work_dir(&env);
    let editor = env.root.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nprintf 'was: %s, now edited' \"$(cat \"$1\")\" > \"$1\"\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", editor.to_str().unwrap()])
        .status()
        .unwrap();
    let tui = Tui::start_with(
        &env,
        Path::new(&work),
        &[],
        &[("EDITOR", editor.to_str().unwrap())],
    );
    tui.expect("Write to the agent", Duration::from_secs(10));
    tui.keys("draft");
    tui.expect("draft", Duration::from_secs(5));
    tui.keys("\x18\x05");
    tui.expect("was: draft, now edited", Duration::from_secs(10));
    tui.expect(
        "the prompt is as the editor left it",
        Duration::from_secs(5),
    );
    drop(tui);

    let tui = Tui::start_with(&env, Path::new(&work), &[], &[("EDITOR", "false")]);
    tui.expect("Write to the agent", Duration::from_secs(10));
    tui.keys("keep me");
    tui.expect("keep me", Duration::from_secs(5));
    tui.keys("\x18\x05");
    tui.expect(
        "the prompt is as it was: false exited",
        Duration::from_secs(10),
    );
    assert!(tui.text().contains("keep me"), "{}", tui.text());
}

/// The terminal interface stopped (SIGSTOP) past its lease while a command runs:
/// another process takes the claim over and stops the command. Its tool error says
/// the owner was alive, not dead (protocol §5.4, `owner_alive`), and once resumed the
/// stopped interface says it lost its lease. Real lease timing is the subject here.
#[test]
fn r5_4_a_stopped_interface_taken_over_says_it_lost_its_lease_and_was_not_dead() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    let config = write_script(
        &env,
        "config.toml",
        "[lease]\nlease_ms = 1500\nheartbeat_ms = 300\n[tools]\nallow = [\"run_command\"]\n",
    );
    let tui = Tui::start(
        &env,
        Path::new(&work),
        &["--config", &config, "--script", &script],
    );
    tui.expect("No session open", Duration::from_secs(10));
    tui.keys("look around\r");
    assert!(
        eventually(Duration::from_secs(20), || events_of(&env)
            .contains(&"tool.started".to_string())),
        "{}",
        tui.text()
    );
    signal(tui.child.id(), "STOP");
    std::thread::sleep(Duration::from_millis(2_500));
    let taker = env
        .cmd()
        .args(["--config", &config, "--script", &script])
        .args(["recover", "--json", "--no-wake"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&taker.stdout).unwrap_or_default();
    assert_eq!(
        report["recovered"].as_array().map(Vec::len),
        Some(1),
        "{report} {}",
        String::from_utf8_lossy(&taker.stderr)
    );
    let error: String = {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let conn = rusqlite::Connection::open_with_flags(env.db(), flags).unwrap();
        conn.query_row(
            "SELECT data FROM session_message WHERE type = 'assistant' ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert!(
        error.contains("alive but not responding") && !error.contains("owner died"),
        "{error}"
    );
    signal(tui.child.id(), "CONT");
    tui.expect("lease lost", Duration::from_secs(10));
}

/// Esc in a session another process runs cannot cancel it here: it says which
/// process runs it, so that the user can stop it there.
#[test]
fn esc_in_a_session_another_process_runs_names_that_process() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    let mut other = env
        .cmd()
        .args([
            "--script",
            &script,
            "run",
            "--yes",
            "--dir",
            &work,
            "look around",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || events_of(&env)
        .contains(&"tool.started".to_string())));
    let tui = Tui::start(&env, Path::new(&work), &["--script", &script]);
    tui.expect("running", Duration::from_secs(10));
    // To the session list, open the session (the prompt takes the focus), Esc.
    tui.keys("\t");
    tui.keys("\r");
    tui.expect("assistant (scripted", Duration::from_secs(10));
    tui.keys("\x1b");
    tui.expect(
        &format!("another Steward process (pid {}", other.id()),
        Duration::from_secs(10),
    );
    signal(other.id(), "KILL");
    other.wait().unwrap();
}

const LEFT_RUNNING: &str = r#"
[[step]]
text = ["Starting."]
tool_calls = [{ tool = "run_command", input = { command = "sleep 300" } }]
[[step]]
text = ["Writing it down."]
tool_calls = [{ tool = "write_file", input = { path = "note.txt", content = "checked" } }]
[[step]]
text = ["Done."]
"#;

/// Quitting with "leave it" while a command runs, then relaunching: the header says
/// its session continues (not just "nothing to recover"), and the
/// continuation's permission question opens its session behind the question.
#[test]
fn a_turn_left_at_quit_continues_at_relaunch_and_its_question_opens_its_session() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "left.toml", LEFT_RUNNING);
    let config = write_script(&env, "config.toml", "[tools]\nallow = [\"run_command\"]\n");
    let args = ["--config", config.as_str(), "--script", script.as_str()];
    let mut tui = Tui::start(&env, Path::new(&work), &args);
    tui.expect("No session open", Duration::from_secs(10));
    tui.keys("look around\r");
    assert!(
        eventually(Duration::from_secs(20), || events_of(&env)
            .contains(&"tool.started".to_string())),
        "{}",
        tui.text()
    );
    tui.keys("\t");
    tui.keys("q");
    tui.expect("Quit?", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    tui.keys("y");
    assert!(
        tui.wait(Duration::from_secs(15)).is_some(),
        "{}",
        tui.text()
    );
    drop(tui);
    let relaunched = Tui::start(&env, Path::new(&work), &args);
    relaunched.expect("1 session continued at launch", Duration::from_secs(10));
    relaunched.expect("wants to run write_file", Duration::from_secs(20));
    // Its session is open behind the question.
    relaunched.expect("look around ·", Duration::from_secs(10));
    assert!(
        !relaunched.text().contains("No session open"),
        "{}",
        relaunched.text()
    );
}

/// A recovery wake the launch's redrive quarantines is in the after-crash panel,
/// as quarantined at this launch with its reason; a claim quarantined before the
/// launch is there too, under the Quarantine tab's count, and the header agrees.
#[test]
fn a_wake_quarantined_at_launch_is_in_the_after_crash_panel() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "slow.toml", SLOW_TOOL);
    // An earlier crash whose claim stays quarantined.
    crashed_mid_tool(&env, &script, &work);
    {
        let conn = rusqlite::Connection::open(env.db()).unwrap();
        conn.execute_batch("UPDATE session_execution SET recovery_error = 'held for a look'")
            .unwrap();
    }
    crashed_mid_tool(&env, &script, &work);
    let recovered = env.run(&["--script", &script, "recover", "--no-wake"]);
    assert!(recovered.status.success());
    {
        // A wake pending while its continuation reads as promoted: the two
        // disagree, and the wake must not run (protocol §5.7).
        let conn = rusqlite::Connection::open(env.db()).unwrap();
        let changed = conn
            .execute(
                "UPDATE session_input SET promoted_seq = 1 WHERE id LIKE 'inp_rec_%'",
                [],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    let tui = Tui::start(&env, Path::new(&work), &["--script", &script]);
    tui.expect("Recovered at launch", Duration::from_secs(10));
    tui.expect("quarantined", Duration::from_secs(2));
    tui.expect("was already promoted", Duration::from_secs(2));
    tui.expect("at this launch", Duration::from_secs(2));
    tui.expect("Quarantine 2", Duration::from_secs(2));
    tui.expect(
        "claim quarantined before this launch",
        Duration::from_secs(2),
    );
    tui.expect("2 in quarantine at launch", Duration::from_secs(2));
    assert!(!tui.text().contains("nothing to recover"), "{}", tui.text());
}
