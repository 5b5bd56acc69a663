//! Large history: the commands a person runs many times a day, on a file of 10,000
//! sessions and about 1,000,000 events, each beside the same command on a file of
//! about 10,000 events, measured in the same run (medians of interleaved runs of the
//! real binary). Each must stay within 2× of its small-file time — `doctor`, which
//! replays every event, within 2× per event — or this bench exits non-zero.
//! `cargo bench -p steward --bench history` (the files are built once, under
//! `target/bench-history/`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../../engine/benches/support/history.rs"]
mod history;
#[path = "../../engine/benches/support/table.rs"]
mod table;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use history::{History, Spec};

const RUNS: usize = 5;
/// How much slower a command may be on the large file.
const RATIO: f64 = 2.0;

const SMALL: Spec = Spec {
    name: "small",
    sessions: 24,
    turns: 9,
    long_messages: 2_000,
};
const LARGE: Spec = Spec {
    name: "large",
    sessions: 9_999,
    turns: 9,
    long_messages: 2_000,
};

fn steward() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_steward"));
    for var in [
        "STEWARD_DATA_DIR",
        "STEWARD_CONFIG",
        "STEWARD_LOG",
        "FAILPOINTS",
        "XDG_DATA_HOME",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// `steward run --dir work hello` on `data`, started.
fn run_hello(data: &Path, config: &Path, work: &Path) -> std::process::Child {
    steward_on(data, config)
        .args(["run", "--dir"])
        .arg(work)
        .arg("hello")
        .spawn()
        .unwrap()
}

/// `steward --data-dir data --config config`.
fn steward_on(data: &Path, config: &Path) -> Command {
    let mut cmd = steward();
    cmd.arg("--data-dir").arg(data).arg("--config").arg(config);
    cmd
}

/// Runs `args` on `data` and returns its wall time.
fn time(data: &Path, config: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let output = steward_on(data, config).args(args).output().unwrap();
    let took = start.elapsed();
    assert!(
        output.status.success(),
        "steward {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    took
}

/// An OpenAI-compatible server on loopback that answers every request with a short
/// streamed reply, and tells when each request arrived.
fn provider() -> (u16, mpsc::Receiver<Instant>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (arrived, arrivals) = mpsc::channel();
    // While set, a request is held unanswered: it stays in flight until Steward
    // is killed.
    let hold = Arc::new(AtomicBool::new(false));
    let holding = hold.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The request: headers, then a body of Content-Length bytes.
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            // Arrived: the whole request has been read.
            let _ = arrived.send(Instant::now());
            if holding.load(Ordering::SeqCst) {
                held.push(stream);
                continue;
            }
            let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}]}\n\n\
                        data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                        data: [DONE]\n\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, arrivals, hold)
}

/// On `data`: `steward run` killed (SIGKILL) with its provider request in flight,
/// then the relaunch — `steward recover`, which continues the interrupted session —
/// to the continuation's provider request, after which the answer streams at once.
fn relaunch(
    data: &Path,
    config: &Path,
    work: &Path,
    arrivals: &mpsc::Receiver<Instant>,
    hold: &AtomicBool,
) -> Duration {
    killed_run(data, config, work, arrivals, hold);
    let start = Instant::now();
    let mut child = steward_on(data, config).arg("recover").spawn().unwrap();
    let arrived = arrivals
        .recv_timeout(Duration::from_secs(60))
        .expect("no continuation request");
    let status = child.wait().unwrap();
    assert!(status.success(), "steward recover failed");
    arrived - start
}

/// On `data`: `steward run` killed (SIGKILL) with its provider request in flight,
/// then the relaunch an editor makes — `steward acp`, `initialize` and `session/load`
/// of the interrupted session, sent at once — to the continuation's first streamed
/// text (the `agent_message_chunk` carrying the server's answer).
fn relaunch_to_text(
    data: &Path,
    config: &Path,
    work: &Path,
    arrivals: &mpsc::Receiver<Instant>,
    hold: &AtomicBool,
) -> Duration {
    use std::io::{BufRead, BufReader};
    let session = killed_run(data, config, work, arrivals, hold);
    let start = Instant::now();
    let mut child = steward_on(data, config)
        .arg("acp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"session/load","params":{{"sessionId":"{session}","cwd":"{}","mcpServers":[]}}}}"#,
        work.display()
    )
    .unwrap();
    // Read on a thread, so that a continuation that never streams fails the bench
    // instead of hanging it.
    let stdout = child.stdout.take().unwrap();
    let (texted, text) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("\"error\"") {
                let _ = texted.send(Err(line));
                return;
            }
            let message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "agent_message_chunk"
                && update["content"]["text"]
                    .as_str()
                    .is_some_and(|text| text.trim_start() == "ok")
            {
                let _ = texted.send(Ok(Instant::now()));
                return;
            }
        }
        let _ = texted.send(Err("steward acp ended".into()));
    });
    let arrived = text.recv_timeout(Duration::from_secs(60));
    drop(stdin);
    if arrived.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    match arrived {
        Ok(Ok(at)) => at - start,
        Ok(Err(line)) => panic!("no streamed text: {line}"),
        Err(_) => panic!("no streamed text within 60 s"),
    }
}

