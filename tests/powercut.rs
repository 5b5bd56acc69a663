//! The power-cut rig. A process crash leaves everything Steward handed the kernel;
//! a power cut leaves only what was synced. The real binary runs a workload with a
//! recorder preloaded (`tests/powercut/shim.c`, an `LD_PRELOAD` shim compiled here
//! with the C compiler the bundled SQLite already needs) that logs, in order, every
//! write, truncation, file and directory sync, creation, link, rename and removal in
//! the data directory. From that log the rig builds the files as a power cut after
//! operation N could have left them:
//!
//! - a file's bytes as of its last `fsync`/`fdatasync` before N, plus a seeded
//!   random subset of the writes and truncations since, each write whole or torn
//!   at 512-byte sector boundaries;
//! - a directory's names as of its last directory sync before N, plus a seeded
//!   random subset of the creations, links, renames and removals since (each may
//!   or may not have happened); the data directory's own name is durable only
//!   after its parent was synced.
//!
//! An acknowledgement counts from the moment Steward wrote it: the recorder logs
//! every write to the acknowledging process's standard output (a `run --json` line,
//! an ACP response, the bytes that draw the terminal's screen) in the same order as
//! the file operations, and the rig finds the write that carried each one — the
//! line, the `end_turn` response, the first frame whose screen shows the answer.
//! Every operation before that write must have been made durable by it. A state
//! with a write-ahead log may also get a stale `-shm` index of random bytes, as a
//! cut leaves the index that was never synced.
//!
//! Points: right after every sync, and random points between, sampled down to
//! `STEWARD_POWERCUT_STATES` per workload (14 in CI). Each state is opened
//! with the real binary — `doctor`, `recover`, `doctor` again — and must be accepted
//! (or refused untouched, exit 3, with nothing acknowledged lost), keep every
//! invariant, and hold everything Steward acknowledged before the point: every
//! `run --json` event line, every ACP `end_turn`'s prompt and answer, every turn
//! whose answer the terminal interface showed, a recovery
//! pass's report (protocol §2.9). `STEWARD_POWERCUT_STATES` (states per workload)
//! and `STEWARD_POWERCUT_SEED` lengthen or replay it; the summary line goes to
//! `target/campaign-summary.txt`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::{Value, json};

use crate::campaign::{Rng, seed};
use crate::support::{Env, code, helper_bin, stderr, stdout};

/// The recorder, compiled once per test process beside the test binary.
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/powercut/shim.c");
        let dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let out = dir.join("steward-powercut-shim.so");
        let temp = dir.join(format!("steward-powercut-shim.so.{}", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
            .arg(&temp)
            .arg(source)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("the C compiler {cc} (as for the bundled SQLite): {e}"));
        assert!(built.status.success(), "{}", stderr(&built));
        std::fs::rename(&temp, &out).unwrap();
        out
    })
}

/// One recorded operation; paths are relative to the recording's root (the data
/// directory is `data`).
#[derive(Clone, Debug)]
enum Op {
    Write {
        ino: u64,
        off: u64,
        bytes: Vec<u8>,
    },
    Truncate {
        ino: u64,
        size: u64,
    },
    Sync {
        ino: u64,
    },
    DirSync(String),
    Create {
        ino: u64,
        path: String,
    },
    Mkdir(String),
    Link(String, String),
    Rename(String, String),
    Unlink(String),
    Rmdir(String),
    /// Write number `n` of process `pid` to its standard output begins.
    Output {
        pid: u32,
        n: u64,
    },
    /// ... and carried these bytes.
    Carried {
        pid: u32,
        n: u64,
        bytes: Vec<u8>,
    },
}

impl Op {
    fn is_sync(&self) -> bool {
        matches!(self, Op::Sync { .. } | Op::DirSync(_))
    }
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.as_bytes()
        .chunks(2)
        .map(|p| Some((digit(p[0])? << 4) | digit(p[1])?))
        .collect()
}

/// What Steward acknowledged, to be found in every state cut after it.
#[derive(Clone, Debug)]
enum Ack {
    /// A `run --json` line: this event, as printed.
    Event {
        session: String,
        seq: i64,
        kind: String,
        data: Value,
    },
    /// An ACP `end_turn` or a turn's answer on the terminal: the prompt admitted
    /// once, and its answer's text; every event of the turn up to `through` is
    /// required too (as [`Ack::Event`]s, taken from the final database).
    Turn {
        prompt: String,
        answer: String,
        through: Through,
    },
    /// A recovery pass's report: no claim and no wake left (and every event the
    /// final database holds, as [`Ack::Event`]s).
    Reconciled,
    /// A row of `schema_migration` in the file before the workload: the older file
    /// was migrated in place, not replaced.
    Migration {
        id: String,
        checksum: String,
        time_applied: i64,
    },
}

/// How far into its turn an acknowledgement vouches for the events.
#[derive(Clone, Copy, Debug)]
enum Through {
    /// The answer's text (the terminal shows committed events only).
    Answer,
    /// The turn's last `step.ended` (an ACP `end_turn`).
    End,
}

/// Every event in the database at `db`, in order: (session, seq, type, data).
fn events_in(db: &Path) -> Vec<(String, i64, String, Value)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT aggregate_id, seq, type, data FROM event ORDER BY aggregate_id, seq")
        .unwrap();
    stmt.query_map([], |r| {
        let data: String = r.get(3)?;
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            serde_json::from_str(&data).unwrap_or(Value::Null),
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The events of the session that admitted `prompt`, from its first through the
/// point of that turn `through` names. The turn ends at the session's next
/// admitted prompt: the workloads send a prompt only after the last one's turn
/// ended (a prompt queued mid-turn would end it early and demand less).
fn turn_events<'a>(
    events: &'a [(String, i64, String, Value)],
    prompt: &str,
    answer: &str,
    through: Through,
) -> Option<Vec<&'a (String, i64, String, Value)>> {
    let admitted = events
        .iter()
        .find(|(_, _, kind, data)| kind == "input.admitted" && data["prompt"] == prompt)?;
    let (session, from) = (&admitted.0, admitted.1);
    let of: Vec<_> = events.iter().filter(|e| &e.0 == session).collect();
    let until = of
        .iter()
        .find(|e| e.1 > from && e.2 == "input.admitted")
        .map_or(i64::MAX, |e| e.1);
    let mut within = of.iter().filter(|e| e.1 > from && e.1 < until);
    let end = match through {
        Through::Answer => {
            within
                .find(|e| {
                    e.2 == "step.text" && e.3["text"].as_str().is_some_and(|t| t.contains(answer))
                })?
                .1
        }
        Through::End => within.filter(|e| e.2 == "step.ended").map(|e| e.1).max()?,
    };
    Some(of.into_iter().filter(|e| e.1 <= end).collect())
}

