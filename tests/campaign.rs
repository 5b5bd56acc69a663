//! The fault campaign: the real binary, built with `failpoints`, aborted at each named
//! failpoint in turn (and at its 1st, 2nd, 3rd hit where it sits in a loop) during a
//! scripted workload with tool calls (commands and an MCP server's), streamed text, a
//! compaction and a cancellation;
//! then relaunched. After every fault: the invariant checker (`doctor`) passes, no
//! tool call ran twice (its side-effect file), and every prompt is in the transcript
//! exactly once. A summary line counts faults injected and checks made; it is also
//! written to `target/campaign-summary.txt`.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::recovery::events_of;
use crate::support::{Env, code, eventually, helper_bin, signal, stderr, stdout};

/// Entry k answers the k-th assistant message of the session.
pub(crate) const SCRIPT: &str = r#"
[[step]]
text = ["Looking ", "at ", "it."]
delay_ms = 60
tool_calls = [{ tool = "run_command", input = { command = "echo k0 >> ../effects.txt" } }, { tool = "t__append", input = { line = "m0" } }]
[[step]]
text = ["Ran ", "it."]
delay_ms = 20
tool_calls = [{ tool = "run_command", input = { command = "echo k1 >> ../effects.txt" } }, { tool = "t__append", input = { line = "m1" } }]
[[step]]
text = ["Done ", "with ", "that."]
delay_ms = 20
[[step]]
text = ["Second."]
tool_calls = [{ tool = "t__append", input = { line = "m3" } }, { tool = "run_command", input = { command = "echo k3 >> ../effects.txt" } }]
[[step]]
text = ["Done ", "again."]
[[step]]
text = ["A ", "long ", "answer ", "that ", "will ", "be ", "cancelled ", "before ", "it ", "ends ", "at ", "all."]
delay_ms = 150
[[step]]
text = ["Carrying on."]
"#;

/// A budget small enough that the workload compacts (at rest, before the second
/// prompt), and the test MCP server `t`, whose effects go to the scenario's
/// `effects.txt` beside the commands'.
fn config(root: &std::path::Path) -> String {
    format!(
        "[compaction]\ntoken_budget = 100\n[mcp.servers.t]\ncommand = {:?}\nargs = [\"mcp-server\", {:?}]\n",
        helper_bin(),
        root.display().to_string()
    )
}

const PROMPTS: [&str; 3] = ["first prompt", "second prompt", "third prompt"];

/// Failpoints a workload passes through, in roughly the order it meets them.
const WORKLOAD_POINTS: &[&str] = &[
    "migrate.after_apply",
    "input.after_admit",
    "claim.after_acquire",
    "runner.after_promote",
    "runner.before_provider_dispatch",
    "runner.after_provider_dispatch",
    "runner.after_text_commit",
    "runner.after_tool_called",
    "runner.after_tool_dispatch",
    "runner.after_tool_completed",
    "mcp.after_call_sent",
    "runner.before_clear",
    "compaction.before_ended",
    "cancel.before_commit",
];

/// Failpoints of a recovery pass and its wakes, met while recovering a fixture.
const RECOVERY_POINTS: &[&str] = &[
    "recovery.after_takeover",
    "recovery.between_batches",
    "recovery.after_commit",
    "wake.after_promote",
];

/// Hits tried per failpoint.
const MAX_HITS: usize = 3;

#[derive(Default)]
pub(crate) struct Tally {
    /// Faults injected per failpoint (or per kind of fault).
    per_point: BTreeMap<String, usize>,
    faults: usize,
    checks: usize,
    passed: usize,
    failed: Vec<String>,
}

impl Tally {
    pub(crate) fn check(&mut self, what: &str, ok: bool, detail: impl FnOnce() -> String) {
        self.checks += 1;
        if ok {
            self.passed += 1;
        } else {
            self.failed.push(format!("{what}: {}", detail()));
        }
    }

    fn summary(&self, name: &str) -> String {
        format!(
            "{name}: {} faults injected, {} checks: {} passed, {} failed",
            self.faults,
            self.checks,
            self.passed,
            self.failed.len()
        )
    }

