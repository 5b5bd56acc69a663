//! MCP tool servers (protocol §4.16) on the real binary: a call is recorded before it
//! is sent and never sent twice — not after a crash, a timeout, a server that dies or
//! writes garbage — and a stdio server never outlives Steward. The crash cases use
//! the test helper's hand-written server (`tests/helper/mcp_server.rs`); conformance
//! uses the official reference server, `@modelcontextprotocol/server-everything`
//! (pinned in `tests/mcp/package.json`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::Duration;

use serde_json::{Value, json};

use crate::acp::{Driver, argv};
use crate::run::{only_session, show, work_dir, write_script};
use crate::support::{Env, code, eventually, helper_bin, signal, stderr, stdout};

const UNKNOWN: &str = "Tool execution outcome unknown after server restart";

/// A data directory with the test server configured as `t`.
struct Mcp {
    env: Env,
    work: String,
    /// Where the test server keeps its effects, log and pid.
    server: PathBuf,
    config: PathBuf,
}

impl Mcp {
    fn new(extra: &str) -> Mcp {
        Mcp::misbehaving(extra, "")
    }

    /// The test server with `modes` (see `tests/helper/mcp_server.rs`).
    fn misbehaving(extra: &str, modes: &str) -> Mcp {
        let env = Env::new();
        let work = work_dir(&env);
        let server = env.root.path().join("server");
        let config = env.root.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[mcp.servers.t]\ncommand = {:?}\nargs = [\"mcp-server\", {:?}, {modes:?}]\n{extra}",
                helper_bin(),
                server.display().to_string()
            ),
        )
        .unwrap();
        Mcp {
            env,
            work,
            server,
            config,
        }
    }

    fn cmd(&self, script: &str) -> Command {
        let script = write_script(&self.env, "script.toml", script);
        let mut cmd = self.env.cmd();
        cmd.arg("--config")
            .arg(&self.config)
            .args(["--script", &script]);
        cmd
    }

    fn run(&self, script: &str, args: &[&str]) -> Output {
        let mut cmd = self.cmd(script);
        cmd.args(["run", "--dir", &self.work]).args(args).arg("go");
        cmd.output().unwrap()
    }

    fn lines(&self, file: &str) -> Vec<String> {
        std::fs::read_to_string(self.server.join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn effects(&self) -> Vec<String> {
        self.lines("effects.txt")
    }

    fn log(&self) -> Vec<String> {
        self.lines("log.txt")
    }

    fn server_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.server.join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The session's tool parts, in order.
    fn tools(&self) -> Vec<Value> {
        let session = only_session(&self.env);
        show(&self.env, &session)["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "assistant")
            .flat_map(|m| m["data"]["parts"].as_array().cloned().unwrap_or_default())
            .filter(|p| p["type"] == "tool")
            .collect()
    }

    /// `(type, data)` of every event, in order.
    fn events(&self) -> Vec<(String, Value)> {
        let conn = rusqlite::Connection::open_with_flags(
            self.env.db(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let mut stmt = conn
            .prepare("SELECT type, data FROM event ORDER BY aggregate_id, seq")
            .unwrap();
        stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                serde_json::from_str(&r.get::<_, String>(1)?).unwrap(),
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        .unwrap_or(false)
}

fn step(tool: &str, input: &str) -> String {
    format!(
        "[[step]]\ntext = [\"calling\"]\ntool_calls = [{{ tool = \"{tool}\", input = {input} }}]\n"
    )
}

const DONE: &str = "[[step]]\ntext = [\"done\"]\n";

#[test]
fn r4_16_an_mcp_call_is_recorded_before_it_is_sent_and_runs_once() {
    let mcp = Mcp::new("");
    let script = step("t__append", "{ line = \"one\" }") + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(mcp.effects(), ["one"]);
    let tools = mcp.tools();
    assert_eq!(tools.len(), 1, "{tools:?}");
    let state = &tools[0]["state"];
    assert_eq!(state["status"], "completed", "{state}");
    assert_eq!(state["output"], "appended one");
    assert_eq!(state["mcp"]["server"], "t");
    assert_eq!(state["mcp"]["tool"], "append");
    // What was sent is in `tool.started`, committed before the request left.
    let events = mcp.events();
    let started = events
        .iter()
        .find(|(t, _)| t == "tool.started")
        .map(|(_, d)| d.clone())
        .unwrap();
    assert_eq!(
        started["mcp"]["arguments"],
        serde_json::json!({"line": "one"})
    );
    assert!(started["mcp"]["request_id"].is_number(), "{started}");
    assert!(
        started["mcp"]["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{started}"
    );
    // The stdio server's process is recorded, and is gone once `run` is done.
    let pid = started["process"]["pid"].as_i64().unwrap() as i32;
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    // Each step records the tools it offered; the list itself is kept once.
    let step_started = events
        .iter()
        .find(|(t, _)| t == "step.started")
        .map(|(_, d)| d.clone())
        .unwrap();
    let hash = step_started["tools"]["hash"].as_str().unwrap().to_string();
    let conn = rusqlite::Connection::open(mcp.env.db()).unwrap();
    let listed: String = conn
        .query_row(
            "SELECT tools FROM tool_list WHERE hash = ?1",
            [&hash],
            |r| r.get(0),
        )
        .unwrap();
    assert!(listed.contains("\"t__append\""), "{listed}");
    assert!(listed.contains("\"run_command\""), "{listed}");
}

#[test]
fn r4_16_mcp_tools_ask_unless_tools_allow_names_them_or_their_server() {
    let script = step("t__append", "{ line = \"asked\" }") + DONE;
    let mcp = Mcp::new("");
    let output = mcp.run(&script, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(mcp.effects().is_empty(), "ran without permission");
    assert!(
        mcp.tools()[0]["state"]["error"]
            .as_str()
            .unwrap()
            .contains("not in tools.allow"),
        "{:?}",
        mcp.tools()
    );
    for allow in ["t__append", "t__*"] {
        let mcp = Mcp::new(&format!("[tools]\nallow = [{allow:?}]\n"));
        let output = mcp.run(&script, &[]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        assert_eq!(mcp.effects(), ["asked"], "allowed by {allow}");
    }
}

#[test]
fn r4_16_a_kill_during_a_slow_call_stops_the_server_and_the_call_is_never_sent_again() {
    let mcp = Mcp::new("");
    let script = step("t__slow", "{ line = \"slow\", ms = 60000 }") + DONE + DONE;
    let mut cmd = mcp.cmd(&script);
    let mut child = cmd
        .args(["run", "--yes", "--dir", &mcp.work, "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || mcp
            .log()
            .contains(&"started slow".to_string())),
        "the call never reached the server"
    );
    let pid = mcp.server_pid().unwrap();
    signal(child.id(), "KILL");
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(1), || !alive(pid)),
        "the MCP server outlived Steward"
    );
    let recovered = mcp.cmd(&script).args(["recover"]).output().unwrap();
    assert_eq!(code(&recovered), 0, "{}", stderr(&recovered));
    let tools = mcp.tools();
    assert_eq!(tools[0]["state"]["status"], "error", "{tools:?}");
    assert!(
        tools[0]["state"]["error"]
            .as_str()
            .unwrap()
            .starts_with(UNKNOWN),
        "{tools:?}"
    );
    // The effect happened once, and the relaunch never sent the call again.
    assert_eq!(mcp.effects(), ["slow"]);
    assert_eq!(
        mcp.log()
            .iter()
            .filter(|l| l.starts_with("started"))
            .count(),
        1
    );
    let doctor = mcp.env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r4_16_a_crash_right_after_the_call_left_is_reconciled_and_never_resent() {
    let mcp = Mcp::new("");
    let script = step("t__slow", "{ line = \"sent\", ms = 100 }") + DONE + DONE;
    let output = mcp
        .cmd(&script)
        .env("FAILPOINTS", "mcp.after_call_sent=return")
        .args(["run", "--yes", "--dir", &mcp.work, "go"])
        .output()
        .unwrap();
    assert!(stderr(&output).contains("failpoint"), "{}", stderr(&output));
    if let Some(pid) = mcp.server_pid() {
        assert!(eventually(Duration::from_secs(1), || !alive(pid)));
    }
    let recovered = mcp.cmd(&script).args(["recover"]).output().unwrap();
    assert_eq!(code(&recovered), 0, "{}", stderr(&recovered));
    let tools = mcp.tools();
    assert!(
        tools[0]["state"]["error"]
            .as_str()
            .unwrap()
            .starts_with(UNKNOWN),
        "{tools:?}"
    );
    // Sent once: it took effect at most once, and nothing sent it again.
    assert!(mcp.effects().len() <= 1, "{:?}", mcp.effects());
    assert!(
        mcp.log()
            .iter()
            .filter(|l| l.starts_with("started"))
            .count()
            <= 1,
        "{:?}",
        mcp.log()
    );
}

#[test]
fn r4_16_a_call_that_times_out_is_cancelled_its_server_stopped_and_the_next_call_starts_it_again() {
    let mcp = Mcp::new("timeout_ms = 500\n");
    let script = step("t__slow", "{ line = \"late\", ms = 60000 }")
        + &step("t__echo", "{ text = \"again\" }")
        + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let tools = mcp.tools();
    let error = tools[0]["state"]["error"].as_str().unwrap();
    assert!(error.contains("no answer within 500 ms"), "{error}");
    assert!(error.contains("unknown"), "{error}");
    assert!(
        mcp.log().iter().any(|l| l.starts_with("cancelled")),
        "no notifications/cancelled reached the server: {:?}",
        mcp.log()
    );
    // The next call ran on a server started again.
    assert_eq!(tools[1]["state"]["output"], "again", "{tools:?}");
    let first = mcp
        .events()
        .iter()
        .filter(|(t, _)| t == "tool.started")
        .map(|(_, d)| d["process"]["pid"].as_i64())
        .collect::<Vec<_>>();
    assert_eq!(first.len(), 2);
    assert_ne!(first[0], first[1], "the timed-out server was not stopped");
    assert!(!alive(first[0].unwrap() as i32));
    assert_eq!(mcp.effects(), ["late"], "the call was sent again");
}

#[test]
fn r4_16_a_server_that_exits_mid_call_leaves_the_outcome_unknown_and_is_started_again() {
    let mcp = Mcp::new("");
    let script = step("t__exit", "{}") + &step("t__echo", "{ text = \"back\" }") + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let tools = mcp.tools();
    let error = tools[0]["state"]["error"].as_str().unwrap();
    assert!(error.contains("ended during the call"), "{error}");
    assert!(error.contains("unknown"), "{error}");
    assert_eq!(tools[1]["state"]["output"], "back", "{tools:?}");
    assert_eq!(mcp.log().iter().filter(|l| *l == "exiting").count(), 1);
}

#[test]
fn r4_16_garbage_on_a_servers_stdout_never_hangs_a_call() {
    let mcp = Mcp::new("timeout_ms = 3000\n");
    let script = step("t__garbage", "{}") + &step("t__echo", "{ text = \"after\" }") + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let tools = mcp.tools();
    let first = &tools[0]["state"];
    assert!(
        first["output"] == "after garbage"
            || first["error"]
                .as_str()
                .is_some_and(|e| e.contains("unknown")),
        "{first}"
    );
    assert_eq!(tools[1]["state"]["output"], "after", "{tools:?}");
    let doctor = mcp.env.run(&["doctor"]);
    assert_eq!(code(&doctor), 0, "{}", stdout(&doctor));
}

#[test]
fn r4_16_tool_errors_and_refusals_are_the_calls_result() {
    let mcp = Mcp::new("");
    let script = step("t__fail", "{}") + &step("t__refuse", "{}") + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let tools = mcp.tools();
    assert_eq!(tools[0]["state"]["error"], "it failed on purpose");
    assert_eq!(
        tools[1]["state"]["error"],
        "MCP server `t` refused the call: refused on purpose"
    );
}

#[test]
fn r4_16_a_server_that_does_not_start_is_said_and_the_turn_goes_on() {
    let mcp = Mcp::new("[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n");
    let script = step("t__echo", "{ text = \"fine\" }") + DONE;
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("MCP server `broken` did not start"),
        "{}",
        stderr(&output)
    );
    assert_eq!(mcp.tools()[0]["state"]["output"], "fine");
    let unavailable = mcp
        .events()
        .into_iter()
        .find(|(t, _)| t == "step.started")
        .map(|(_, d)| d["tools"]["unavailable"].clone())
        .unwrap();
    assert_eq!(unavailable[0]["server"], "broken", "{unavailable}");
}

#[test]
fn r4_16_a_cancelled_call_is_cancelled_at_the_server_which_is_stopped() {
    let mcp = Mcp::new("");
    let script = step("t__slow", "{ line = \"c\", ms = 60000 }") + DONE;
    let mut cmd = mcp.cmd(&script);
    let child = cmd
        .args(["run", "--yes", "--dir", &mcp.work, "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || mcp
        .log()
        .contains(&"started c".to_string())));
    let pid = mcp.server_pid().unwrap();
    signal(child.id(), "INT");
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    assert!(
        mcp.log().iter().any(|l| l.starts_with("cancelled")),
        "{:?}",
        mcp.log()
    );
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    assert_eq!(mcp.tools()[0]["state"]["status"], "error");
}

fn everything() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// `npm ci` once, when the reference server is not installed yet.
fn ensure_everything() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        if !everything().exists() {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp"))
                .status()
                .expect("npm is required to install the MCP reference server");
            assert!(status.success(), "npm ci failed in tests/mcp");
        }
    });
}

#[test]
fn r4_16_conformance_with_the_reference_server() {
    ensure_everything();
    let env = Env::new();
    let work = work_dir(&env);
    let config = env.root.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntimeout_ms = 1500\n",
            everything().display().to_string()
        ),
    )
    .unwrap();
    let script = step("everything__get-sum", "{ a = 2, b = 3 }")
        + &step("everything__get-sum", "{ a = \"two\" }")
        + &step(
            "everything__trigger-long-running-operation",
            "{ duration = 30, steps = 30 }",
        )
        + &step("everything__echo", "{ message = \"still here\" }")
        + DONE;
    let script = write_script(&env, "script.toml", &script);
    let output = env
        .cmd()
        .arg("--config")
        .arg(&config)
        .args(["--script", &script, "run", "--yes", "--dir", &work, "go"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session = only_session(&env);
    let tools: Vec<Value> = show(&env, &session)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["data"]["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool")
        .collect();
    // A call with arguments.
    assert!(
        tools[0]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains('5'),
        "{}",
        tools[0]
    );
    // An error result.
    assert_eq!(tools[1]["state"]["status"], "error", "{}", tools[1]);
    // A slow call, cancelled at its timeout.
    let slow = tools[2]["state"]["error"].as_str().unwrap_or("");
    assert!(slow.contains("no answer within 1500 ms"), "{}", tools[2]);
    // The server was started again for the next call.
    assert!(
        tools[3]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("still here"),
        "{}",
        tools[3]
    );
    // The tool list the model saw has the server's tools.
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let listed: String = conn
        .query_row("SELECT tools FROM tool_list LIMIT 1", [], |r| r.get(0))
        .unwrap();
    for name in ["everything__echo", "everything__get-sum"] {
        assert!(listed.contains(name), "{name} not listed");
    }
}

#[test]
fn r4_16_acp_a_clients_stdio_server_asks_through_the_client_and_stops_with_the_connection() {
    let env = Env::new();
    let work = work_dir(&env);
    let server = env.root.path().join("server");
    let script = write_script(
        &env,
        "script.toml",
        &(step("notes__append", "{ line = \"from acp\" }") + DONE),
    );
    let mut client = Driver::spawn(&env, &argv(&env, &script, None));
    let init = client.request("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"]["http"], true,
        "{init}"
    );
    let created = client.request(
        "session/new",
        json!({"cwd": work, "mcpServers": [{
            "name": "notes", "command": helper_bin(),
            "args": ["mcp-server", server.display().to_string()], "env": []
        }]}),
    );
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    client.send(
        json!({"jsonrpc": "2.0", "id": 50, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}}),
    );
    assert!(
        client.wait_for(Duration::from_secs(20), |m| m["method"]
            == "session/request_permission"),
        "{:#?}",
        client.seen
    );
    let asked = client
        .seen
        .iter()
        .find(|m| m["method"] == "session/request_permission")
        .unwrap()
        .clone();
    assert!(
        asked["params"]["toolCall"]["title"]
            .as_str()
            .unwrap()
            .starts_with("notes__append"),
        "{asked}"
    );
    client.send(json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    assert!(client.wait_for(Duration::from_secs(20), |m| m["id"] == 50));
    let answer = client.seen.iter().find(|m| m["id"] == 50).unwrap();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let effects = std::fs::read_to_string(server.join("effects.txt")).unwrap();
    assert_eq!(effects, "from acp\n");
    let pid: i32 = std::fs::read_to_string(server.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "the server belongs to the open session");
    // Closing the connection stops it.
    assert!(client.close().success());
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
}

#[test]
fn r4_16_the_terminal_interface_shows_the_mcp_call_and_its_running_server_with_its_pid() {
    let mcp = Mcp::new("[tools]\nallow = [\"t__*\"]\n");
    let script = write_script(
        &mcp.env,
        "script.toml",
        &(step("t__append", "{ line = \"from the tui\" }") + DONE),
    );
    let config = mcp.config.display().to_string();
    let mut tui = crate::tui::Tui::start(
        &mcp.env,
        Path::new(&mcp.work),
        &["--config", &config, "--script", &script],
    );
    tui.expect("Write to the agent", Duration::from_secs(10));
    tui.keys("hello\r");
    tui.expect("t › append (MCP)", Duration::from_secs(20));
    tui.expect("done", Duration::from_secs(20));
    assert!(eventually(Duration::from_secs(5), || mcp
        .server_pid()
        .is_some()));
    let pid = mcp.server_pid().unwrap();
    // The inspector's MCP tab: the server this process runs, with its pid.
    tui.keys("\t");
    tui.keys("i");
    tui.keys("6");
    tui.expect(&pid.to_string(), Duration::from_secs(10));
    tui.expect("MCP 1", Duration::from_secs(2));
    // Quitting stops it.
    tui.keys("q");
    assert!(
        tui.wait(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    assert_eq!(mcp.effects(), ["from the tui"]);
}

#[test]
fn r4_16_doctor_lists_each_configured_server_and_whether_it_starts() {
    let mcp = Mcp::new("[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n");
    // A database to check.
    let output = mcp.run(DONE, &[]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let doctor = mcp
        .env
        .cmd()
        .arg("--config")
        .arg(&mcp.config)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        code(&doctor),
        1,
        "a server that does not start is a problem"
    );
    let report: Value = serde_json::from_str(&stdout(&doctor)).unwrap();
    assert_eq!(report["ok"], true, "the database is fine: {report}");
    let servers = report["mcp_servers"].as_array().unwrap();
    let t = servers.iter().find(|s| s["name"] == "t").unwrap();
    assert_eq!(t["ok"], true, "{t}");
    assert!(
        t["tools"].as_array().unwrap().iter().any(|n| n == "append"),
        "{t}"
    );
    let broken = servers.iter().find(|s| s["name"] == "broken").unwrap();
    assert_eq!(broken["ok"], false);
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("cannot run `/nonexistent/mcp-server`: no such file"),
        "{broken}"
    );
    // Stopped again: nothing of the probe keeps running.
    let pid = mcp.server_pid().unwrap();
    assert!(eventually(Duration::from_secs(5), || !alive(pid)));
    let text = mcp
        .env
        .cmd()
        .arg("--config")
        .arg(&mcp.config)
        .arg("doctor")
        .output()
        .unwrap();
    assert!(
        stdout(&text).contains("mcp         t: starts, 8 tools"),
        "{}",
        stdout(&text)
    );
}

/// The reference server over Streamable HTTP, on a free port of loopback; killed
/// when dropped.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    fn start() -> HttpServer {
        ensure_everything();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("node")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (ready, listening) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("listening on port") {
                    let _ = ready.send(());
                }
            }
        });
        listening
            .recv_timeout(Duration::from_secs(30))
            .expect("the reference server did not listen");
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn r4_16_conformance_with_the_reference_server_over_streamable_http() {
    let server = HttpServer::start();
    let env = Env::new();
    let work = work_dir(&env);
    let config = env.root.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.web]\nurl = {:?}\ntimeout_ms = 1500\n",
            server.url
        ),
    )
    .unwrap();
    let script = step("web__get-sum", "{ a = 40, b = 2 }")
        + &step(
            "web__trigger-long-running-operation",
            "{ duration = 30, steps = 30 }",
        )
        + &step("web__echo", "{ message = \"over http\" }")
        + DONE;
    let script = write_script(&env, "script.toml", &script);
    let output = env
        .cmd()
        .arg("--config")
        .arg(&config)
        .args(["--script", &script, "run", "--yes", "--dir", &work, "go"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let session = only_session(&env);
    let tools: Vec<Value> = show(&env, &session)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["data"]["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool")
        .collect();
    assert!(
        tools[0]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("42"),
        "{}",
        tools[0]
    );
    let slow = tools[1]["state"]["error"].as_str().unwrap_or("");
    assert!(slow.contains("no answer within 1500 ms"), "{}", tools[1]);
    assert!(
        tools[2]["state"]["output"]
            .as_str()
            .unwrap_or("")
            .contains("over http"),
        "{}",
        tools[2]
    );
    // An HTTP call has no process of Steward's to record.
    let started = show(&env, &session)["messages"].to_string();
    assert!(started.contains("\"server\":\"web\""), "{started}");
}

#[test]
fn r4_16_ctrl_c_is_heard_while_a_call_starts_its_server_again() {
    // The server exits after listing its tools; started again for the call, it
    // never answers `initialize` (within the 30 s startup limit).
    let mcp = Mcp::misbehaving("", "exit-after-list,hang-on-restart");
    // The call comes a second after the step starts: the server is gone by then.
    let script = "[[step]]\ntext = [\"calling\"]\ndelay_ms = 1000\ntool_calls = [{ tool = \"t__echo\", input = { text = \"x\" } }]\n".to_string() + DONE;
    let mut cmd = mcp.cmd(&script);
    let child = cmd
        .args(["run", "--yes", "--dir", &mcp.work, "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || mcp.lines("starts.txt").len()
            >= 2),
        "the server was never started again"
    );
    let asked = std::time::Instant::now();
    signal(child.id(), "INT");
    let output = child.wait_with_output().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "Ctrl-C took {:?}",
        asked.elapsed()
    );
    assert_eq!(code(&output), 130, "{}", stderr(&output));
    let hung: i32 = mcp.lines("starts.txt")[1].parse().unwrap();
    assert!(eventually(Duration::from_secs(2), || !alive(hung)));
}