fn event_ack((session, seq, kind, data): &(String, i64, String, Value)) -> Ack {
    Ack::Event {
        session: session.clone(),
        seq: *seq,
        kind: kind.clone(),
        data: data.clone(),
    }
}

/// How an acknowledgement shows in the standard output of the process that made it.
#[derive(Clone, Debug)]
enum Shown {
    /// These bytes (a `run --json` line, a recovery report).
    Bytes(Vec<u8>),
    /// An ACP response to the request with this id, ending the turn.
    EndTurn(Value),
    /// The terminal's screen shows this text.
    Screen(String),
}

/// One process's standard output as the recorder logged it.
struct Stream {
    bytes: Vec<u8>,
    screen: vt100::Parser,
    /// Where each write began in the log: the operations before it are durable
    /// by the time its bytes can be read.
    begun: BTreeMap<u64, usize>,
}

impl Stream {
    fn new() -> Stream {
        Stream {
            bytes: Vec::new(),
            screen: vt100::Parser::new(
                std::num::NonZeroU16::new(crate::tui::ROWS).unwrap(),
                std::num::NonZeroU16::new(crate::tui::COLS).unwrap(),
                0,
            ),
            begun: BTreeMap::new(),
        }
    }

    /// Whether `shown` appears once the bytes from `before` on were added.
    fn shows(&self, shown: &Shown, before: usize) -> bool {
        match shown {
            Shown::Bytes(needle) => self.bytes[before.saturating_sub(needle.len())..]
                .windows(needle.len().max(1))
                .any(|w| w == needle.as_slice()),
            Shown::EndTurn(id) => {
                let start = self.bytes[..before]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                self.bytes[start..]
                    .split_inclusive(|b| *b == b'\n')
                    .filter(|line| line.ends_with(b"\n"))
                    .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
                    .any(|m| {
                        m["id"] == *id
                            && m.get("method").is_none()
                            && m["result"]["stopReason"] == "end_turn"
                    })
            }
            Shown::Screen(text) => self
                .screen
                .screen()
                .rows(0, crate::tui::COLS)
                .collect::<Vec<_>>()
                .join("\n")
                .contains(text.as_str()),
        }
    }
}

/// A workload run under the recorder.
struct Recording {
    name: &'static str,
    env: Env,
    log: PathBuf,
    /// The data directory's files before the workload (taken as durable).
    baseline: Vec<(String, u64, Vec<u8>)>,
    baseline_dirs: Vec<String>,
    /// What the file held before the workload: due at every point (its events and
    /// migration rows).
    baseline_acks: Vec<Ack>,
    /// What each process acknowledged, as its output shows it.
    shown: Vec<(u32, Shown, Ack)>,
}

