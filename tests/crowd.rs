//! The fault campaign with many processes on one data directory: the terminal
//! interface (in its pseudo-terminal), `steward acp` with a client, `steward inspect`,
//! `steward run`, `recover`, `wake`/`discard` and a foreign SQLite reader, started and
//! stopped in a seeded random order, with SIGKILLs among them. After each run every
//! prompt a front end acknowledged (an ACP `end_turn`, `run`'s exit 0, the prompt on
//! the terminal interface's screen) is in the file exactly once, no tool ran twice,
//! `doctor` passes, nothing is left claimed or waiting, and no foreign reader's close
//! ever deleted the log while a long-lived process had it open (protocol §2.8).
//!
//! `STEWARD_CROWD_RUNS` (default 3) and `STEWARD_CROWD_SEED` choose the runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::acp::Driver;
use crate::campaign::{Rng, Tally, seed};
use crate::nothing_lost::{foreign_read, log_of};
use crate::support::{Env, code, eventually, holds_posix_lock, signal, stderr, stdout};
use crate::tui::Tui;

/// Each prompt takes two steps: one with a tool call that appends a line naming its
/// session's directory and step to the effects file, then an answer. Text streams
/// slowly enough that a kill can land mid-turn.
fn script(effects: &Path) -> String {
    let effects = effects.display();
    let step = |k: usize| {
        format!(
            "[[step]]\ntext = [\"Step \", \"{k} \", \"runs.\"]\ndelay_ms = 40\n\
             tool_calls = [{{ tool = \"run_command\", input = {{ command = \"echo \\\"$PWD k{k}\\\" >> {effects}\" }} }}]\n\
             [[step]]\ntext = [\"Answer \", \"{k}.\"]\ndelay_ms = 40\n"
        )
    };
    let mut text: String = (0..12).map(|k| step(2 * k)).collect();
    text.push_str("[[step]]\ntext = [\"Carrying on.\"]\n");
    text
}

const CONFIG: &str = "[tools]\nallow = [\"read_file\", \"list_dir\", \"run_command\"]\n";

/// A prompt and what became of it: acknowledged by a front end, or only sent.
struct Sent {
    prompt: String,
    acknowledged: bool,
}

/// One data directory and the processes on it.
struct Crowd {
    env: Env,
    script: String,
    config: String,
    effects: PathBuf,
    work: PathBuf,
    tui: Option<Tui>,
    acp: Option<(Driver, String)>,
    inspect: Option<Tui>,
    sent: Vec<Sent>,
    n: usize,
    label: String,
}

