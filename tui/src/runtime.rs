//! The event loop: one `select!` over terminal input, the engine's events, the
//! data-directory doorbell (with a slow poll behind it), loaded data, permission
//! questions, and a clock that ticks only while something on screen counts down.
//! Messages go through [`update`]; effects are carried out here; frames are drawn
//! from the state, at most one per [`FRAME`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, MouseEventKind};
use steward_engine::Engine;
use steward_engine::clock::SharedClock;
use steward_engine::inspect::Reader;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::time::Instant;

use crate::app::{Act, App, Effect, Launch, Mode, Msg};
use crate::loader::Loader;
use crate::permission::Asks;
use crate::terminal::Taken;
use crate::theme::Theme;
use crate::update::{update, view_of};
use crate::view::view;

/// The shortest time between two frames.
const FRAME: Duration = Duration::from_millis(16);
/// How often the screen reloads when no doorbell rang (file events can be missed).
const POLL: Duration = Duration::from_secs(5);
/// The countdown clock, while one is on screen.
const TICK: Duration = Duration::from_millis(250);

/// What the screen needs to know about where it runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub data_dir: PathBuf,
    pub database: PathBuf,
    pub owners_dir: PathBuf,
    /// Where `n` and a first prompt create sessions.
    pub cwd: PathBuf,
    /// Where "always allow and save" writes.
    pub config_path: PathBuf,
    pub mouse: bool,
    pub clock: SharedClock,
}

/// What the user chose when leaving the chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Nothing ran, or the running turns are left for recovery.
    Quit,
    /// The running turns were cancelled first.
    CancelledAndQuit,
}

/// `steward`: the chat, with the inspector a key away. The launch recovery already
/// ran; its report opens the after-crash panel.
pub async fn run_chat(
    engine: Arc<Engine>,
    asks: Asks,
    launch: Launch,
    options: Options,
) -> std::io::Result<Leave> {
    let reader = Reader::open(&options.database, &options.owners_dir)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut app = App::new(
        Mode::Chat,
        options.data_dir.display().to_string(),
        options.cwd.display().to_string(),
        Theme::from_env(),
        options.clock.now_ms(),
    );
    app.owner_id = Some(engine.owner_id().to_string());
    app.utc_offset_s = steward_engine::clock::local_offset_s(app.now_ms);
    let mut taken = Taken::take(options.mouse)?;
    app.size = size(&taken);
    let mut loop_ = EventLoop::new(reader, &options, Some(engine.clone()), Some(asks));
    // Subscribed before reading what already runs: no start is missed.
    app.running = engine.running().into_iter().collect();
    loop_.inbox.send(Msg::Launched(launch)).ok();
    let leave = loop_.run(&mut app, &mut taken).await;
    drop(taken);
    leave
}

/// `steward inspect` on a terminal: the inspector alone, reading only, over
/// `reader` (opened by the caller, so that a refused file is reported as such).
pub async fn run_inspector(reader: Reader, options: Options) -> std::io::Result<()> {
    let mut app = App::new(
        Mode::ReadOnly,
        options.data_dir.display().to_string(),
        options.cwd.display().to_string(),
        Theme::from_env(),
        options.clock.now_ms(),
    );
    app.utc_offset_s = steward_engine::clock::local_offset_s(app.now_ms);
    let mut taken = Taken::take(options.mouse)?;
    app.size = size(&taken);
    let mut loop_ = EventLoop::new(reader, &options, None, None);
    loop_.inbox.send(Msg::Changed).ok();
    loop_.run(&mut app, &mut taken).await?;
    Ok(())
}

fn size(taken: &Taken) -> (u16, u16) {
    taken
        .terminal
        .size()
        .map(|s| (s.width, s.height))
        .unwrap_or((80, 24))
}

struct EventLoop {
    engine: Option<Arc<Engine>>,
    events: Option<tokio::sync::broadcast::Receiver<steward_engine::runner::EngineEvent>>,
    asks: Option<Asks>,
    loader: Loader,
    inbox: UnboundedSender<Msg>,
    messages: mpsc::UnboundedReceiver<Msg>,
    keys: mpsc::UnboundedReceiver<Event>,
    pause: Arc<InputPause>,
    bell: Arc<Notify>,
    _watcher: Option<Box<dyn std::any::Any>>,
    options: Options,
    started: std::time::Instant,
}