impl Recording {
    fn new(name: &'static str, env: Env) -> Recording {
        let log = env.root.path().join("powercut.log");
        // Read before the files are taken: a reader may leave an empty log beside
        // the database, which then belongs to the baseline too.
        let mut baseline_acks = Vec::new();
        if env.db().exists() {
            baseline_acks.extend(events_in(&env.db()).iter().map(event_ack));
            let conn = rusqlite::Connection::open_with_flags(
                env.db(),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            let mut stmt = conn
                .prepare("SELECT id, checksum, time_applied FROM schema_migration")
                .unwrap();
            let rows = stmt
                .query_map([], |r| {
                    Ok(Ack::Migration {
                        id: r.get(0)?,
                        checksum: r.get(1)?,
                        time_applied: r.get(2)?,
                    })
                })
                .unwrap();
            baseline_acks.extend(rows.map(Result::unwrap));
        }
        let mut baseline = Vec::new();
        let mut baseline_dirs = Vec::new();
        fn walk(
            root: &Path,
            dir: &Path,
            files: &mut Vec<(String, u64, Vec<u8>)>,
            dirs: &mut Vec<String>,
        ) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            dirs.push(dir.strip_prefix(root).unwrap().display().to_string());
            for entry in entries.flatten() {
                let path = entry.path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    walk(root, &path, files, dirs);
                } else if !path.to_string_lossy().ends_with("-shm") {
                    let rel = path.strip_prefix(root).unwrap().display().to_string();
                    files.push((rel, meta.ino(), std::fs::read(&path).unwrap()));
                }
            }
        }
        walk(
            env.root.path(),
            &env.data,
            &mut baseline,
            &mut baseline_dirs,
        );
        Recording {
            name,
            env,
            log,
            baseline,
            baseline_dirs,
            baseline_acks,
            shown: Vec::new(),
        }
    }

    /// The recorder's environment, for a process started by other means.
    fn preload(&self) -> [(&'static str, String); 3] {
        [
            ("LD_PRELOAD", shim().display().to_string()),
            ("POWERCUT_WATCH", self.env.data.display().to_string()),
            ("POWERCUT_LOG", self.log.display().to_string()),
        ]
    }

    /// `cmd` with the recorder preloaded.
    fn record<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.preload())
    }

    /// Operations logged so far.
    fn ops_now(&self) -> usize {
        std::fs::read(&self.log)
            .map(|b| b.iter().filter(|c| **c == b'\n').count())
            .unwrap_or(0)
    }

    /// Process `pid` acknowledged `ack` by writing what `shown` describes.
    fn acknowledge(&mut self, pid: u32, shown: Shown, ack: Ack) {
        self.shown.push((pid, shown, ack));
    }

    /// Each acknowledgement with the number of operations logged before the write
    /// that carried it. Panics when the log holds no such write: the test saw what
    /// the recorder did not.
    fn acks(&self, ops: &[Op]) -> Vec<(usize, Ack)> {
        let mut streams: BTreeMap<u32, Stream> = BTreeMap::new();
        let mut found: Vec<Option<usize>> = vec![None; self.shown.len()];
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Output { pid, n } => {
                    streams
                        .entry(*pid)
                        .or_insert_with(Stream::new)
                        .begun
                        .insert(*n, i);
                }
                Op::Carried { pid, n, bytes } => {
                    let Some(stream) = streams.get_mut(pid) else {
                        continue;
                    };
                    let begun = stream.begun[n];
                    let before = stream.bytes.len();
                    stream.bytes.extend_from_slice(bytes);
                    stream.screen.process(bytes);
                    for (k, (of, shown, _)) in self.shown.iter().enumerate() {
                        if of == pid && found[k].is_none() && stream.shows(shown, before) {
                            found[k] = Some(begun);
                        }
                    }
                }
                _ => {}
            }
        }
        let mut acks: Vec<(usize, Ack)> =
            self.baseline_acks.iter().map(|a| (0, a.clone())).collect();
        let last = events_in(&self.env.db());
        for ((pid, shown, ack), at) in self.shown.iter().zip(found) {
            let at = at.unwrap_or_else(|| {
                panic!(
                    "{}: process {pid} acknowledged {ack:?} ({shown:?}) but its output in the log never shows it",
                    self.name
                )
            });
            match ack {
                Ack::Turn {
                    prompt,
                    answer,
                    through,
                } => {
                    let turn = turn_events(&last, prompt, answer, *through).unwrap_or_else(|| {
                        panic!("{}: the final database has no turn {prompt:?}", self.name)
                    });
                    acks.extend(turn.into_iter().map(|e| (at, event_ack(e))));
                }
                Ack::Reconciled => acks.extend(last.iter().map(|e| (at, event_ack(e)))),
                _ => {}
            }
            acks.push((at, ack.clone()));
        }
        acks
    }

    /// `steward run --json --yes`, each event line acknowledged as it is read;
    /// returns the session.
    fn run_json(&mut self, args: &[&str], prompt: &str) -> String {
        let mut cmd = self.env.cmd();
        self.record(&mut cmd)
            .args(["run", "--json", "--yes"])
            .args(args)
            .arg(prompt)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let mut session = String::new();
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            let event: Value = serde_json::from_str(&line).unwrap();
            if let (Some(s), Some(seq)) = (event["session_id"].as_str(), event["seq"].as_i64()) {
                session = s.to_string();
                self.acknowledge(
                    pid,
                    Shown::Bytes(format!("{line}\n").into_bytes()),
                    Ack::Event {
                        session: s.to_string(),
                        seq,
                        kind: event["type"].as_str().unwrap().to_string(),
                        data: event["data"].clone(),
                    },
                );
            }
        }
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}: the run failed: {}",
            self.name,
            stderr(&output)
        );
        session
    }

    fn ops(&self) -> Vec<Op> {
        // The recorder logs paths resolved through symlinks.
        let top = std::fs::canonicalize(self.env.root.path())
            .unwrap()
            .display()
            .to_string();
        let root = format!("{top}/");
        let rel = |p: &str| {
            if p == top {
                String::new()
            } else {
                p.strip_prefix(&root).unwrap_or(p).to_string()
            }
        };
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let f: Vec<&str> = line.split('\t').collect();
                let num = |i: usize| f[i].parse::<u64>().unwrap();
                match f[0] {
                    "O" => Op::Output {
                        pid: num(1) as u32,
                        n: num(2),
                    },
                    "P" => Op::Carried {
                        pid: num(1) as u32,
                        n: num(2),
                        bytes: unhex(f[3]).expect("output bytes in hex"),
                    },
                    "W" => Op::Write {
                        ino: num(1),
                        off: num(2),
                        bytes: unhex(f[3]).unwrap_or_else(|| {
                            let fields: Vec<String> = f
                                .iter()
                                .map(|x| {
                                    format!(
                                        "{} bytes {:.60}…{}",
                                        x.len(),
                                        x,
                                        &x[x.len().saturating_sub(60)..]
                                    )
                                })
                                .collect();
                            let _ = std::fs::copy(
                                &self.log,
                                std::env::temp_dir().join("steward-powercut-bad.log"),
                            );
                            panic!(
                                "{}: a write's bytes in the log are not hex: {fields:#?}",
                                self.name,
                            )
                        }),
                    },
                    "T" => Op::Truncate {
                        ino: num(1),
                        size: num(2),
                    },
                    "S" => Op::Sync { ino: num(1) },
                    "D" => Op::DirSync(rel(f[1])),
                    "C" => Op::Create {
                        ino: num(1),
                        path: rel(f[2]),
                    },
                    "M" => Op::Mkdir(rel(f[1])),
                    "L" => Op::Link(rel(f[1]), rel(f[2])),
                    "R" => Op::Rename(rel(f[1]), rel(f[2])),
                    "U" => Op::Unlink(rel(f[1])),
                    "X" => Op::Rmdir(rel(f[1])),
                    other => panic!("unknown operation {other} in the log"),
                }
            })
            .collect()
    }
}