impl Crowd {
    fn new(label: String) -> Crowd {
        let env = Env::new();
        let work = env.root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let effects = env.root.path().join("effects.txt");
        let script_path = env.root.path().join("script.toml");
        std::fs::write(&script_path, script(&effects)).unwrap();
        let config = env.root.path().join("config.toml");
        std::fs::write(&config, CONFIG).unwrap();
        Crowd {
            script: script_path.display().to_string(),
            config: config.display().to_string(),
            effects,
            work,
            env,
            tui: None,
            acp: None,
            inspect: None,
            sent: Vec::new(),
            n: 0,
            label,
        }
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--config".into(),
            self.config.clone(),
            "--script".into(),
            self.script.clone(),
        ]
    }

    /// A fresh directory for the next session (tool lines name it).
    fn dir(&mut self, who: &str) -> String {
        self.n += 1;
        let dir = self.work.join(format!("{who}_{}", self.n));
        std::fs::create_dir_all(&dir).unwrap();
        dir.display().to_string()
    }

    fn start_tui(&mut self, tally: &mut Tally) {
        if self.tui.is_some() {
            return;
        }
        let dir = self.dir("tui");
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let tui = Tui::start(&self.env, Path::new(&dir), &args);
        let opened = tui.wait_for("No session open", Duration::from_secs(15));
        tally.check(&format!("{}: steward opened", self.label), opened, || {
            tui.text()
        });
        if opened {
            // The after-crash panel may sit on top: close it.
            tui.keys("\x1b");
            std::thread::sleep(Duration::from_millis(100));
            self.tui = Some(tui);
        }
    }

    fn tui_prompt(&mut self, tally: &mut Tally, kill_after: Option<Duration>) {
        self.start_tui(tally);
        let Some(tui) = &self.tui else { return };
        self.n += 1;
        let prompt = format!("tui prompt {}", self.n);
        tui.keys(&format!("{prompt}\r"));
        // What the screen shows of a prompt it read back from the file.
        let shown = tui.wait_for(&format!("you  {prompt}"), Duration::from_secs(15));
        self.sent.push(Sent {
            prompt: prompt.clone(),
            acknowledged: shown,
        });
        if let Some(after) = kill_after {
            std::thread::sleep(after);
            self.kill_tui(tally);
            return;
        }
        let idle = eventually(Duration::from_secs(20), || {
            let text = tui.text();
            text.lines().next().is_some_and(|h| h.contains(" idle "))
        });
        tally.check(
            &format!("{}: the terminal interface's turn ended", self.label),
            shown && idle,
            || tui.text(),
        );
    }

    fn quit_tui(&mut self, tally: &mut Tally) {
        let Some(mut tui) = self.tui.take() else {
            return;
        };
        tui.keys("\t");
        let mut left = None;
        for _ in 0..3 {
            tui.keys("q");
            // Asked first while a turn runs: leave it for recovery. (A question
            // whose turn ends meanwhile goes away, and q quits then.)
            if tui.wait_for("Quit?", Duration::from_millis(500)) {
                std::thread::sleep(Duration::from_millis(500));
                tui.keys("y");
            }
            left = tui.wait(Duration::from_secs(10));
            if left.is_some() {
                break;
            }
        }
        let left = left.is_some_and(|s| s.success());
        tally.check(&format!("{}: steward quit", self.label), left, || {
            tui.text()
        });
    }

    fn kill_tui(&mut self, tally: &mut Tally) {
        if let Some(tui) = self.tui.take() {
            signal(tui.child.id(), "KILL");
            drop(tui);
            tally.fault("sigkill steward");
        }
    }

    fn start_acp(&mut self) {
        if self.acp.is_some() {
            return;
        }
        let mut argv = vec![crate::support::steward_bin().to_string()];
        argv.extend(["--data-dir".into(), self.env.data.display().to_string()]);
        argv.extend(self.args());
        argv.push("acp".into());
        let mut driver = Driver::spawn(&self.env, &serde_json::to_string(&argv).unwrap());
        driver.request("initialize", json!({"protocolVersion": 1}));
        let dir = self.dir("acp");
        let created = driver.request("session/new", json!({"cwd": dir, "mcpServers": []}));
        let session = created["result"]["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.acp = Some((driver, session));
    }

    fn acp_prompt(&mut self, tally: &mut Tally, kill_after: Option<Duration>) {
        self.start_acp();
        let Some((driver, session)) = &mut self.acp else {
            return;
        };
        self.n += 1;
        let prompt = format!("acp prompt {}", self.n);
        let params =
            json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt.clone()}]});
        if let Some(after) = kill_after {
            driver.send(json!({"jsonrpc": "2.0", "id": 9_000 + self.n, "method": "session/prompt", "params": params}));
            std::thread::sleep(after);
            let id = json!(9_000 + self.n);
            let answered = driver.wait_for(Duration::ZERO, |m| m["id"] == id);
            self.sent.push(Sent {
                prompt,
                acknowledged: answered,
            });
            self.kill_acp();
            tally.fault("sigkill steward acp");
            return;
        }
        let answer = driver.request("session/prompt", params);
        let ended = answer["result"]["stopReason"] == "end_turn";
        self.sent.push(Sent {
            prompt,
            acknowledged: ended,
        });
        tally.check(&format!("{}: an acp turn ended", self.label), ended, || {
            answer.to_string()
        });
    }

    fn kill_acp(&mut self) {
        if let Some((driver, _)) = self.acp.take() {
            signal(driver.pid(), "KILL");
            drop(driver);
        }
    }

    fn close_acp(&mut self, tally: &mut Tally) {
        if let Some((driver, _)) = self.acp.take() {
            let closed = driver.close().success();
            tally.check(
                &format!("{}: steward acp closed", self.label),
                closed,
                || "a non-zero exit".into(),
            );
        }
    }

    fn toggle_inspect(&mut self, tally: &mut Tally) {
        match self.inspect.take() {
            Some(mut tui) => {
                tui.keys("q");
                let left = tui
                    .wait(Duration::from_secs(10))
                    .is_some_and(|s| s.success());
                tally.check(&format!("{}: inspect quit", self.label), left, || {
                    tui.text()
                });
            }
            None => {
                let work = self.work.clone();
                let tui = Tui::start(&self.env, &work, &["inspect"]);
                if tui.wait_for("Claims", Duration::from_secs(10)) {
                    self.inspect = Some(tui);
                }
            }
        }
    }

    fn run(&mut self, tally: &mut Tally, kill_after: Option<Duration>) {
        let dir = self.dir("run");
        let prompt = format!("run prompt {}", self.n);
        let mut cmd = self.env.cmd();
        cmd.args(self.args())
            .args(["run", "--yes", "--dir", &dir, &prompt]);
        match kill_after {
            None => {
                let output = cmd.output().unwrap();
                let ok = code(&output) == 0;
                self.sent.push(Sent {
                    prompt,
                    acknowledged: ok,
                });
                tally.check(&format!("{}: run exits 0", self.label), ok, || {
                    stderr(&output)
                });
            }
            Some(after) => {
                let mut child = cmd
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                std::thread::sleep(after);
                let finished = child.try_wait().unwrap();
                if finished.is_none() {
                    signal(child.id(), "KILL");
                    tally.fault("sigkill steward run");
                }
                let status = child.wait().unwrap();
                self.sent.push(Sent {
                    prompt,
                    acknowledged: finished.is_some() && status.success(),
                });
            }
        }
    }

    fn recover(&mut self, tally: &mut Tally) {
        let output = self
            .env
            .cmd()
            .args(self.args())
            .args(["recover", "--json"])
            .output()
            .unwrap();
        tally.check(
            &format!("{}: recover exits 0", self.label),
            code(&output) == 0,
            || stderr(&output),
        );
    }

    /// Wakes or discards what waits on the user, if anything does.
    fn act_on_waiting(&mut self, tally: &mut Tally, discard: bool) {
        let inspect = self.env.run(&["inspect", "--json"]);
        let snapshot: Value = serde_json::from_slice(&inspect.stdout).unwrap_or(Value::Null);
        let target = snapshot["quarantine"][0]["execution_id"]
            .as_str()
            .or_else(|| snapshot["wakes"][0]["execution_id"].as_str())
            .map(str::to_string);
        let Some(execution) = target else { return };
        let verb = if discard { "discard" } else { "wake" };
        let output = self
            .env
            .cmd()
            .args(self.args())
            .args([verb, &execution])
            .output()
            .unwrap();
        // Another process may have acted first, or hold the session: a refusal
        // says why in one line, and is fine.
        let refused = matches!(code(&output), 1 | 4) && stderr(&output).starts_with("steward: ");
        tally.check(
            &format!("{}: {verb} succeeds or says why not", self.label),
            code(&output) == 0 || refused,
            || format!("{} {}", code(&output), stderr(&output)),
        );
    }

    /// The long-lived processes open now, and whether each writes (holds a
    /// read-write connection, so it uses the log while it runs).
    fn long_lived(&self) -> Vec<(&'static str, u32, bool)> {
        let mut open = Vec::new();
        if let Some(tui) = &self.tui {
            open.push(("steward", tui.child.id(), true));
        }
        if let Some((driver, _)) = &self.acp {
            open.push(("steward acp", driver.pid(), true));
        }
        if let Some(tui) = &self.inspect {
            open.push(("steward inspect", tui.child.id(), false));
        }
        open
    }

    /// A foreign reader opens and closes the file. Every process that uses the log
    /// (holds a lock on the `-shm`: a writer always does; `steward inspect` does
    /// unless it reads a file that had no log, without locks) must hold its SQLite
    /// lock on the database, and the log must survive the reader's close.
    fn foreign_reader(&mut self, tally: &mut Tally) {
        if !self.env.db().exists() {
            return;
        }
        let db = self.env.db();
        let (wal, shm) = log_of(&db);
        let users: Vec<(&str, u32)> = self
            .long_lived()
            .into_iter()
            .filter(|(face, pid, writes)| {
                let uses = holds_posix_lock(*pid, &shm);
                tally.check(
                    &format!("{}: {face} uses the log", self.label),
                    uses || !writes,
                    || format!("pid {pid} holds no lock on the -shm"),
                );
                uses
            })
            .map(|(face, pid, _)| (face, pid))
            .collect();
        for (face, pid) in &users {
            tally.check(
                &format!("{}: {face} holds its SQLite lock", self.label),
                holds_posix_lock(*pid, &db),
                || format!("pid {pid} holds no lock on {}", db.display()),
            );
        }
        foreign_read(&db);
        let kept = wal.exists() && shm.exists();
        tally.check(
            &format!(
                "{}: a foreign reader's close kept the log of a running process",
                self.label
            ),
            users.is_empty() || kept,
            || format!("log kept: {kept}, used by {users:?}"),
        );
    }

    /// Ends every process, lets recovery finish what was left, and checks the file.
    fn settle_and_check(mut self, tally: &mut Tally) {
        self.quit_tui(tally);
        self.close_acp(tally);
        if let Some(mut inspect) = self.inspect.take() {
            inspect.keys("q");
            let _ = inspect.wait(Duration::from_secs(10));
        }
        self.recover(tally);
        let label = self.label.clone();
        let doctor = self.env.run(&["doctor", "--json"]);
        let report: Value = serde_json::from_slice(&doctor.stdout).unwrap_or(Value::Null);
        tally.check(
            &format!("{label}: invariants"),
            report["ok"] == true,
            || stdout(&doctor),
        );
        let effects = std::fs::read_to_string(&self.effects).unwrap_or_default();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for line in effects.lines() {
            *seen.entry(line).or_default() += 1;
        }
        tally.check(
            &format!("{label}: each tool call ran at most once"),
            seen.values().all(|n| *n == 1),
            || format!("{seen:?}"),
        );
        let inspect = self.env.run(&["inspect", "--json"]);
        let snapshot: Value = serde_json::from_slice(&inspect.stdout).unwrap_or(Value::Null);
        tally.check(
            &format!("{label}: nothing left claimed or waiting"),
            snapshot["claims"] == json!([]) && snapshot["wakes"] == json!([]),
            || snapshot.to_string(),
        );
        let users = user_texts(&self.env);
        for sent in &self.sent {
            let n = users.iter().filter(|t| **t == sent.prompt).count();
            let ok = if sent.acknowledged { n == 1 } else { n <= 1 };
            tally.check(
                &format!(
                    "{label}: {} {:?} in the file {}",
                    if sent.acknowledged {
                        "acknowledged"
                    } else {
                        "sent"
                    },
                    sent.prompt,
                    if sent.acknowledged {
                        "once"
                    } else {
                        "at most once"
                    }
                ),
                ok,
                || format!("{n} times"),
            );
        }
    }
}