impl EventLoop {
    fn new(
        reader: Reader,
        options: &Options,
        engine: Option<Arc<Engine>>,
        asks: Option<Asks>,
    ) -> EventLoop {
        let (inbox, messages) = mpsc::unbounded_channel();
        let servers = engine.clone().map(|engine| {
            std::sync::Arc::new(move || engine.mcp_servers()) as crate::loader::Servers
        });
        let loader = Loader::spawn(reader, options.clock.clone(), servers, inbox.clone());
        let pause = Arc::new(InputPause::default());
        let bell = Arc::new(Notify::new());
        let watcher = steward_engine::doorbell::watch(&options.data_dir, bell.clone())
            .map(|w| Box::new(w) as Box<dyn std::any::Any>);
        EventLoop {
            events: engine.as_ref().map(|e| e.subscribe()),
            engine,
            asks,
            loader,
            inbox,
            messages,
            keys: terminal_events(pause.clone()),
            pause,
            bell,
            _watcher: watcher,
            options: options.clone(),
            started: std::time::Instant::now(),
        }
    }

    async fn run(&mut self, app: &mut App, taken: &mut Taken) -> std::io::Result<Leave> {
        let mut events = self.events.take();
        let mut dirty = true;
        let mut last_frame = Instant::now() - FRAME;
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leave = Leave::Quit;
        // Closing the window (SIGHUP) or `kill` (SIGTERM) leaves as `q` does: the
        // terminal is restored and running turns are reconciled, never abandoned.
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        self.loader.request(view_of(app));
        loop {
            if dirty && last_frame.elapsed() >= FRAME {
                if !app.running.is_empty() {
                    app.frame += 1;
                }
                taken.terminal.draw(|f| view(app, f))?;
                last_frame = Instant::now();
                dirty = false;
            }
            if app.quit {
                return Ok(leave);
            }
            let next_frame = last_frame + FRAME;
            let msg = tokio::select! {
                Some(event) = self.keys.recv() => match event {
                    Event::Key(key) => Msg::Key(key),
                    Event::Paste(text) => Msg::Paste(text),
                    Event::Resize(width, height) => Msg::Resize(width, height),
                    Event::Mouse(mouse) => match mouse.kind {
                        MouseEventKind::ScrollUp => Msg::Wheel { up: true },
                        MouseEventKind::ScrollDown => Msg::Wheel { up: false },
                        _ => continue,
                    },
                    _ => continue,
                },
                _ = terminate.recv() => Msg::Terminate,
                _ = hangup.recv() => Msg::Terminate,
                Some(msg) = self.messages.recv() => msg,
                event = recv_engine(&mut events) => match event {
                    Some(event) => Msg::Engine(event),
                    None => Msg::Changed,
                },
                Some(ask) = recv_ask(&mut self.asks) => {
                    let (id, request) = self.asks.as_mut().expect("asks exist").hold(ask);
                    Msg::Permission { id, request }
                }
                _ = self.bell.notified() => Msg::Changed,
                _ = poll.tick(), if self._watcher.is_none() => Msg::Changed,
                _ = tick.tick(), if app.needs_ticks() => Msg::Tick(self.options.clock.now_ms()),
                _ = tokio::time::sleep_until(next_frame), if dirty => continue,
            };
            dirty = true;
            app.mono_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            app.now_ms = app.now_ms.max(self.options.clock.now_ms());
            for effect in update(app, msg) {
                match effect {
                    // The screen is handed to the editor, and taken back, here.
                    Effect::EditPrompt(prompt) => {
                        let edited = edit_in_editor(taken, &self.pause, &prompt);
                        self.inbox.send(Msg::Edited(edited)).ok();
                    }
                    Effect::Copy(text) => {
                        if let Err(e) = copy_to(taken.terminal.backend_mut(), &text) {
                            self.inbox
                                .send(Msg::Done(Err(format!("cannot copy: {e}"))))
                                .ok();
                        }
                    }
                    effect => {
                        if let Some(chosen) = self.carry_out(app, effect) {
                            leave = chosen;
                        }
                    }
                }
            }
        }
    }

