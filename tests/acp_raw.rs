//! `steward acp` driven by a raw client that pipelines, as JSON-RPC allows: requests
//! sent back to back without waiting, a client that stops reading, more requests
//! than are served at once.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::acp::{Driver, agent_text, argv};
use crate::run::{work_dir, write_script};
use crate::support::{Env, code, stderr};

/// A session with one finished turn, written by `steward run`.
fn a_session(env: &Env, script: &str, work: &str) -> String {
    let output = env
        .cmd()
        .args(["--script", script, "run", "--dir", work, "first"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let listed: Value = serde_json::from_slice(&env.run(&["sessions", "--json"]).stdout).unwrap();
    listed[0]["id"].as_str().unwrap().to_string()
}

fn position(seen: &[Value], wanted: impl Fn(&Value) -> bool) -> Option<usize> {
    seen.iter().position(wanted)
}

#[test]
fn acp_a_prompt_pipelined_right_behind_a_load_runs_after_it() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "two.toml",
        "[[step]]\ntext = [\"One.\"]\n[[step]]\ntext = [\"Two.\"]\n",
    );
    let session = a_session(&env, &script, &work);
    let mut client = Driver::spawn(&env, &argv(&env, &script, None));
    client.request("initialize", json!({"protocolVersion": 1}));
    // Both at once, before any answer.
    client.send(
        json!({"jsonrpc": "2.0", "id": 100, "method": "session/load",
        "params": {"sessionId": session, "cwd": work, "mcpServers": []}}),
    );
    client.send(
        json!({"jsonrpc": "2.0", "id": 101, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "second"}]}}),
    );
    assert!(
        client.wait_for(Duration::from_secs(20), |m| m["id"] == 101),
        "no answer to the prompt"
    );
    let seen = client.seen.clone();
    let loaded = position(&seen, |m| m["id"] == 100).expect("the load was answered");
    let prompted = position(&seen, |m| m["id"] == 101).unwrap();
    assert!(seen[loaded].get("result").is_some(), "{}", seen[loaded]);
    assert_eq!(
        seen[prompted]["result"]["stopReason"], "end_turn",
        "{}",
        seen[prompted]
    );
    assert!(loaded < prompted);
    // The replay came before the prompt's own answer streamed.
    let says = |text: &'static str| {
        move |m: &Value| {
            m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(text))
        }
    };
    let replayed = position(&seen, says("One.")).unwrap();
    let answered = position(&seen, says("Two.")).unwrap();
    assert!(replayed < loaded && loaded < answered, "{seen:#?}");
    assert!(client.close().success());
}

#[test]
fn acp_a_loaded_session_s_continuation_starts_only_after_the_load_is_answered() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "crash.toml", crate::acp::CRASH);
    let argv = argv(&env, &script, None);
    let (session, _) = crate::acp::crash_mid_tool(&env, &argv, &work);
    let mut client = Driver::spawn(&env, &argv);
    client.request("initialize", json!({"protocolVersion": 1}));
    client.send(
        json!({"jsonrpc": "2.0", "id": 100, "method": "session/load",
        "params": {"sessionId": session, "cwd": work, "mcpServers": []}}),
    );
    let carried = |m: &Value| {
        m["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Carried on after the restart."))
    };
    let continued = client.wait_for(Duration::from_secs(20), carried);
    assert!(continued, "{:#?}", client.seen);
    let seen = client.seen.clone();
    let loaded = position(&seen, |m| m["id"] == 100).expect("the load was answered");
    let continued = position(&seen, carried).unwrap();
    assert!(
        loaded < continued,
        "the continuation ran before the load answered: {seen:#?}"
    );
    assert!(client.close().success());
}

