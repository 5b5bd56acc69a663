//! The pure update: `(App, Msg) -> effects`. No I/O here; whatever needs the engine
//! or the file is returned as an [`Effect`] for the runtime to carry out. This file
//! takes the messages and what loads bring back; keys and their actions are in
//! `keys`, moving around in `navigate`, the inspector's actions, permission answers
//! and the after-crash panel in `questions`.

use steward_engine::coordinator::SessionOutcome;
use steward_engine::inspect::pages::PageRequest;
use steward_engine::message::{EXECUTION_INTERRUPTED_BY_RESTART, PROVIDER_OUTCOME_UNKNOWN};
use steward_engine::phase::Phase;
use steward_engine::runner::EngineEvent;

use crate::app::{
    Act, App, Effect, Extent, LastRecovery, Launch, Loaded, Mode, Msg, Overlay, PAGE, Pane,
    PanelLine, Rows, Screen, TRANSCRIPT_PAGE, TYPE_AHEAD_MS, Tab, View,
};
use crate::keymap::{Context, KeyAction, lookup};

/// Applies `msg` to `app`; returns what the runtime must do.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    let top = overlay_identity(app);
    let effects = handle(app, msg);
    if overlay_identity(app) != top {
        app.overlay_since = app.mono_ms;
    }
    effects
}

/// What identifies the overlay on top (to tell when a new one appears; one added
/// underneath does not count).
fn overlay_identity(app: &App) -> (Option<std::mem::Discriminant<Overlay>>, Option<u64>) {
    let top = app.overlay.last();
    (
        top.map(std::mem::discriminant),
        match top {
            Some(Overlay::Permission { id, .. }) => Some(*id),
            _ => None,
        },
    )
}

fn handle(app: &mut App, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(key) => {
            let effects = on_key(app, key);
            app.last_key_ms = app.mono_ms;
            effects
        }
        Msg::Paste(text) => {
            // Terminals send CR (or CRLF) for the line breaks of a paste.
            let text = text.replace("\r\n", "\n").replace('\r', "\n");
            if !app.overlay.is_empty() {
                return Vec::new();
            }
            if app.screen == Screen::Inspector && app.inspector.editing_filter {
                app.inspector
                    .filter
                    .push_str(text.lines().next().unwrap_or_default());
                return refilter(app);
            } else if app.screen == Screen::Chat && app.pane == Pane::Prompt {
                app.prompt.insert_str(text);
            }
            Vec::new()
        }
        Msg::Resize(width, height) => {
            app.size = (width, height);
            Vec::new()
        }
        Msg::Wheel { up } => {
            if app.too_small() {
                return Vec::new();
            }
            let action = if up { KeyAction::Up } else { KeyAction::Down };
            if app.overlay.is_empty() && app.screen == Screen::Chat && app.pane == Pane::Prompt {
                // The wheel scrolls the conversation, not the prompt.
                app.pane = Pane::Transcript;
                let effects = navigate(app, action);
                app.pane = Pane::Prompt;
                return effects;
            }
            navigate(app, action)
        }
        Msg::Terminate => {
            app.quit = true;
            vec![Effect::Quit {
                cancel_running: false,
            }]
        }

        Msg::Tick(now) => {
            app.now_ms = now;
            Vec::new()
        }
        Msg::Changed => vec![load(app)],
        Msg::Engine(event) => on_engine(app, event),
        Msg::Loaded(loaded) => {
            apply(app, *loaded);
            Vec::new()
        }
        Msg::Permission { id, request } => {
            // A question of a session that is not open (a continuation started at
            // launch) opens it when the chat screen shows no session and nothing is
            // typed, so that its transcript stands behind the question; one that is
            // open stays open, and the inspector stays where it is. Otherwise the
            // question names the session by its title.
            let effects = match app.current_session() {
                None if app.mode == Mode::Chat
                    && app.screen == Screen::Chat
                    && app.prompt.is_empty() =>
                {
                    navigate::open_session(app, &request.session_id)
                }
                _ => Vec::new(),
            };
            // Shown under the questions already open, so a question never replaces
            // the one being read; it comes up when that one is answered.
            let at = app
                .overlay
                .iter()
                .position(|o| matches!(o, Overlay::Permission { .. }))
                .unwrap_or(app.overlay.len());
            app.overlay.insert(
                at,
                Overlay::Permission {
                    id,
                    request,
                    scroll: 0,
                },
            );
            effects
        }
        Msg::Done(result) => {
            app.status = Some(match result {
                Ok(note) => note,
                Err(error) => format!("error: {error}"),
            });
            vec![load(app)]
        }
        Msg::SubmitFailed { prompt, error } => {
            // Nothing was admitted: the text goes back where it was typed, before
            // whatever was typed since.
            app.creating = false;
            let typed = app.prompt.lines().join("\n");
            app.prompt = fresh_prompt();
            app.prompt.insert_str(prompt);
            if !typed.trim().is_empty() {
                app.prompt.insert_newline();
                app.prompt.insert_str(typed);
            }
            app.status = Some(format!("error: {error}"));
            vec![load(app)]
        }
        Msg::Acted {
            result,
            act,
            from_panel,
        } => {
            if result.is_ok()
                && let Some(i) = from_panel
            {
                for overlay in &mut app.overlay {
                    if let Overlay::Panel { lines, .. } = overlay
                        && let Some(line) = lines.get_mut(i)
                    {
                        line.done = Some(match act {
                            Act::Wake | Act::Retry => "woken".into(),
                            Act::Discard => "discarded".into(),
                        });
                    }
                }
            }
            handle(app, Msg::Done(result))
        }
        Msg::Stopped => {
            app.quit = true;
            Vec::new()
        }
        Msg::Created(session) => {
            app.creating = false;
            app.transcript = Default::default();
            app.transcript.session = Some(session);
            app.pane = Pane::Prompt;
            app.screen = Screen::Chat;
            // The new session tops the first page: select it there.
            app.sessions.request = PageRequest::first(PAGE);
            app.sessions.selected = 0;
            app.sessions.keep_selection = true;
            vec![load(app)]
        }
        Msg::Housekept {
            session,
            op,
            result,
        } => {
            if result.is_ok()
                && op == crate::app::Housekeep::Delete
                && app.current_session() == Some(session.as_str())
            {
                app.transcript = Default::default();
            }
            handle(app, Msg::Done(result))
        }
        Msg::Edited(Ok(text)) => {
            app.prompt = fresh_prompt();
            app.prompt.insert_str(text);
            app.status = Some("the prompt is as the editor left it: Enter sends it".into());
            Vec::new()
        }
        Msg::Edited(Err(error)) => {
            app.status = Some(format!("the prompt is as it was: {error}"));
            Vec::new()
        }
        Msg::Launched(launch) => {
            let lines = panel_lines(&launch);
            if let Some(report) = &launch.report
                && !(report.recovered.is_empty() && report.quarantined.is_empty())
            {
                app.last_recovery = Some(LastRecovery {
                    at_ms: launch.at_ms,
                    executions: report.recovered.len() + report.quarantined.len(),
                });
            }
            let (open, note) = (launch.open.clone(), launch.note.clone());
            app.launch = launch;
            if let Some(note) = note {
                app.status = Some(note);
            }
            if !lines.is_empty() {
                app.overlay.push(Overlay::Panel { lines, selected: 0 });
            }
            match open {
                // The panel, when there is one, stays on top of it.
                Some(session) => open_session(app, &session),
                None => vec![load(app)],
            }
        }
    }
}