/// Every user message's text, across sessions.
fn user_texts(env: &Env) -> Vec<String> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(env.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    let mut stmt = conn
        .prepare("SELECT json_extract(data, '$.text') FROM session_message WHERE type = 'user'")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn campaign_many_processes_on_one_data_directory() {
    let seed = seed("STEWARD_CROWD_SEED");
    let runs: usize = std::env::var("STEWARD_CROWD_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    let started = Instant::now();
    for run in 0..runs {
        let mut crowd = Crowd::new(format!("crowd seed {seed} run {run}"));
        let actions = 10 + rng.below(8) as usize;
        for _ in 0..actions {
            let kill = |rng: &mut Rng| {
                (rng.below(3) == 0).then(|| Duration::from_millis(50 + rng.below(600)))
            };
            let choice = rng.below(13);
            // Shown with a failure: what the run did, in order.
            eprintln!("{}: action {choice}", crowd.label);
            match choice {
                0 | 1 => crowd.start_tui(&mut tally),
                2 | 3 => {
                    let k = kill(&mut rng);
                    crowd.tui_prompt(&mut tally, k);
                }
                4 => crowd.quit_tui(&mut tally),
                5 => crowd.start_acp(),
                6 | 7 => {
                    let k = kill(&mut rng);
                    crowd.acp_prompt(&mut tally, k);
                }
                8 => crowd.close_acp(&mut tally),
                9 => {
                    let k = kill(&mut rng);
                    crowd.run(&mut tally, k);
                }
                10 => {
                    if rng.below(2) == 0 {
                        crowd.recover(&mut tally);
                    } else {
                        let discard = rng.below(2) == 0;
                        crowd.act_on_waiting(&mut tally, discard);
                    }
                }
                11 => crowd.toggle_inspect(&mut tally),
                _ => crowd.foreign_reader(&mut tally),
            }
            // A foreign reader comes and goes between most steps.
            if rng.below(2) == 0 {
                crowd.foreign_reader(&mut tally);
            }
        }
        crowd.settle_and_check(&mut tally);
    }
    eprintln!(
        "crowd: {runs} runs (seed {seed}) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    tally.finish("crowd");
}