    pub(crate) fn fault(&mut self, point: &str) {
        self.faults += 1;
        *self.per_point.entry(point.to_string()).or_default() += 1;
    }

    pub(crate) fn finish(self, name: &str) {
        let line = self.summary(name);
        for (point, n) in &self.per_point {
            eprintln!("  {point}: {n} fault{}", if *n == 1 { "" } else { "s" });
        }
        eprintln!("{line}");
        summary_line(name, &line);
        assert!(self.failed.is_empty(), "{line}\n{}", self.failed.join("\n"));
    }
}

/// Puts `line` (which starts with `name:`) into `target/campaign-summary.txt` in
/// place of that name's earlier line.
pub(crate) fn summary_line(name: &str, line: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/campaign-summary.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{name}:")))
        .collect();
    let mut out = kept.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(line);
    out.push('\n');
    let _ = std::fs::write(&path, out);
}

/// One data directory and its workload.
pub(crate) struct Scenario {
    pub(crate) env: Env,
    pub(crate) work: String,
    pub(crate) script: String,
    pub(crate) config: String,
    pub(crate) label: String,
}

/// How a step of the workload ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Finished(i32),
    Aborted,
}

pub(crate) fn ended(output: &Output) -> Step {
    if output.status.signal() == Some(6) || stderr(output).contains("failpoint") {
        Step::Aborted
    } else {
        Step::Finished(code(output))
    }
}

impl Scenario {
    pub(crate) fn new(label: String, script: &str) -> Scenario {
        let env = Env::new();
        let work = env.root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let script_path = env.root.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        let config = env.root.path().join("config.toml");
        std::fs::write(&config, self::config(env.root.path())).unwrap();
        Scenario {
            work: work.to_string_lossy().into_owned(),
            script: script_path.to_string_lossy().into_owned(),
            config: config.to_string_lossy().into_owned(),
            env,
            label,
        }
    }

    pub(crate) fn steward(&self, failpoints: Option<&str>) -> Command {
        let mut cmd = self.env.cmd();
        cmd.args(["--config", &self.config, "--script", &self.script]);
        match failpoints {
            Some(f) => cmd.env("FAILPOINTS", f),
            None => cmd.env_remove("FAILPOINTS"),
        };
        cmd
    }

    pub(crate) fn session(&self) -> Option<String> {
        let output = self
            .steward(None)
            .args(["sessions", "--json"])
            .output()
            .unwrap();
        let list: Value = serde_json::from_str(&stdout(&output)).ok()?;
        list.get(0)?.get("id")?.as_str().map(str::to_string)
    }

    /// Runs the workload, with `fault` = (step, failpoint spec) applied to that step's
    /// process only, until a step aborts; returns the aborted step, if any.
    fn workload(&self, fault: Option<(usize, &str)>) -> Option<usize> {
        for (i, prompt) in PROMPTS.iter().enumerate() {
            let failpoints = fault.filter(|(step, _)| *step == i).map(|(_, spec)| spec);
            let mut cmd = self.steward(failpoints);
            cmd.args(["run", "--yes"]);
            if i == 0 {
                cmd.args(["--dir", &self.work]);
            } else {
                let session = self.session()?;
                cmd.args(["--session", &session]);
            }
            cmd.arg(prompt);
            let step = if i == 2 {
                self.cancelled(cmd)
            } else {
                ended(&cmd.output().unwrap())
            };
            if step == Step::Aborted {
                return Some(i);
            }
        }
        None
    }

    /// Writes `config` as this scenario's config file.
    pub(crate) fn set_config(&self, config: &str) {
        std::fs::write(&self.config, config).unwrap();
    }