/// `dir/name` split at its last slash; the root is `""`.
fn split(path: &str) -> (String, String) {
    match path.rsplit_once('/') {
        Some((dir, name)) => (dir.to_string(), name.to_string()),
        None => (String::new(), path.to_string()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Node {
    File(usize),
    Dir,
}

#[derive(Clone, Debug)]
enum NameOp {
    Add(String, Node),
    Remove(String),
    Rename(String, String),
}

#[derive(Clone, Default)]
struct Dir {
    durable: BTreeMap<String, Node>,
    current: BTreeMap<String, Node>,
    pending: Vec<NameOp>,
}

#[derive(Clone, Default)]
struct File {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Writes (`Some(bytes)` at an offset) and truncations (`None`, to a size)
    /// since the last sync.
    pending: Vec<(u64, Option<Vec<u8>>)>,
}

fn put(buf: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    let off = off as usize;
    if buf.len() < off + bytes.len() {
        buf.resize(off + bytes.len(), 0);
    }
    buf[off..off + bytes.len()].copy_from_slice(bytes);
}

/// The file system as the recorded operations left it, durable and not.
struct Model {
    files: Vec<File>,
    inodes: BTreeMap<u64, usize>,
    dirs: BTreeMap<String, Dir>,
}

impl Model {
    fn new(rec: &Recording) -> Model {
        let mut model = Model {
            files: Vec::new(),
            inodes: BTreeMap::new(),
            dirs: BTreeMap::new(),
        };
        model.dirs.insert(String::new(), Dir::default());
        for dir in &rec.baseline_dirs {
            let (parent, name) = split(dir);
            model.dirs.entry(dir.clone()).or_default();
            let p = model.dirs.entry(parent).or_default();
            p.durable.insert(name.clone(), Node::Dir);
            p.current.insert(name, Node::Dir);
        }
        for (path, ino, bytes) in &rec.baseline {
            let i = model.files.len();
            model.files.push(File {
                durable: bytes.clone(),
                current: bytes.clone(),
                pending: Vec::new(),
            });
            model.inodes.insert(*ino, i);
            let (dir, name) = split(path);
            let d = model.dirs.entry(dir).or_default();
            d.durable.insert(name.clone(), Node::File(i));
            d.current.insert(name, Node::File(i));
        }
        model
    }

    fn file(&mut self, ino: u64) -> &mut File {
        let next = self.files.len();
        let i = *self.inodes.entry(ino).or_insert(next);
        if i == next {
            self.files.push(File::default());
        }
        &mut self.files[i]
    }

    fn name(&mut self, dir: &str, op: NameOp) {
        let d = self.dirs.entry(dir.to_string()).or_default();
        match &op {
            NameOp::Add(name, node) => {
                d.current.insert(name.clone(), *node);
            }
            NameOp::Remove(name) => {
                d.current.remove(name);
            }
            NameOp::Rename(from, to) => {
                if let Some(node) = d.current.remove(from) {
                    d.current.insert(to.clone(), node);
                }
            }
        }
        d.pending.push(op);
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Write { ino, off, bytes } => {
                let f = self.file(*ino);
                put(&mut f.current, *off, bytes);
                f.pending.push((*off, Some(bytes.clone())));
            }
            Op::Truncate { ino, size } => {
                let f = self.file(*ino);
                f.current.resize(*size as usize, 0);
                f.pending.push((*size, None));
            }
            Op::Sync { ino } => {
                let f = self.file(*ino);
                f.durable = f.current.clone();
                f.pending.clear();
            }
            Op::DirSync(path) => {
                let d = self.dirs.entry(path.clone()).or_default();
                d.durable = d.current.clone();
                d.pending.clear();
            }
            Op::Create { ino, path } => {
                // A new file (an inode number may be reused after a removal).
                let i = self.files.len();
                self.files.push(File::default());
                self.inodes.insert(*ino, i);
                let (dir, name) = split(path);
                self.name(&dir, NameOp::Add(name, Node::File(i)));
            }
            Op::Mkdir(path) => {
                self.dirs.entry(path.clone()).or_default();
                let (dir, name) = split(path);
                self.name(&dir, NameOp::Add(name, Node::Dir));
            }
            Op::Link(from, to) => {
                let (fd, fname) = split(from);
                let node = self
                    .dirs
                    .get(&fd)
                    .and_then(|d| d.current.get(&fname))
                    .copied();
                if let Some(node) = node {
                    let (dir, name) = split(to);
                    self.name(&dir, NameOp::Add(name, node));
                }
            }
            Op::Rename(from, to) => {
                let (fd, fname) = split(from);
                let (td, tname) = split(to);
                if fd == td {
                    self.name(&fd, NameOp::Rename(fname, tname));
                } else {
                    let node = self
                        .dirs
                        .get(&fd)
                        .and_then(|d| d.current.get(&fname))
                        .copied();
                    self.name(&fd, NameOp::Remove(fname));
                    if let Some(node) = node {
                        self.name(&td, NameOp::Add(tname, node));
                    }
                }
            }
            Op::Unlink(path) | Op::Rmdir(path) => {
                let (dir, name) = split(path);
                self.name(&dir, NameOp::Remove(name));
            }
            Op::Output { .. } | Op::Carried { .. } => {}
        }
    }

    /// A file's bytes after a cut: durable, plus a random subset of what followed,
    /// each write whole or torn at 512-byte sectors.
    fn cut_file(&self, i: usize, rng: &mut Rng) -> Vec<u8> {
        let f = &self.files[i];
        let mut bytes = f.durable.clone();
        for (at, write) in &f.pending {
            if rng.below(2) == 0 {
                continue;
            }
            match write {
                None => bytes.resize(*at as usize, 0),
                Some(data) if rng.below(2) == 0 => put(&mut bytes, *at, data),
                Some(data) => {
                    let mut pos = *at;
                    let end = at + data.len() as u64;
                    // Torn inside: a file system records a write's new size as a
                    // whole (its sectors may not all have reached the disk, and
                    // read as zeros), never a size partway through the write.
                    if (bytes.len() as u64) < end {
                        bytes.resize(end as usize, 0);
                    }
                    while pos < end {
                        let next = ((pos / 512) + 1) * 512;
                        let next = next.min(end);
                        if rng.below(2) == 0 {
                            let from = (pos - at) as usize;
                            let to = (next - at) as usize;
                            put(&mut bytes, pos, &data[from..to]);
                        }
                        pos = next;
                    }
                }
            }
        }
        bytes
    }

    /// A directory's names after a cut: durable, plus a random subset of the
    /// changes since (in their order).
    fn cut_dir(&self, path: &str, rng: &mut Rng) -> BTreeMap<String, Node> {
        let Some(d) = self.dirs.get(path) else {
            return BTreeMap::new();
        };
        let mut names = d.durable.clone();
        for op in &d.pending {
            if rng.below(2) == 0 {
                continue;
            }
            match op {
                NameOp::Add(name, node) => {
                    names.insert(name.clone(), *node);
                }
                NameOp::Remove(name) => {
                    names.remove(name);
                }
                NameOp::Rename(from, to) => {
                    if let Some(node) = names.remove(from) {
                        names.insert(to.clone(), node);
                    }
                }
            }
        }
        names
    }

    /// Writes the state a cut could leave under `root` (only the data directory's
    /// name is taken from the root's own entries).
    /// Returns whether it placed a stale index.
    fn materialize(&self, root: &Path, rng: &mut Rng) -> bool {
        let top = self.cut_dir("", rng);
        if top.get("data") == Some(&Node::Dir) {
            self.build("data", &root.join("data"), rng);
            // The index is never synced: a cut leaves whatever reached the disk.
            let wal = root.join("data/steward.db-wal");
            if wal.exists() && rng.below(2) == 0 {
                let stale: Vec<u8> = (0..32 * 1024).map(|_| rng.below(256) as u8).collect();
                std::fs::write(root.join("data/steward.db-shm"), stale).unwrap();
                return true;
            }
        }
        false
    }

    fn build(&self, rel: &str, at: &Path, rng: &mut Rng) {
        std::fs::create_dir_all(at).unwrap();
        for (name, node) in self.cut_dir(rel, rng) {
            match node {
                Node::File(i) => std::fs::write(at.join(&name), self.cut_file(i, rng)).unwrap(),
                Node::Dir => self.build(&format!("{rel}/{name}"), &at.join(&name), rng),
            }
        }
    }
}

/// A script and config every state is checked with: continuations answer plainly.
struct Checker {
    script: PathBuf,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Checker {
    fn new() -> Checker {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("check.toml");
        std::fs::write(
            &script,
            "[[step]]\ntext = [\"Carried on after the cut.\"]\n".repeat(64),
        )
        .unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, "").unwrap();
        Checker {
            script,
            config,
            _dir: dir,
        }
    }

    fn steward(&self, env: &Env, args: &[&str]) -> std::process::Output {
        env.cmd()
            .arg("--config")
            .arg(&self.config)
            .arg("--script")
            .arg(&self.script)
            .args(args)
            .output()
            .unwrap()
    }

    /// Opens a state with the real binary; every failure found. `seen` is told how
    /// the state was met and how many acknowledgements were found in it.
    fn check(&self, env: &Env, due: &[&Ack], seen: &mut Seen) -> Vec<String> {
        let mut failed = Vec::new();
        seen.outcome = Outcome::Opened;
        let files = || -> BTreeMap<String, Vec<u8>> {
            crate::support::snapshot(&env.data)
                .into_iter()
                .filter(|(n, _)| !n.ends_with("-shm") && !n.starts_with("logs"))
                .collect()
        };
        let before = files();
        let doctor = self.steward(env, &["doctor", "--json"]);
        match code(&doctor) {
            0 => {}
            // Invariants a recovery pass restores (an interrupted execution's open
            // tool call) on a file that opened: recovery comes next.
            1 if serde_json::from_str::<Value>(&stdout(&doctor))
                .is_ok_and(|r| r["quick_check"] == "ok") => {}
            // Cut before the database was linked into place: doctor creates
            // nothing and says so; nothing can have been acknowledged yet, and the
            // recovery pass next creates the file.
            1 if !env.db().exists() => {
                seen.outcome = Outcome::NoDatabase;
                if files() != before {
                    failed.push("doctor on a missing database changed the files".to_string());
                }
                if !due.is_empty() {
                    failed.push(format!(
                        "the database is gone though {} acknowledgements are due",
                        due.len()
                    ));
                    return failed;
                }
            }
            3 => {
                seen.outcome = Outcome::Refused;
                if files() != before {
                    seen.outcome = Outcome::Failed;
                    failed.push("refused (exit 3) but the files changed".to_string());
                }
                if !due.is_empty() {
                    failed.push(format!(
                        "refused a file for which {} acknowledgements are due: {}{}",
                        due.len(),
                        stdout(&doctor),
                        stderr(&doctor)
                    ));
                }
                return failed;
            }
            other => {
                seen.outcome = Outcome::Failed;
                failed.push(format!(
                    "doctor exited {other}: {}{}",
                    stdout(&doctor),
                    stderr(&doctor)
                ));
                return failed;
            }
        }
        if due.iter().any(|a| matches!(a, Ack::Reconciled)) {
            let inspect = self.steward(env, &["inspect", "--json"]);
            let seen_now: Value = serde_json::from_str(&stdout(&inspect)).unwrap_or(Value::Null);
            if seen_now["claims"] != json!([]) || seen_now["wakes"] != json!([]) {
                failed.push(format!(
                    "a reported recovery pass is undone: claims {}, wakes {}",
                    seen_now["claims"], seen_now["wakes"]
                ));
            } else {
                seen.verified += 1;
            }
        }
        let recover = self.steward(env, &["recover", "--json"]);
        if code(&recover) != 0 {
            failed.push(format!(
                "recover exited {}: {}",
                code(&recover),
                stderr(&recover)
            ));
        }
        let doctor = self.steward(env, &["doctor", "--json"]);
        let report: Value = serde_json::from_str(&stdout(&doctor)).unwrap_or(Value::Null);
        if code(&doctor) != 0 || report["ok"] != true {
            failed.push(format!(
                "doctor after recover: {report} {}",
                stderr(&doctor)
            ));
        }
        if due.is_empty() {
            return failed;
        }
        let conn = match rusqlite::Connection::open(env.db()) {
            Ok(conn) => conn,
            Err(e) => {
                failed.push(format!("the database is gone: {e}"));
                return failed;
            }
        };
        let count = |sql: &str, text: &str| -> i64 {
            conn.query_row(sql, [text], |r| r.get(0)).unwrap_or(-1)
        };
        let stored: BTreeMap<(String, i64), (String, Value)> = events_in(&env.db())
            .into_iter()
            .map(|(session, seq, kind, data)| ((session, seq), (kind, data)))
            .collect();
        for ack in due {
            match ack {
                Ack::Event {
                    session,
                    seq,
                    kind,
                    data,
                } => {
                    let stored = stored.get(&(session.clone(), *seq));
                    let same = stored.is_some_and(|(t, d)| t == kind && d == data);
                    if same {
                        seen.verified += 1;
                    } else {
                        failed.push(format!(
                            "acknowledged event {session}#{seq} {kind} is {stored:?}"
                        ));
                    }
                }
                Ack::Turn { prompt, answer, .. } => {
                    let prompts = count(
                        "SELECT count(*) FROM event WHERE type = 'input.admitted' AND json_extract(data, '$.prompt') = ?1",
                        prompt,
                    );
                    let answers = count(
                        "SELECT count(*) FROM event WHERE type = 'step.text' AND instr(json_extract(data, '$.text'), ?1) > 0",
                        answer,
                    );
                    if prompts == 1 && answers >= 1 {
                        seen.verified += 1;
                    } else {
                        failed.push(format!(
                            "acknowledged turn {prompt:?}: admitted {prompts} times, answer {answer:?} {answers} times"
                        ));
                    }
                }
                Ack::Reconciled => {}
                Ack::Migration {
                    id,
                    checksum,
                    time_applied,
                } => {
                    let row: Option<(String, i64)> = conn
                        .query_row(
                            "SELECT checksum, time_applied FROM schema_migration WHERE id = ?1",
                            [id],
                            |r| Ok((r.get(0)?, r.get(1)?)),
                        )
                        .ok();
                    if row.as_ref() == Some(&(checksum.clone(), *time_applied)) {
                        seen.verified += 1;
                    } else {
                        failed.push(format!(
                            "the older file's migration {id} (applied at {time_applied}) is {row:?}: the file was replaced, not migrated"
                        ));
                    }
                }
            }
        }
        failed
    }
}

/// How the real binary met a state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Outcome {
    /// Opened (recovered, doctor content after).
    #[default]
    Opened,
    /// Refused, exit 3, files untouched, nothing acknowledged due.
    Refused,
    /// Cut before the database was linked into place: nothing due, and the
    /// recovery pass created it.
    NoDatabase,
    /// `doctor` exited otherwise.
    Failed,
}

/// What one state's check saw.
#[derive(Default)]
struct Seen {
    outcome: Outcome,
    /// Acknowledgements found in the state as Steward reported them.
    verified: usize,
}

/// Tally of one rig run.
#[derive(Default)]
struct Figures {
    generated: usize,
    opened: usize,
    refused: usize,
    no_database: usize,
    /// Acknowledgements found, summed over the states.
    verified: usize,
    /// Stale `-shm` indexes placed beside a log.
    stale_index: usize,
    failed: Vec<String>,
    per_workload: BTreeMap<&'static str, PerWorkload>,
}

/// One workload's figures.
#[derive(Default)]
struct PerWorkload {
    ops: usize,
    syncs: usize,
    /// Distinct cut points tried, and of them right after a sync, and right before
    /// an acknowledgement.
    points: usize,
    at_syncs: usize,
    before_acks: usize,
    states: usize,
    failed: usize,
}

/// Cut points for a log of `ops`: right before each acknowledgement was written
/// (`acked`; everything it depends on must be durable there), after every sync,
/// random points between, and the end; `budget` of them at most (seeded choice,
/// up to half of them acknowledgement points).
fn points(ops: &[Op], acked: &[usize], budget: usize, rng: &mut Rng) -> Vec<usize> {
    let mut acked: Vec<usize> = acked.to_vec();
    acked.sort_unstable();
    acked.dedup();
    while acked.len() > budget / 2 {
        let drop = rng.below(acked.len() as u64) as usize;
        acked.remove(drop);
    }
    let mut all: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.is_sync())
        .map(|(i, _)| i + 1)
        .collect();
    let syncs = all.len();
    for _ in 0..syncs.max(4) {
        all.push(rng.below(ops.len() as u64 + 1) as usize);
    }
    all.push(ops.len());
    all.sort_unstable();
    all.dedup();
    all.retain(|p| !acked.contains(p));
    while all.len() + acked.len() > budget && all.len() > 1 {
        let drop = rng.below(all.len() as u64 - 1) as usize;
        all.remove(drop);
    }
    all.extend(acked);
    all.sort_unstable();
    all
}