#[test]
fn acp_a_client_that_stops_reading_slows_steward_down_and_loses_no_update() {
    let env = Env::new();
    let work = work_dir(&env);
    // Thousands of updates, far more than a pipe and the queues hold.
    let chunks: Vec<String> = (0..4_000).map(|i| format!("\"w{i} \"")).collect();
    let script = write_script(
        &env,
        "long.toml",
        &format!("[[step]]\ntext = [{}]\n", chunks.join(", ")),
    );
    let expected: String = (0..4_000).map(|i| format!("w{i} ")).collect();
    let argv: Vec<String> = serde_json::from_str(&argv(&env, &script, None)).unwrap();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("HOME", &env.home)
        .env_remove("STEWARD_DATA_DIR")
        .env_remove("STEWARD_CONFIG")
        .env_remove("FAILPOINTS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": work, "mcpServers": []}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    stdin.flush().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let session = loop {
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 2 {
            break message["result"]["sessionId"].as_str().unwrap().to_string();
        }
    };
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}})
    )
    .unwrap();
    stdin.flush().unwrap();
    // The client reads nothing for a while: the pipe fills, and Steward waits.
    std::thread::sleep(Duration::from_secs(2));
    let rss = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").map(str::to_string))
        .unwrap();
    let kb: u64 = rss.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        kb < 100 * 1024,
        "steward acp grew to {kb} kB while nobody read"
    );
    // Then it reads everything: every update is there, in order.
    let mut updates = Vec::new();
    let started = Instant::now();
    loop {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout closed");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == 3 {
            assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
            break;
        }
        if message["method"] == "session/update" {
            updates.push(message["params"]["update"].clone());
        }
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    let refs: Vec<&Value> = updates.iter().collect();
    assert_eq!(agent_text(&refs), expected);
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn acp_requests_past_the_bound_in_flight_are_answered_at_once_not_queued() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "slow.toml",
        "[[step]]\ntext = [\"slow \", \"answer\"]\ndelay_ms = 3000\n",
    );
    let mut client = Driver::spawn(&env, &argv(&env, &script, None));
    client.request("initialize", json!({"protocolVersion": 1}));
    let sessions: Vec<String> = (0..70)
        .map(|i| {
            let dir = std::path::Path::new(&work).join(format!("s{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let created = client.request("session/new", json!({"cwd": dir, "mcpServers": []}));
            created["result"]["sessionId"].as_str().unwrap().to_string()
        })
        .collect();
    for (i, session) in sessions.iter().enumerate() {
        client.send(
            json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}}),
        );
    }
    // Those past the bound are answered at once with the reason.
    assert!(client.wait_for(Duration::from_secs(10), |m| {
        m["error"]["message"]
            .as_str()
            .is_some_and(|t| t.contains("requests are already in progress"))
    }));
    for session in &sessions {
        client.send(json!({"jsonrpc": "2.0", "method": "session/cancel",
            "params": {"sessionId": session}}));
    }
    for i in 0..70 {
        assert!(
            client.wait_for(Duration::from_secs(30), |m| m["id"] == 1000 + i),
            "prompt {i} was never answered"
        );
    }
    let refused = client
        .seen
        .iter()
        .filter(|m| {
            m["error"]["message"]
                .as_str()
                .is_some_and(|t| t.contains("requests are already in progress"))
        })
        .count();
    assert_eq!(refused, 6, "64 in flight, the rest refused");
    assert!(client.close().success());
}

#[test]
fn r4_19_acp_a_commands_output_streams_while_it_runs() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "ticks.toml",
        "[[step]]\ntext = [\"Counting.\"]\ntool_calls = [{ tool = \"run_command\", input = { command = \"for i in 1 2 3; do echo tick $i; sleep 0.5; done\" } }]\n[[step]]\ntext = [\"Counted.\"]\n",
    );
    let mut client = prompting(&env, &script, &work, "", &[], 70);
    let streamed = |m: &Value| {
        let update = &m["params"]["update"];
        update["sessionUpdate"] == "tool_call_update"
            && update["status"] == "in_progress"
            && update["content"].to_string().contains("tick 1")
    };
    assert!(
        client.wait_for(Duration::from_secs(20), streamed),
        "{:#?}",
        client.seen
    );
    // Seen while the command still ran: before its completion.
    let live = position(&client.seen, streamed).unwrap();
    assert!(client.wait_for(Duration::from_secs(20), |m| m["id"] == 70));
    let completed = position(&client.seen, |m| {
        m["params"]["update"]["status"] == "completed"
    })
    .unwrap();
    assert!(live < completed);
    assert!(client.close().success());
}