#[test]
fn r4_16_what_a_server_left_in_its_group_goes_when_it_exits() {
    let mcp = Mcp::misbehaving("", "fork-child,exit-after-list");
    let script = step("t__echo", "{ text = \"x\" }") + DONE;
    let mut cmd = mcp.cmd(&script);
    let mut child = cmd
        .args(["run", "--yes", "--dir", &mcp.work, "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || mcp
        .server
        .join("child.pid")
        .exists()));
    let left: i32 = std::fs::read_to_string(mcp.server.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The server exits on its own: what it started goes with it, even though
    // Steward is then killed before it could look.
    assert!(
        eventually(Duration::from_secs(3), || !alive(left)),
        "the server's child outlived it"
    );
    signal(child.id(), "KILL");
    child.wait().unwrap();
}

/// The most memory process `pid` has held, in kB.
fn peak_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn r4_16_a_server_that_floods_steward_grows_neither_its_memory_nor_its_log() {
    for flood in ["flood-notifications", "flood-requests"] {
        let mcp = Mcp::misbehaving("", flood);
        let script = step("t__slow", "{ line = \"s\", ms = 3000 }") + DONE;
        let mut cmd = mcp.cmd(&script);
        let mut child = cmd
            .args(["run", "--yes", "--dir", &mcp.work, "go"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut peak = 0;
        while child.try_wait().unwrap().is_none() {
            peak = peak.max(peak_kb(child.id()));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            peak < 200_000,
            "{flood}: steward grew to {peak} kB while the server flooded it"
        );
        let logs: u64 = std::fs::read_dir(mcp.env.data.join("logs"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        assert!(logs < 1 << 20, "{flood}: the log grew to {logs} bytes");
        assert_eq!(mcp.effects(), ["s"], "{flood}");
    }
}

#[test]
fn r4_16_a_line_past_the_limit_ends_the_connection_not_the_wait() {
    let mcp = Mcp::new("timeout_ms = 60000\n");
    let script = step("t__huge", "{}") + &step("t__echo", "{ text = \"next\" }") + DONE;
    let started = std::time::Instant::now();
    let output = mcp.run(&script, &["--yes"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call waited for its timeout: {:?}",
        started.elapsed()
    );
    let tools = mcp.tools();
    let error = tools[0]["state"]["error"].as_str().unwrap();
    assert!(error.contains("ended during the call"), "{error}");
    assert_eq!(tools[1]["state"]["output"], "next", "{tools:?}");
}

#[test]
fn r4_16_acp_a_client_server_that_does_not_start_is_said() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "script.toml", DONE);
    let mut client = Driver::spawn(&env, &argv(&env, &script, None));
    client.request("initialize", json!({"protocolVersion": 1}));
    let created = client.request(
        "session/new",
        json!({"cwd": work, "mcpServers": [{
            "name": "broken", "command": "/nonexistent/mcp", "args": [], "env": []
        }]}),
    );
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    let answer = client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let said = crate::acp::agent_text(&client.updates(&session));
    assert!(
        said.contains("⚠ MCP server `broken` did not start: cannot run `/nonexistent/mcp`"),
        "{said}"
    );
    assert!(client.close().success());
}
