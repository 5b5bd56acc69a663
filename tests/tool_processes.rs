//! Tool processes never outlive their owner: SIGKILL of Steward alone takes the
//! command and its children with it; without that kernel help, recovery stops the
//! leftover group at relaunch — and never signals a process that is not provably it.

use std::process::Stdio;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::run::{only_session, show, work_dir, write_script};
use crate::support::{Env, code, eventually, processes_with, signal, stderr, stdout};

/// A script whose tool starts a uniquely named `sleep` and a grandchild of it.
fn marked_script(env: &Env) -> (String, String) {
    // One marker per test: the tests of this file run side by side in one process.
    let marker = format!(
        "steward-marker-{}",
        env.root.path().file_name().unwrap().to_string_lossy()
    );
    let bin = env.root.path().join(&marker);
    std::fs::copy("/bin/sleep", &bin).unwrap();
    let command = format!(
        "sh -c '{} 300 & {} 301' & {} 302",
        bin.display(),
        bin.display(),
        bin.display()
    );
    let script = write_script(
        env,
        "marked.toml",
        &format!(
            "[[step]]\ntool_calls = [{{ tool = \"run_command\", input = {{ command = \"{}\" }} }}]\n[[step]]\ntext = [\"after\"]\n",
            command.replace('"', "\\\"")
        ),
    );
    (script, marker)
}

fn start(env: &Env, script: &str, work: &str, no_pdeathsig: bool) -> std::process::Child {
    let mut cmd = env.cmd();
    cmd.args([
        "--script", script, "run", "--yes", "--dir", work, "start it",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if no_pdeathsig {
        cmd.env("STEWARD_TEST_NO_PDEATHSIG", "1");
    }
    cmd.spawn().unwrap()
}

#[test]
fn i7_a_steward_started_with_sighup_ignored_still_takes_its_tools_with_it() {
    let env = Env::new();
    let work = work_dir(&env);
    let (script, marker) = marked_script(&env);
    // As `nohup` (or a service manager) starts it: SIGHUP ignored, which every
    // child inherits.
    let steward = env.cmd();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("trap '' HUP; exec \"$0\" \"$@\"")
        .arg(steward.get_program())
        .args(steward.get_args())
        .args([
            "--script", &script, "run", "--yes", "--dir", &work, "start it",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in steward.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let mut child = cmd.spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker).len()
            >= 3),
        "the tool never started"
    );
    signal(child.id(), "KILL");
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()),
        "tool processes outlived Steward: {:?}",
        processes_with(&marker)
    );
}

#[test]
fn i7_sigkill_of_steward_alone_takes_the_tool_and_its_children_with_it() {
    let env = Env::new();
    let work = work_dir(&env);
    let (script, marker) = marked_script(&env);
    let mut child = start(&env, &script, &work, false);
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker).len()
            >= 3),
        "the tool never started"
    );
    signal(child.id(), "KILL"); // Steward only, not its group
    child.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()),
        "tool processes outlived Steward: {:?}",
        processes_with(&marker)
    );
}

#[test]
fn i7_without_pdeathsig_recovery_stops_the_leftover_group_and_reports_it() {
    let env = Env::new();
    let work = work_dir(&env);
    let (script, marker) = marked_script(&env);
    let mut child = start(&env, &script, &work, true);
    assert!(eventually(Duration::from_secs(10), || processes_with(
        &marker
    )
    .len()
        >= 3));
    signal(child.id(), "KILL");
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let survivors = processes_with(&marker);
    assert!(
        survivors.len() >= 3,
        "the test switch did not keep them alive: {survivors:?}"
    );

    let output = env
        .cmd()
        .args(["--script", &script, "recover", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let stopped = report["recovered"][0]["stopped_processes"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(stopped.len(), 1, "{report}");
    assert!(
        eventually(Duration::from_secs(2), || processes_with(&marker)
            .is_empty()),
        "recovery left {:?}",
        processes_with(&marker)
    );
    let shown = show(&env, &only_session(&env));
    let tool = &shown["messages"][1]["data"]["parts"][0]["state"];
    assert_eq!(tool["status"], "error");
    let error = tool["error"].as_str().unwrap();
    assert!(
        error.starts_with("Tool execution outcome unknown after server restart"),
        "{error}"
    );
    assert!(error.contains("recovery stopped them"), "{error}");
}

#[test]
fn i7_ctrl_c_stops_the_tool_group_before_exiting() {
    let env = Env::new();
    let work = work_dir(&env);
    let (script, marker) = marked_script(&env);
    let child = start(&env, &script, &work, true);
    assert!(eventually(Duration::from_secs(10), || processes_with(
        &marker
    )
    .len()
        >= 3));
    signal(child.id(), "INT");
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 130);
    assert_eq!(
        processes_with(&marker),
        Vec::<i32>::new(),
        "the cancellation left processes running"
    );
    let shown = show(&env, &only_session(&env));
    assert_eq!(
        shown["messages"][1]["data"]["parts"][0]["state"]["error"],
        "Tool execution interrupted"
    );
}