/// What the screen shows, to be (re)loaded.
pub fn view_of(app: &App) -> View {
    let mut table_request = app.inspector.request.clone();
    table_request.filter = Some(app.inspector.filter.clone()).filter(|f| !f.is_empty());
    View {
        sessions: (app.mode == Mode::Chat).then(|| sessions_request(app)),
        archived: app.sessions.archived,
        transcript: app
            .current_session()
            .map(|s| (s.to_string(), transcript_extent(app))),
        table: (app.screen == Screen::Inspector).then_some((
            app.inspector.tab,
            app.inspector.order,
            table_request,
        )),
        owner_id: app.owner_id.clone(),
    }
}

/// The session list's page, with its filter.
fn sessions_request(app: &App) -> PageRequest {
    let mut request = app.sessions.request.clone();
    request.filter = Some(app.sessions.filter.clone()).filter(|f| !f.is_empty());
    request
}

/// Which messages the transcript loads: the newest page (or as many as are
/// loaded), or — while the view is held — everything from where it was held.
fn transcript_extent(app: &App) -> Extent {
    let t = &app.transcript;
    match (t.scroll, t.pin) {
        (Some(_), Some((seq, older))) => Extent::From { seq, older },
        _ => Extent::Newest(t.loaded.max(TRANSCRIPT_PAGE)),
    }
}

fn load(app: &App) -> Effect {
    Effect::Load(Box::new(view_of(app)))
}