    /// Runs `cmd`, and interrupts it (SIGINT) once it streams its answer.
    fn cancelled(&self, mut cmd: Command) -> Step {
        let texts = || {
            events_of(&self.env)
                .iter()
                .filter(|t| *t == "step.text")
                .count()
        };
        let before = texts();
        let mut child: Child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if texts() > before {
                signal(child.id(), "INT");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        ended(&child.wait_with_output().unwrap())
    }

    /// Relaunches (no failpoints): recovery, wakes, continuations run to the end.
    fn relaunch(&self) -> Output {
        self.steward(None)
            .args(["recover", "--json"])
            .output()
            .unwrap()
    }

    /// Everything that must hold after a fault and a relaunch.
    pub(crate) fn check(&self, tally: &mut Tally, expected_prompts: &[(&str, bool)]) {
        let label = &self.label;
        let relaunch = self.relaunch();
        tally.check(&format!("{label}: relaunch"), code(&relaunch) == 0, || {
            stderr(&relaunch)
        });
        let doctor = self
            .steward(None)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_str(&stdout(&doctor)).unwrap_or(Value::Null);
        let rules = report["rules_checked"].as_u64().unwrap_or(0) as usize;
        tally.checks += rules.saturating_sub(1);
        tally.passed += if report["ok"] == true {
            rules.saturating_sub(1)
        } else {
            0
        };
        tally.check(
            &format!("{label}: invariants"),
            report["ok"] == true,
            || report.to_string(),
        );
        let effects =
            std::fs::read_to_string(self.env.root.path().join("effects.txt")).unwrap_or_default();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for line in effects.lines() {
            *seen.entry(line).or_default() += 1;
        }
        tally.check(
            &format!("{label}: each tool call ran at most once"),
            seen.values().all(|n| *n == 1),
            || format!("{seen:?}"),
        );
        // No MCP server outlived the Steward that ran it (its arguments name this
        // scenario's directory, as nothing else still running does).
        let root = self.env.root.path().display().to_string();
        let leftover = || crate::support::processes_with(&format!("mcp-server\0{root}"));
        tally.check(
            &format!("{label}: no MCP server outlived its Steward"),
            eventually(Duration::from_secs(2), || leftover().is_empty()),
            || format!("still running: {:?}", leftover()),
        );
        let inspect = self
            .steward(None)
            .args(["inspect", "--json"])
            .output()
            .unwrap();
        let snapshot: Value = serde_json::from_str(&stdout(&inspect)).unwrap_or(Value::Null);
        tally.check(
            &format!("{label}: no claim or wake left"),
            snapshot["claims"] == Value::Array(vec![]) && snapshot["wakes"] == Value::Array(vec![]),
            || {
                format!(
                    "{snapshot}\nthe relaunch said: {}{}",
                    stdout(&relaunch),
                    stderr(&relaunch)
                )
            },
        );
        let users = self.user_texts();
        for (prompt, must) in expected_prompts {
            let n = users.iter().filter(|t| t == prompt).count();
            let ok = if *must { n == 1 } else { n <= 1 };
            tally.check(
                &format!("{label}: prompt {prompt:?} present once"),
                ok,
                || format!("{n} times in {users:?}"),
            );
        }
    }

    pub(crate) fn user_texts(&self) -> Vec<String> {
        let Some(session) = self.session() else {
            return Vec::new();
        };
        let output = self
            .steward(None)
            .args(["show", &session, "--json"])
            .output()
            .unwrap();
        let shown: Value = serde_json::from_str(&stdout(&output)).unwrap_or(Value::Null);
        shown["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["type"] == "user")
                    .filter_map(|m| m["data"]["text"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `point` aborting at its `hit`-th evaluation in a process (tikv `fail` syntax).
fn failpoint_spec(point: &str, hit: usize) -> String {
    if hit == 1 {
        format!("{point}=return")
    } else {
        format!("{point}={}*off->return", hit - 1)
    }
}

/// Failpoints that abort before a step's prompt is admitted.
fn before_admission(point: &str) -> bool {
    matches!(point, "migrate.after_apply")
}

#[test]
fn campaign_aborts_at_every_failpoint_and_everything_holds_after_relaunch() {
    let mut covered: Vec<&str> = WORKLOAD_POINTS
        .iter()
        .chain(RECOVERY_POINTS)
        .copied()
        .collect();
    // A file tool's crash between writing a file's new text and putting it in
    // place is the subject of a test of its own (`editing.rs`).
    covered.push("tools.before_replace");
    covered.sort();
    let mut named = steward_engine::failpoint::NAMES.to_vec();
    named.sort();
    assert_eq!(
        covered, named,
        "the campaign must abort at every named failpoint"
    );
    let mut tally = Tally::default();
    // The workload without faults is the baseline every scenario is held to.
    let baseline = Scenario::new("baseline".into(), SCRIPT);
    assert_eq!(baseline.workload(None), None);
    let kinds = events_of(&baseline.env);
    for kind in ["compaction.ended", "step.interrupted", "tool.completed"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "the workload never produced {kind}: {kinds:?}"
        );
    }
    baseline.check(&mut tally, &PROMPTS.map(|p| (p, true)));

    // Each point at its 1st, 2nd, 3rd hit within each step's process.
    for point in WORKLOAD_POINTS {
        let mut hit_anywhere = false;
        for step in 0..PROMPTS.len() {
            for hit in 1..=MAX_HITS {
                let scenario = Scenario::new(format!("{point}@{step}#{hit}"), SCRIPT);
                let spec = failpoint_spec(point, hit);
                let Some(aborted) = scenario.workload(Some((step, &spec))) else {
                    break;
                };
                hit_anywhere = true;
                tally.fault(point);
                let expected: Vec<(&str, bool)> = PROMPTS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i <= aborted)
                    .map(|(i, p)| (*p, i < aborted || !before_admission(point)))
                    .collect();
                scenario.check(&mut tally, &expected);
            }
        }
        tally.check(
            &format!("{point}: hit by the workload"),
            hit_anywhere,
            || "never hit".into(),
        );
    }

    for point in RECOVERY_POINTS {
        for hit in 1..=MAX_HITS {
            let scenario = Scenario::new(
                format!("{point}#{hit}"),
                "[[step]]\ntext = [\"Carrying on.\"]\n",
            );
            std::fs::create_dir_all(&scenario.env.data).unwrap();
            let fixture = Command::new(helper_bin())
                .args([
                    "interrupted",
                    scenario.env.data.to_str().unwrap(),
                    "150",
                    &scenario.work,
                    "script",
                ])
                .env_remove("FAILPOINTS")
                .output()
                .unwrap();
            assert!(fixture.status.success(), "{}", stderr(&fixture));
            let spec = failpoint_spec(point, hit);
            // 150 claims cross batch boundaries at batches of 100.
            let first = scenario
                .steward(Some(&spec))
                .env("STEWARD_RECOVERY_BATCH", "100")
                .args(["recover", "--json"])
                .output()
                .unwrap();
            if ended(&first) != Step::Aborted {
                tally.check(&format!("{point}: hit at least once"), hit > 1, || {
                    stderr(&first)
                });
                break;
            }
            tally.fault(point);
            scenario.check(&mut tally, &[]);
            let conn = rusqlite::Connection::open(scenario.env.db()).unwrap();
            let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
            tally.check(
                &format!("{point}#{hit}: no execution recovered twice"),
                count(
                    "SELECT count(*) FROM (SELECT json_extract(data, '$.execution_id') AS e FROM event
                     WHERE type = 'step.recovered' GROUP BY e HAVING count(*) > 1)",
                ) == 0,
                || "an execution was reconciled twice".into(),
            );
            tally.check(
                &format!("{point}#{hit}: every fixture execution recovered"),
                count("SELECT count(*) FROM session_recovery") >= 150,
                || "fewer recoveries than interrupted executions".into(),
            );
            tally.check(
                &format!("{point}#{hit}: every continuation promoted exactly once"),
                count("SELECT count(*) FROM session_input WHERE promoted_seq IS NULL") == 0
                    && count("SELECT count(*) FROM session_recovery")
                        == count("SELECT count(*) FROM session_message WHERE data LIKE '%\"kind\":\"continuation\"%'"),
                || "a continuation is pending or doubled".into(),
            );
            tally.check(
                &format!("{point}#{hit}: every session ends answered"),
                count(
                    "SELECT count(*) FROM session s WHERE (SELECT type FROM session_message m
                     WHERE m.session_id = s.id ORDER BY seq DESC LIMIT 1) IS NOT 'assistant'",
                ) == 0,
                || "a session does not end with an answer".into(),
            );
        }
    }
    tally.finish("campaign");
}

/// A small, seedable generator (xorshift64*), so a failing run can be replayed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The seed `var` names, or one from the clock (printed with every failure).
pub(crate) fn seed(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::UNIX_EPOCH
                .elapsed()
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        })
}

