//! Editing on the real binary (protocol §4.19): a file replaced whole or not at all
//! across a crash, and what an edit shows kept free of the values Steward hides.

use serde_json::Value;

use crate::run::{only_session, show, work_dir, write_script};
use crate::support::{Env, code, stderr, stdout};

const UNKNOWN: &str = "Tool execution outcome unknown after server restart";

/// The parts of a session's transcript that are tool calls.
fn tools(env: &Env, session: &str) -> Vec<Value> {
    show(env, session)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["data"]["parts"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool")
        .collect()
}

#[test]
fn r4_19_a_crash_while_an_edit_is_put_in_place_leaves_the_old_text_whole() {
    let env = Env::new();
    let work = work_dir(&env);
    let file = std::path::Path::new(&work).join("big.txt");
    // Large enough that a write cut short by the crash would show.
    let old: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&file, &old).unwrap();
    let script = write_script(
        &env,
        "edit.toml",
        r#"
[[step]]
text = ["Editing."]
tool_calls = [{ tool = "edit_file", input = { path = "big.txt", old_string = "line 100000\n", new_string = "changed\n" } }]
[[step]]
text = ["Done."]
"#,
    );
    let crashed = env
        .cmd()
        .env("FAILPOINTS", "tools.before_replace=return")
        .args([
            "--script", &script, "run", "--yes", "--dir", &work, "edit it",
        ])
        .output()
        .unwrap();
    assert!(
        stderr(&crashed).contains("failpoint tools.before_replace hit"),
        "{}",
        stderr(&crashed)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        old,
        "the old text, whole"
    );
    let recovered = env
        .cmd()
        .args(["--script", &script, "recover"])
        .output()
        .unwrap();
    assert_eq!(code(&recovered), 0, "{}", stderr(&recovered));
    let session = only_session(&env);
    let edit = &tools(&env, &session)[0];
    assert_eq!(edit["state"]["error"], UNKNOWN, "{edit}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        old,
        "never run again"
    );
    // Without the crash the edit lands whole.
    let done = env
        .cmd()
        .args([
            "--script", &script, "run", "--yes", "--dir", &work, "edit it",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        old.replace("line 100000\n", "changed\n")
    );
}

#[test]
fn r4_19_a_hidden_value_never_reaches_the_file_through_an_edits_diff() {
    let env = Env::new();
    let work = work_dir(&env);
    let secret = "sk-hidden-7f3a9c2e5b";
    std::fs::write(
        std::path::Path::new(&work).join(".env"),
        format!("KEY={secret}\nMODE=dev\n"),
    )
    .unwrap();
    // A line grep shortens to 300 characters, the value across the cut.
    std::fs::write(
        std::path::Path::new(&work).join("config.json"),
        format!(
            "{{\"name\":\"demo\",\"d\":\"{}\",\"key\":\"{secret}\"}}\n",
            "y".repeat(255)
        ),
    )
    .unwrap();
    let config = env.root.path().join("config.toml");
    std::fs::write(
        &config,
        "[provider]\napi_key_env = \"STEWARD_TEST_HIDDEN\"\n",
    )
    .unwrap();
    let script = write_script(
        &env,
        "edit.toml",
        r#"
[[step]]
text = ["Editing."]
tool_calls = [{ tool = "edit_file", input = { path = ".env", old_string = "MODE=dev", new_string = "MODE=prod" } }, { tool = "run_command", input = { command = "cat .env" } }, { tool = "write_file", input = { path = ".env", content = "KEY=<redacted>\nMODE=test\n" } }, { tool = "grep", input = { pattern = "demo" } }]
[[step]]
text = ["Done."]
"#,
    );
    let output = env
        .cmd()
        .env("STEWARD_TEST_HIDDEN", secret)
        .arg("--config")
        .arg(&config)
        .args(["--script", &script, "run", "--yes", "--dir", &work, "go"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(!stdout(&output).contains(secret), "{}", stdout(&output));
    let session = only_session(&env);
    let tools = tools(&env, &session);
    let diff = &tools[0]["state"]["structured"]["diff"];
    assert!(
        diff["old_text"]
            .as_str()
            .unwrap()
            .contains("KEY=<redacted>"),
        "{diff}"
    );
    // Nowhere in the file, its log included.
    for name in ["steward.db", "steward.db-wal"] {
        let bytes = std::fs::read(env.data.join(name)).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{name} holds the hidden value"
        );
    }
    // Writing back the `<redacted>` the model saw would destroy the value.
    assert!(
        tools[2]["state"]["error"]
            .as_str()
            .unwrap()
            .contains("holds a value Steward hides"),
        "{}",
        tools[2]
    );
    let grepped = tools[3]["state"]["output"].as_str().unwrap();
    assert!(grepped.contains("<redacted>"), "{grepped}");
    assert!(!grepped.contains(&secret[..8]), "{grepped}");
    // The edit itself kept it: only what Steward shows and keeps is scrubbed.
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&work).join(".env")).unwrap(),
        format!("KEY={secret}\nMODE=prod\n")
    );
}
