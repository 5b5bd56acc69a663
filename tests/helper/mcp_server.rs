//! `steward-test-helper mcp-server DIR`: a small MCP stdio server for the crash
//! tests, written by hand so each misbehaviour is exact. Its side effects go to
//! `DIR/effects.txt` (one line per call that took effect), what it saw to
//! `DIR/log.txt` (`started`, `cancelled <id>`), and its pid to `DIR/pid`.
//!
//! Tools: `append {line}`; `slow {line, ms}` (appends, logs `started <line>`, then
//! waits before it answers); `fail` (a tool error); `refuse` (a JSON-RPC error);
//! `exit` (the server exits mid-call); `garbage` (a line that is not JSON, then the
//! answer); `echo {text}`; `huge` (an answer on one line of 9 MiB).
//!
//! Misbehaviours, as comma-separated modes: `exit-after-list` (exits 300 ms after
//! listing its tools), `hang-on-restart` (a second start never answers
//! `initialize`), `fork-child` (starts `sleep 300` in its group, its pid in
//! `DIR/child.pid`), `flood-notifications` and `flood-requests` (after `initialize`,
//! sends notifications of 10 KB, or `ping` requests, as fast as it can).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

fn append(path: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    writeln!(file, "{line}").expect("append");
    file.sync_all().expect("sync");
}

fn tools() -> Value {
    let object = |properties: Value| json!({"type": "object", "properties": properties});
    json!([
        {"name": "append", "description": "Append a line to the effects file.",
         "inputSchema": object(json!({"line": {"type": "string"}}))},
        {"name": "slow", "description": "Wait, then append a line.",
         "inputSchema": object(json!({"line": {"type": "string"}, "ms": {"type": "integer"}})),
         "annotations": {"readOnlyHint": true}},
        {"name": "fail", "description": "Fail as a tool.", "inputSchema": object(json!({}))},
        {"name": "refuse", "description": "Answer with an error.", "inputSchema": object(json!({}))},
        {"name": "exit", "description": "Exit mid-call.", "inputSchema": object(json!({}))},
        {"name": "garbage", "description": "Write garbage first.", "inputSchema": object(json!({}))},
        {"name": "echo", "description": "Echo text.",
         "inputSchema": object(json!({"text": {"type": "string"}}))},
        {"name": "huge", "description": "Answer with one huge line.", "inputSchema": object(json!({}))},
    ])
}

/// Serves MCP on stdin/stdout until stdin ends.
pub fn serve(dir: PathBuf, modes: &str) -> Result<(), String> {
    let mode = |m: &str| modes.split(',').any(|x| x == m);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let restarted = dir.join("pid").exists();
    std::fs::write(dir.join("pid"), std::process::id().to_string()).map_err(|e| e.to_string())?;
    append(&dir.join("starts.txt"), &std::process::id().to_string());
    if mode("fork-child") {
        let child = std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .map_err(|e| e.to_string())?;
        std::fs::write(dir.join("child.pid"), child.id().to_string()).map_err(|e| e.to_string())?;
    }
    let effects = dir.join("effects.txt");
    let log = dir.join("log.txt");
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let send = {
        let out = out.clone();
        move |message: Value| {
            let mut out = out.lock().unwrap();
            writeln!(out, "{message}").unwrap();
            out.flush().unwrap();
        }
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let id = message.get("id").cloned();
        let method = message["method"].as_str().unwrap_or("");
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match (method, id) {
            ("initialize", Some(_)) if restarted && mode("hang-on-restart") => {
                std::thread::sleep(Duration::from_secs(600));
            }
            ("initialize", Some(id)) => {
                if mode("flood-notifications") || mode("flood-requests") {
                    let send = send.clone();
                    let requests = mode("flood-requests");
                    std::thread::spawn(move || {
                        let padding = "x".repeat(10_000);
                        for n in 0u64.. {
                            if requests {
                                send(
                                    json!({"jsonrpc": "2.0", "id": format!("p{n}"), "method": "ping"}),
                                );
                            } else {
                                send(json!({"jsonrpc": "2.0", "method": "notifications/message",
                                    "params": {"level": "info", "data": padding}}));
                            }
                        }
                    });
                }
                send(json!({
                    "jsonrpc": "2.0", "id": id,
                    "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "steward-test-mcp", "version": "1"}
                    }
                }))
            }
            ("tools/list", Some(id)) => {
                send(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools()}}));
                if mode("exit-after-list") {
                    std::thread::spawn(|| {
                        std::thread::sleep(Duration::from_millis(300));
                        std::process::exit(0);
                    });
                }
            }
            ("ping", Some(id)) => send(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
            ("notifications/cancelled", None) => {
                append(&log, &format!("cancelled {}", params["requestId"]))
            }
            ("tools/call", Some(id)) => {
                let (effects, log, out, send) =
                    (effects.clone(), log.clone(), out.clone(), send.clone());
                // Calls run beside the reader, so a cancellation is heard mid-call.
                std::thread::spawn(move || call(&params, id, &effects, &log, &out, &send));
            }
            (_, Some(id)) => send(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("no method {method}")}
            })),
            (_, None) => {}
        }
    }
    Ok(())
}

fn call(
    params: &Value,
    id: Value,
    effects: &Path,
    log: &Path,
    out: &Arc<Mutex<std::io::Stdout>>,
    send: &impl Fn(Value),
) {
    let args = &params["arguments"];
    let text = |text: String| json!({"content": [{"type": "text", "text": text}]});
    let result = match params["name"].as_str().unwrap_or("") {
        "append" => {
            let line = args["line"].as_str().unwrap_or("");
            append(effects, line);
            text(format!("appended {line}"))
        }
        "slow" => {
            // The effect first, then the wait: a call killed while it waits has
            // taken effect, exactly once.
            let line = args["line"].as_str().unwrap_or("");
            append(effects, line);
            append(log, &format!("started {line}"));
            std::thread::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(1000)));
            text(format!("appended {line}, then waited"))
        }
        "fail" => json!({
            "content": [{"type": "text", "text": "it failed on purpose"}],
            "isError": true
        }),
        "refuse" => {
            send(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32000, "message": "refused on purpose"}
            }));
            return;
        }
        "exit" => {
            append(log, "exiting");
            std::process::exit(3);
        }
        "garbage" => {
            let mut out = out.lock().unwrap();
            writeln!(out, "this is not JSON {{{{").unwrap();
            out.flush().unwrap();
            drop(out);
            text("after garbage".into())
        }
        "echo" => text(args["text"].as_str().unwrap_or("").to_string()),
        "huge" => text("h".repeat(9 << 20)),
        other => {
            send(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32602, "message": format!("no tool {other}")}
            }));
            return;
        }
    };
    send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
}
