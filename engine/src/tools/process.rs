//! Tool processes that never outlive their owner.
//!
//! Each command runs in its own process group under a small `sh` wrapper that:
//! - waits at a gate (a line `go` on its stdin) before the command may run, so the
//!   runner can record the process identity in `tool.started` first;
//! - on Linux, is given `PR_SET_PDEATHSIG` = SIGHUP before exec, and answers that
//!   signal by killing its whole group — so when Steward dies however it dies, the
//!   command and its children die with it.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the
//! process; so every tool process is spawned from one long-lived spawner thread.
//! Elsewhere (no `prctl`), recovery stops leftover groups instead ([`stop_leftover`]).
//!
//! A process is known by pid, process group, start time (clock ticks since boot,
//! from `/proc/<pid>/stat`) and boot id: a reused pid never matches, and a process
//! whose identity does not match is never signalled.

#![allow(unsafe_code)] // fork-time setup (prctl) and signals to process groups

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use crate::message::ProcessIdentity;

/// The wrapper: gate, then the command in the background of a shell that kills its
/// group when its parent dies (SIGHUP from PDEATHSIG). It outlives a SIGTERM to the
/// group until the command has ended, so the command gets its whole grace period to
/// clean up before the group is killed; its exit status is the command's.
pub(crate) const WRAPPER: &str = r#"trap 'kill -KILL 0' HUP
trap ':' TERM
IFS= read -r gate || exit 125
[ "$gate" = go ] || exit 125
exec 0</dev/null
sh -c "$1" &
child=$!
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || exit "$status"
done"#;

/// The wrapper's `$0`: with [`WRAPPER`] in the command line, what marks a process as
/// a Steward tool wrapper.
pub(crate) const WRAPPER_NAME: &str = "steward-tool";

/// The wrapper of an MCP stdio server ([`ServerProcess`]): no gate (a server's
/// start has no effect a transcript must know of first; its calls are gated one by
/// one instead), and the server keeps the wrapper's stdin — a background command's
/// stdin would otherwise be `/dev/null` — so the requests reach it. Like
/// [`WRAPPER`], it kills its group when its parent dies and outlives a SIGTERM to
/// the group until the server has ended. When the server ends, so does everything
/// it left in its group: the wrapper says how the server ended, then kills the
/// group and itself — nothing stays behind without a wrapper to stop it.
pub(crate) const SERVER_WRAPPER: &str = r#"trap 'kill -KILL 0' HUP
trap ':' TERM
exec 3<&0 0</dev/null
"$@" <&3 3<&- &
child=$!
exec 3<&-
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break
done
echo "steward: the server exited with status $status" >&2
kill -KILL 0"#;

/// [`SERVER_WRAPPER`]'s `$0`.
pub(crate) const SERVER_WRAPPER_NAME: &str = "steward-mcp-server";

/// Set to `1` to start tool processes without `PR_SET_PDEATHSIG` (tests of the
/// recovery path that stops leftover process groups).
pub const NO_PDEATHSIG_ENV: &str = "STEWARD_TEST_NO_PDEATHSIG";

/// What to start: a tool command (gated) or an MCP server.
#[derive(Debug, Clone)]
enum Program {
    Command(String),
    Server {
        program: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

struct SpawnRequest {
    program: Program,
    cwd: PathBuf,
    hidden_env: Vec<String>,
    runtime: tokio::runtime::Handle,
    reply: tokio::sync::oneshot::Sender<io::Result<Child>>,
}

/// The one thread that forks tool processes, alive for the whole process.
fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("steward-tool-spawner".into())
            .spawn(move || {
                while let Ok(request) = rx.recv() {
                    let _runtime = request.runtime.enter();
                    let _ = request.reply.send(spawn_here(
                        &request.program,
                        &request.cwd,
                        &request.hidden_env,
                    ));
                }
            })
            .expect("spawn the tool spawner thread");
        tx
    })
}