fn on_engine(app: &mut App, event: EngineEvent) -> Vec<Effect> {
    match event {
        EngineEvent::Retrying {
            session_id,
            attempt,
            of,
            at_ms,
            error,
        } => {
            app.retrying.insert(
                session_id,
                crate::app::Retry {
                    at_ms,
                    attempt,
                    of,
                    error,
                },
            );
            Vec::new()
        }
        EngineEvent::ToolOutput { call_id, text, .. } => {
            let kept = app.live.entry(call_id).or_default();
            kept.push_str(&text);
            if kept.len() > crate::app::LIVE_BYTES {
                let mut cut = kept.len() - crate::app::LIVE_BYTES;
                while !kept.is_char_boundary(cut) {
                    cut += 1;
                }
                kept.drain(..cut);
            }
            Vec::new()
        }
        EngineEvent::Committed(record) => {
            // A call that ended shows what it kept, not what streamed.
            if let steward_engine::events::Event::ToolCompleted { call_id, .. }
            | steward_engine::events::Event::ToolFailed { call_id, .. } = &record.event
            {
                app.live.remove(call_id);
            }
            // The step (or the compaction) answered or ended: no retry waits any more.
            if matches!(
                record.event,
                steward_engine::events::Event::StepText { .. }
                    | steward_engine::events::Event::CompactionEnded { .. }
                    | steward_engine::events::Event::StepEnded { .. }
                    | steward_engine::events::Event::StepFailed { .. }
                    | steward_engine::events::Event::StepInterrupted { .. }
            ) {
                app.retrying.remove(&record.session_id);
            }
            if matches!(
                record.event,
                steward_engine::events::Event::StepRecovered { .. }
            ) {
                // A recovery after launch (a crash elsewhere, reconciled here).
                let executions = match app.last_recovery {
                    Some(last) if record.time_created - last.at_ms < 1_000 => last.executions + 1,
                    _ => 1,
                };
                app.last_recovery = Some(LastRecovery {
                    at_ms: record.time_created,
                    executions,
                });
            }
            vec![load(app)]
        }
        EngineEvent::Finished { .. } => vec![load(app)],
        EngineEvent::Running { session_id } => {
            app.failures.remove(&session_id);
            app.running.insert(session_id);
            Vec::new()
        }
        EngineEvent::Idle {
            session_id,
            outcome,
        } => {
            app.running.remove(&session_id);
            app.retrying.remove(&session_id);
            on_turn_ended(app, &session_id, &outcome);
            if app
                .status
                .as_deref()
                .is_some_and(|s| s.starts_with("cancelling"))
                && app.current_session() == Some(session_id.as_str())
            {
                app.status = None;
            }
            // A permission question of a session that stopped can no longer matter.
            app.overlay.retain(|o| {
                !matches!(o, Overlay::Permission { request, .. } if request.session_id == session_id)
            });
            // Nor does asking before quitting, once nothing runs.
            let mut moot = false;
            for overlay in &mut app.overlay {
                if let Overlay::Quit { running } = overlay {
                    running.retain(|s| *s != session_id);
                    moot = running.is_empty();
                }
            }
            if moot {
                app.overlay.retain(|o| !matches!(o, Overlay::Quit { .. }));
                app.status = Some("nothing runs any more: q quits".into());
            }
            vec![load(app)]
        }
        _ => Vec::new(),
    }
}

/// A turn that did not end as asked is said where the user looks: in the footer
/// when its session is open, and in its transcript (and, while its claim stays
/// behind, its badge) until it runs again.
fn on_turn_ended(app: &mut App, session_id: &str, outcome: &SessionOutcome) {
    use steward_engine::runner::Outcome;
    if !outcome.is_failure() {
        app.failures.remove(session_id);
        return;
    }
    let current = app.current_session() == Some(session_id);
    if let SessionOutcome::Busy { owner_id } = outcome {
        // Not a failure of this turn: another process runs the session, and what
        // it writes appears here as it commits.
        if current {
            app.status = Some(format!(
                "another Steward process ({}) runs this session: its turn shows here as it streams",
                crate::view::short_id(owner_id)
            ));
        }
        return;
    }
    let text = outcome.to_string();
    if matches!(outcome, SessionOutcome::Ran(Outcome::Lost)) {
        // Whichever session it was: another process runs it now, and what this
        // one did not finish is recovered there.
        app.lease_lost = Some((session_id.to_string(), app.now_ms));
        app.status = Some(format!(
            "lease lost: the turn of {} {text}",
            crate::view::short_id(session_id)
        ));
    } else if current {
        app.status = Some(format!("the turn stopped: {text}"));
    }
    app.failures.insert(
        session_id.to_string(),
        crate::app::Failure {
            text,
            holds_claim: matches!(outcome, SessionOutcome::Ran(Outcome::Error(_))),
            at_ms: app.now_ms,
        },
    );
}

