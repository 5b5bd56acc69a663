//! Keys: which contexts a key is looked up in, typing into the prompt and the
//! filter, and the actions keys stand for.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use steward_engine::inspect::pages::{ClaimOrder, PageRequest};

use super::*;
use crate::app::Housekeep;

/// The contexts a key is looked up in, most specific first.
pub(super) fn contexts(app: &App) -> Vec<Context> {
    match app.overlay.last() {
        Some(Overlay::Help { .. }) => return vec![Context::Help, Context::Always],
        // Only the panel's own keys: a word typed at launch must not quit.
        Some(Overlay::Panel { .. }) => return vec![Context::Panel, Context::Always],
        Some(Overlay::Confirm { .. } | Overlay::Quit { .. }) => {
            return vec![Context::Confirm, Context::Always];
        }
        Some(Overlay::Permission { .. }) => return vec![Context::Permission, Context::Always],
        Some(Overlay::Rename { .. }) => return vec![Context::Rename, Context::Always],
        Some(Overlay::Delete { .. }) => return vec![Context::Confirm, Context::Always],
        None => {}
    }
    match app.screen {
        Screen::Inspector if app.inspector.editing_filter => vec![Context::Filter, Context::Always],
        Screen::Chat if app.pane == Pane::Sessions && app.sessions.editing_filter => {
            vec![Context::Filter, Context::Always]
        }
        Screen::Chat
            if app.pane == Pane::Transcript
                && app.transcript.search.as_ref().is_some_and(|s| s.editing) =>
        {
            vec![Context::Search, Context::Always]
        }
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

pub(super) fn on_key(app: &mut App, key: KeyEvent) -> Vec<Effect> {
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
    if std::mem::take(&mut app.chord)
        && key.code == KeyCode::Char('e')
        && key.modifiers.contains(KeyModifiers::CONTROL)
        && app.overlay.is_empty()
        && app.screen == Screen::Chat
        && app.pane == Pane::Prompt
    {
        return vec![Effect::EditPrompt(app.prompt.lines().join("\n"))];
    }
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
pub(super) fn is_answer(action: KeyAction) -> bool {
    use KeyAction as A;
    matches!(
        action,
        A::Yes | A::CancelAndQuit | A::AllowOnce | A::AllowAlways | A::AllowAndSave | A::Deny
    )
}

/// Whether a key came too soon — after the question appeared, or after typing —
/// to be an answer to the question rather than typing (or an Esc meant for the
/// turn) that ran on.
pub(super) fn typed_ahead(app: &App) -> bool {
    app.mono_ms.saturating_sub(app.overlay_since) < TYPE_AHEAD_MS
        || app.mono_ms.saturating_sub(app.last_typed_ms) < TYPE_AHEAD_MS
}

/// A key no binding takes: text for the prompt or the filter.
pub(super) fn type_key(app: &mut App, key: KeyEvent) -> Vec<Effect> {
    if let Some(Overlay::Rename { title, .. }) = app.overlay.last_mut() {
        edit_line(title, key);
        app.last_typed_ms = app.mono_ms;
        return Vec::new();
    }
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
    if app.screen == Screen::Chat && app.pane == Pane::Sessions && app.sessions.editing_filter {
        app.last_typed_ms = app.mono_ms;
        if edit_line(&mut app.sessions.filter, key) {
            return refilter_sessions(app);
        }
        return Vec::new();
    }
    if app.screen == Screen::Chat
        && app.pane == Pane::Transcript
        && let Some(search) = app.transcript.search.as_mut().filter(|s| s.editing)
    {
        app.last_typed_ms = app.mono_ms;
        if edit_line(&mut search.query, key) {
            search.current = None;
        }
        return Vec::new();
    }
    if app.screen == Screen::Chat && app.pane == Pane::Prompt {
        app.last_typed_ms = app.mono_ms;
        app.prompt.input(key);
    }
    Vec::new()
}

/// Types `key` into a one-line text; whether it changed.
fn edit_line(text: &mut String, key: KeyEvent) -> bool {
    match key.code {
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            text.push(c);
            true
        }
        KeyCode::Backspace => text.pop().is_some(),
        _ => false,
    }
}

/// The session list's filter changed: its first matching page.
pub(super) fn refilter_sessions(app: &mut App) -> Vec<Effect> {
    app.sessions.request = PageRequest::first(PAGE);
    app.sessions.selected = 0;
    vec![load(app)]
}

/// The filter changed: the table shows its first matching page.
pub(super) fn refilter(app: &mut App) -> Vec<Effect> {
    app.inspector.request = PageRequest {
        reverse: app.inspector.request.reverse,
        ..PageRequest::first(PAGE)
    };
    app.inspector.selected = 0;
    app.inspector.detail_scroll = 0;
    vec![load(app)]
}

pub(super) fn act(app: &mut App, action: KeyAction) -> Vec<Effect> {
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
            // Another process runs it: only that process can cancel its turn.
            Some(_) => {
                if let Some((owner, pid)) = &app.transcript.holder
                    && app.owner_id.as_deref() != Some(owner.as_str())
                {
                    app.status = Some(format!(
                        "this turn runs in another Steward process (pid {pid}, {}): only that process can cancel it, from where it was started; or end that process (kill {pid}; a stopped one ends only once continued: kill -CONT {pid}) and the turn is reconciled",
                        crate::view::short_id(owner)
                    ));
                }
                Vec::new()
            }
            None => Vec::new(),
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
        A::ChooseModel => match app.current_session() {
            Some(session) if app.mode == crate::app::Mode::Chat => {
                vec![Effect::ChooseModel(session.to_string())]
            }
            _ => Vec::new(),
        },
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
            if app.screen == Screen::Chat {
                app.sessions.editing_filter = true;
            } else {
                app.inspector.editing_filter = true;
            }
            Vec::new()
        }
        A::ClearText => clear_text(app),
        A::Search => {
            app.transcript.search = Some(crate::app::Search {
                editing: true,
                ..Default::default()
            });
            Vec::new()
        }
        A::NextMatch => {
            super::find::next_match(app, true);
            Vec::new()
        }
        A::PrevMatch => {
            super::find::next_match(app, false);
            Vec::new()
        }
        A::Copy | A::CopyBlock => super::find::copy(app, action == A::CopyBlock),
        A::Rename | A::Archive | A::Delete => housekeep(app, action),
        A::ShowArchived => {
            app.sessions.archived = !app.sessions.archived;
            app.status = Some(if app.sessions.archived {
                "archived sessions are listed too (marked archived): A hides them".into()
            } else {
                "archived sessions are hidden: A lists them too".into()
            });
            refilter_sessions(app)
        }
        A::EditorChord => {
            app.chord = true;
            app.status = Some("Ctrl-X: Ctrl-E edits the prompt in $EDITOR".into());
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
            Some(Overlay::Delete { session, .. }) => {
                app.status = Some(format!("deleting {session}…"));
                vec![Effect::Housekeep {
                    session,
                    op: Housekeep::Delete,
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

pub(super) fn send(app: &mut App) -> Vec<Effect> {
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

pub(super) fn fresh_prompt() -> ratatui_textarea::TextArea<'static> {
    let mut prompt = ratatui_textarea::TextArea::default();
    prompt.set_cursor_line_style(ratatui::style::Style::default());
    prompt.set_placeholder_text("Write to the agent…");
    prompt
}

pub(super) fn quit(app: &mut App) -> Vec<Effect> {
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

/// Ctrl-U: clears what is being typed.
fn clear_text(app: &mut App) -> Vec<Effect> {
    if let Some(Overlay::Rename { title, .. }) = app.overlay.last_mut() {
        title.clear();
        return Vec::new();
    }
    if app.screen == Screen::Inspector && app.inspector.editing_filter {
        app.inspector.filter.clear();
        return refilter(app);
    }
    if app.screen == Screen::Chat && app.pane == Pane::Sessions && app.sessions.editing_filter {
        app.sessions.filter.clear();
        return refilter_sessions(app);
    }
    if let Some(search) = app.transcript.search.as_mut() {
        search.query.clear();
        search.current = None;
    }
    Vec::new()
}

/// `r`, `a` and `d` on the selected session: rename (asks for the title), archive
/// or bring back, delete (asks first). The engine refuses, with the reason, while
/// anything holds the session.
fn housekeep(app: &mut App, action: KeyAction) -> Vec<Effect> {
    if app.mode != Mode::Chat {
        return Vec::new();
    }
    let Some(s) = app.sessions.rows.get(app.sessions.selected) else {
        return Vec::new();
    };
    let (session, title) = (s.id.clone(), s.title.clone());
    match action {
        KeyAction::Rename => {
            app.overlay.push(Overlay::Rename { session, title });
            Vec::new()
        }
        KeyAction::Delete => {
            app.overlay.push(Overlay::Delete { session, title });
            Vec::new()
        }
        _ => vec![Effect::Housekeep {
            session,
            op: Housekeep::Archive(!s.archived),
        }],
    }
}
