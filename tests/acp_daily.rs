//! `steward acp` as an editor uses it every day: the session list by recent
//! activity, prompts that mention files (`resource_link`) or carry them whole
//! (`resource`, `embeddedContext`), the compaction summary as a marked note of its
//! own, and a continuation after a crash that says, live, which tool's outcome is
//! unknown (a client that hides what a load replays still learns it).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::acp::{Driver, agent_text, argv};
use crate::providers::{Answer, Server, Wire};
use crate::run::{work_dir, write_script};
use crate::support::{Env, steward_bin};

fn new_session(client: &mut Driver, work: &str) -> String {
    let created = client.request("session/new", json!({"cwd": work, "mcpServers": []}));
    created["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_string()
}

fn listed(client: &mut Driver) -> Vec<String> {
    let answer = client.request("session/list", json!({}));
    answer["result"]["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_string())
        .collect()
}

fn prompt(client: &mut Driver, session: &str, blocks: Value) -> Value {
    client.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": blocks}),
    )
}

#[test]
fn acp_session_list_puts_the_session_just_prompted_first() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "one.toml", "[[step]]\ntext = [\"Done.\"]\n");
    let mut client = Driver::spawn(&env, &argv(&env, &script, None));
    client.request("initialize", json!({"protocolVersion": 1}));
    let ids: Vec<String> = (0..3).map(|_| new_session(&mut client, &work)).collect();
    assert_eq!(
        listed(&mut client),
        vec![ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    let answer = prompt(
        &mut client,
        &ids[0],
        json!([{"type": "text", "text": "hello"}]),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // The oldest session, just prompted, is the most recently active.
    assert_eq!(
        listed(&mut client),
        vec![ids[0].clone(), ids[2].clone(), ids[1].clone()]
    );
    assert!(client.close().success());
}

/// `steward acp` with `config` and no script.
fn argv_with_config(env: &Env, config: &str) -> String {
    json!([
        steward_bin(),
        "--data-dir",
        env.data.display().to_string(),
        "--config",
        config,
        "acp"
    ])
    .to_string()
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The user's chunks of a session as its updates carry them.
fn user_blocks(client: &Driver, session: &str) -> Vec<Value> {
    client
        .updates(session)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| u["content"].clone())
        .collect()
}

#[test]
fn acp_a_prompt_s_resource_links_reach_the_model_and_replay_as_links() {
    let env = Env::new();
    let work = work_dir(&env);
    let work_path = Path::new(&work).canonicalize().unwrap();
    std::fs::write(work_path.join("notes.txt"), "the secret word is plover\n").unwrap();
    let outside = env.root.path().join("outside.txt");
    std::fs::write(&outside, "never sent to the model\n").unwrap();
    let server = Server::start(
        Wire::OpenAi,
        vec![Answer::Stream {
            pieces: Wire::OpenAi.answer(&["Read it."]),
            pause: Duration::ZERO,
        }],
    );
    let config = write_script(&env, "config.toml", &Wire::OpenAi.config(&server.root));
    let argv = argv_with_config(&env, &config);
    let blocks = json!([
        {"type": "text", "text": "What do these say?"},
        {"type": "resource_link", "uri": file_uri(&work_path.join("notes.txt")), "name": "notes.txt"},
        {"type": "resource_link", "uri": file_uri(&outside), "name": "outside.txt"},
        {"type": "resource_link", "uri": file_uri(&work_path.join("missing.txt")), "name": "missing.txt"},
        {"type": "resource", "resource": {"uri": file_uri(&work_path.join("pasted.rs")),
            "mimeType": "text/x-rust", "text": "fn pasted() -> u32 { 7 }"}}
    ]);

    let mut client = Driver::spawn(&env, &argv);
    let init = client.request("initialize", json!({"protocolVersion": 1}));
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"]["embeddedContext"], true,
        "{init}"
    );
    let session = new_session(&mut client, &work);
    let answer = prompt(&mut client, &session, blocks.clone());
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(client.close().success());

    // What the model was sent: the linked file inside the session's directory and
    // the embedded resource, whole; the others named, with why they were not read.
    let bodies = server.bodies();
    let sent = bodies
        .last()
        .expect("a request reached the provider")
        .to_string();
    assert!(sent.contains("the secret word is plover"), "{sent}");
    assert!(sent.contains("fn pasted() -> u32 { 7 }"), "{sent}");
    assert!(!sent.contains("never sent to the model"), "{sent}");
    assert!(
        sent.contains("outside the session directory"),
        "the outside file's refusal is not said: {sent}"
    );
    assert!(
        sent.contains("missing.txt") && sent.contains("could not be read"),
        "the missing file is not said: {sent}"
    );

    // Loaded again, the prompt is what the editor sent: its links and resource.
    let mut client = Driver::spawn(&env, &argv);
    client.request("initialize", json!({"protocolVersion": 1}));
    let loaded = client.request(
        "session/load",
        json!({"sessionId": session, "cwd": work, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed = user_blocks(&client, &session);
    let expected: Vec<Value> = blocks.as_array().unwrap().clone();
    assert_eq!(replayed, expected);
    assert!(client.close().success());
}

#[test]
fn acp_the_provider_s_key_in_a_linked_file_or_resource_never_reaches_the_model() {
    const KEY: &str = "sk-SECRETKEY-1234567890abcdef";
    let env = Env::new();
    let work = work_dir(&env);
    let work_path = Path::new(&work).canonicalize().unwrap();
    std::fs::write(work_path.join(".env"), format!("key={KEY}\n")).unwrap();
    let server = Server::start(
        Wire::OpenAi,
        vec![Answer::Stream {
            pieces: Wire::OpenAi.answer(&["Read it."]),
            pause: Duration::ZERO,
        }],
    );
    let config = format!(
        "{}api_key_env = \"STEWARD_TEST_PROVIDER_KEY\"\n",
        Wire::OpenAi.config(&server.root)
    );
    let config = write_script(&env, "config.toml", &config);
    let argv = argv_with_config(&env, &config);
    let vars = [("STEWARD_TEST_PROVIDER_KEY", KEY)];
    let blocks = json!([
        {"type": "text", "text": "What is in these?"},
        {"type": "resource_link", "uri": format!("{}#L1", file_uri(&work_path.join(".env"))), "name": ".env"},
        {"type": "resource", "resource": {"uri": file_uri(&work_path.join("pasted.env")),
            "text": format!("token={KEY}")}}
    ]);
    let mut client = Driver::spawn_with(&env, &argv, &vars);
    client.request("initialize", json!({"protocolVersion": 1}));
    let session = new_session(&mut client, &work);
    let answer = prompt(&mut client, &session, blocks);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(client.close().success());

    let sent = server.bodies().last().expect("a request").to_string();
    assert!(!sent.contains("sk-SECRETKEY"), "the key was sent: {sent}");
    assert!(sent.contains("key=<redacted>"), "{sent}");
    assert!(sent.contains("token=<redacted>"), "{sent}");

    // What was kept of the resource holds no key either: a load replays it redacted.
    let mut client = Driver::spawn_with(&env, &argv, &vars);
    client.request("initialize", json!({"protocolVersion": 1}));
    let loaded = client.request(
        "session/load",
        json!({"sessionId": session, "cwd": work, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed = json!(user_blocks(&client, &session)).to_string();
    assert!(!replayed.contains("sk-SECRETKEY"), "{replayed}");
    assert!(replayed.contains("token=<redacted>"), "{replayed}");
    assert!(client.close().success());
}

#[test]
fn acp_the_compaction_summary_is_a_marked_thought_not_the_agents_answer() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(
        &env,
        "two.toml",
        "[[step]]\ntext = [\"First answer.\"]\n[[step]]\ntext = [\"Second answer.\"]\n",
    );
    let config = env.root.path().join("config.toml");
    std::fs::write(&config, "[compaction]\ntoken_budget = 10\n").unwrap();
    let argv = argv(&env, &script, Some(&config));
    let mut client = Driver::spawn(&env, &argv);
    client.request("initialize", json!({"protocolVersion": 1}));
    let session = new_session(&mut client, &work);
    for text in ["alpha request", "beta request"] {
        let answer = prompt(
            &mut client,
            &session,
            json!([{"type": "text", "text": text}]),
        );
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    }
    let check = |updates: Vec<&Value>| {
        let said = agent_text(&updates);
        assert!(
            !said.contains("The user asked"),
            "the summary came as the agent's answer: {said}"
        );
        let summary: Vec<&&Value> = updates
            .iter()
            .filter(|u| {
                u["sessionUpdate"] == "agent_thought_chunk"
                    && u["_meta"]["steward"]["kind"] == "compaction"
            })
            .collect();
        assert_eq!(summary.len(), 1, "{updates:#?}");
        let text = summary[0]["content"]["text"].as_str().unwrap();
        assert!(
            text.starts_with("Compacted conversation") && text.contains("alpha request"),
            "{text}"
        );
    };
    check(client.updates(&session));
    assert!(client.close().success());
    // Replayed the same way.
    let mut client = Driver::spawn(&env, &argv);
    client.request("initialize", json!({"protocolVersion": 1}));
    client.request(
        "session/load",
        json!({"sessionId": session, "cwd": work, "mcpServers": []}),
    );
    check(client.updates(&session));
    assert!(client.close().success());
}

#[test]
fn acp_after_sigkill_mid_tool_the_continuation_s_first_live_update_says_the_outcome_is_unknown() {
    let env = Env::new();
    let work = work_dir(&env);
    let script = write_script(&env, "crash.toml", crate::acp::CRASH);
    let argv = argv(&env, &script, None);
    let (session, _) = crate::acp::crash_mid_tool(&env, &argv, &work);
    let mut client = Driver::spawn(&env, &argv);
    client.request("initialize", json!({"protocolVersion": 1}));
    // A session newer than the crashed one: the continuation's work moves the
    // crashed one back to the top of the list.
    let newer = new_session(&mut client, &work);
    client.send(
        json!({"jsonrpc": "2.0", "id": 100, "method": "session/load",
        "params": {"sessionId": session, "cwd": work, "mcpServers": []}}),
    );
    let carried = |m: &Value| {
        m["params"]["update"]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Carried on after the restart."))
    };
    assert!(
        client.wait_for(Duration::from_secs(30), carried),
        "{:#?}",
        client.seen
    );
    let loaded = client
        .seen
        .iter()
        .position(|m| m["id"] == 100)
        .expect("the load was answered");
    let first_live = client.seen[loaded + 1..]
        .iter()
        .find(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| &m["params"]["update"])
        .unwrap();
    let text = first_live["content"]["text"].as_str().unwrap_or_default();
    assert_eq!(
        first_live["sessionUpdate"], "agent_message_chunk",
        "{first_live}"
    );
    assert!(
        text.contains("Continuing after restart")
            && text.contains("outcome")
            && text.contains("unknown")
            && text.contains("run_command echo ran"),
        "the continuation's first live update does not say the tool's outcome is unknown: {text}"
    );
    // Woken, the crashed session is the most recently active.
    let order = listed(&mut client);
    assert_eq!(order[..2], [session.clone(), newer], "{order:?}");
    assert!(client.close().success());
}

#[test]
fn acp_resources_and_the_marked_summary_pass_the_official_sdk_schemas() {
    let env = Env::new();
    let work = work_dir(&env);
    let work = Path::new(&work).canonicalize().unwrap();
    let linked = work.join("linked.txt");
    std::fs::write(&linked, "linked text\n").unwrap();
    let script = write_script(
        &env,
        "two.toml",
        "[[step]]\ntext = [\"First answer.\"]\n[[step]]\ntext = [\"Second answer.\"]\n",
    );
    let config = env.root.path().join("config.toml");
    std::fs::write(&config, "[compaction]\ntoken_budget = 10\n").unwrap();
    crate::acp::conform(
        &env,
        &argv(&env, &script, Some(&config)),
        "resources",
        &[
            "--cwd",
            &work.display().to_string(),
            "--file",
            &linked.display().to_string(),
        ],
    );
}