/// How the torture drives a prompt: headless, the terminal interface in a pty, or
/// an ACP client.
#[derive(Clone, Copy, Debug)]
enum Front {
    Run,
    Tui,
    Acp,
}

/// The text that ends the turn of each prompt of [`SCRIPT`] (its last step's).
const TURN_ENDS: [&str; 2] = ["Done with that.", "Done again."];

/// Tools the terminal interface and ACP run without asking (headless runs pass
/// `--yes`): the workload's commands and the test MCP server's tool.
fn allowing(config: &str) -> String {
    format!("[tools]\nallow = [\"run_command\", \"t__*\"]\n{config}")
}

/// Drives [`PROMPTS`]`[..2]` through `front`, killing (SIGKILL) the process that
/// runs prompt `victim` `delay` after it was sent. Returns the prompts whose turn
/// Steward acknowledged as ended before the kill: a `run` that exited 0, an ACP
/// `end_turn`, a turn's last text on the terminal.
fn torture_once(
    scenario: &Scenario,
    front: Front,
    victim: usize,
    delay: Duration,
) -> Vec<&'static str> {
    let mut acknowledged = Vec::new();
    let limit = Duration::from_secs(30);
    match front {
        Front::Run => {
            let mut session: Option<String> = None;
            for (i, prompt) in PROMPTS[..2].iter().enumerate() {
                let mut cmd = scenario.steward(None);
                cmd.args(["run", "--yes"]);
                match &session {
                    None => cmd.args(["--dir", scenario.work.as_str()]),
                    Some(id) => cmd.args(["--session", id.as_str()]),
                };
                let mut child = cmd
                    .arg(prompt)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                if i == victim {
                    std::thread::sleep(delay);
                    signal(child.id(), "KILL");
                    child.wait().unwrap();
                    break;
                }
                if child.wait().unwrap().success() {
                    acknowledged.push(*prompt);
                }
                session = scenario.session();
            }
        }
        Front::Tui => {
            use crate::tui::Tui;
            let args = ["--config", &scenario.config, "--script", &scenario.script];
            let tui = Tui::start(&scenario.env, std::path::Path::new(&scenario.work), &args);
            if tui.wait_for("No session open", limit) {
                for (i, prompt) in PROMPTS[..2].iter().enumerate() {
                    tui.keys(&format!("{prompt}\r"));
                    if i == victim {
                        std::thread::sleep(delay);
                        break;
                    }
                    if !tui.wait_for(TURN_ENDS[i], limit) {
                        break;
                    }
                    acknowledged.push(*prompt);
                }
            }
            signal(tui.child.id(), "KILL");
            drop(tui);
        }
        Front::Acp => {
            use crate::acp::{Driver, argv};
            use serde_json::json;
            let config = std::path::Path::new(&scenario.config);
            let mut client = Driver::spawn(
                &scenario.env,
                &argv(&scenario.env, &scenario.script, Some(config)),
            );
            client.request("initialize", json!({"protocolVersion": 1}));
            let created = client.request(
                "session/new",
                json!({"cwd": scenario.work, "mcpServers": []}),
            );
            let session = created["result"]["sessionId"].as_str().map(str::to_string);
            for (i, prompt) in PROMPTS[..2].iter().enumerate() {
                let Some(session) = &session else { break };
                let id = 100 + i;
                client.send(json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
                    "params": {"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}}));
                if i == victim {
                    std::thread::sleep(delay);
                    break;
                }
                let answered =
                    client.wait_for(limit, |m| m["id"] == id && m.get("method").is_none());
                let ended = client
                    .seen
                    .iter()
                    .any(|m| m["id"] == id && m["result"]["stopReason"] == "end_turn");
                if !(answered && ended) {
                    break;
                }
                acknowledged.push(*prompt);
            }
            signal(client.pid(), "KILL");
            client.close();
        }
    }
    // A process the killed one forked holds its owner lock (`flock`, shared across
    // `fork`) until it execs or dies with its parent: recovery proves the owner dead
    // only once it is gone, so the relaunch waits for what it does not test.
    let owners = scenario.env.data.join("owners");
    if !eventually(Duration::from_secs(60), || holding(&owners).is_empty()) {
        eprintln!(
            "{}: owner locks still held after 60 s by {:?}",
            scenario.label,
            holding(&owners)
        );
    }
    acknowledged
}

/// Pids of live processes with a descriptor open on a file under `dir`.
fn holding(dir: &std::path::Path) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let fds = std::fs::read_dir(entry.path().join("fd"))
            .into_iter()
            .flatten();
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(dir)))
        {
            out.push(pid);
        }
    }
    out
}