/// Takes a load's results into the state, keeping selections on the same rows.
fn apply(app: &mut App, loaded: Loaded) {
    app.now_ms = loaded.now_ms;
    if let Some(servers) = &loaded.servers {
        app.inspector.servers = servers.len();
    }
    if let Some(counts) = loaded.counts {
        app.counts = counts;
        app.inspector.counts = counts;
    }
    if !loaded.errors.is_empty() {
        app.status = Some(format!("cannot read: {}", loaded.errors.join("; ")));
    }
    if let Some(total) = loaded.session_total {
        app.sessions.total = total;
    }
    if loaded.rows.is_some() {
        app.inspector.filtered = loaded.filtered_counts;
    }
    if let Some((request, rows)) = loaded.sessions
        && request == sessions_request(app)
    {
        if rows.is_empty() && !request.is_first() {
            // Past the last row (or before the first): stay on the page shown.
            app.sessions.request = app.sessions.shown.clone();
            app.sessions.selected = if request.after.is_some() {
                app.sessions.rows.len().saturating_sub(1)
            } else {
                0
            };
            return apply_rest(app, loaded.transcript, loaded.rows, loaded.own_claims);
        }
        // A reload of the page shown keeps the selected row; another page (or a
        // new session) keeps the place the move chose.
        let refresh = request == app.sessions.shown && !app.sessions.keep_selection;
        if request != app.sessions.shown || request.is_first() {
            app.sessions.offset = page_offset(
                &request,
                app.sessions.offset,
                app.sessions.rows.len(),
                rows.len(),
                loaded.session_total.unwrap_or(app.sessions.total),
            );
        }
        app.sessions.keep_selection = false;
        app.sessions.shown = request;
        let selected = app
            .sessions
            .rows
            .get(app.sessions.selected)
            .map(|s| s.id.clone())
            .filter(|_| refresh);
        app.sessions.rows = rows;
        app.sessions.selected = selected
            .and_then(|id| app.sessions.rows.iter().position(|s| s.id == id))
            .unwrap_or(app.sessions.selected)
            .min(app.sessions.rows.len().saturating_sub(1));
    }
    apply_rest(app, loaded.transcript, loaded.rows, loaded.own_claims);
}

/// How many rows come before a page just loaded: none before the first, all but
/// its own before the last, and one page more or less than before the page shown
/// when paging forward or back.
fn page_offset(
    request: &PageRequest,
    offset: usize,
    shown: usize,
    loaded: usize,
    total: i64,
) -> usize {
    let total = usize::try_from(total).unwrap_or(0);
    if request.is_first() {
        0
    } else if request.last {
        total.saturating_sub(loaded)
    } else if request.before.is_some() {
        offset.saturating_sub(loaded)
    } else {
        offset + shown
    }
}

fn apply_rest(
    app: &mut App,
    transcript: Option<crate::app::LoadedTranscript>,
    rows: Option<(PageRequest, Rows)>,
    own_claims: Option<Vec<(String, i64)>>,
) {
    // A transcript counts only for the session and the length still asked for.
    if let Some(t) = transcript
        && app.current_session() == Some(t.session.id.as_str())
        && t.extent == transcript_extent(app)
    {
        if app.transcript.scroll.is_some() && app.transcript.anchor.is_none() {
            app.transcript.anchor = app.transcript.messages.first().map(|m| m.id.clone());
        }
        app.transcript.loaded = t.messages.len() + t.unreadable.len();
        app.transcript.messages = t.messages;
        app.transcript.unreadable = t.unreadable;
        app.transcript.pending = t.pending;
        app.transcript.quarantined = t.quarantined;
        app.transcript.holder = t.holder;
        app.transcript.has_older = t.has_older;
        app.transcript.state = t.state;
        app.transcript.session = Some(t.session);
    }
    if let Some((request, rows)) = rows
        && rows.tab() == app.inspector.tab
    {
        let mut current = app.inspector.request.clone();
        current.filter = Some(app.inspector.filter.clone()).filter(|f| !f.is_empty());
        if request == current && rows.is_empty() && !request.is_first() {
            app.inspector.request = app.inspector.shown.clone();
            app.inspector.selected = if request.after.is_some() {
                app.inspector.rows.len().saturating_sub(1)
            } else {
                0
            };
        } else if request == current {
            let refresh = app.inspector.shown == app.inspector.request;
            if !refresh || request.is_first() {
                let total = app.inspector.count(app.inspector.tab);
                app.inspector.offset = page_offset(
                    &request,
                    app.inspector.offset,
                    app.inspector.rows.len(),
                    rows.len(),
                    total,
                );
            }
            app.inspector.shown = app.inspector.request.clone();
            let key = app
                .inspector
                .rows
                .key(app.inspector.selected, app.inspector.order)
                .filter(|_| refresh);
            app.inspector.rows = rows;
            let order = app.inspector.order;
            let n = app.inspector.rows.len();
            app.inspector.selected = key
                .and_then(|k| {
                    (0..n).find(|i| app.inspector.rows.key(*i, order).as_ref() == Some(&k))
                })
                .unwrap_or(app.inspector.selected)
                .min(n.saturating_sub(1));
        }
    }
    if let Some(own) = own_claims {
        app.own_claims = own;
    }
}

mod find;
mod keys;
mod navigate;
mod questions;

use keys::*;
use navigate::*;
pub use questions::panel_lines;
use questions::*;

#[cfg(test)]
mod tests;
