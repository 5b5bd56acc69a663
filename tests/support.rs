//! Helpers for driving the real binary against real files.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// The `steward` binary under test.
pub fn steward_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| pinned("steward", env!("CARGO_BIN_EXE_steward")))
}

/// The test helper binary (built with the `test-helper` feature).
pub fn helper_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        pinned(
            "steward-test-helper",
            env!("CARGO_BIN_EXE_steward-test-helper"),
        )
    })
}

/// `built`, or its copy in `STEWARD_TEST_BINS` when that names a directory: a long
/// run (the torture's thousands of runs) keeps testing the binaries it started with
/// while the tree is rebuilt.
fn pinned(name: &str, built: &str) -> String {
    match std::env::var_os("STEWARD_TEST_BINS") {
        Some(dir) => Path::new(&dir).join(name).to_string_lossy().into_owned(),
        None => built.to_string(),
    }
}

/// A private home and data directory for one test.
pub struct Env {
    pub root: TempDir,
    pub home: PathBuf,
    pub data: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let root = tempfile::Builder::new()
            .prefix("steward-test-")
            .tempdir()
            .unwrap();
        let home = root.path().join("home");
        let data = root.path().join("data");
        std::fs::create_dir_all(&home).unwrap();
        Env { root, home, data }
    }

    pub fn db(&self) -> PathBuf {
        self.data.join("steward.db")
    }

    /// `steward --data-dir <data> ...` with a private HOME and no inherited settings.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(steward_bin());
        isolate(&mut cmd, &self.home);
        cmd.arg("--data-dir").arg(&self.data);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }
}

fn isolate(cmd: &mut Command, home: &Path) {
    cmd.env("HOME", home);
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
}

/// Runs `cmd` as an unprivileged user when the tests run as root, so that file
/// permissions apply to it. Returns false when that is impossible.
pub fn unprivileged(cmd: &mut Command) {
    if is_root() {
        cmd.uid(65534).gid(65534);
    }
}

pub fn is_root() -> bool {
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().metadata().unwrap().uid() == 0
}

/// Every file under `dir` (recursively) with its bytes, and every directory.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.strip_prefix(base).unwrap().display().to_string();
            if path.is_dir() {
                out.insert(format!("{name}/"), Vec::new());
                walk(base, &path, out);
            } else {
                out.insert(
                    name,
                    std::fs::read(&path).unwrap_or_else(|_| b"<unreadable>".to_vec()),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

/// Pids of live (non-zombie) processes whose command line mentions `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s[s.rfind(')').unwrap_or(0) + 1..]
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            out.push(pid);
        }
    }
    out
}

/// Polls `check` every 20 ms until it holds or `limit` passes.
pub fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    check()
}

/// Sends `signal` (e.g. "KILL", "INT", "STOP") to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Whether process `pid` holds a POSIX lock on the file at `path` (from
/// `/proc/locks`). A process with a WAL-mode SQLite connection to a database holds a
/// shared lock on it for as long as the connection is open; without it, another
/// process's close takes itself for the last one and deletes the log (protocol §2.8).
pub fn holds_posix_lock(pid: u32, path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let (pid, ino) = (pid.to_string(), meta.ino().to_string());
    // `/proc/locks` is generated as it is read: a read in several chunks while
    // other processes take and drop locks can skip a line. A lock seen once is held;
    // one missed three times over is not.
    (0..3).any(|_| {
        std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .lines()
            .any(|line| {
                // "2: POSIX  ADVISORY  READ 1234 fe:00:5678 1073741826 1073742335"
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(1) == Some(&"POSIX")
                    && fields.get(4) == Some(&pid.as_str())
                    && fields.get(5).and_then(|dev_ino| dev_ino.rsplit(':').next())
                        == Some(ino.as_str())
            })
    })
}

/// Pids of live (non-zombie) processes whose working directory is `dir`.
pub fn processes_in(dir: &Path) -> Vec<i32> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir) {
            out.push(pid);
        }
    }
    out
}