    /// Carries out one effect. Engine work runs in tasks that report back through
    /// the inbox, so the screen keeps drawing meanwhile.
    fn carry_out(&mut self, app: &mut App, effect: Effect) -> Option<Leave> {
        match effect {
            Effect::Load(view) => self.loader.request(*view),
            Effect::Submit { session, prompt } => {
                let engine = self.engine.clone()?;
                let inbox = self.inbox.clone();
                let cwd = self.options.cwd.display().to_string();
                tokio::spawn(async move {
                    // A first prompt creates its session in the transaction that
                    // admits it: a refused prompt leaves no empty session behind.
                    let result = match session {
                        Some(id) => engine.submit(&id, &prompt).await.map(drop),
                        None => {
                            let title = steward_engine::store::sessions::title_from(&prompt);
                            engine
                                .submit_new(&title, &cwd, &prompt)
                                .await
                                .map(|(created, _)| {
                                    let _ = inbox.send(Msg::Created(created));
                                })
                        }
                    };
                    if let Err(e) = result {
                        let error = e.to_string();
                        let _ = inbox.send(Msg::SubmitFailed { prompt, error });
                    }
                });
            }
            Effect::Cancel(session) => {
                if let Some(engine) = &self.engine {
                    engine.cancel(&session);
                }
            }
            Effect::Act {
                act,
                execution_id,
                from_panel,
            } => {
                let engine = self.engine.clone()?;
                let inbox = self.inbox.clone();
                tokio::spawn(async move {
                    let result = match act {
                        Act::Wake | Act::Retry => {
                            engine.continue_execution(&execution_id).await.map(|c| {
                                format!("{} {execution_id}: {} continues", act.verb(), c.session_id)
                            })
                        }
                        Act::Discard => engine
                            .discard_execution(&execution_id)
                            .await
                            .map(|s| format!("discarded {execution_id} ({s})")),
                    };
                    let _ = inbox.send(Msg::Acted {
                        result: result.map_err(|e| e.to_string()),
                        act,
                        from_panel,
                    });
                });
            }
            Effect::Answer { id, allow, always } => {
                if let Some(asks) = &mut self.asks {
                    asks.answer(id, allow, always);
                }
            }
            Effect::SaveTool { tool } => {
                if let Some(engine) = self.engine.clone() {
                    // File work, off the event loop. Every session may use the tool
                    // without asking only once it is in tools.allow for good.
                    let (path, inbox) = (self.options.config_path.clone(), self.inbox.clone());
                    tokio::task::spawn_blocking(move || {
                        let result =
                            steward_engine::config::save_allowed_tool(&path, &tool).map(|()| {
                                engine.allow_everywhere(&tool);
                                format!("saved `{tool}` to tools.allow in {}", path.display())
                            });
                        let _ = inbox.send(Msg::Done(result));
                    });
                }
            }
            Effect::ChooseModel(session) => {
                let engine = self.engine.clone()?;
                let inbox = self.inbox.clone();
                tokio::spawn(async move {
                    let result = engine.choose_model(&session).await.map(|changed| {
                        if changed {
                            format!("the session runs on {} from here", engine.model())
                        } else {
                            format!("the session runs on {} already", engine.model())
                        }
                    });
                    let _ = inbox.send(Msg::Done(result.map_err(|e| e.to_string())));
                });
            }
            Effect::Housekeep { session, op } => {
                let engine = self.engine.clone()?;
                let inbox = self.inbox.clone();
                tokio::spawn(async move {
                    use crate::app::Housekeep;
                    let result = match &op {
                        Housekeep::Rename(title) => engine
                            .rename_session(&session, title)
                            .await
                            .map(|()| format!("renamed: {title}")),
                        Housekeep::Archive(archived) => {
                            engine.archive_session(&session, *archived).await.map(|_| {
                                if *archived {
                                    "archived: hidden from the list (A shows archived sessions)"
                                        .into()
                                } else {
                                    "no longer archived".into()
                                }
                            })
                        }
                        Housekeep::Delete => engine
                            .delete_session(&session)
                            .await
                            .map(|_| format!("deleted {session}")),
                    };
                    let _ = inbox.send(Msg::Housekept {
                        session,
                        op,
                        result: result.map_err(|e| e.to_string()),
                    });
                });
            }
            Effect::EditPrompt(_) | Effect::Copy(_) => {}
            Effect::Quit { cancel_running } => {
                if cancel_running && let Some(engine) = self.engine.clone() {
                    let (running, inbox) = (app.running.clone(), self.inbox.clone());
                    tokio::spawn(async move {
                        for session in &running {
                            engine.cancel(session);
                        }
                        for session in &running {
                            engine.wait_idle(session).await;
                        }
                        let _ = inbox.send(Msg::Stopped);
                    });
                    return Some(Leave::CancelledAndQuit);
                }
                return Some(Leave::Quit);
            }
        }
        None
    }
}

