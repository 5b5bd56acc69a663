//! `steward acp` against the official ACP TypeScript client SDK
//! (`tests/acp/conformance.mjs`, `@agentclientprotocol/sdk` pinned in
//! `tests/acp/package.json`): every message the agent sends is validated against
//! the SDK's schemas, and each scenario's checks must pass. Node.js is required; a
//! missing `node` fails these tests rather than skipping them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::Duration;

use serde_json::Value;

use crate::run::{work_dir, write_script};
use crate::support::{Env, code, signal, stderr, stdout, steward_bin};

fn acp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp")
}

/// `npm ci` once, when the SDK is not installed yet.
fn ensure_sdk() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let node = Command::new("node").arg("--version").output();
        assert!(
            node.as_ref().is_ok_and(|o| o.status.success()),
            "node (Node.js 20+) is required for the ACP conformance tests: {node:?}"
        );
        if !acp_dir()
            .join("node_modules/@agentclientprotocol/sdk")
            .exists()
        {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(acp_dir())
                .status()
                .expect("npm is required to install the ACP SDK");
            assert!(status.success(), "npm ci failed in tests/acp");
        }
    });
}

pub(crate) fn argv(env: &Env, script: &str, config: Option<&Path>) -> String {
    let mut argv = vec![
        steward_bin().to_string(),
        "--data-dir".into(),
        env.data.display().to_string(),
        "--script".into(),
        script.into(),
    ];
    if let Some(config) = config {
        argv.push("--config".into());
        argv.push(config.display().to_string());
    }
    argv.push("acp".into());
    serde_json::to_string(&argv).unwrap()
}

fn client(env: &Env, argv: &str, scenario: &str, options: &[&str]) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(acp_dir().join("conformance.mjs"))
        .arg(argv)
        .arg(scenario)
        .args(options)
        .env("HOME", &env.home)
        .env_remove("STEWARD_DATA_DIR")
        .env_remove("STEWARD_CONFIG")
        .env_remove("FAILPOINTS");
    cmd
}

/// Runs a scenario and asserts every check passed.
pub(crate) fn conform(env: &Env, argv: &str, scenario: &str, options: &[&str]) -> Vec<Value> {
    ensure_sdk();
    let output: Output = client(env, argv, scenario, options).output().unwrap();
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let failed: Vec<&Value> = lines.iter().filter(|l| l["ok"] == false).collect();
    assert!(
        output.status.success() && failed.is_empty() && lines.iter().any(|l| l["done"] == true),
        "{scenario}: {failed:#?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&output),
        stderr(&output)
    );
    lines
}

const TURN: &str = r#"
[[step]]
text = ["Looking ", "around."]
tool_calls = [{ tool = "list_dir", input = { path = "." } }]
[[step]]
text = ["All done."]
"#;

#[test]
fn acp_a_turn_with_a_tool_call_streams_updates_and_ends_the_turn() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "turn.toml", TURN);
    conform(&env, &argv(&env, &script, None), "turn", &["--cwd", &work]);
}

#[test]
fn acp_a_cancelled_turn_answers_cancelled() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        r#"
        [[step]]
        text = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight "]
        delay_ms = 300
    "#,
    );
    conform(
        &env,
        &argv(&env, &script, None),
        "cancel",
        &["--cwd", &work],
    );
    // The cancellation went through the engine like Ctrl-C in `run`.
    let output = env.run(&["doctor"]);
    assert!(output.status.success(), "{}", stdout(&output));
}

#[test]
fn acp_session_list_returns_every_session_and_filters_by_cwd() {
    let env = Env::new();
    let work = work_dir(&env);
    let other = env.root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let script = write_script(&env, "turn.toml", TURN);
    conform(
        &env,
        &argv(&env, &script, None),
        "list",
        &["--cwd", &work, "--cwd2", other.to_str().unwrap()],
    );
}

