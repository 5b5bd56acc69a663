//! Moving around: tabs, rows and pages, the transcript's scroll, opening and
//! closing what is selected.

use steward_engine::inspect::pages::{ClaimOrder, PageRequest};

use super::*;

pub(super) fn switch_tab(app: &mut App, tab: Tab) {
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

pub(super) fn empty_rows(tab: Tab) -> Rows {
    match tab {
        Tab::Claims => Rows::Claims(Vec::new()),
        Tab::Quarantine => Rows::Quarantine(Vec::new()),
        Tab::Wakes => Rows::Wakes(Vec::new()),
        Tab::Recoveries => Rows::Recoveries(Vec::new()),
        Tab::Owners => Rows::Owners(Vec::new()),
        Tab::Servers => Rows::Servers(Vec::new()),
    }
}

/// Moves the selection (or the scroll) of what has the focus; at the edge of a page
/// the next or previous page is loaded, and `g`/`G` go to the first or last page.
pub(super) fn navigate(app: &mut App, action: KeyAction) -> Vec<Effect> {
    use KeyAction as A;
    match app.overlay.last_mut() {
        Some(Overlay::Help { scroll }) => {
            // From where the view is (the window may have grown since).
            *scroll = (*scroll).min(app.hidden.get().help);
            let page = app.hidden.get().help_height.saturating_sub(1).max(1);
            *scroll = match action {
                A::Up => scroll.saturating_sub(1),
                A::Down => *scroll + 1,
                A::PageUp => scroll.saturating_sub(page),
                A::PageDown => *scroll + page,
                A::Top => 0,
                _ => *scroll,
            };
            // No further than the last line the view drew.
            *scroll = (*scroll).min(app.hidden.get().help);
            return Vec::new();
        }
        Some(Overlay::Panel { lines, selected }) => {
            *selected = step(*selected, lines.len(), action, 10);
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
        i.selected = step(i.selected, n, action, app.hidden.get().table);
        return Vec::new();
    }
    match app.pane {
        Pane::Sessions => {
            let list = &mut app.sessions;
            let n = list.rows.len();
            if matches!(action, A::Down | A::PageDown) && list.selected + 1 >= n && n == PAGE {
                list.request = PageRequest {
                    after: list.rows.last().map(crate::app::session_key),
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
                    before: list.rows.first().map(crate::app::session_key),
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
            list.selected = step(list.selected, n, action, app.hidden.get().list);
            Vec::new()
        }
        Pane::Transcript => scroll_transcript(app, action),
        Pane::Prompt => Vec::new(),
    }
}

/// Scrolls the transcript by what the last frame drew: up holds the view at a line
/// (anchored to the first message loaded), down to the end follows the newest line
/// again. Reaching the top of what is loaded loads an older page, if any.
pub(super) fn scroll_transcript(app: &mut App, action: KeyAction) -> Vec<Effect> {
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

/// The selection after `action` in a list of `len` rows that shows `page` at once
/// (PgUp/PgDn move that many).
pub(super) fn step(selected: usize, len: usize, action: KeyAction, page: usize) -> usize {
    use KeyAction as A;
    let last = len.saturating_sub(1);
    let page = page.max(1);
    match action {
        A::Up => selected.saturating_sub(1),
        A::Down => (selected + 1).min(last),
        A::PageUp => selected.saturating_sub(page),
        A::PageDown => (selected + page).min(last),
        A::Top => 0,
        A::Bottom => last,
        _ => selected,
    }
}

pub(super) fn open(app: &mut App) -> Vec<Effect> {
    if let Some(Overlay::Rename { session, title }) = app.overlay.last() {
        if title.trim().is_empty() {
            app.status = Some("a title cannot be empty: type one, or Esc".into());
            return Vec::new();
        }
        let (session, title) = (session.clone(), title.trim().to_string());
        app.overlay.pop();
        return vec![Effect::Housekeep {
            session,
            op: crate::app::Housekeep::Rename(title),
        }];
    }
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
    if app.pane == Pane::Sessions && app.sessions.editing_filter {
        app.sessions.editing_filter = false;
        return Vec::new();
    }
    if app.pane == Pane::Transcript
        && let Some(search) = app.transcript.search.as_mut().filter(|s| s.editing)
    {
        search.editing = false;
        super::find::next_match(app, true);
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
pub(super) fn open_session(app: &mut App, session_id: &str) -> Vec<Effect> {
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
            archived: false,
        });
    }
    vec![load(app)]
}

pub(super) fn close(app: &mut App) -> Vec<Effect> {
    if matches!(
        app.overlay.last(),
        Some(Overlay::Help { .. } | Overlay::Panel { .. } | Overlay::Rename { .. })
    ) {
        app.overlay.pop();
        return Vec::new();
    }
    if app.screen == Screen::Chat && app.pane == Pane::Sessions && app.sessions.editing_filter {
        app.sessions.editing_filter = false;
        app.sessions.filter.clear();
        return super::keys::refilter_sessions(app);
    }
    if app.screen == Screen::Chat && app.pane == Pane::Transcript && app.transcript.search.is_some()
    {
        app.transcript.search = None;
        return Vec::new();
    }
    if app.screen == Screen::Inspector && app.inspector.editing_filter {
        app.inspector.editing_filter = false;
        app.inspector.filter.clear();
        return refilter(app);
    }
    Vec::new()
}