fn spawn_here(program: &Program, cwd: &Path, hidden_env: &[String]) -> io::Result<Child> {
    let mut cmd = Command::new("sh");
    match program {
        Program::Command(command) => {
            cmd.arg("-c").arg(WRAPPER).arg(WRAPPER_NAME).arg(command);
        }
        Program::Server { program, args, env } => {
            cmd.arg("-c")
                .arg(SERVER_WRAPPER)
                .arg(SERVER_WRAPPER_NAME)
                .arg(program)
                .args(args)
                .envs(env.iter().map(|(k, v)| (k, v)));
        }
    }
    // After the server's own variables: a secret is never passed on, even when
    // named there.
    for var in hidden_env {
        cmd.env_remove(var);
    }
    cmd.current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    #[cfg(target_os = "linux")]
    if std::env::var(NO_PDEATHSIG_ENV).as_deref() != Ok("1") {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls are made
        // (signal, prctl, getppid, _exit), touching no memory the parent owns.
        unsafe {
            cmd.pre_exec(move || {
                // A Steward started with SIGHUP ignored (`nohup`, some service
                // managers and shells) would pass that on, and a shell cannot trap
                // a signal ignored when it started: the wrapper would outlive it.
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGHUP as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before the prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(125);
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
}

/// A command started and held at its gate.
#[derive(Debug)]
pub struct GatedProcess {
    child: Child,
    gate: Option<ChildStdin>,
    pub identity: ProcessIdentity,
    finished: bool,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exit code, or `None` when a signal ended it.
    Exited(Option<i32>),
    TimedOut,
    Cancelled,
    Aborted,
}

/// What a finished command left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub exit: Exit,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
}

impl GatedProcess {
    /// Starts `command` (via `sh -c`) in `cwd`, in a new process group, held at the
    /// gate, without the environment variables named in `hidden_env` (secrets such
    /// as the provider's API key). Nothing of the command has run when this returns.
    pub async fn spawn(
        command: &str,
        cwd: &Path,
        hidden_env: &[String],
    ) -> io::Result<GatedProcess> {
        let (mut child, identity) =
            spawn(Program::Command(command.to_string()), cwd, hidden_env).await?;
        let gate = child.stdin.take();
        Ok(GatedProcess {
            child,
            gate,
            identity,
            finished: false,
        })
    }

    /// Opens the gate and waits for the command, stopping it on timeout or when
    /// told to. Output beyond `limit` bytes per stream is read and dropped.
    pub async fn run(
        mut self,
        timeout: Duration,
        limit: usize,
        grace: Duration,
        stop: crate::tools::StopSignals,
    ) -> io::Result<Finished> {
        // What the command writes is heard as it comes (up to the limit), besides
        // being kept.
        let stdout = tokio::spawn(read_capped(
            self.child.stdout.take(),
            limit,
            stop.output.clone().map(|h| (h, crate::tools::Pipe::Stdout)),
        ));
        let stderr = tokio::spawn(read_capped(
            self.child.stderr.take(),
            limit,
            stop.output.clone().map(|h| (h, crate::tools::Pipe::Stderr)),
        ));
        let mut gate = self
            .gate
            .take()
            .ok_or_else(|| io::Error::other("gate already opened"))?;
        gate.write_all(b"go\n").await?;
        drop(gate);
        let pgid = self.identity.pgid;
        let exit = tokio::select! {
            status = self.child.wait() => Exit::Exited(status?.code()),
            _ = tokio::time::sleep(timeout) => {
                self.terminate(grace).await;
                Exit::TimedOut
            }
            _ = stop.cancel.cancelled() => {
                self.terminate(grace).await;
                Exit::Cancelled
            }
            _ = stop.abort.cancelled() => {
                kill_group(pgid, libc::SIGKILL);
                let _ = self.child.wait().await;
                Exit::Aborted
            }
        };
        // Whatever the command left behind in its group goes too.
        kill_group(pgid, libc::SIGKILL);
        self.finished = true;
        let drain = async {
            let (out, err) = (stdout.await, stderr.await);
            (out.unwrap_or_default(), err.unwrap_or_default())
        };
        let ((stdout, t1), (stderr, t2)) = tokio::time::timeout(Duration::from_secs(2), drain)
            .await
            .unwrap_or_default();
        Ok(Finished {
            exit,
            stdout,
            stderr,
            truncated: t1 || t2,
        })
    }

    /// SIGTERM to the group, a grace period, then SIGKILL.
    async fn terminate(&mut self, grace: Duration) {
        kill_group(self.identity.pgid, libc::SIGTERM);
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            kill_group(self.identity.pgid, libc::SIGKILL);
            let _ = self.child.wait().await;
        }
    }
}

/// Starts `program` on the spawner thread, in a process group of its own, and
/// reads its identity (a process whose identity cannot be read is killed).
async fn spawn(
    program: Program,
    cwd: &Path,
    hidden_env: &[String],
) -> io::Result<(Child, ProcessIdentity)> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    spawner()
        .send(SpawnRequest {
            program,
            cwd: cwd.to_path_buf(),
            hidden_env: hidden_env.to_vec(),
            runtime: tokio::runtime::Handle::current(),
            reply,
        })
        .map_err(|_| io::Error::other("the tool spawner thread is gone"))?;
    let mut child = answer
        .await
        .map_err(|_| io::Error::other("the tool spawner dropped a request"))??;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("the tool process has no pid"))? as i32;
    match identify(pid) {
        Some(identity) => Ok((child, identity)),
        None => {
            kill_group(pid, libc::SIGKILL);
            let _ = child.wait().await;
            Err(io::Error::other("cannot read the tool process's identity"))
        }
    }
}