#[test]
fn acp_a_tool_outside_tools_allow_asks_and_the_answer_decides() {
    let script_text = r#"
        [[step]]
        tool_calls = [{ tool = "write_file", input = { path = "notes.txt", content = "hello" } }]
        [[step]]
        text = ["Done."]
    "#;
    for (decision, written) in [("allow", true), ("reject", false)] {
        let env = Env::new();
        let work = work_dir(&env);
        let script = write_script(&env, "perm.toml", script_text);
        conform(
            &env,
            &argv(&env, &script, None),
            "permission",
            &["--cwd", &work, "--decision", decision],
        );
        assert_eq!(
            Path::new(&work).join("notes.txt").exists(),
            written,
            "{decision}"
        );
    }
}

pub(crate) const CRASH: &str = r#"
[[step]]
text = ["Running ", "the slow command."]
tool_calls = [{ tool = "run_command", input = { command = "echo ran >> ../effects.txt; sleep 300" } }]
[[step]]
text = ["Carried on after the restart."]
[[step]]
text = ["Still here."]
"#;

/// Starts a turn whose tool sleeps, SIGKILLs the agent while the tool runs; returns
/// the session and the interrupted tool call.
pub fn crash_mid_tool(env: &Env, argv: &str, work: &str) -> (String, String) {
    crash(env, argv, work, "tool")
}