/// On `data`: `steward run --json` killed (SIGKILL) with its provider request held
/// in flight; returns its session.
fn killed_run(
    data: &Path,
    config: &Path,
    work: &Path,
    arrivals: &mpsc::Receiver<Instant>,
    hold: &AtomicBool,
) -> String {
    use std::io::{BufRead, BufReader};
    while arrivals.try_recv().is_ok() {}
    hold.store(true, Ordering::SeqCst);
    let mut child = steward_on(data, config)
        .args(["run", "--json", "--dir"])
        .arg(work)
        .arg("hello")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Read while it runs: the rest of its output goes to an open pipe.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("steward run printed nothing").unwrap();
    let event: serde_json::Value = serde_json::from_str(&first).unwrap();
    let drain = std::thread::spawn(move || lines.for_each(drop));
    arrivals
        .recv_timeout(Duration::from_secs(60))
        .expect("no provider request");
    child.kill().unwrap();
    let _ = drain.join();
    child.wait().unwrap();
    hold.store(false, Ordering::SeqCst);
    event["session_id"].as_str().unwrap().to_string()
}

/// `steward run` to its first provider request.
fn first_request(
    data: &Path,
    config: &Path,
    work: &Path,
    arrivals: &mpsc::Receiver<Instant>,
) -> Duration {
    while arrivals.try_recv().is_ok() {}
    let start = Instant::now();
    let mut child = run_hello(data, config, work);
    let arrived = arrivals
        .recv_timeout(Duration::from_secs(60))
        .expect("no provider request");
    let status = child.wait().unwrap();
    assert!(status.success(), "steward run failed");
    arrived - start
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    eprintln!("building the history files (once; cached under target/bench-history)…");
    let small = history::data_dir(&target, SMALL);
    let large = history::data_dir(&target, LARGE);
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (port, arrivals, hold) = provider();
    let config = scratch.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nname = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"bench\"\nmax_attempts = 1\n"
        ),
    )
    .unwrap();
    println!(
        "large history: {} sessions, {} events, {:.0} MB — beside {} sessions, {} events, {:.1} MB",
        large.sessions,
        large.events,
        large.bytes as f64 / 1e6,
        small.sessions,
        small.events,
        small.bytes as f64 / 1e6
    );
    let (small_copy, large_copy) = (scratch.path().join("small"), scratch.path().join("large"));
    for (from, to) in [
        (&small.data_dir, &small_copy),
        (&large.data_dir, &large_copy),
    ] {
        std::fs::create_dir_all(to).unwrap();
        std::fs::copy(from.join("steward.db"), to.join("steward.db")).unwrap();
    }
    let show = |h: &History| vec!["show".to_string(), h.long_session.clone()];
    type Case<'a> = (&'a str, Box<dyn Fn(&History) -> Duration + 'a>);
    let cases: Vec<Case> = vec![
        (
            "sessions",
            Box::new(|h: &History| time(&h.data_dir, &config, &["sessions"])),
        ),
        (
            "show (2,000 messages)",
            Box::new(|h: &History| {
                let args = show(h);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                time(&h.data_dir, &config, &args)
            }),
        ),
        (
            "inspect --json",
            Box::new(|h: &History| time(&h.data_dir, &config, &["inspect", "--json"])),
        ),
        (
            "run to first provider request",
            // On a copy: each run adds a session, and the cached files stay as built.
            Box::new(|h: &History| {
                let copy = if h.data_dir == small.data_dir {
                    &small_copy
                } else {
                    &large_copy
                };
                first_request(copy, &config, &work, &arrivals)
            }),
        ),
        (
            "doctor",
            Box::new(|h: &History| time(&h.data_dir, &config, &["doctor"])),
        ),
    ];
    println!(
        "{:<32} {:>12} {:>12} {:>8} {:>8}",
        "command", "small (ms)", "large (ms)", "ratio", "limit"
    );
    let mut failed = Vec::new();
    for (name, run) in &cases {
        // One warm-up each, then interleaved runs.
        run(&small);
        run(&large);
        let (mut s, mut l) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            s.push(run(&small));
            l.push(run(&large));
        }
        let (s, l) = (median(s), median(l));
        let (ratio, what, unit, value, base) = if *name == "doctor" {
            // Per event: its replay reads every one.
            let (per_small, per_large) =
                (s * 1e3 / small.events as f64, l * 1e3 / large.events as f64);
            (
                per_large / per_small,
                "doctor per event",
                "µs",
                per_large,
                per_small,
            )
        } else {
            (l / s, *name, "ms", l, s)
        };
        println!("{what:<32} {s:>12.1} {l:>12.1} {ratio:>8.2} {RATIO:>8.1}");
        table::row(
            "large history",
            what,
            value,
            unit,
            Some(("same on 10k events", base)),
            table::Limit::RatioAtMost(RATIO),
        );
        if ratio > RATIO {
            failed.push(format!("{what}: {ratio:.2}× the small file's"));
        }
    }
    // Opening the long conversation over ACP, in a process already running,
    // beside a whole `show --json` process reading and printing the same.
    let show_json = |h: &History| {
        time(
            &h.data_dir,
            &config,
            &["show", h.long_session.as_str(), "--json"],
        )
    };
    let (mut loads, mut shows) = (Vec::new(), Vec::new());
    load(&small.data_dir, &config, &small.long_session, &work);
    show_json(&small);
    for _ in 0..RUNS {
        loads.push(load(&small.data_dir, &config, &small.long_session, &work));
        shows.push(show_json(&small));
    }
    let (l, s) = (median(loads), median(shows));
    println!(
        "{:<32} {s:>12.1} {l:>12.1} {:>8.2} {:>8.1}",
        "session/load vs show --json",
        l / s,
        1.0
    );
    table::row(
        "acp",
        "session/load (2,000 messages)",
        l,
        "ms",
        Some(("show --json, same session", s)),
        table::Limit::RatioAtMost(1.0),
    );
    // A relaunch after kill -9, on the large file beside the small one (each on its
    // copy: every run adds an interrupted session): to the continuation's provider
    // request, and as an editor sees it, to the continuation's first text.
    type Relaunch = fn(&Path, &Path, &Path, &mpsc::Receiver<Instant>, &AtomicBool) -> Duration;
    let relaunches: [(&str, &str, Relaunch); 2] = [
        (
            "relaunch to continuation",
            "relaunch after kill -9 to continuation request",
            relaunch,
        ),
        (
            "relaunch to first text (acp)",
            "relaunch after kill -9 to first streamed text (acp)",
            relaunch_to_text,
        ),
    ];
    for (short, what, measure) in relaunches {
        let run = |data: &Path| measure(data, &config, &work, &arrivals, &hold);
        run(&small_copy);
        run(&large_copy);
        let (mut smalls, mut larges) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            smalls.push(run(&small_copy));
            larges.push(run(&large_copy));
        }
        let (s, l) = (median(smalls), median(larges));
        println!(
            "{short:<32} {s:>12.1} {l:>12.1} {:>8.2} {:>8.1}",
            l / s,
            RATIO
        );
        table::row(
            "large history",
            what,
            l,
            "ms",
            Some(("same on 10k events", s)),
            table::Limit::AtMostAndRatioAtMost(100.0, RATIO),
        );
        if l > 100.0 || l / s > RATIO {
            failed.push(format!("{what}: {l:.1} ms, {:.2}× the small file's", l / s));
        }
    }
    if !failed.is_empty() {
        eprintln!("over the limit: {}", failed.join("; "));
        std::process::exit(1);
    }
}

/// `session/load` of `session` in a `steward acp` already running on `data`: from
/// the request to its answer, every update of the replay read on the way.
fn load(data: &Path, config: &Path, session: &str, work: &Path) -> Duration {
    use std::io::{BufRead, BufReader};
    let mut child = steward_on(data, config)
        .arg("acp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answer = |id: i64| -> usize {
        let mut updates = 0;
        loop {
            let line = lines.next().expect("steward acp ended").unwrap();
            if line.contains("\"session/update\"") {
                updates += 1;
            } else if line.starts_with(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},"))
                || line.contains(&format!("\"id\":{id},\"result\""))
                || line.contains(&format!("\"id\":{id},\"error\""))
            {
                assert!(!line.contains("\"error\""), "{line}");
                return updates;
            }
        }
    };
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":1}}}}"#
    )
    .unwrap();
    answer(1);
    let start = Instant::now();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"session/load","params":{{"sessionId":"{session}","cwd":"{}","mcpServers":[]}}}}"#,
        work.display()
    )
    .unwrap();
    let updates = answer(2);
    let took = start.elapsed();
    assert!(updates >= 2_000, "{updates} updates replayed");
    drop(stdin);
    let _ = child.wait();
    took
}