/// An MCP stdio server: started in a process group of its own under
/// `SERVER_WRAPPER`, dying with Steward however Steward dies (as a command does),
/// and stopped — SIGTERM, a grace, SIGKILL — when it is dropped or told to.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    pub identity: ProcessIdentity,
    /// The last bytes the server wrote to stderr, for an error that says why.
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    stopped: bool,
}

/// How much of a server's stderr [`ServerProcess::stderr_tail`] keeps.
const STDERR_TAIL: usize = 4096;

impl ServerProcess {
    /// Starts `program args…` in `cwd` with `env` added and `hidden_env` removed.
    /// Its stdin and stdout are the caller's (the MCP transport); its stderr is
    /// drained, the last few kilobytes kept.
    pub async fn spawn(
        program: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: &Path,
        hidden_env: &[String],
    ) -> io::Result<(ServerProcess, ChildStdin, tokio::process::ChildStdout)> {
        let (mut child, identity) = spawn(
            Program::Server {
                program: program.to_string(),
                args: args.to_vec(),
                env: env.to_vec(),
            },
            cwd,
            hidden_env,
        )
        .await?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            kill_group(identity.pgid, libc::SIGKILL);
            return Err(io::Error::other("the server's pipes are missing"));
        };
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                    tail.extend_from_slice(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL);
                    tail.drain(..excess);
                }
            });
        }
        Ok((
            ServerProcess {
                child,
                identity,
                stderr,
                stopped: false,
            },
            stdin,
            stdout,
        ))
    }

    /// The last lines the server wrote to stderr, trimmed.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).trim().to_string()
    }

    /// Whether the server has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The server's own pid: the child of its wrapper (which leads the group),
    /// where `/proc` tells; else the wrapper's.
    pub fn server_pid(&self) -> i32 {
        let leader = self.identity.pid;
        std::fs::read_to_string(format!("/proc/{leader}/task/{leader}/children"))
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse().ok())
            .unwrap_or(leader)
    }

    /// Stops the server as MCP asks of a client: its stdin is closed already (the
    /// connection ended), so it may exit by itself within half of `grace`; then
    /// SIGTERM to its group and the other half; then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) {
        if self.stopped {
            return;
        }
        let half = grace / 2;
        if tokio::time::timeout(half, self.child.wait()).await.is_err() {
            kill_group(self.identity.pgid, libc::SIGTERM);
            if tokio::time::timeout(half, self.child.wait()).await.is_err() {
                kill_group(self.identity.pgid, libc::SIGKILL);
                let _ = self.child.wait().await;
            }
        }
        // Whatever it left behind in its group goes too.
        kill_group(self.identity.pgid, libc::SIGKILL);
        self.stopped = true;
    }

    /// Kills the server's group at once.
    pub fn kill(&mut self) {
        kill_group(self.identity.pgid, libc::SIGKILL);
        self.stopped = true;
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if !self.stopped {
            kill_group(self.identity.pgid, libc::SIGKILL);
        }
    }
}

impl Drop for GatedProcess {
    fn drop(&mut self) {
        if !self.finished {
            // Never started or abandoned mid-run: nothing of it may outlive us.
            kill_group(self.identity.pgid, libc::SIGKILL);
        }
    }
}