fn cut_and_check(
    rec: &Recording,
    budget: usize,
    seed: u64,
    checker: &Checker,
    figures: &mut Figures,
) {
    let ops = rec.ops();
    let acks = rec.acks(&ops);
    let mut rng = Rng(seed ^ (rec.name.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let acked: Vec<usize> = acks.iter().map(|(at, _)| *at).collect();
    let points = points(&ops, &acked, budget, &mut rng);
    // Every point once, then again with other random subsets while the budget lasts.
    let jobs: Vec<(usize, u64)> = points
        .iter()
        .cycle()
        .take(budget.max(points.len()))
        .map(|p| (*p, rng.below(u64::MAX) | 1))
        .collect();
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some((point, state_seed)) = jobs.get(k).copied() else {
                        break;
                    };
                    let mut model = Model::new(rec);
                    for op in &ops[..point] {
                        model.apply(op);
                    }
                    let env = Env::new();
                    let stale = model.materialize(env.root.path(), &mut Rng(state_seed));
                    let due: Vec<&Ack> = acks
                        .iter()
                        .filter(|(n, _)| *n <= point)
                        .map(|(_, a)| a)
                        .collect();
                    let mut seen = Seen::default();
                    let failures = checker.check(&env, &due, &mut seen);
                    if !failures.is_empty()
                        && let Some(keep) = std::env::var_os("STEWARD_POWERCUT_KEEP")
                    {
                        // The failing state, as the cut left it, and the recording,
                        // for a look by hand.
                        let dir = Path::new(&keep).join(format!("{point}-{state_seed}"));
                        let _ = std::fs::create_dir_all(&dir);
                        let _ = std::fs::copy(&rec.log, dir.join("operations.log"));
                        model.materialize(&dir, &mut Rng(state_seed));
                    }
                    results
                        .lock()
                        .unwrap()
                        .push((point, state_seed, stale, seen, failures));
                }
            });
        }
    });
    let results = results.into_inner().unwrap();
    let entry = figures.per_workload.entry(rec.name).or_default();
    entry.ops = ops.len();
    entry.syncs = ops.iter().filter(|op| op.is_sync()).count();
    entry.points = points.len();
    entry.at_syncs = points
        .iter()
        .filter(|p| **p > 0 && ops[**p - 1].is_sync())
        .count();
    entry.before_acks = points.iter().filter(|p| acked.contains(p)).count();
    entry.states += results.len();
    for (point, state_seed, stale, seen, failures) in results {
        figures.generated += 1;

        figures.verified += seen.verified;
        figures.stale_index += usize::from(stale);
        match seen.outcome {
            Outcome::Opened => figures.opened += 1,
            Outcome::Refused => figures.refused += 1,
            Outcome::NoDatabase => figures.no_database += 1,
            Outcome::Failed => {}
        }
        if !failures.is_empty() {
            entry.failed += 1;
        }
        for f in failures {
            figures.failed.push(format!(
                "{} cut after operation {point} of {} (state seed {state_seed}): {f}",
                rec.name,
                ops.len()
            ));
        }
    }
}