/// Starts a turn and SIGKILLs the agent once `on` happened: `text` streamed, or a
/// `tool` running. Returns the session and the running tool call (if any).
fn crash(env: &Env, argv: &str, work: &str, on: &str) -> (String, String) {
    // The crash scripts' command appends a line to `effects.txt` as it starts: a
    // tool reported running is killed only once it has.
    let effects = env.root.path().join("effects.txt");
    let lines = || {
        std::fs::read_to_string(&effects)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let before = lines();
    let running = start_turn(env, argv, work, on);
    if on == "tool" {
        assert!(
            crate::support::eventually(Duration::from_secs(10), || lines() > before),
            "the tool never started"
        );
    }
    let ids = (running.session.clone(), running.tool_call.clone());
    running.kill();
    ids
}

/// A turn of another `steward acp`, running.
struct Running {
    client: std::process::Child,
    pid: u32,
    session: String,
    tool_call: String,
}

impl Running {
    /// SIGKILLs the agent and returns once it is gone.
    fn kill(mut self) {
        signal(self.pid, "KILL");
        let _ = self.client.kill();
        let _ = self.client.wait();
        let pid = self.pid;
        assert!(
            crate::support::eventually(Duration::from_secs(10), || {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.split_whitespace().nth(2) == Some("Z"))
                    .unwrap_or(true)
            }),
            "the agent did not die"
        );
        // The killed agent's tool group dies with it (PR_SET_PDEATHSIG).
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts a turn through `crash-start` and returns once `on` happened.
fn start_turn(env: &Env, argv: &str, work: &str, on: &str) -> Running {
    ensure_sdk();
    let mut child = client(
        env,
        argv,
        "crash-start",
        &["--cwd", work, "--prompt", "run it", "--ready-on", on],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = loop {
        let line = lines
            .next()
            .expect("crash-start ended before its tool ran")
            .unwrap();
        let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        assert_ne!(value["ok"], false, "crash-start: {line}");
        if value["ready"] == true {
            break value;
        }
    };
    // Its output is no longer read; a full pipe must not block it.
    std::thread::spawn(move || for _ in lines {});
    Running {
        client: child,
        pid: ready["pid"].as_u64().unwrap() as u32,
        session: ready["session_id"].as_str().unwrap().to_string(),
        tool_call: ready["tool_call_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

/// A `steward acp` driven line by line from the test, as an editor would.
pub(crate) struct Driver {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
    /// Every message received that was not a response, in order.
    pub(crate) seen: Vec<Value>,
    next_id: i64,
}

impl Driver {
    pub(crate) fn spawn(env: &Env, argv: &str) -> Driver {
        Driver::spawn_with(env, argv, &[])
    }

    /// [`Driver::spawn`] with `vars` set in the agent's environment.
    pub(crate) fn spawn_with(env: &Env, argv: &str, vars: &[(&str, &str)]) -> Driver {
        let argv: Vec<String> = serde_json::from_str(argv).unwrap();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .envs(vars.iter().copied())
            .env("HOME", &env.home)
            .env_remove("STEWARD_DATA_DIR")
            .env_remove("STEWARD_CONFIG")
            .env_remove("FAILPOINTS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("stdout carried a line that is not JSON: {line}"));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Driver {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            next_id: 0,
        }
    }

    /// The agent's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn send(&mut self, message: Value) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its response (`result` or `error`), keeping
    /// everything that arrived before it.
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let message = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
            self.seen.push(message);
        }
    }

    /// Waits for a message matching `wanted` (kept with the others); false when
    /// none came within `limit`.
    pub(crate) fn wait_for(&mut self, limit: Duration, wanted: impl Fn(&Value) -> bool) -> bool {
        if self.seen.iter().any(&wanted) {
            return true;
        }
        let deadline = std::time::Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(message) => {
                    let found = wanted(&message);
                    self.seen.push(message);
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// Takes what arrived without waiting.
    fn drain(&mut self) {
        while let Ok(message) = self.lines.try_recv() {
            self.seen.push(message);
        }
    }

    /// The updates received for `session`.
    pub(crate) fn updates(&self, session: &str) -> Vec<&Value> {
        self.seen
            .iter()
            .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
            .map(|m| &m["params"]["update"])
            .collect()
    }

    /// Closes stdin and waits for the agent to exit.
    pub(crate) fn close(mut self) -> std::process::ExitStatus {
        self.stdin = None;
        self.child.wait().unwrap()
    }
}

pub(crate) fn agent_text(updates: &[&Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[test]
fn acp_after_sigkill_mid_tool_session_load_replays_the_recovery_and_a_new_prompt_ends_the_turn() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "crash.toml", CRASH);
    let argv = argv(&env, &script, None);
    let (session, call) = crash_mid_tool(&env, &argv, &work);
    conform(
        &env,
        &argv,
        "crash-load",
        &[
            "--cwd",
            &work,
            "--session",
            &session,
            "--tool-call-id",
            &call,
            "--prompt",
            "run it",
            "--expect-continuation",
            "Carried on after the restart.",
        ],
    );
    let effects = std::fs::read_to_string(env.root.path().join("effects.txt")).unwrap();
    assert_eq!(effects, "ran\n", "the tool ran again");
}

#[test]
fn acp_a_crash_elsewhere_is_reconciled_for_the_opened_sessions_and_the_others_are_left_alone() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "crash.toml", CRASH);
    let config = env.root.path().join("lease.toml");
    // Short leases: the background probe of other owners runs every 500 ms.
    std::fs::write(&config, "[lease]\nlease_ms = 2000\nheartbeat_ms = 500\n").unwrap();
    let argv = argv(&env, &script, Some(&config));
    let mut editor = Driver::spawn(&env, &argv);
    let init = editor.request("initialize", serde_json::json!({"protocolVersion": 1}));
    assert!(init.get("result").is_some(), "{init}");

    // 1. The editor has a session open that another process runs; that process
    //    is killed mid-tool, and the editor prompts at once: the dead owner's
    //    claim is reconciled then and there, not reported as a live owner's.
    let other = start_turn(&env, &argv, &work, "tool");
    let (opened, call) = (other.session.clone(), other.tool_call.clone());
    let loaded = editor.request(
        "session/load",
        serde_json::json!({"sessionId": opened, "cwd": work, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let effects = env.root.path().join("effects.txt");
    let ran = |n: usize| {
        crate::support::eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(&effects).is_ok_and(|t| t.lines().count() == n)
        })
    };
    assert!(ran(1), "the tool never started");
    other.kill();
    let answer = editor.request(
        "session/prompt",
        serde_json::json!({"sessionId": opened, "prompt": [{"type": "text", "text": "still there?"}]}),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    editor.drain();
    let updates = editor.updates(&opened);
    assert!(
        updates.iter().any(|u| u["toolCallId"] == call.as_str()
            && u["status"] == "failed"
            && u.to_string()
                .contains("Tool execution outcome unknown after server restart")),
        "the editor was not told the tool's outcome is unknown: {updates:#?}"
    );
    assert!(
        agent_text(&updates).contains("Carried on after the restart."),
        "{updates:#?}"
    );

    // 2. A session the editor never opened is crashed the same way: it is
    //    reconciled in the background, but not run, and nothing about it is sent.
    let hidden = start_turn(&env, &argv, &work, "tool");
    let unopened = hidden.session.clone();
    assert!(ran(2), "the second tool never started");
    hidden.kill();
    let wake_waits = || {
        let output = env.run(&["inspect", "--json"]);
        let inspected: Value = serde_json::from_str(&stdout(&output)).unwrap();
        inspected["wakes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["session_id"] == unopened.as_str())
    };
    assert!(
        crate::support::eventually(Duration::from_secs(15), wake_waits),
        "the background never reconciled the crashed session"
    );
    // Several probe intervals later, it still waits, untouched.
    std::thread::sleep(Duration::from_millis(2000));
    assert!(wake_waits(), "a session the editor never opened was run");
    editor.drain();
    assert!(
        !editor
            .seen
            .iter()
            .any(|m| m.to_string().contains(unopened.as_str())),
        "the editor was sent something about a session it never opened"
    );

    // 3. Once the editor loads it, it sees the restart text, and what the agent
    //    does next streams to it.
    let loaded = editor.request(
        "session/load",
        serde_json::json!({"sessionId": unopened, "cwd": work, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed = agent_text(&editor.updates(&unopened));
    assert!(
        replayed.contains("Session execution interrupted by server restart"),
        "{replayed}"
    );
    let continued = editor.wait_for(Duration::from_secs(30), |m| {
        m["params"]["sessionId"] == unopened.as_str()
            && m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("Carried on after the restart."))
    });
    assert!(
        continued,
        "the continuation did not stream: {:#?}",
        editor.updates(&unopened)
    );
    assert!(editor.close().success());

    let effects = std::fs::read_to_string(&effects).unwrap();
    assert_eq!(effects, "ran\nran\n", "a tool ran again");
    let doctor = env.run(&["doctor"]);
    assert!(doctor.status.success(), "{}", stdout(&doctor));
}

#[test]
fn acp_what_another_process_does_in_an_opened_session_streams_to_the_client() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        "[[step]]\ntext = [\"alpha \", \"beta \", \"gamma \", \"delta\"]\ndelay_ms = 200\n",
    );
    let argv = argv(&env, &script, None);
    let mut editor = Driver::spawn(&env, &argv);
    editor.request("initialize", serde_json::json!({"protocolVersion": 1}));
    let created = editor.request(
        "session/new",
        serde_json::json!({"cwd": work, "mcpServers": []}),
    );
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    // Another window runs the session.
    let output = env
        .cmd()
        .args(["--script", &script, "run", "--session", &session, "go"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let streamed = editor.wait_for(Duration::from_secs(15), |m| {
        m["params"]["sessionId"] == session.as_str()
            && m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("delta"))
    });
    assert!(streamed, "{:#?}", editor.updates(&session));
    assert_eq!(
        agent_text(&editor.updates(&session)),
        "alpha beta gamma delta"
    );
    // The other window's prompt is shown too, as a load would replay it.
    assert!(
        editor
            .updates(&session)
            .iter()
            .any(|u| u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == "go"),
        "{:#?}",
        editor.updates(&session)
    );
    assert!(editor.close().success());
}

#[test]
fn acp_a_second_process_prompting_a_session_acp_runs_gets_exit_4() {
    ensure_sdk();
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "crash.toml", CRASH);
    let argv = argv(&env, &script, None);
    let mut child = client(
        &env,
        &argv,
        "crash-start",
        &["--cwd", &work, "--prompt", "run it"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = loop {
        let value: Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap_or(Value::Null);
        if value["ready"] == true {
            break value;
        }
    };
    let session = ready["session_id"].as_str().unwrap();
    let output = env
        .cmd()
        .args(["--script", &script, "run", "--session", session, "me too"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("held by owner"),
        "{}",
        stderr(&output)
    );
    signal(ready["pid"].as_u64().unwrap() as u32, "KILL");
    let _ = child.kill();
    let _ = child.wait();
}

/// The fault campaign through ACP: SIGKILL of `steward acp` during a streamed turn
/// and while its tool runs, relaunch, then the replayed recovery, the invariants
/// and the tool's side effect (it ran at most once).
#[test]
fn campaign_sigkill_of_acp_mid_turn_is_recovered_and_replayed() {
    use crate::campaign::{Scenario, Tally};
    let mut tally = Tally::default();
    let streamed = r#"
        [[step]]
        text = ["one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight "]
        delay_ms = 250
        tool_calls = [{ tool = "run_command", input = { command = "echo ran >> ../effects.txt; sleep 300" } }]
        [[step]]
        text = ["Carried on after the restart."]
        [[step]]
        text = ["Still here."]
    "#;
    for (when, on, script) in [
        ("while it streams", "text", streamed),
        ("while its tool runs", "tool", CRASH),
    ] {
        let scenario = Scenario::new(format!("acp {when}"), script);
        let argv = serde_json::to_string(&[
            steward_bin(),
            "--data-dir",
            scenario.env.data.to_str().unwrap(),
            "--config",
            &scenario.config,
            "--script",
            &scenario.script,
            "acp",
        ])
        .unwrap();
        let (session, call) = crash(&scenario.env, &argv, &scenario.work, on);
        tally.fault(&format!("SIGKILL of steward acp {when}"));
        let mut options = vec![
            "--cwd",
            &scenario.work,
            "--session",
            &session,
            "--prompt",
            "run it",
        ];
        if on == "tool" {
            options.extend(["--tool-call-id", &call]);
        } else {
            options.extend(["--expect-tool", "no"]);
        }
        let output = client(&scenario.env, &argv, "crash-load", &options)
            .output()
            .unwrap();
        for line in stdout(&output).lines() {
            let value: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            if let Some(check) = value["check"].as_str() {
                tally.check(&format!("acp {when}: {check}"), value["ok"] == true, || {
                    line.to_string()
                });
            }
        }
        tally.check(
            &format!("acp {when}: the client finished"),
            output.status.success(),
            || stderr(&output),
        );
        scenario.check(&mut tally, &[("run it", true)]);
    }
    tally.finish("acp");
}

/// A turn that reads `notes.txt` and changes its `old line`.
const EDIT: &str = r#"
[[step]]
text = ["Reading."]
tool_calls = [{ tool = "read_file", input = { path = "notes.txt" } }]
[[step]]
text = ["Editing."]
tool_calls = [{ tool = "edit_file", input = { path = "notes.txt", old_string = "old line", new_string = "new line" } }]
[[step]]
text = ["Done."]
"#;

#[test]
fn r4_19_acp_an_edit_carries_its_diff_and_locations() {
    let env = Env::new();
    let work = work_dir(&env);
    let file = Path::new(&work).join("notes.txt");
    std::fs::write(&file, "first\nold line\nlast\n").unwrap();
    let script = write_script(&env, "edit.toml", EDIT);
    conform(
        &env,
        &argv(&env, &script, None),
        "edit",
        &["--cwd", &work, "--file", file.to_str().unwrap()],
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "first\nnew line\nlast\n",
        "without fs, the edit goes to the disk"
    );
}

#[test]
fn r4_19_acp_with_fs_offered_files_go_through_the_clients_buffers() {
    let env = Env::new();
    let work = work_dir(&env);
    let file = Path::new(&work).join("notes.txt");
    std::fs::write(&file, "on disk\nold line\n").unwrap();
    let script = write_script(&env, "edit.toml", EDIT);
    conform(
        &env,
        &argv(&env, &script, None),
        "fs",
        &[
            "--cwd",
            &work,
            "--file",
            file.to_str().unwrap(),
            "--buffer",
            "unsaved in the editor\nold line\n",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "on disk\nold line\n",
        "the write went to the client, not the disk"
    );
}

#[test]
fn r4_19_acp_a_kill_while_the_client_writes_is_reconciled_and_never_sent_again() {
    let env = Env::new();
    let work = work_dir(&env);
    let file = Path::new(&work).join("notes.txt");
    std::fs::write(&file, "on disk\nold line\n").unwrap();
    let script = write_script(&env, "edit.toml", EDIT);
    let argv = argv(&env, &script, None);
    ensure_sdk();
    let mut child = client(
        &env,
        &argv,
        "fs-crash-start",
        &[
            "--cwd",
            &work,
            "--file",
            file.to_str().unwrap(),
            "--buffer",
            "in the editor\nold line\n",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = loop {
        let line = lines.next().expect("fs-crash-start ended early").unwrap();
        let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        assert_ne!(value["ok"], false, "fs-crash-start: {line}");
        if value["ready"] == true {
            break value;
        }
    };
    let pid = ready["pid"].as_u64().unwrap() as u32;
    let session = ready["session_id"].as_str().unwrap().to_string();
    signal(pid, "KILL");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        crate::support::eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.split_whitespace().nth(2) == Some("Z"))
                .unwrap_or(true)
        }),
        "the agent did not die"
    );
    // Its main thread is a zombie before its last thread is gone, and its files —
    // its owner lock among them — close with the last thread.
    assert!(
        crate::support::eventually(Duration::from_secs(10), || owners_free(&env)),
        "the agent's owner lock stayed held"
    );
    // The relaunch reconciles the write as unknown and never sends it again: not to
    // a client (there is none), not to the disk.
    let recovered = env
        .cmd()
        .args(["--script", &script, "recover"])
        .output()
        .unwrap();
    assert_eq!(code(&recovered), 0, "{}", stderr(&recovered));
    let shown: Value =
        serde_json::from_str(&stdout(&env.run(&["show", &session, "--json"]))).unwrap();
    let edit = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["data"]["parts"].as_array().cloned().unwrap_or_default())
        .find(|p| p["tool"] == "edit_file")
        .unwrap();
    assert_eq!(
        edit["state"]["error"],
        "Tool execution outcome unknown after server restart",
        "{edit}\nrecover: {}{}\n{}",
        stdout(&recovered),
        stderr(&recovered),
        claims_and_owners(&env)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "on disk\nold line\n"
    );
}

/// Whether no owner lock file of `env` is held.
fn owners_free(env: &Env) -> bool {
    std::fs::read_dir(env.data.join("owners"))
        .into_iter()
        .flatten()
        .all(|entry| std::fs::File::open(entry.unwrap().path()).is_ok_and(|f| f.try_lock().is_ok()))
}

/// The claims and owners in the file, and whether each owner's lock is held: what
/// a failed recovery assertion needs to be read.
fn claims_and_owners(env: &Env) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(env.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut out = String::new();
    for sql in ["SELECT * FROM session_execution", "SELECT * FROM owner"] {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                Ok((0..n)
                    .map(|i| format!("{:?}", r.get_ref(i).unwrap()))
                    .collect::<Vec<_>>()
                    .join(" "))
            })
            .unwrap();
        for row in rows {
            out.push_str(&row.unwrap());
            out.push('\n');
        }
    }
    for entry in std::fs::read_dir(env.data.join("owners"))
        .into_iter()
        .flatten()
    {
        let path = entry.unwrap().path();
        let held = std::fs::File::open(&path)
            .map(|f| f.try_lock().is_err())
            .unwrap_or(false);
        out.push_str(&format!("{} held={held}\n", path.display()));
    }
    out
}
