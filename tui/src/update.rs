//! The pure update: `(App, Msg) -> effects`. No I/O here; whatever needs the engine
//! or the file is returned as an [`Effect`] for the runtime to carry out.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use steward_engine::inspect::pages::{ClaimOrder, PageRequest};
use steward_engine::message::{EXECUTION_INTERRUPTED_BY_RESTART, PROVIDER_OUTCOME_UNKNOWN};
use steward_engine::phase::Phase;
use steward_engine::runner::EngineEvent;

use crate::app::{
    Act, App, Effect, Launch, Loaded, Mode, Msg, Overlay, PAGE, Pane, PanelLine, Rows, Screen,
    TRANSCRIPT_PAGE, Tab, View,
};
use crate::keymap::{Context, KeyAction, lookup};

/// Applies `msg` to `app`; returns what the runtime must do.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(key) => on_key(app, key),
        Msg::Paste(text) => {
            if app.inspector.editing_filter {
                app.inspector.filter.push_str(text.trim_end_matches('\n'));
            } else if app.screen == Screen::Chat && app.pane == Pane::Prompt {
                app.prompt.insert_str(text);
            }
            Vec::new()
        }
        Msg::Resize => Vec::new(),

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
            app.overlay.push(Overlay::Permission { id, request });
            Vec::new()
        }
        Msg::Done(result) => {
            app.status = Some(match result {
                Ok(note) => note,
                Err(error) => format!("error: {error}"),
            });
            vec![load(app)]
        }
        Msg::Created(session) => {
            app.transcript = Default::default();
            app.transcript.session = Some(session);
            app.pane = Pane::Prompt;
            app.screen = Screen::Chat;
            app.sessions.request = PageRequest::first(PAGE);
            app.sessions.selected = 0;
            vec![load(app)]
        }
        Msg::Launched(launch) => {
            let lines = panel_lines(&launch);
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
            .map(|s| (s.to_string(), app.transcript.loaded.max(TRANSCRIPT_PAGE))),
        table: (app.screen == Screen::Inspector).then_some((
            app.inspector.tab,
            app.inspector.order,
            table_request,
        )),
        owner_id: app.owner_id.clone(),
    }
}

fn load(app: &App) -> Effect {
    Effect::Load(view_of(app))
}

fn on_engine(app: &mut App, event: EngineEvent) -> Vec<Effect> {
    match event {
        EngineEvent::Committed(_) | EngineEvent::Finished { .. } => vec![load(app)],
        EngineEvent::Running { session_id } => {
            app.running.insert(session_id);
            Vec::new()
        }
        EngineEvent::Idle { session_id } => {
            app.running.remove(&session_id);
            // A permission question of a session that stopped can no longer matter.
            app.overlay.retain(|o| {
                !matches!(o, Overlay::Permission { request, .. } if request.session_id == session_id)
            });
            vec![load(app)]
        }
    }
}

