//! The terminal interface as a person meets it, measured on the real binary in a
//! pseudo-terminal (120×40): launch to first frame on the large history file
//! (10,000 sessions, about a million events) beside the small one, the peak
//! resident memory of that launch, and the CPU an idle screen uses over 60 s with
//! 100 sessions. `cargo bench -p steward --bench tui`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../../engine/benches/support/history.rs"]
mod history;
#[path = "../../engine/benches/support/table.rs"]
mod table;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use history::Spec;

const ROWS: u16 = 40;
const COLS: u16 = 120;
const LAUNCHES: usize = 5;
const IDLE: Duration = Duration::from_secs(60);

/// `steward` in a pseudo-terminal, and its screen.
struct Screen {
    pty: Arc<pty_process::blocking::Pty>,
    child: std::process::Child,
    parser: Arc<Mutex<vt100::Parser>>,
}

impl Screen {
    fn start(data: &Path, home: &Path) -> Screen {
        let (pty, pts) = pty_process::blocking::open().unwrap();
        pty.resize(pty_process::Size::new(ROWS, COLS)).unwrap();
        let mut cmd = pty_process::blocking::Command::new(env!("CARGO_BIN_EXE_steward"))
            .arg("--data-dir")
            .arg(data)
            .current_dir(home)
            .env("HOME", home)
            .env("TERM", "xterm-256color");
        for var in [
            "STEWARD_DATA_DIR",
            "STEWARD_CONFIG",
            "FAILPOINTS",
            "NO_COLOR",
        ] {
            cmd = cmd.env_remove(var);
        }
        let child = cmd.spawn(pts).unwrap();
        let pty = Arc::new(pty);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(
            std::num::NonZeroU16::new(ROWS).unwrap(),
            std::num::NonZeroU16::new(COLS).unwrap(),
            0,
        )));
        {
            let (pty, parser) = (pty.clone(), parser.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = (&*pty).read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    parser.lock().unwrap().process(&buf[..n]);
                }
            });
        }
        Screen { pty, child, parser }
    }

    fn shows(&self, needle: &str) -> bool {
        let parser = self.parser.lock().unwrap();
        parser.screen().contents().contains(needle)
    }

    /// Waits until the screen shows `needle`; how long that took from `since`.
    fn wait_for(&self, needle: &str, since: Instant) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.shows(needle) {
            assert!(
                Instant::now() < deadline,
                "the screen never showed {needle:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        since.elapsed()
    }

    fn quit(mut self) {
        (&*self.pty).write_all(b"\x03").unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "steward did not quit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn proc(&self, file: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{file}", self.child.id())).unwrap_or_default()
    }

    /// Peak resident memory, in MB.
    fn peak_rss_mb(&self) -> f64 {
        self.proc("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    /// CPU time used so far (user + system, every thread), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = self.proc("stat");
        // Fields after the command name (which is in parentheses).
        let after = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let at = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
        at(11) + at(12)
    }
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target");
    eprintln!("building the history files (once; cached under target/bench-history)…");
    let small = history::data_dir(
        &target,
        Spec {
            name: "small",
            sessions: 24,
            turns: 9,
            long_messages: 2_000,
        },
    );
    let large = history::data_dir(
        &target,
        Spec {
            name: "large",
            sessions: 9_999,
            turns: 9,
            long_messages: 2_000,
        },
    );
    let hundred = history::data_dir(
        &target,
        Spec {
            name: "hundred",
            sessions: 99,
            turns: 9,
            long_messages: 30,
        },
    );
    let home = tempfile::tempdir().unwrap();

    // Launch to first frame, interleaved.
    let (mut s, mut l) = (Vec::new(), Vec::new());
    let mut peak = 0.0f64;
    for _ in 0..LAUNCHES {
        for (data, out) in [(&small.data_dir, &mut s), (&large.data_dir, &mut l)] {
            let start = Instant::now();
            let screen = Screen::start(data, home.path());
            out.push(screen.wait_for(" Sessions ", start));
            if data == &large.data_dir {
                // Once the launch has settled (recovery, the first loads): the
                // high-water mark then covers all of it.
                std::thread::sleep(Duration::from_millis(500));
                peak = peak.max(screen.peak_rss_mb());
            }
            screen.quit();
        }
    }
    let (s, l) = (median(s), median(l));
    println!(
        "launch to first frame: {l:.1} ms on {} sessions / {:.0} MB, {s:.1} ms on {} sessions (target 100, bar 150)",
        large.sessions,
        large.bytes as f64 / 1e6,
        small.sessions
    );
    table::row(
        "terminal interface",
        "launch to first frame, large history",
        l,
        "ms",
        Some(("same on 10k events", s)),
        table::Limit::Below {
            target: 100.0,
            bar: 150.0,
        },
    );
    println!("peak resident memory of that launch: {peak:.1} MB (target < 50)");
    table::row(
        "terminal interface",
        "peak RSS, large history",
        peak,
        "MB",
        None,
        table::Limit::Below {
            target: 50.0,
            bar: 50.0,
        },
    );

    // An idle screen over a minute.
    let screen = Screen::start(&hundred.data_dir, home.path());
    screen.wait_for(" Sessions ", Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let before = screen.cpu_ticks();
    std::thread::sleep(IDLE);
    let used = screen.cpu_ticks() - before;
    screen.quit();
    // Clock ticks are 1/100 s on Linux.
    let percent = used as f64 / 100.0 / IDLE.as_secs_f64() * 100.0;
    println!(
        "idle CPU over {} s with {} sessions: {percent:.2} % of a core (target < 0.5)",
        IDLE.as_secs(),
        hundred.sessions
    );
    table::row(
        "terminal interface",
        "idle CPU, 100 sessions, 60 s",
        percent,
        "% core",
        None,
        table::Limit::Below {
            target: 0.5,
            bar: 0.5,
        },
    );
}