const TURN_SCRIPT: &str = r#"
[[step]]
text = ["Looking ", "at ", "it."]
tool_calls = [{ tool = "run_command", input = { command = "echo one >> ../effects.txt" } }]
[[step]]
text = ["Done ", "with ", "that."]
[[step]]
text = ["Second."]
tool_calls = [{ tool = "run_command", input = { command = "echo two >> ../effects.txt" } }]
[[step]]
text = ["Done ", "again."]
"#;

fn write(env: &Env, name: &str, text: &str) -> String {
    let path = env.root.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn work(env: &Env) -> String {
    let work = env.root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    work.display().to_string()
}

/// The first launch on an empty directory (the database built and linked into
/// place), then two streamed turns with tools, the second after a compaction.
fn turns_from_an_empty_directory() -> Recording {
    let env = Env::new();
    let work = work(&env);
    let script = write(&env, "script.toml", TURN_SCRIPT);
    let config = write(&env, "config.toml", "[compaction]\ntoken_budget = 20\n");
    let mut rec = Recording::new("first launch, turns with tools, compaction", env);
    let base = ["--config", config.as_str(), "--script", script.as_str()];
    let session = rec.run_json(
        &[&base[..], &["--dir", work.as_str()]].concat(),
        "first prompt",
    );
    rec.run_json(
        &[&base[..], &["--session", session.as_str()]].concat(),
        "second prompt",
    );
    let kinds = crate::recovery::events_of(&rec.env);
    for kind in ["tool.completed", "compaction.ended", "step.text"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "the workload never produced {kind}: {kinds:?}"
        );
    }
    rec
}

