//! The pure update: `(App, Msg) -> effects`. No I/O here; whatever needs the engine
//! or the file is returned as an [`Effect`] for the runtime to carry out.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use steward_engine::coordinator::SessionOutcome;
use steward_engine::inspect::pages::{ClaimOrder, PageRequest};
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
            Vec::new()
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
            app.launch = launch;
            if !lines.is_empty() {
                app.overlay.push(Overlay::Panel { lines, selected: 0 });
            }
            vec![load(app)]
        }
    }
}

/// What the screen shows, to be (re)loaded.
pub fn view_of(app: &App) -> View {
    let mut table_request = app.inspector.request.clone();
    table_request.filter = Some(app.inspector.filter.clone()).filter(|f| !f.is_empty());
    View {
        sessions: (app.mode == Mode::Chat).then(|| app.sessions.request.clone()),
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
        EngineEvent::Committed(record) => {
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
    if current {
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
    if let Some(counts) = loaded.counts {
        app.counts = counts;
        app.inspector.counts = counts;
    }
    if !loaded.errors.is_empty() {
        app.status = Some(format!("cannot read: {}", loaded.errors.join("; ")));
    }
    if let Some((request, rows)) = loaded.sessions
        && request == app.sessions.request
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

/// The contexts a key is looked up in, most specific first.
fn contexts(app: &App) -> Vec<Context> {
    match app.overlay.last() {
        Some(Overlay::Help { .. }) => return vec![Context::Help, Context::Always],
        // Only the panel's own keys: a word typed at launch must not quit.
        Some(Overlay::Panel { .. }) => return vec![Context::Panel, Context::Always],
        Some(Overlay::Confirm { .. } | Overlay::Quit { .. }) => {
            return vec![Context::Confirm, Context::Always];
        }
        Some(Overlay::Permission { .. }) => return vec![Context::Permission, Context::Always],
        None => {}
    }
    match app.screen {
        Screen::Inspector if app.inspector.editing_filter => vec![Context::Filter, Context::Always],
        Screen::Inspector => vec![Context::Inspector, Context::Global, Context::Always],
        Screen::Chat => match app.pane {
            Pane::Prompt => vec![Context::Prompt, Context::Always],
            Pane::Sessions => vec![
                Context::Sessions,
                Context::Chat,
                Context::Global,
                Context::Always,
            ],
            Pane::Transcript => {
                vec![
                    Context::Transcript,
                    Context::Chat,
                    Context::Global,
                    Context::Always,
                ]
            }
        },
    }
}

fn on_key(app: &mut App, key: KeyEvent) -> Vec<Effect> {
    if key.kind == ratatui::crossterm::event::KeyEventKind::Release {
        return Vec::new();
    }
    let previous_key = app.last_key_ms;
    app.status = None;
    if app.too_small() {
        // Nothing is visible to type into or act on: only leaving works — and
        // answering the question leaving asks, which the small screen shows.
        if matches!(app.overlay.last(), Some(Overlay::Quit { .. })) {
            return match lookup(&[Context::Confirm], &key) {
                Some(action) if is_answer(action) && typed_ahead(app) => {
                    app.last_typed_ms = app.mono_ms;
                    Vec::new()
                }
                Some(action) => act(app, action),
                None => {
                    app.last_typed_ms = app.mono_ms;
                    Vec::new()
                }
            };
        }
        let quits = matches!(key.code, KeyCode::Char('q'))
            || (key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL));
        return if quits { quit(app) } else { Vec::new() };
    }
    let _ = previous_key;
    match lookup(&contexts(app), &key) {
        Some(action) if is_answer(action) && typed_ahead(app) => {
            app.last_typed_ms = app.mono_ms;
            app.status = Some("typed before the question appeared: read it, then answer".into());
            Vec::new()
        }
        Some(action) => act(app, action),
        None => type_key(app, key),
    }
}

/// Whether `action` answers a question (decides something for the user).
fn is_answer(action: KeyAction) -> bool {
    use KeyAction as A;
    matches!(
        action,
        A::Yes | A::CancelAndQuit | A::AllowOnce | A::AllowAlways | A::AllowAndSave | A::Deny
    )
}

/// Whether a key came too soon — after the question appeared, or after typing —
/// to be an answer to the question rather than typing (or an Esc meant for the
/// turn) that ran on.
fn typed_ahead(app: &App) -> bool {
    app.mono_ms.saturating_sub(app.overlay_since) < TYPE_AHEAD_MS
        || app.mono_ms.saturating_sub(app.last_typed_ms) < TYPE_AHEAD_MS
}

/// A key no binding takes: text for the prompt or the filter.
fn type_key(app: &mut App, key: KeyEvent) -> Vec<Effect> {
    if !app.overlay.is_empty() {
        // A key a question does not take is typing that ran on into it.
        app.last_typed_ms = app.mono_ms;
        return Vec::new();
    }
    if app.screen == Screen::Inspector && app.inspector.editing_filter {
        match key.code {
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                app.last_typed_ms = app.mono_ms;
                app.inspector.filter.push(c)
            }
            KeyCode::Backspace => {
                app.inspector.filter.pop();
            }
            _ => return Vec::new(),
        }
        return refilter(app);
    }
    if app.screen == Screen::Chat && app.pane == Pane::Prompt {
        app.last_typed_ms = app.mono_ms;
        app.prompt.input(key);
    }
    Vec::new()
}

/// The filter changed: the table shows its first matching page.
fn refilter(app: &mut App) -> Vec<Effect> {
    app.inspector.request = PageRequest {
        reverse: app.inspector.request.reverse,
        ..PageRequest::first(PAGE)
    };
    app.inspector.selected = 0;
    app.inspector.detail_scroll = 0;
    vec![load(app)]
}

fn act(app: &mut App, action: KeyAction) -> Vec<Effect> {
    use KeyAction as A;
    match action {
        A::Send => send(app),
        A::Newline => {
            app.prompt.insert_newline();
            Vec::new()
        }
        A::CancelTurn => match app.current_session().map(str::to_string) {
            Some(s) if app.current_is_running() => {
                app.status = Some("cancelling the turn…".into());
                vec![Effect::Cancel(s)]
            }
            _ => Vec::new(),
        },
        A::Interrupt => {
            // With a permission question open, Ctrl-C cancels the turn that asks.
            if let Some(Overlay::Permission { request, .. }) = app.overlay.last() {
                let session = request.session_id.clone();
                app.overlay.pop();
                app.status = Some("cancelling the turn…".into());
                // Not answered: the cancellation ends the wait, and nothing is
                // recorded as the user's denial.
                return vec![Effect::Cancel(session)];
            }
            match app.current_session().map(str::to_string) {
                Some(s) if app.current_is_running() && app.overlay.is_empty() => {
                    app.status = Some("cancelling the turn…".into());
                    vec![Effect::Cancel(s)]
                }
                _ => quit(app),
            }
        }
        A::Quit => quit(app),
        A::NextPane | A::PrevPane => {
            if app.screen == Screen::Chat {
                let order = [Pane::Sessions, Pane::Transcript, Pane::Prompt];
                let i = order.iter().position(|p| *p == app.pane).unwrap_or(2);
                let step = if action == A::NextPane { 1 } else { 2 };
                app.pane = order[(i + step) % 3];
            }
            Vec::new()
        }
        A::Up | A::Down | A::Top | A::Bottom | A::PageUp | A::PageDown => navigate(app, action),
        A::DetailUp => {
            app.inspector.detail_scroll = app.inspector.detail_scroll.saturating_sub(3);
            Vec::new()
        }
        A::DetailDown => {
            let most = u16::try_from(app.hidden.get().detail).unwrap_or(u16::MAX);
            app.inspector.detail_scroll = app.inspector.detail_scroll.saturating_add(3).min(most);
            Vec::new()
        }
        A::NewSession => {
            // A draft: the session is created, in the current directory and titled
            // after the prompt, when the first prompt is sent.
            app.transcript = Default::default();
            app.screen = Screen::Chat;
            app.pane = Pane::Prompt;
            app.status = Some(format!(
                "new session in {}: write the first prompt",
                app.cwd
            ));
            Vec::new()
        }
        A::Open => open(app),
        A::Close => close(app),
        A::ToggleInspector => {
            if app.mode == Mode::Chat {
                app.screen = match app.screen {
                    Screen::Chat => Screen::Inspector,
                    Screen::Inspector => Screen::Chat,
                };
                vec![load(app)]
            } else {
                Vec::new()
            }
        }
        A::NextTab | A::PrevTab | A::Tab(_) => {
            let i = app.inspector.tab.index();
            let next = match action {
                A::NextTab => (i + 1) % Tab::ALL.len(),
                A::PrevTab => (i + Tab::ALL.len() - 1) % Tab::ALL.len(),
                A::Tab(n) => usize::from(n).min(Tab::ALL.len() - 1),
                _ => i,
            };
            switch_tab(app, Tab::ALL[next]);
            vec![load(app)]
        }
        A::Filter => {
            app.inspector.editing_filter = true;
            Vec::new()
        }
        A::CycleSort => {
            // Oldest first, newest first; Claims also by session.
            let reverse = app.inspector.request.reverse;
            let (order, reverse) = match (app.inspector.tab, app.inspector.order, reverse) {
                (Tab::Claims, ClaimOrder::Created, false) => (ClaimOrder::Created, true),
                (Tab::Claims, ClaimOrder::Created, true) => (ClaimOrder::Session, false),
                (Tab::Claims, ClaimOrder::Session, _) => (ClaimOrder::Created, false),
                (_, order, reverse) => (order, !reverse),
            };
            app.inspector.order = order;
            app.inspector.request = PageRequest {
                reverse,
                ..PageRequest::first(PAGE)
            };
            app.inspector.selected = 0;
            vec![load(app)]
        }
        A::Wake => ask(app, Act::Wake),
        A::Discard => ask(app, Act::Discard),
        A::Retry => ask(app, Act::Retry),
        A::Help => {
            app.overlay.push(Overlay::Help { scroll: 0 });
            Vec::new()
        }
        A::Yes => match app.overlay.pop() {
            Some(Overlay::Confirm {
                act,
                execution_id,
                from_panel,
                ..
            }) => vec![Effect::Act {
                act,
                execution_id,
                from_panel,
            }],
            Some(Overlay::Quit { .. }) => {
                app.quit = true;
                vec![Effect::Quit {
                    cancel_running: false,
                }]
            }
            _ => Vec::new(),
        },
        A::CancelAndQuit => match app.overlay.last() {
            Some(Overlay::Quit { .. }) => {
                app.overlay.pop();
                // Quits once the cancelled turns have stopped (`Msg::Stopped`).
                app.quitting = true;
                app.status = Some("cancelling the running turns, then quitting…".into());
                vec![Effect::Quit {
                    cancel_running: true,
                }]
            }
            _ => Vec::new(),
        },
        A::No => {
            app.overlay.pop();
            Vec::new()
        }
        A::AllowOnce | A::AllowAlways | A::AllowAndSave | A::Deny => answer(app, action),
    }
}

fn send(app: &mut App) -> Vec<Effect> {
    let text = app.prompt.lines().join("\n");
    if text.trim().is_empty() {
        return Vec::new();
    }
    if app.creating {
        app.status = Some("the new session is being created: send again in a moment".into());
        return Vec::new();
    }
    app.creating = app.current_session().is_none();
    app.prompt = fresh_prompt();
    app.transcript.scroll = None;
    app.transcript.pin = None;
    vec![Effect::Submit {
        session: app.current_session().map(str::to_string),
        prompt: text,
    }]
}

fn fresh_prompt() -> ratatui_textarea::TextArea<'static> {
    let mut prompt = ratatui_textarea::TextArea::default();
    prompt.set_cursor_line_style(ratatui::style::Style::default());
    prompt.set_placeholder_text("Write to the agent…");
    prompt
}

fn quit(app: &mut App) -> Vec<Effect> {
    if app.quitting {
        return Vec::new();
    }
    if app.running.is_empty() {
        app.quit = true;
        return vec![Effect::Quit {
            cancel_running: false,
        }];
    }
    if !matches!(app.overlay.last(), Some(Overlay::Quit { .. })) {
        app.overlay.push(Overlay::Quit {
            running: app.running.iter().cloned().collect(),
        });
    }
    Vec::new()
}

fn switch_tab(app: &mut App, tab: Tab) {
    if app.inspector.tab != tab {
        app.inspector.tab = tab;
        app.inspector.rows = empty_rows(tab);
        app.inspector.selected = 0;
        app.inspector.request = PageRequest::first(PAGE);
        app.inspector.shown = PageRequest::first(PAGE);
        app.inspector.order = ClaimOrder::Created;
        app.inspector.detail_scroll = 0;
    }
}

fn empty_rows(tab: Tab) -> Rows {
    match tab {
        Tab::Claims => Rows::Claims(Vec::new()),
        Tab::Quarantine => Rows::Quarantine(Vec::new()),
        Tab::Wakes => Rows::Wakes(Vec::new()),
        Tab::Recoveries => Rows::Recoveries(Vec::new()),
        Tab::Owners => Rows::Owners(Vec::new()),
    }
}

/// Moves the selection (or the scroll) of what has the focus; at the edge of a page
/// the next or previous page is loaded, and `g`/`G` go to the first or last page.
fn navigate(app: &mut App, action: KeyAction) -> Vec<Effect> {
    use KeyAction as A;
    match app.overlay.last_mut() {
        Some(Overlay::Help { scroll }) => {
            // From where the view is (the window may have grown since).
            *scroll = (*scroll).min(app.hidden.get().help);
            *scroll = match action {
                A::Up => scroll.saturating_sub(1),
                A::Down => *scroll + 1,
                A::PageUp => scroll.saturating_sub(10),
                A::PageDown => *scroll + 10,
                A::Top => 0,
                _ => *scroll,
            };
            // No further than the last line the view drew.
            *scroll = (*scroll).min(app.hidden.get().help);
            return Vec::new();
        }
        Some(Overlay::Panel { lines, selected }) => {
            *selected = step(*selected, lines.len(), action);
            return Vec::new();
        }
        Some(Overlay::Permission { scroll, .. }) => {
            // No further than the last line the view drew.
            let most = u16::try_from(app.hidden.get().permission).unwrap_or(u16::MAX);
            *scroll = match action {
                A::Up => scroll.saturating_sub(1),
                A::Down => scroll.saturating_add(1),
                _ => *scroll,
            }
            .min(most);
            return Vec::new();
        }
        Some(_) => return Vec::new(),
        None => {}
    }
    if app.screen == Screen::Inspector {
        let i = &mut app.inspector;
        let n = i.rows.len();
        let order = i.order;
        let page = |i: &crate::app::Inspector| PageRequest {
            reverse: i.request.reverse,
            ..PageRequest::first(PAGE)
        };
        let edge_down = matches!(action, A::Down | A::PageDown) && i.selected + 1 >= n;
        let edge_up = matches!(action, A::Up | A::PageUp) && i.selected == 0;
        i.detail_scroll = 0;
        if edge_down && n == PAGE {
            i.request = PageRequest {
                after: i.rows.key(n - 1, order),
                ..page(i)
            };
            i.selected = 0;
            return vec![load(app)];
        }
        if edge_up && !i.shown.is_first() && n > 0 {
            i.request = PageRequest {
                before: i.rows.key(0, order),
                ..page(i)
            };
            i.selected = PAGE - 1;
            return vec![load(app)];
        }
        if action == A::Top && !i.shown.is_first() {
            i.request = page(i);
            i.selected = 0;
            return vec![load(app)];
        }
        if action == A::Bottom && n == PAGE && !i.shown.last {
            i.request = PageRequest {
                last: true,
                ..page(i)
            };
            i.selected = PAGE - 1;
            return vec![load(app)];
        }
        i.selected = step(i.selected, n, action);
        return Vec::new();
    }
    match app.pane {
        Pane::Sessions => {
            let list = &mut app.sessions;
            let n = list.rows.len();
            if matches!(action, A::Down | A::PageDown) && list.selected + 1 >= n && n == PAGE {
                list.request = PageRequest {
                    after: list.rows.last().map(|s| s.id.clone()),
                    ..PageRequest::first(PAGE)
                };
                list.selected = 0;
                return vec![load(app)];
            }
            if matches!(action, A::Up | A::PageUp)
                && list.selected == 0
                && !list.shown.is_first()
                && n > 0
            {
                list.request = PageRequest {
                    before: list.rows.first().map(|s| s.id.clone()),
                    ..PageRequest::first(PAGE)
                };
                list.selected = PAGE - 1;
                return vec![load(app)];
            }
            if action == A::Top && !list.shown.is_first() {
                list.request = PageRequest::first(PAGE);
                list.selected = 0;
                return vec![load(app)];
            }
            if action == A::Bottom && n == PAGE && !list.shown.last {
                list.request = PageRequest::last(PAGE);
                list.selected = PAGE - 1;
                return vec![load(app)];
            }
            list.selected = step(list.selected, n, action);
            Vec::new()
        }
        Pane::Transcript => scroll_transcript(app, action),
        Pane::Prompt => Vec::new(),
    }
}

/// Scrolls the transcript by what the last frame drew: up holds the view at a line
/// (anchored to the first message loaded), down to the end follows the newest line
/// again. Reaching the top of what is loaded loads an older page, if any.
fn scroll_transcript(app: &mut App, action: KeyAction) -> Vec<Effect> {
    use KeyAction as A;
    let t = &mut app.transcript;
    let drawn = t.rendered.get();
    let bottom = drawn.total.saturating_sub(drawn.height);
    let top = match t.scroll {
        None => bottom,
        Some(_) => drawn.top.min(bottom),
    };
    let page = drawn.height.saturating_sub(1).max(1);
    let next = match action {
        A::Up => top.saturating_sub(1),
        A::PageUp => top.saturating_sub(page),
        A::Down => top + 1,
        A::PageDown => top + page,
        A::Top => 0,
        _ => bottom,
    };
    if next >= bottom {
        t.scroll = None;
        t.anchor = None;
        t.pin = None;
        return Vec::new();
    }
    t.scroll = Some(next);
    t.anchor = t.messages.first().map(|m| m.id.clone());
    if t.pin.is_none() {
        t.pin = t.messages.first().map(|m| (m.seq, 0));
    }
    if next == 0 && t.has_older && matches!(action, A::Up | A::PageUp | A::Top) {
        t.loaded = t.loaded.max(TRANSCRIPT_PAGE) + TRANSCRIPT_PAGE;
        if let Some((_, older)) = &mut t.pin {
            *older += TRANSCRIPT_PAGE;
        }
        return vec![load(app)];
    }
    Vec::new()
}

fn step(selected: usize, len: usize, action: KeyAction) -> usize {
    use KeyAction as A;
    let last = len.saturating_sub(1);
    match action {
        A::Up => selected.saturating_sub(1),
        A::Down => (selected + 1).min(last),
        A::PageUp => selected.saturating_sub(10),
        A::PageDown => (selected + 10).min(last),
        A::Top => 0,
        A::Bottom => last,
        _ => selected,
    }
}

fn open(app: &mut App) -> Vec<Effect> {
    if let Some(Overlay::Panel { lines, selected }) = app.overlay.last() {
        let Some(line) = lines.get(*selected).cloned() else {
            return Vec::new();
        };
        app.overlay.pop();
        return match line.target {
            Some(tab) => {
                app.screen = Screen::Inspector;
                switch_tab(app, tab);
                app.inspector.filter = line.execution_id;
                refilter(app)
            }
            None => open_session(app, &line.session_id),
        };
    }
    if app.screen == Screen::Inspector {
        if app.inspector.editing_filter {
            app.inspector.editing_filter = false;
            return refilter(app);
        }
        return Vec::new();
    }
    match app.pane {
        Pane::Sessions => match app.sessions.rows.get(app.sessions.selected) {
            Some(s) => {
                let id = s.id.clone();
                open_session(app, &id)
            }
            None => Vec::new(),
        },
        Pane::Transcript => {
            app.transcript.expanded = !app.transcript.expanded;
            Vec::new()
        }
        Pane::Prompt => Vec::new(),
    }
}

/// Shows `session_id` in the chat.
fn open_session(app: &mut App, session_id: &str) -> Vec<Effect> {
    app.screen = Screen::Chat;
    app.pane = Pane::Prompt;
    if app.current_session() != Some(session_id) {
        app.transcript = Default::default();
        app.transcript.session = Some(steward_engine::projection::SessionRow {
            id: session_id.to_string(),
            title: String::new(),
            directory: String::new(),
            time_created: 0,
            time_updated: 0,
        });
    }
    vec![load(app)]
}

fn close(app: &mut App) -> Vec<Effect> {
    if matches!(
        app.overlay.last(),
        Some(Overlay::Help { .. } | Overlay::Panel { .. })
    ) {
        app.overlay.pop();
        return Vec::new();
    }
    if app.screen == Screen::Inspector && app.inspector.editing_filter {
        app.inspector.editing_filter = false;
        app.inspector.filter.clear();
        return refilter(app);
    }
    Vec::new()
}

/// Asks to confirm an inspector action on the selected row, where it applies.
fn ask(app: &mut App, act: Act) -> Vec<Effect> {
    if app.mode == Mode::ReadOnly {
        app.status = Some(format!(
            "read-only: {} from `steward` (or `steward {}`)",
            act.verb(),
            match act {
                Act::Discard => "discard EXECUTION_ID",
                _ => "wake EXECUTION_ID",
            }
        ));
        return Vec::new();
    }
    let target = match app.overlay.last() {
        Some(Overlay::Panel { lines, selected }) => match lines.get(*selected) {
            Some(line) if line.done.is_some() => {
                app.status = Some(format!(
                    "already {}",
                    line.done.as_deref().unwrap_or_default()
                ));
                return Vec::new();
            }
            Some(line) if !line.actionable => {
                app.status = Some(format!(
                    "{} does not apply: {}",
                    act.verb(),
                    if line.symbol == "↻" {
                        "its continuation runs on its own"
                    } else {
                        "nothing waits here"
                    }
                ));
                return Vec::new();
            }
            Some(line) => Some((
                line.execution_id.clone(),
                Some(*selected),
                format!(
                    "{} · {}",
                    app.launch
                        .titles
                        .get(&line.session_id)
                        .cloned()
                        .unwrap_or_else(|| line.session_id.clone()),
                    line.what
                ),
            )),
            None => None,
        },
        Some(_) => return Vec::new(),
        None => {
            if let Some(reason) = not_applicable(app, act) {
                app.status = Some(reason);
                return Vec::new();
            }
            let i = app.inspector.selected;
            let label = format!(
                "{} row{}",
                app.inspector.tab.title().to_lowercase(),
                app.inspector
                    .rows
                    .session(i)
                    .map(|s| format!(" of session {s}"))
                    .unwrap_or_default()
            );
            app.inspector
                .rows
                .execution(i)
                .filter(|_| app.screen == Screen::Inspector)
                .map(|e| (e, None, label))
        }
    };
    let Some((execution_id, from_panel, label)) = target else {
        app.status = Some(format!("nothing to {} here", act.verb()));
        return Vec::new();
    };
    app.overlay.push(Overlay::Confirm {
        act,
        execution_id,
        label,
        from_panel,
    });
    Vec::new()
}

/// Why `act` does not apply to the selected inspector row, if it does not.
fn not_applicable(app: &App, act: Act) -> Option<String> {
    let i = app.inspector.selected;
    let ok = match (&app.inspector.rows, act) {
        (Rows::Quarantine(r), Act::Retry) => r.get(i).is_some_and(|q| q.kind == "claim"),
        (Rows::Quarantine(_), Act::Wake | Act::Discard) => true,
        (Rows::Wakes(r), Act::Wake | Act::Discard) => {
            r.get(i).is_some_and(|w| w.kind == "recovery")
        }
        (Rows::Recoveries(r), Act::Wake | Act::Discard) => r
            .get(i)
            .is_some_and(|v| v.recovery_error.is_some() || v.wake_pending),
        (Rows::Claims(r), Act::Retry | Act::Discard) => {
            r.get(i).is_some_and(|c| c.claim.recovery_error.is_some())
        }
        _ => false,
    };
    (!ok).then(|| format!("{} does not apply to this row", act.verb()))
}

fn answer(app: &mut App, action: KeyAction) -> Vec<Effect> {
    if matches!(action, KeyAction::AllowAlways | KeyAction::AllowAndSave)
        && matches!(app.overlay.last(), Some(Overlay::Permission { request, .. }) if request.guarded.is_some())
    {
        app.status = Some(
            "a call that touches this path is asked about every time: y allows it once".into(),
        );
        return Vec::new();
    }
    let Some(Overlay::Permission { id, request, .. }) = app.overlay.pop() else {
        return Vec::new();
    };
    let allow = action != KeyAction::Deny;
    let always = matches!(action, KeyAction::AllowAlways | KeyAction::AllowAndSave);
    let mut effects = Vec::new();
    if action == KeyAction::AllowAndSave {
        effects.push(Effect::SaveTool { tool: request.tool });
    }
    effects.push(Effect::Answer { id, allow, always });
    effects
}

/// The after-crash panel: what the launch recovery did, and what waits on the user.
pub fn panel_lines(launch: &Launch) -> Vec<PanelLine> {
    let mut lines = Vec::new();
    if let Some(error) = &launch.error {
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: String::new(),
            execution_id: String::new(),
            what: "not finished".into(),
            detail: format!(
                "recovery did not finish: {error} · it is tried again in the background"
            ),
            target: None,
            actionable: false,
            done: None,
        });
    }
    let Some(report) = &launch.report else {
        return lines;
    };
    for r in &report.recovered {
        let text = match r.phase {
            Phase::Unknown => PROVIDER_OUTCOME_UNKNOWN,
            Phase::Ready | Phase::Safe => EXECUTION_INTERRUPTED_BY_RESTART,
        };
        let mut detail = Vec::new();
        if r.parked {
            detail.push("parked: interrupted repeatedly, continue with w".to_string());
        } else if launch.auto_continue {
            detail.push("continuation started".to_string());
        } else {
            detail.push("continuation waits for you (w)".to_string());
        }
        if !r.stopped_processes.is_empty() {
            detail.push(format!(
                "{} process{} stopped",
                r.stopped_processes.len(),
                if r.stopped_processes.len() == 1 {
                    ""
                } else {
                    "es"
                }
            ));
        }
        lines.push(PanelLine {
            symbol: if r.parked { "⏸" } else { "↻" },
            session_id: r.session_id.clone(),
            execution_id: r.execution_id.clone(),
            what: format!("phase {}", r.phase.as_str()),
            detail: format!("{text} · {}", detail.join(" · ")),
            target: r.parked.then_some(Tab::Quarantine),
            actionable: r.parked || !launch.auto_continue,
            done: None,
        });
    }
    for q in &report.quarantined {
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: q.session_id.clone(),
            execution_id: q.execution_id.clone(),
            what: "quarantined".into(),
            detail: q.reason.clone(),
            target: Some(Tab::Quarantine),
            actionable: true,
            done: None,
        });
    }
    let reported: Vec<&str> = lines.iter().map(|l| l.execution_id.as_str()).collect();
    let mut waiting = Vec::new();
    for (execution_id, session_id, parked) in &launch.wakes {
        if reported.contains(&execution_id.as_str()) {
            continue;
        }
        waiting.push(PanelLine {
            symbol: if *parked { "⏸" } else { "…" },
            session_id: session_id.clone(),
            execution_id: execution_id.clone(),
            what: if *parked {
                "parked wake"
            } else {
                "pending wake"
            }
            .into(),
            detail: if *parked {
                "interrupted repeatedly: continue with w".into()
            } else {
                "waiting to be woken: w wakes it now".into()
            },
            target: Some(if *parked { Tab::Quarantine } else { Tab::Wakes }),
            actionable: true,
            done: None,
        });
    }
    lines.extend(waiting);
    if launch.more_wakes > 0 {
        lines.push(PanelLine {
            symbol: "…",
            session_id: String::new(),
            execution_id: String::new(),
            what: format!("{} more", launch.more_wakes),
            detail: "more wakes wait: see the Wakes tab".into(),
            target: Some(Tab::Wakes),
            actionable: false,
            done: None,
        });
    }
    lines
}

#[cfg(test)]
mod tests;