async fn recv_engine(
    events: &mut Option<tokio::sync::broadcast::Receiver<steward_engine::runner::EngineEvent>>,
) -> Option<steward_engine::runner::EngineEvent> {
    match events {
        Some(events) => match events.recv().await {
            Ok(event) => Some(event),
            Err(RecvError::Lagged(_)) => None,
            Err(RecvError::Closed) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

async fn recv_ask(asks: &mut Option<Asks>) -> Option<crate::permission::Ask> {
    match asks {
        Some(asks) => asks.receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Stops and restarts the input thread, so that a program the screen hands the
/// terminal to (the editor) gets every key.
#[derive(Debug, Default)]
struct InputPause {
    /// Asked to stop reading.
    paused: std::sync::atomic::AtomicBool,
    /// The thread has stopped reading.
    idle: std::sync::atomic::AtomicBool,
}

/// How long the input thread waits for a key before it looks whether it must stop.
const INPUT_POLL: Duration = Duration::from_millis(250);

impl InputPause {
    /// Stops the thread reading; returns once it has stopped (or after a second).
    fn pause(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.idle.store(false, SeqCst);
        self.paused.store(true, SeqCst);
        let deadline = std::time::Instant::now() + INPUT_POLL * 4;
        while !self.idle.load(SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn resume(&self) {
        self.paused
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Terminal events, read on their own thread. It waits for a key in a blocking
/// poll, waking only a few times a second to see whether it must stop reading.
fn terminal_events(pause: Arc<InputPause>) -> mpsc::UnboundedReceiver<Event> {
    use std::sync::atomic::Ordering::SeqCst;
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("steward-tui-input".into())
        .spawn(move || {
            loop {
                if pause.paused.load(SeqCst) {
                    pause.idle.store(true, SeqCst);
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                match event::poll(INPUT_POLL) {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(_) => return,
                }
                let Ok(event) = event::read() else {
                    return;
                };
                if sender.send(event).is_err() {
                    return;
                }
            }
        })
        .expect("spawn the input thread");
    receiver
}

/// Suspends the screen, runs `$VISUAL` (or `$EDITOR`) on a private temporary file
/// holding `prompt`, takes the screen back and returns what the editor left: the
/// new prompt, or why there is none (the prompt is then left as it was).
fn edit_in_editor(taken: &mut Taken, pause: &InputPause, prompt: &str) -> Result<String, String> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .ok_or("set $VISUAL or $EDITOR to edit the prompt in an editor")?;
    let file = tempfile::Builder::new()
        .prefix("steward-prompt-")
        .suffix(".md")
        .tempfile()
        .map_err(|e| format!("cannot create the prompt's file: {e}"))?;
    std::fs::write(file.path(), prompt)
        .map_err(|e| format!("cannot write the prompt's file: {e}"))?;
    pause.pause();
    crate::terminal::restore();
    // Through the shell, so that an editor with arguments (`code --wait`) works.
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("steward-editor")
        .arg(file.path())
        .status();
    let back = taken.resume();
    pause.resume();
    back.map_err(|e| format!("cannot take the terminal back: {e}"))?;
    match status {
        Ok(status) if status.success() => {
            let text = std::fs::read_to_string(file.path())
                .map_err(|e| format!("cannot read what {editor} wrote: {e}"))?;
            Ok(text.strip_suffix('\n').unwrap_or(&text).to_string())
        }
        Ok(status) => Err(format!("{editor} exited with {status}")),
        Err(e) => Err(format!("cannot run {editor}: {e}")),
    }
}

/// The OSC 52 sequence that puts `text` on the terminal's clipboard (tmux passes it
/// on with `set-clipboard on`).
pub fn osc52(text: &str) -> Vec<u8> {
    let mut out = b"\x1b]52;c;".to_vec();
    out.extend(base64(text.as_bytes()).into_bytes());
    out.push(0x07);
    out
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Writes the clipboard sequence for `text` to `out`.
pub fn copy_to(out: &mut impl std::io::Write, text: &str) -> std::io::Result<()> {
    out.write_all(&osc52(text))?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osc52_puts_base64_text_between_the_sequence_and_bel() {
        let mut out = Vec::new();
        copy_to(&mut out, "héllo\n").unwrap();
        assert_eq!(out, b"\x1b]52;c;aMOpbGxvCg==\x07");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