/// An ACP client's turn with a tool, on a fresh directory.
fn an_acp_turn() -> Recording {
    use crate::acp::{Driver, argv};
    let env = Env::new();
    let work = work(&env);
    let script = write(&env, "script.toml", TURN_SCRIPT);
    let config = write(&env, "config.toml", "[tools]\nallow = [\"run_command\"]\n");
    let mut rec = Recording::new("ACP turn", env);
    let preload = rec.preload();
    let vars: Vec<(&str, &str)> = preload.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut client = Driver::spawn_with(
        &rec.env,
        &argv(&rec.env, &script, Some(Path::new(&config))),
        &vars,
    );
    client.request("initialize", json!({"protocolVersion": 1}));
    let created = client.request("session/new", json!({"cwd": work, "mcpServers": []}));
    let session = created["result"]["sessionId"].as_str().unwrap().to_string();
    for (prompt, answer) in [("first prompt", "that."), ("second prompt", "again.")] {
        let done = client.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt}]}),
        );
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        rec.acknowledge(
            client.pid(),
            Shown::EndTurn(done["id"].clone()),
            Ack::Turn {
                prompt: prompt.into(),
                answer: answer.into(),
                through: Through::End,
            },
        );
    }
    assert!(client.close().success());
    rec
}

/// Two turns with a tool typed into the terminal interface (in a pseudo-terminal),
/// each acknowledged when its answer's end shows on the screen.
fn tui_turns() -> Recording {
    use crate::tui::Tui;
    let env = Env::new();
    let work = work(&env);
    let script = write(&env, "script.toml", TURN_SCRIPT);
    let config = write(&env, "config.toml", "[tools]\nallow = [\"run_command\"]\n");
    let mut rec = Recording::new("terminal interface turns", env);
    let preload = rec.preload();
    let vars: Vec<(&str, &str)> = preload.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let limit = std::time::Duration::from_secs(20);
    let mut tui = Tui::start_with(
        &rec.env,
        Path::new(&work),
        &["--config", &config, "--script", &script],
        &vars,
    );
    tui.expect("No session open", limit);
    let turns = [
        ("first prompt", "Done with that.", "that."),
        ("second prompt", "Done again.", "again."),
    ];
    for (prompt, shown, answer) in turns {
        tui.keys(&format!("{prompt}\r"));
        tui.expect(shown, limit);
        rec.acknowledge(
            tui.child.id(),
            Shown::Screen(shown.into()),
            Ack::Turn {
                prompt: prompt.into(),
                answer: answer.into(),
                through: Through::Answer,
            },
        );
    }
    tui.keys("\t");
    tui.keys("q");
    assert!(
        tui.wait(limit).is_some_and(|s| s.success()),
        "{}",
        tui.text()
    );
    rec
}