/// `STEWARD_TORTURE_SHARD` as `i/n`: this process takes the runs whose number is
/// `i` modulo `n`, so `n` processes with one seed share a long run between them.
fn shard() -> (usize, usize) {
    let Ok(text) = std::env::var("STEWARD_TORTURE_SHARD") else {
        return (0, 1);
    };
    let parsed = text
        .split_once('/')
        .and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
    match parsed {
        Some((i, n)) if i < n => (i, n),
        _ => panic!("STEWARD_TORTURE_SHARD={text}: expected i/n with i < n"),
    }
}

/// Seeded SIGKILLs at random instants of a two-prompt workload, through `steward
/// run`, the terminal interface and ACP in turn. `STEWARD_TORTURE_RUNS` (default
/// 30) and `STEWARD_TORTURE_SEED` replay or lengthen it, `STEWARD_TORTURE_SHARD`
/// splits it; each run's instants come from the seed and its number alone, so a
/// failing run (named with seed and run as it fails) replays in any shard.
/// Progress goes to stderr every 100 runs.
#[test]
fn campaign_random_sigkill_torture() {
    let seed = seed("STEWARD_TORTURE_SEED");
    let runs: usize = std::env::var("STEWARD_TORTURE_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let (shard, shards) = shard();
    let name = if shards == 1 {
        "torture".to_string()
    } else {
        format!("torture shard {shard}/{shards}")
    };
    eprintln!("{name}: seed {seed}, {runs} runs");
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut acknowledged_per_front: BTreeMap<String, usize> = BTreeMap::new();
    let mut done = 0;
    for run in (shard..runs).step_by(shards) {
        let mut rng = Rng((seed ^ (run as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        rng.next();
        let front = [Front::Run, Front::Tui, Front::Acp][run % 3];
        let scenario = Scenario::new(format!("seed {seed} run {run} ({front:?})"), SCRIPT);
        if !matches!(front, Front::Run) {
            scenario.set_config(&allowing(&config(scenario.env.root.path())));
        }
        // Two prompts: kill the process running one of them at a random instant.
        let victim = rng.below(2) as usize;
        let delay = Duration::from_millis(rng.below(900));
        let acknowledged = torture_once(&scenario, front, victim, delay);
        tally.fault(&format!("sigkill ({front:?})"));
        *acknowledged_per_front
            .entry(format!("{front:?}"))
            .or_default() += acknowledged.len();
        let failed_before = tally.failed.len();
        let expected: Vec<(&str, bool)> = acknowledged.iter().map(|p| (*p, true)).collect();
        scenario.check(&mut tally, &expected);
        let conn = rusqlite::Connection::open(scenario.env.db()).unwrap();
        let admitted: Vec<String> = conn
            .prepare("SELECT prompt FROM session_input WHERE id NOT LIKE 'inp_rec_%' ORDER BY admitted_seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let users = scenario.user_texts();
        tally.check(
            &format!(
                "{}: every admitted prompt is in the transcript once",
                scenario.label
            ),
            users == admitted,
            || format!("admitted {admitted:?}, transcript {users:?}"),
        );
        for failure in &tally.failed[failed_before..] {
            eprintln!("torture FAILED (seed {seed} run {run}): {failure}");
        }
        done += 1;
        if done % 100 == 0 {
            eprintln!(
                "{name}: {done} runs (last {run} of {runs}), {} failed checks, {:.0} s",
                tally.failed.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "{name}: {done} runs in {:.0} s; prompts acknowledged before a kill: {acknowledged_per_front:?}",
        started.elapsed().as_secs_f64()
    );
    tally.finish(&name);
}