async fn read_capped(
    pipe: Option<impl AsyncRead + Unpin>,
    limit: usize,
    heard: Option<(crate::tools::Heard, crate::tools::Pipe)>,
) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = [0u8; 8192];
    let mut lines = heard.map(|(heard, pipe)| Lines::new(heard, pipe));
    loop {
        let read = match &mut lines {
            Some(lines) if !lines.pending.is_empty() => {
                match tokio::time::timeout(QUIET, pipe.read(&mut buf)).await {
                    Ok(read) => read,
                    Err(_) => {
                        lines.flush(false);
                        continue;
                    }
                }
            }
            _ => pipe.read(&mut buf).await,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                if let Some(lines) = &mut lines
                    && room > 0
                {
                    lines.push(&buf[..n.min(room)]);
                }
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    if let Some(lines) = &mut lines {
        lines.flush(true);
    }
    (kept, truncated)
}

/// How long a partial line waits for its end before it is heard as it is.
const QUIET: Duration = Duration::from_millis(500);
/// The longest piece of a line without an end that waits for the rest.
const LIVE_LINE: usize = 4096;

/// What a command writes, heard in whole lines (protocol §4.19): a value to hide is
/// seen whole by the scrubbing, and a character split between two reads arrives
/// whole. A line without its end is heard after [`QUIET`], or in pieces of
/// [`LIVE_LINE`] bytes.
struct Lines {
    pending: Vec<u8>,
    heard: crate::tools::Heard,
    pipe: crate::tools::Pipe,
}

impl Lines {
    fn new(heard: crate::tools::Heard, pipe: crate::tools::Pipe) -> Lines {
        Lines {
            pending: Vec::new(),
            heard,
            pipe,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        let end = match self.pending.iter().rposition(|b| *b == b'\n') {
            Some(i) => i + 1,
            None if self.pending.len() >= LIVE_LINE => whole_chars(&self.pending),
            None => return,
        };
        if end > 0 {
            let rest = self.pending.split_off(end);
            let text = std::mem::replace(&mut self.pending, rest);
            (self.heard)(self.pipe, &String::from_utf8_lossy(&text));
        }
    }

    /// Hands on what waits: up to its last whole character, or `all` of it (the
    /// stream ended).
    fn flush(&mut self, all: bool) {
        let end = if all {
            self.pending.len()
        } else {
            whole_chars(&self.pending)
        };
        let rest = self.pending.split_off(end);
        let text = std::mem::replace(&mut self.pending, rest);
        if !text.is_empty() {
            (self.heard)(self.pipe, &String::from_utf8_lossy(&text));
        }
    }
}

/// How much of `bytes` ends on a whole UTF-8 character (invalid bytes count as
/// whole: they are shown replaced).
fn whole_chars(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

fn kill_group(pgid: i32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: plain syscall; a negative pid addresses the process group.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// `/proc/<pid>/stat` of a process that has not exited: (process group, start time
/// in clock ticks since boot). A zombie has exited: it counts as gone.
fn stat(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); pgrp is field 5, starttime field 22.
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    Some((fields.get(2)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

pub use crate::host::boot_id;

/// The identity of a live process that leads its own group. Without `/proc` (not
/// Linux) the start time and boot cannot be read: the identity then carries an empty
/// boot id, which [`stop_leftover`] treats as unprovable and never signals.
pub fn identify(pid: i32) -> Option<ProcessIdentity> {
    let (pgid, start_time, boot_id) = match stat(pid) {
        Some((pgid, start)) => (pgid, start, boot_id()),
        None if !Path::new("/proc/self/stat").exists() => (pid, 0, String::new()),
        None => return None,
    };
    Some(ProcessIdentity {
        pid,
        pgid,
        start_time,
        boot_id,
        hostname: crate::host::hostname(),
    })
}

/// What [`stop_leftover`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Nothing of the group runs any more.
    Gone,
    /// The group was still running and has been killed.
    Stopped,
    /// The pid now belongs to another process (different start time): not signalled.
    Reused,
    /// Another host or another boot: nothing here can be proven, nothing signalled.
    Elsewhere,
}

/// Kills what is left of a recorded tool process group, if — and only if — it is
/// provably that group: same host, same boot, the leader's start time matches, and
/// the leader is a Steward tool wrapper (its command line says so). The identity
/// comes from the database, and a damaged or hostile row must never make Steward
/// signal a process that is not its own: a leader that is gone, or is anything but
/// the wrapper, is never signalled.
pub fn stop_leftover(identity: &ProcessIdentity) -> Leftover {
    match find_leftover(identity) {
        Ok(group) => group.kill(),
        Err(found) => found,
    }
}

/// A recorded tool process group found still running and provably that group
/// ([`find_leftover`]), not signalled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftoverGroup {
    pgid: i32,
    start_time: u64,
}

impl LeftoverGroup {
    /// Kills the group, after checking once more that its leader is the one found
    /// (a pid is never signalled on an identity checked long before).
    pub fn kill(&self) -> Leftover {
        match stat(self.pgid) {
            None => Leftover::Gone,
            Some((group, start))
                if start == self.start_time && group == self.pgid && is_wrapper(self.pgid) =>
            {
                kill_group(self.pgid, libc::SIGKILL);
                Leftover::Stopped
            }
            Some(_) => Leftover::Reused,
        }
    }
}

/// What [`stop_leftover`] checks before it kills: `Ok` with the group when it still
/// runs and is provably the recorded one, else what was found instead (never
/// [`Leftover::Stopped`]). Signals nothing.
pub fn find_leftover(identity: &ProcessIdentity) -> Result<LeftoverGroup, Leftover> {
    if identity.hostname != crate::host::hostname()
        || identity.boot_id != boot_id()
        || identity.boot_id.is_empty()
    {
        return Err(Leftover::Elsewhere);
    }
    let pgid = identity.pgid;
    if identity.pid != pgid {
        return Err(Leftover::Reused);
    }
    let Some((group, start)) = stat(pgid) else {
        return Err(Leftover::Gone);
    };
    // A live process with the leader's pid but another start time is not ours.
    if start != identity.start_time || group != pgid || !is_wrapper(pgid) {
        return Err(Leftover::Reused);
    }
    Ok(LeftoverGroup {
        pgid,
        start_time: start,
    })
}

/// Whether `pid` runs this build's tool wrapper (`sh -c WRAPPER steward-tool …`) or
/// MCP server wrapper as this user.
fn is_wrapper(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let ours = std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == me);
    let wrapper = |script: &str, name: &str| {
        args.len() >= 4
            && args[1] == b"-c"
            && args[2] == script.as_bytes()
            && args[3] == name.as_bytes()
    };
    ours && (wrapper(WRAPPER, WRAPPER_NAME) || wrapper(SERVER_WRAPPER, SERVER_WRAPPER_NAME))
}

#[cfg(test)]
mod tests {

    #[test]
    fn r4_19_output_is_heard_in_whole_lines_and_whole_characters() {
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = heard.clone();
        let mut lines = Lines::new(
            std::sync::Arc::new(move |_, t: &str| {
                sink.lock().unwrap().push(t.to_string());
            }),
            crate::tools::Pipe::Stdout,
        );
        lines.push(b"KEY=sk-sec");
        lines.push(b"ret\nnext ");
        // "é" split between two reads.
        lines.push(b"caf\xc3");
        lines.flush(false);
        lines.push(b"\xa9\n");
        lines.push(b"tail");
        lines.flush(true);
        assert_eq!(
            *heard.lock().unwrap(),
            ["KEY=sk-secret\n", "next caf", "\u{e9}\n", "tail"]
        );
    }

    use super::*;
    use crate::tools::StopSignals;
    use pretty_assertions::assert_eq;

    fn alive(pid: i32) -> bool {
        // Zombies count as gone.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
            .unwrap_or(false)
    }

    #[tokio::test]
    async fn a_gated_command_runs_only_after_the_gate_opens() {
        let dir = tempfile::tempdir().unwrap();
        let process = GatedProcess::spawn(
            "echo ran >> marker; echo out; echo err >&2",
            dir.path(),
            &[],
        )
        .await
        .unwrap();
        assert_eq!(process.identity.pid, process.identity.pgid);
        assert_eq!(
            identify(process.identity.pid),
            Some(process.identity.clone())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !dir.path().join("marker").exists(),
            "the command ran before the gate"
        );
        let done = process
            .run(
                Duration::from_secs(10),
                1024,
                Duration::from_secs(1),
                StopSignals::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            done,
            Finished {
                exit: Exit::Exited(Some(0)),
                stdout: b"out\n".to_vec(),
                stderr: b"err\n".to_vec(),
                truncated: false,
            }
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("marker")).unwrap(),
            "ran\n"
        );
    }

    #[tokio::test]
    async fn a_dropped_gated_process_never_runs() {
        let dir = tempfile::tempdir().unwrap();
        let process = GatedProcess::spawn("touch marker", dir.path(), &[])
            .await
            .unwrap();
        let pid = process.identity.pid;
        drop(process);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!dir.path().join("marker").exists());
        assert!(!alive(pid));
    }

    #[tokio::test]
    async fn timeouts_and_cancellation_stop_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let command = "sleep 300 & echo $! > child.pid; sleep 300";
        let process = GatedProcess::spawn(command, dir.path(), &[]).await.unwrap();
        let done = process
            .run(
                Duration::from_millis(300),
                1024,
                Duration::from_millis(200),
                StopSignals::default(),
            )
            .await
            .unwrap();
        assert_eq!(done.exit, Exit::TimedOut);
        let child: i32 = std::fs::read_to_string(dir.path().join("child.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!alive(child), "a grandchild survived the timeout");

        let process = GatedProcess::spawn(command, dir.path(), &[]).await.unwrap();
        let stop = StopSignals::default();
        let cancel = stop.cancel.clone();
        let run = tokio::spawn(process.run(
            Duration::from_secs(60),
            1024,
            Duration::from_millis(200),
            stop,
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
        assert_eq!(run.await.unwrap().unwrap().exit, Exit::Cancelled);
        let child: i32 = std::fs::read_to_string(dir.path().join("child.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!alive(child), "a grandchild survived the cancellation");
    }

    #[tokio::test]
    async fn output_is_capped_but_drained() {
        let dir = tempfile::tempdir().unwrap();
        let process = GatedProcess::spawn("head -c 100000 /dev/zero | tr '\\0' x", dir.path(), &[])
            .await
            .unwrap();
        let done = process
            .run(
                Duration::from_secs(10),
                1000,
                Duration::from_secs(1),
                StopSignals::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            (done.exit, done.stdout.len(), done.truncated),
            (Exit::Exited(Some(0)), 1000, true)
        );
    }

    #[test]
    fn a_reused_pid_is_never_signalled() {
        let (mut leftover, real) = crate::testing::leftover_wrapper("sleep 300");
        let pid = real.pid;
        let mut identity = real.clone();
        identity.start_time += 1;
        assert_eq!(stop_leftover(&identity), Leftover::Reused);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            alive(pid),
            "a process with another start time was signalled"
        );
        assert_eq!(stop_leftover(&real), Leftover::Stopped);
        leftover.wait().unwrap();
        assert_eq!(stop_leftover(&real), Leftover::Gone);
        let mut elsewhere = real.clone();
        elsewhere.boot_id = "another-boot".into();
        assert_eq!(stop_leftover(&elsewhere), Leftover::Elsewhere);
    }

    #[test]
    fn r5_10_a_process_that_is_not_a_tool_wrapper_is_never_signalled() {
        // A damaged or hostile row names a user's process, exactly.
        let mut users = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut users, 0);
        let mut users = users.arg("300").spawn().unwrap();
        let identity = identify(users.id() as i32).unwrap();
        assert_eq!(stop_leftover(&identity), Leftover::Reused);
        std::thread::sleep(Duration::from_millis(100));
        assert!(alive(identity.pid), "a user's process was signalled");
        users.kill().unwrap();
        users.wait().unwrap();
    }

    #[tokio::test]
    async fn a_stopped_command_gets_its_grace_to_clean_up() {
        let dir = tempfile::tempdir().unwrap();
        let command = "trap 'sleep 0.3; echo cleaned > cleaned.txt; exit 0' TERM; sleep 100 & wait";
        let process = GatedProcess::spawn(command, dir.path(), &[]).await.unwrap();
        let stop = StopSignals::default();
        let cancel = stop.cancel.clone();
        let run =
            tokio::spawn(process.run(Duration::from_secs(60), 1024, Duration::from_secs(5), stop));
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
        let done = run.await.unwrap().unwrap();
        assert_eq!(done.exit, Exit::Cancelled);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cleaned.txt")).unwrap(),
            "cleaned\n"
        );
    }

    #[tokio::test]
    async fn a_hidden_variable_never_reaches_the_command() {
        let dir = tempfile::tempdir().unwrap();
        // HOME is set in every test process; hiding it proves the removal.
        let process = GatedProcess::spawn("echo \"[$HOME]\"", dir.path(), &["HOME".into()])
            .await
            .unwrap();
        let done = process
            .run(
                Duration::from_secs(10),
                1024,
                Duration::from_secs(1),
                StopSignals::default(),
            )
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&done.stdout), "[]\n");
    }
}