/// A recovery pass over 150 interrupted sessions (batches of 100), and their
/// continuations.
fn a_recovery_pass() -> Recording {
    let env = Env::new();
    let work = work(&env);
    std::fs::create_dir_all(&env.data).unwrap();
    let fixture = Command::new(helper_bin())
        .args([
            "interrupted",
            env.data.to_str().unwrap(),
            "150",
            &work,
            "script",
        ])
        .env_remove("FAILPOINTS")
        .output()
        .unwrap();
    assert!(fixture.status.success(), "{}", stderr(&fixture));
    let script = write(&env, "script.toml", "[[step]]\ntext = [\"Carrying on.\"]\n");
    let mut rec = Recording::new("recovery of 150 sessions", env);
    let mut cmd = rec.env.cmd();
    rec.record(&mut cmd)
        .env("STEWARD_RECOVERY_BATCH", "100")
        .args(["--script", &script, "recover", "--json"]);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["recovered"].as_array().map(Vec::len),
        Some(150),
        "{report}"
    );
    rec.acknowledge(pid, Shown::Bytes(output.stdout), Ack::Reconciled);
    rec
}

/// The last migration, undone: a file with sessions in it, one migration behind.
const LAST_MIGRATION: &str = "0006_session_housekeeping";
const UNDO_LAST_MIGRATION: &str = "DROP INDEX session_time_updated_id_idx;
ALTER TABLE session DROP COLUMN archived;
DELETE FROM schema_migration WHERE id = '0006_session_housekeeping';";

/// An older file with a session in it — a turn run, then the last migration (an
/// `ALTER TABLE` of the session table) undone — migrated by a run that continues
/// that session.
fn a_migration() -> Recording {
    let env = Env::new();
    let work = work(&env);
    let script = write(
        &env,
        "script.toml",
        &"[[step]]\ntext = [\"Answered.\"]\n".repeat(2),
    );
    let before = env
        .cmd()
        .args([
            "--script", &script, "run", "--json", "--yes", "--dir", &work,
        ])
        .arg("before the upgrade")
        .output()
        .unwrap();
    assert_eq!(code(&before), 0, "{}", stderr(&before));
    let first: Value = serde_json::from_str(stdout(&before).lines().next().unwrap()).unwrap();
    let session = first["session_id"].as_str().unwrap().to_string();
    {
        let conn = rusqlite::Connection::open(env.db()).unwrap();
        let last: String = conn
            .query_row("SELECT max(id) FROM schema_migration", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            last, LAST_MIGRATION,
            "a new migration: undo it in UNDO_LAST_MIGRATION"
        );
        conn.execute_batch(UNDO_LAST_MIGRATION).unwrap();
    }
    let mut rec = Recording::new("migration of an older file", env);
    let migrations = rec
        .baseline_acks
        .iter()
        .filter(|a| matches!(a, Ack::Migration { .. }))
        .count();
    assert!(
        migrations > 0 && rec.baseline_acks.len() > migrations,
        "the older file holds migrations and events: {:?}",
        rec.baseline_acks
    );
    rec.run_json(
        &["--script", &script, "--session", &session],
        "after the upgrade",
    );
    let conn = rusqlite::Connection::open(rec.env.db()).unwrap();
    let applied: String = conn
        .query_row("SELECT max(id) FROM schema_migration", [], |r| r.get(0))
        .unwrap();
    assert_eq!(applied, LAST_MIGRATION, "the run did not migrate the file");
    rec
}

/// Runs a workload under the recorder.
type Workload = fn() -> Recording;

/// The rig: every workload recorded, cut at its syncs and between, each state
/// opened by the real binary (protocol §2.1, §2.9: a committed event survives power loss).
#[test]
fn powercut_every_acknowledged_event_survives_a_cut_at_any_write() {
    let started = Instant::now();
    let seed = seed("STEWARD_POWERCUT_SEED");
    let budget: usize = std::env::var("STEWARD_POWERCUT_STATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(14);
    eprintln!("powercut: seed {seed}, up to {budget} states per workload");
    let checker = Checker::new();
    let mut figures = Figures::default();
    let workloads: [(&str, Workload); 5] = [
        ("turns", turns_from_an_empty_directory),
        ("acp", an_acp_turn),
        ("tui", tui_turns),
        ("recovery", a_recovery_pass),
        ("migration", a_migration),
    ];
    // `STEWARD_POWERCUT_WORKLOADS=acp,migration` runs only those.
    let only = std::env::var("STEWARD_POWERCUT_WORKLOADS").ok();
    for (name, workload) in workloads {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|w| w == name))
        {
            continue;
        }
        let rec = workload();
        assert!(rec.ops_now() > 0, "{}: nothing was recorded", rec.name);
        assert!(
            !rec.shown.is_empty(),
            "{}: nothing was acknowledged",
            rec.name
        );
        cut_and_check(&rec, budget, seed, &checker, &mut figures);
    }
    let elapsed = started.elapsed();
    for (name, w) in &figures.per_workload {
        eprintln!(
            "  {name}: {} operations recorded ({} syncs); {} cut points ({} right after a sync, {} right before an acknowledgement), {} states, {} failed",
            w.ops, w.syncs, w.points, w.at_syncs, w.before_acks, w.states, w.failed
        );
    }
    let line = format!(
        "powercut: {} states generated and checked ({} opened, {} refused untouched, {} cut before the database existed; {} with a stale index), {} failed, {} acknowledgements found in them, {:.1} s (seed {seed})",
        figures.generated,
        figures.opened,
        figures.refused,
        figures.no_database,
        figures.stale_index,
        figures.failed.len(),
        figures.verified,
        elapsed.as_secs_f64()
    );
    eprintln!("{line}");
    crate::campaign::summary_line("powercut", &line);
    // A rig whose states never open, or never owe an acknowledgement, proves nothing.
    assert!(
        figures.opened > 0 && figures.verified > 0,
        "{line}\n{}",
        figures.failed.join("\n")
    );
    assert!(
        figures.failed.is_empty(),
        "{line}\n{}",
        figures.failed.join("\n")
    );
}