/// Takes a load's results into the state, keeping selections on the same rows.
fn apply(app: &mut App, loaded: Loaded) {
    app.now_ms = loaded.now_ms;
    if let Some(counts) = loaded.counts {
        app.counts = counts;
        app.inspector.counts = counts;
    }
    if let Some((request, rows)) = loaded.sessions
        && request == app.sessions.request
    {
        let selected = app
            .sessions
            .rows
            .get(app.sessions.selected)
            .map(|s| s.id.clone());
        app.sessions.rows = rows;
        app.sessions.selected = selected
            .and_then(|id| app.sessions.rows.iter().position(|s| s.id == id))
            .unwrap_or(app.sessions.selected)
            .min(app.sessions.rows.len().saturating_sub(1));
    }
    if let Some(t) = loaded.transcript
        && app.current_session() == Some(t.session.id.as_str())
    {
        app.transcript.loaded = t.messages.len();
        app.transcript.messages = t.messages;
        app.transcript.pending = t.pending;
        app.transcript.has_older = t.has_older;
        app.transcript.session = Some(t.session);
    }
    if let Some((request, rows)) = loaded.rows
        && rows.tab() == app.inspector.tab
    {
        let mut current = app.inspector.request.clone();
        current.filter = Some(app.inspector.filter.clone()).filter(|f| !f.is_empty());
        if request == current {
            let key = app
                .inspector
                .rows
                .key(app.inspector.selected, app.inspector.order);
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
    if let Some(own) = loaded.own_claims {
        app.own_claims = own;
    }
}

/// The contexts a key is looked up in, most specific first.
fn contexts(app: &App) -> Vec<Context> {
    match app.overlay.last() {
        Some(Overlay::Help { .. }) => return vec![Context::Help, Context::Always],
        Some(Overlay::Panel { .. }) => {
            return vec![Context::Panel, Context::Global, Context::Always];
        }
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
    match lookup(&contexts(app), &key) {
        Some(action) => act(app, action),
        None => {
            type_key(app, key);
            Vec::new()
        }
    }
}

/// A key no binding takes: text for the prompt or the filter.
fn type_key(app: &mut App, key: KeyEvent) {
    if !app.overlay.is_empty() {
        return;
    }
    if app.screen == Screen::Inspector && app.inspector.editing_filter {
        match key.code {
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                app.inspector.filter.push(c)
            }
            KeyCode::Backspace => {
                app.inspector.filter.pop();
            }
            _ => {}
        }
        return;
    }
    if app.screen == Screen::Chat && app.pane == Pane::Prompt {
        app.prompt.input(key);
    }
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
        A::Interrupt => match app.current_session().map(str::to_string) {
            Some(s) if app.current_is_running() && app.overlay.is_empty() => {
                app.status = Some("cancelling the turn…".into());
                vec![Effect::Cancel(s)]
            }
            _ => quit(app),
        },
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
            if app.inspector.tab == Tab::Claims {
                app.inspector.order = match app.inspector.order {
                    ClaimOrder::Created => ClaimOrder::Session,
                    ClaimOrder::Session => ClaimOrder::Created,
                };
                app.inspector.request = PageRequest::first(PAGE);
                app.inspector.selected = 0;
            }
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
            Some(Overlay::Confirm { act, execution_id }) => vec![Effect::Act(act, execution_id)],
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
                app.quit = true;
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
    app.prompt = fresh_prompt();
    app.transcript.scroll = 0;
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
/// the next or previous page is loaded.
fn navigate(app: &mut App, action: KeyAction) -> Vec<Effect> {
    use KeyAction as A;
    match app.overlay.last_mut() {
        Some(Overlay::Help { scroll }) => {
            *scroll = match action {
                A::Up => scroll.saturating_sub(1),
                A::Down => *scroll + 1,
                _ => *scroll,
            };
            return Vec::new();
        }
        Some(Overlay::Panel { lines, selected }) => {
            *selected = step(*selected, lines.len(), action);
            return Vec::new();
        }
        Some(_) => return Vec::new(),
        None => {}
    }
    if app.screen == Screen::Inspector {
        let n = app.inspector.rows.len();
        let edge_down = matches!(action, A::Down | A::PageDown) && app.inspector.selected + 1 >= n;
        let edge_up = matches!(action, A::Up | A::PageUp) && app.inspector.selected == 0;
        let order = app.inspector.order;
        if edge_down && n == PAGE {
            app.inspector.request = PageRequest {
                after: app.inspector.rows.key(n - 1, order),
                ..PageRequest::first(PAGE)
            };
            app.inspector.selected = 0;
            return vec![load(app)];
        }
        if edge_up && app.inspector.request != PageRequest::first(PAGE) {
            app.inspector.request = PageRequest {
                before: app.inspector.rows.key(0, order),
                ..PageRequest::first(PAGE)
            };
            app.inspector.selected = PAGE - 1;
            return vec![load(app)];
        }
        if action == A::Top && app.inspector.request != PageRequest::first(PAGE) {
            app.inspector.request = PageRequest::first(PAGE);
            app.inspector.selected = 0;
            return vec![load(app)];
        }
        app.inspector.selected = step(app.inspector.selected, n, action);
        return Vec::new();
    }
    match app.pane {
        Pane::Sessions => {
            let n = app.sessions.rows.len();
            if matches!(action, A::Down | A::PageDown)
                && app.sessions.selected + 1 >= n
                && n == PAGE
            {
                app.sessions.request = PageRequest {
                    after: app.sessions.rows.last().map(|s| s.id.clone()),
                    ..PageRequest::first(PAGE)
                };
                app.sessions.selected = 0;
                return vec![load(app)];
            }
            if matches!(action, A::Up | A::PageUp)
                && app.sessions.selected == 0
                && app.sessions.request != PageRequest::first(PAGE)
            {
                app.sessions.request = PageRequest {
                    before: app.sessions.rows.first().map(|s| s.id.clone()),
                    ..PageRequest::first(PAGE)
                };
                app.sessions.selected = PAGE - 1;
                return vec![load(app)];
            }
            app.sessions.selected = step(app.sessions.selected, n, action);
            Vec::new()
        }
        Pane::Transcript => {
            let t = &mut app.transcript;
            t.scroll = match action {
                A::Up => t.scroll + 1,
                A::Down => t.scroll.saturating_sub(1),
                A::PageUp => t.scroll + 10,
                A::PageDown => t.scroll.saturating_sub(10),
                A::Top => usize::MAX / 2,
                A::Bottom => 0,
                _ => t.scroll,
            };
            // Scrolling up towards the top of what is loaded loads older messages.
            if matches!(action, A::Up | A::PageUp | A::Top) && t.has_older {
                t.loaded = t.loaded.max(TRANSCRIPT_PAGE) + TRANSCRIPT_PAGE;
                return vec![load(app)];
            }
            Vec::new()
        }
        Pane::Prompt => Vec::new(),
    }
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
                vec![load(app)]
            }
            None => open_session(app, &line.session_id),
        };
    }
    if app.screen == Screen::Inspector {
        if app.inspector.editing_filter {
            app.inspector.editing_filter = false;
            app.inspector.request = PageRequest::first(PAGE);
            app.inspector.selected = 0;
            return vec![load(app)];
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
        app.inspector.request = PageRequest::first(PAGE);
        app.inspector.selected = 0;
        return vec![load(app)];
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
        Some(Overlay::Panel { lines, selected }) => lines
            .get(*selected)
            .map(|l| (l.execution_id.clone(), l.target)),
        Some(_) => return Vec::new(),
        None => {
            let i = app.inspector.selected;
            app.inspector
                .rows
                .execution(i)
                .filter(|_| app.screen == Screen::Inspector)
                .map(|e| (e, Some(app.inspector.tab)))
        }
    };
    let Some((execution_id, _)) = target else {
        app.status = Some(format!("nothing to {} here", act.verb()));
        return Vec::new();
    };
    if let Some(reason) = not_applicable(app, act) {
        app.status = Some(reason);
        return Vec::new();
    }
    app.overlay.push(Overlay::Confirm { act, execution_id });
    Vec::new()
}

/// Why `act` does not apply to the selected inspector row, if it does not.
fn not_applicable(app: &App, act: Act) -> Option<String> {
    if !app.overlay.is_empty() {
        return None;
    }
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
    let Some(Overlay::Permission { id, request }) = app.overlay.pop() else {
        return Vec::new();
    };
    let allow = action != KeyAction::Deny;
    let mut effects = Vec::new();
    if matches!(action, KeyAction::AllowAlways | KeyAction::AllowAndSave) {
        effects.push(Effect::AllowTool {
            tool: request.tool,
            save: action == KeyAction::AllowAndSave,
        });
    }
    effects.push(Effect::Answer { id, allow });
    effects
}

/// The after-crash panel: what the launch recovery did, and what waits on the user.
pub fn panel_lines(launch: &Launch) -> Vec<PanelLine> {
    let Some(report) = &launch.report else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for r in &report.recovered {
        let text = match r.phase {
            Phase::Unknown => PROVIDER_OUTCOME_UNKNOWN,
            Phase::Ready | Phase::Safe => EXECUTION_INTERRUPTED_BY_RESTART,
        };
        let mut detail = Vec::new();
        if r.parked {
            detail.push("parked: interrupted repeatedly, continue with w".to_string());
        } else if launch.auto_continue {
            detail.push("continuation running".to_string());
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
        });
    }
    lines.extend(waiting);
    lines
}

#[cfg(test)]
mod tests;