#[test]
fn r4_19_acp_output_held_back_by_the_pace_is_sent_when_the_command_goes_quiet() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "quiet.toml",
        "[[step]]\ntext = [\"Running.\"]\ntool_calls = [{ tool = \"run_command\", input = { command = \"echo first; sleep 0.05; echo second; sleep 3; echo third\" } }]\n[[step]]\ntext = [\"Ran.\"]\n",
    );
    let mut client = prompting(&env, &script, &work, "", &[], 71);
    // "second" came within the pace of "first": it is sent once the command goes
    // quiet, not only when "third" comes three seconds later.
    let second_alone = |m: &Value| {
        let update = &m["params"]["update"];
        let content = update["content"].to_string();
        update["status"] == "in_progress"
            && content.contains("second")
            && !content.contains("third")
    };
    assert!(
        client.wait_for(Duration::from_secs(20), second_alone),
        "{:#?}",
        client.seen
    );
    assert!(client.wait_for(Duration::from_secs(20), |m| m["id"] == 71));
    assert!(client.close().success());
}

#[test]
fn r4_19_acp_live_output_never_carries_a_hidden_value_not_even_in_pieces() {
    let env = Env::new();
    let work = work_dir(&env);
    let key = "sk-live-ABCDEF0123456789";
    // The key written in two pieces with a pause between — and stderr written in
    // that pause — then a long line that ends with it across the 4 KiB piece a
    // line is heard in.
    let script = write_script(
        &env,
        "split.toml",
        &format!(
            "[[step]]\ntext = [\"Running.\"]\ntool_calls = [{{ tool = \"run_command\", input = {{ command = \"printf 'split:{}'; sleep 0.8; printf 'warn\\\\n' >&2; sleep 0.3; printf '{}\\\\n'; printf '%4090s' '' | tr ' ' x; printf '{}\\\\n'; sleep 0.6\" }} }}]\n[[step]]\ntext = [\"Ran.\"]\n",
            &key[..11],
            &key[11..],
            key
        ),
    );
    let mut client = prompting(
        &env,
        &script,
        &work,
        "[provider]\napi_key_env = \"STEWARD_TEST_HIDDEN\"\n",
        &[("STEWARD_TEST_HIDDEN", key)],
        72,
    );
    assert!(client.wait_for(Duration::from_secs(30), |m| m["id"] == 72));
    let live: Vec<String> = client
        .seen
        .iter()
        .filter(|m| m["params"]["update"]["status"] == "in_progress")
        .map(|m| m["params"]["update"]["content"].to_string())
        .filter(|c| c.contains("split:"))
        .collect();
    assert!(!live.is_empty(), "{:#?}", client.seen);
    for content in &live {
        assert!(
            !content.contains(&key[..8]),
            "a piece of the key went out: {content}"
        );
    }
    assert!(
        live.iter().any(|c| c.contains("split:warn\\n<redacted>")),
        "{live:#?}"
    );
    assert!(client.close().success());
}

/// `steward acp` on `script` with `run_command` allowed (and `config` besides), in
/// an environment with `vars`: initialized, a session in `work` created, and the
/// prompt sent as request `id`.
fn prompting(
    env: &Env,
    script: &str,
    work: &str,
    config: &str,
    vars: &[(&str, &str)],
    id: i64,
) -> Driver {
    let path = env.root.path().join("config.toml");
    std::fs::write(
        &path,
        format!("{config}[tools]\nallow = [\"run_command\"]\n"),
    )
    .unwrap();
    let mut client = Driver::spawn_with(env, &argv(env, script, Some(&path)), vars);
    client.request("initialize", json!({"protocolVersion": 1}));
    let created = client.request("session/new", json!({"cwd": work, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    client.send(
        json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}}),
    );
    client
}
