//! Rendering: a pure function of the [`App`]. No I/O, no state changes.

mod inspector;
mod overlay;
pub mod transcript;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, List, ListItem, ListState, Paragraph};
use steward_engine::inspect::SessionState;

use crate::app::{App, Mode, Pane, Screen};
use crate::theme::Role;

/// The smallest terminal the layout fits.
pub const MIN_WIDTH: u16 = 50;
pub const MIN_HEIGHT: u16 = 12;
/// Below this width the chat shows one pane at a time.
const TWO_PANES: u16 = 80;

/// Draws the whole screen.
pub fn view(app: &App, frame: &mut Frame) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small(app, frame, area);
        return;
    }
    // A note too long for the footer line (an error) takes lines of its own above
    // the hints, wrapped — up to a third of the screen — rather than being cut at
    // the edge.
    let (note, hints) = footer_lines(app);
    let note_height = note.as_ref().map_or(0, |n| {
        let wrapped = transcript::wrap(vec![n.clone()], area.width).len();
        wrapped.clamp(1, usize::from(area.height / 3).max(3)) as u16
    });
    let footer_height = 1 + note_height;
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(footer_height),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_line(app)), header);
    match app.screen {
        Screen::Chat => chat(app, frame, body),
        Screen::Inspector => inspector::render(app, frame, body),
    }
    let [note_area, hints_area] =
        Layout::vertical([Constraint::Length(note_height), Constraint::Length(1)]).areas(footer);
    if let Some(note) = note {
        frame.render_widget(
            Paragraph::new(transcript::wrap(vec![note], area.width)),
            note_area,
        );
    }
    frame.render_widget(Paragraph::new(hints), hints_area);
    overlay::render(app, frame, area);
}

fn too_small(app: &App, frame: &mut Frame, area: Rect) {
    if let Some(crate::app::Overlay::Quit { running }) = app.overlay.last() {
        let n = running.len();
        let text = vec![
            Line::from(Span::styled("Quit?", app.theme.style(Role::Title))),
            Line::from(format!(
                "{n} turn{} running. y quit (continues at the next launch) · c cancel, then quit · n stay",
                if n == 1 { "" } else { "s" }
            )),
        ];
        frame.render_widget(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    // How to leave comes first: on the smallest terminals nothing after it fits.
    let text = vec![
        Line::from(Span::styled(
            "Terminal too small: q quits",
            app.theme.style(Role::Title),
        )),
        Line::from(format!(
            "{}×{} here; Steward needs at least {MIN_WIDTH}×{MIN_HEIGHT}.",
            area.width, area.height
        )),
        Line::from("Enlarge the window (nothing else works until then)."),
    ];
    frame.render_widget(
        Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
        area,
    );
}

/// `ses_01234567…` → `ses_0123…567`: prefix, head and tail of an id.
pub fn short_id(id: &str) -> String {
    let Some((prefix, rest)) = id.split_once('_') else {
        return id.to_string();
    };
    let chars: Vec<char> = rest.chars().collect();
    if chars.len() <= 10 {
        return id.to_string();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 3..].iter().collect();
    format!("{prefix}_{head}…{tail}")
}

/// The time of day of `ms` in the local zone, `14:02:11`; with the date when it is
/// not today.
pub fn clock_time(app: &App, ms: i64) -> String {
    use steward_engine::clock::Civil;
    let offset = i64::from(app.utc_offset_s) * 1000;
    let (at, today) = (Civil::of(ms + offset), Civil::of(app.now_ms + offset));
    let time = format!("{:02}:{:02}:{:02}", at.hour, at.minute, at.second);
    if at.days == today.days {
        time
    } else {
        format!("{:04}-{:02}-{:02} {time}", at.year, at.month, at.day)
    }
}

/// "in 24.1 s", "3.2 s ago".
pub fn relative(ms: i64) -> String {
    let secs = ms.abs() as f64 / 1000.0;
    let amount = if secs < 60.0 {
        format!("{secs:.1} s")
    } else if secs < 3600.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.0} h", secs / 3600.0)
    };
    if ms >= 0 {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

fn header_line(app: &App) -> Line<'static> {
    let t = &app.theme;
    let mut spans = vec![
        Span::styled(" steward ", t.style(Role::Accent)),
        Span::styled(format!(" {} ", app.data_dir), t.style(Role::Muted)),
    ];
    match &app.owner_id {
        Some(owner) => spans.push(Span::raw(format!(" {} (this) ", short_id(owner)))),
        None => spans.push(Span::styled(" read-only ".to_string(), t.style(Role::Warn))),
    }
    if app.mode == Mode::Chat {
        let (text, role) = lease_health(app);
        spans.push(Span::styled(format!(" {text} "), t.style(role)));
        if let Some((session, at_ms)) = &app.lease_lost {
            // When this process noticed: the takeover itself came earlier, at a time
            // the engine does not report here.
            spans.push(Span::styled(
                format!(
                    " lease lost (noticed {}, {}) ",
                    clock_time(app, *at_ms),
                    short_id(session)
                ),
                t.style(Role::Error),
            ));
        }
    }
    if let Some(last) = &app.last_recovery {
        let n = last.executions;
        spans.push(Span::styled(
            format!(
                " last recovery {} ({n} execution{}) ",
                clock_time(app, last.at_ms),
                if n == 1 { "" } else { "s" },
            ),
            t.style(Role::Muted),
        ));
    } else if app.launch.error.is_some() {
        spans.push(Span::styled(
            " recovery did not finish at launch: retrying ".to_string(),
            t.style(Role::Error),
        ));
    } else if app.launch.report.is_some() {
        // What the launch did, worded as of the launch: a continuation it started may
        // have finished since. Rows quarantined (before this launch too) wait on the
        // user: as many as the panel's heading and the Quarantine tab say.
        let (n, q) = (app.launch.continued.len(), app.launch.quarantine_total);
        let mut parts = Vec::new();
        if q == 0 {
            parts.push("nothing to recover".to_string());
        }
        if n > 0 {
            parts.push(format!(
                "{n} session{} continued",
                if n == 1 { "" } else { "s" }
            ));
        }
        if q > 0 {
            parts.push(format!("{q} in quarantine"));
        }
        let role = match (q, n) {
            (0, 0) => Role::Muted,
            (0, _) => Role::Recovered,
            _ => Role::Error,
        };
        spans.push(Span::styled(
            format!(" {} at launch ", parts.join(" · ")),
            t.style(role),
        ));
    }
    // The data directory gives way first when the line is too long.
    let used: usize = spans.iter().map(|s| s.width()).sum();
    let width = usize::from(app.size.0);
    if used > width {
        let over = used - width;
        let dir: String = app.data_dir.chars().collect();
        let keep = dir.chars().count().saturating_sub(over + 1);
        let tail: String = dir.chars().skip(dir.chars().count() - keep).collect();
        spans[1] = Span::styled(format!(" …{tail} "), t.style(Role::Muted));
    }
    Line::from(spans)
}

/// How the leases of the executions running here look.
fn lease_health(app: &App) -> (String, Role) {
    if app.running.is_empty() {
        return ("idle".into(), Role::Muted);
    }
    let least = app
        .own_claims
        .iter()
        .map(|(_, expires_at)| expires_at - app.now_ms)
        .min();
    let n = app.running.len();
    match least {
        Some(left) if left <= 0 => (format!("{n} running · lease expired"), Role::Error),
        Some(left) if left < 5_000 => (format!("{n} running · lease renewing late"), Role::Warn),
        _ => (format!("{n} running · leases ok"), Role::Ok),
    }
}

/// The footer: the note (an action's result, an error) on its own lines when it does
/// not fit beside the hints, and the line of hints.
fn footer_lines(app: &App) -> (Option<Line<'static>>, Line<'static>) {
    let t = &app.theme;
    let hints = match (app.screen, app.pane) {
        (Screen::Inspector, _) if app.mode == Mode::ReadOnly => {
            "read-only: actions run from `steward`  ←/→ tab  j/k row  / filter  s sort  ? help  q quit"
        }
        (Screen::Inspector, _) if app.inspector.editing_filter => {
            "type to filter  Enter apply  Esc clear"
        }
        (Screen::Inspector, _) => {
            "←/→ tab  j/k row  / filter  s sort  w wake  d discard  r retry  i chat  ? help  q quit"
        }
        // Another process runs the session: Esc here says which, it cancels nothing.
        (Screen::Chat, Pane::Prompt)
            if !app.current_is_running()
                && app
                    .transcript
                    .holder
                    .as_ref()
                    .is_some_and(|(owner, _)| app.owner_id.as_deref() != Some(owner.as_str())) =>
        {
            "Enter send · Ctrl-J newline · Esc which process runs it · Tab pane · F1 help"
        }
        (Screen::Chat, Pane::Prompt) => {
            "Enter send · Ctrl-J newline · Esc cancel turn · Tab pane · F1 help"
        }
        (Screen::Chat, Pane::Sessions) if app.sessions.editing_filter => {
            "type to filter by title or directory  Enter keep  Esc clear  Ctrl-U clear"
        }
        (Screen::Chat, Pane::Sessions) => {
            "? help  n new  Enter open  / filter  r rename  a archive  d delete  A archived  Tab pane  q quit"
        }
        (Screen::Chat, Pane::Transcript)
            if app.transcript.search.as_ref().is_some_and(|s| s.editing) =>
        {
            "type to search  Enter find  Esc stop  Ctrl-U clear"
        }
        (Screen::Chat, Pane::Transcript) => {
            "? help  / search  n/N match  y copy  Y code or output  j/k PgUp/PgDn scroll  Enter expand  Tab pane"
        }
    };
    // A note in the read-only inspector says what is read-only itself.
    let hints = match &app.status {
        Some(_) => hints.trim_start_matches("read-only: actions run from `steward`  "),
        None => hints,
    };
    let hints = Span::styled(format!(" {hints}"), t.style(Role::Muted));
    let Some(status) = &app.status else {
        return (None, Line::from(hints));
    };
    let note = Span::styled(format!(" {status} "), t.style(Role::Warn));
    if note.width() + 1 + hints.width() <= usize::from(app.size.0) {
        (None, Line::from(vec![note, Span::raw(" "), hints]))
    } else {
        (Some(Line::from(note)), Line::from(hints))
    }
}

fn chat(app: &App, frame: &mut Frame, area: Rect) {
    let prompt_height = (app.prompt.lines().len() as u16).clamp(1, 6) + 2;
    let [main, prompt] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(prompt_height)]).areas(area);
    if area.width < TWO_PANES {
        if app.pane == Pane::Sessions {
            sessions(app, frame, main);
        } else {
            conversation(app, frame, main);
        }
    } else {
        let [left, right] =
            Layout::horizontal([Constraint::Length(32), Constraint::Min(20)]).areas(main);
        sessions(app, frame, left);
        conversation(app, frame, right);
    }
    prompt_box(app, frame, prompt);
}

fn border(app: &App, title: String, focused: bool) -> Block<'static> {
    let role = if focused { Role::Accent } else { Role::Muted };
    Block::bordered()
        .title(Line::from(Span::styled(title, app.theme.style(role))))
        .border_style(app.theme.style(role))
}

/// The state badge of a session: a symbol and the same word, so colour is never the
/// only signal.
pub fn badge(app: &App, state: SessionState) -> (&'static str, Role) {
    match state {
        SessionState::Idle => ("●", Role::Muted),
        SessionState::Running => {
            const SPIN: [&str; 4] = ["◐", "◓", "◑", "◒"];
            (SPIN[(app.frame % 4) as usize], Role::Ok)
        }
        SessionState::Waiting => ("…", Role::Warn),
        SessionState::Recovered => ("↻", Role::Recovered),
        SessionState::Quarantined => ("⚠", Role::Error),
    }
}

fn sessions(app: &App, frame: &mut Frame, area: Rect) {
    let t = &app.theme;
    let width = usize::from(area.width.saturating_sub(2));
    let items: Vec<ListItem> = app
        .sessions
        .rows
        .iter()
        .map(|s| {
            let state = if app.waits_for_permission(&s.id) {
                SessionState::Waiting
            } else if app.running.contains(&s.id) {
                SessionState::Running
            } else {
                s.state
            };
            // A turn that stopped here on a store failure leaves its claim: the
            // file says running, but nothing runs.
            let stopped = state == SessionState::Running
                && !app.running.contains(&s.id)
                && app.failures.get(&s.id).is_some_and(|f| f.holds_claim);
            let ((symbol, role), word) = if stopped {
                (("⚠", Role::Error), "stopped")
            } else {
                (badge(app, state), state.as_str())
            };
            let word = if s.archived && word == "idle" {
                "archived"
            } else {
                word
            };
            let room = width.saturating_sub(word.len() + 4);
            let mut title: String = s.title.chars().take(room).collect();
            if s.title.chars().count() > room && room > 0 {
                title.pop();
                title.push('…');
            }
            let gap = room.saturating_sub(title.chars().count());
            let current = app.current_session() == Some(s.id.as_str());
            ListItem::new(Line::from(vec![
                Span::styled(format!("{symbol} "), t.style(role)),
                Span::styled(
                    title,
                    if current {
                        t.style(Role::Title)
                    } else {
                        t.style(Role::Plain)
                    },
                ),
                Span::raw(" ".repeat(gap + 1)),
                Span::styled(word.to_string(), t.style(role)),
            ]))
        })
        .collect();
    let focused = app.screen == Screen::Chat && app.pane == Pane::Sessions;
    let list = &app.sessions;
    let title = if list.filter.is_empty() && !list.archived {
        format!(" Sessions {} ", list.total)
    } else {
        format!(" Sessions {} of {} ", list.total, app.counts.sessions)
    };
    let mut block = border(app, title, focused);
    if !list.rows.is_empty() {
        block = block.title_bottom(
            Line::from(Span::styled(
                format!(" {} of {} ", list.offset + list.selected + 1, list.total),
                t.style(Role::Muted),
            ))
            .right_aligned(),
        );
    }
    if list.editing_filter || !list.filter.is_empty() || list.archived {
        let mut text = if list.editing_filter {
            format!(" / {}▌ ", list.filter)
        } else if list.filter.is_empty() {
            String::new()
        } else {
            format!(" / {} ", list.filter)
        };
        if list.archived {
            text.push_str(" +archived ");
        }
        block = block.title_bottom(Line::from(Span::styled(text, t.style(Role::Accent))));
    }
    let inner = block.inner(area);
    app.hidden.set(crate::app::Hidden {
        list: usize::from(inner.height).max(1),
        ..app.hidden.get()
    });
    if items.is_empty() && (!list.filter.is_empty() || list.editing_filter) {
        frame.render_widget(block, area);
        frame.render_widget(
            Paragraph::new(Span::styled(
                format!("No session matches “{}”.", list.filter),
                t.style(Role::Muted),
            ))
            .wrap(ratatui::widgets::Wrap { trim: true }),
            inner,
        );
        return;
    }
    let widget = List::new(items)
        .block(block)
        .highlight_style(t.style(Role::Selected));
    let mut state = ListState::default();
    if !list.rows.is_empty() {
        state.select(Some(list.selected));
    }
    frame.render_stateful_widget(widget, area, &mut state);
}

fn conversation(app: &App, frame: &mut Frame, area: Rect) {
    let t = &app.theme;
    let focused = app.pane == Pane::Transcript;
    let title = match &app.transcript.session {
        Some(s) => {
            let state = if app.waits_for_permission(&s.id) {
                "waiting"
            } else if app.running.contains(&s.id) {
                "running"
            } else if app.current_failure().is_some_and(|f| f.holds_claim) {
                "stopped"
            } else {
                app.transcript.state.map(|s| s.as_str()).unwrap_or("idle")
            };
            format!(
                " {} · {} · {} ",
                if s.title.is_empty() {
                    "session"
                } else {
                    &s.title
                },
                short_id(&s.id),
                state
            )
        }
        None => " new session ".to_string(),
    };
    let title = match app.transcript.unreadable.len() {
        0 => title,
        n => format!(
            "{title}⚠ {n} message{} cannot be read (`steward doctor`) ",
            if n == 1 { "" } else { "s" }
        ),
    };
    let mut block = border(app, title, focused);
    let inner = block.inner(area);
    if app.transcript.session.is_none() {
        frame.render_widget(block, area);
        let hint = vec![
            Line::from(Span::styled("No session open.", t.style(Role::Title))),
            Line::from(Span::styled(
                "Write below and press Enter to start one in the current directory,",
                t.style(Role::Muted),
            )),
            Line::from(Span::styled(
                if app.size.0 < TWO_PANES {
                    "or pick a session: Tab to the session list, j/k, Enter."
                } else {
                    "or pick a session on the left (Tab, j/k, Enter)."
                },
                t.style(Role::Muted),
            )),
        ];
        frame.render_widget(Paragraph::new(hint), inner);
        return;
    }
    let tr = &app.transcript;
    let quarantined;
    let messages = if tr.quarantined.is_empty() {
        &tr.messages
    } else {
        quarantined = transcript::with_quarantine(&tr.messages, &tr.quarantined);
        &quarantined
    };
    let (mut lines, starts) = transcript::lines_with_starts(
        t,
        messages,
        &tr.pending,
        tr.expanded,
        inner.width,
        &app.live,
    );
    lines.extend(transcript::quarantine_lines(
        t,
        &tr.quarantined,
        inner.width,
    ));
    if let Some(failure) = app.current_failure() {
        lines.extend(transcript::failure_lines(t, &failure.text, inner.width));
    }
    if let Some(retry) = app.current_session().and_then(|s| app.retrying.get(s)) {
        lines.extend(transcript::retry_lines(t, retry, app.now_ms, inner.width));
    }
    let height = usize::from(inner.height);
    let total = lines.len();
    let bottom = total.saturating_sub(height);
    // Held at a line counted from the anchor message, which older messages loaded
    // since may have pushed down.
    let top = match tr.scroll {
        None => bottom,
        Some(top) => {
            let shift = tr
                .anchor
                .as_ref()
                .and_then(|id| tr.messages.iter().position(|m| &m.id == id))
                .and_then(|i| starts.get(i).copied())
                .unwrap_or(0);
            (top + shift).min(bottom)
        }
    };
    tr.rendered.set(crate::app::Rendered { total, height, top });
    *tr.starts.borrow_mut() = starts.clone();
    let search = tr.search.as_ref().filter(|s| !s.query.is_empty());
    if let Some(search) = search {
        let query = search.query.to_lowercase();
        let found: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, line)| line_text(line).to_lowercase().contains(&query))
            .map(|(i, _)| i)
            .collect();
        for i in &found {
            let role = if search.current == Some(*i) {
                Role::Selected
            } else {
                Role::Accent
            };
            let line = &mut lines[*i];
            *line = std::mem::take(line).patch_style(t.style(role));
        }
        *tr.found.borrow_mut() = found;
    } else {
        tr.found.borrow_mut().clear();
    }
    if let Some(search) = &app.transcript.search {
        let n = app.transcript.found.borrow().len();
        let text = if search.editing {
            format!(" / {}▌ ", search.query)
        } else {
            format!(
                " / {}  {n} line{} found ",
                search.query,
                if n == 1 { "" } else { "s" }
            )
        };
        block = block.title_bottom(Line::from(Span::styled(text, t.style(Role::Accent))));
    }
    frame.render_widget(block, area);
    let end = (top + height).min(total);
    let mut visible: Vec<Line> = lines[top..end].to_vec();
    if top == 0 && tr.has_older && !visible.is_empty() {
        visible[0] = Line::from(Span::styled(
            "… older messages: scroll up to load them",
            t.style(Role::Muted),
        ));
    }
    frame.render_widget(Paragraph::new(visible), inner);
}

/// The text of a drawn line.
fn line_text(line: &Line) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

fn prompt_box(app: &App, frame: &mut Frame, area: Rect) {
    let focused = app.screen == Screen::Chat && app.pane == Pane::Prompt;
    let title = if app.current_is_running() {
        " Prompt (queued while the turn runs · Esc cancel turn) ".to_string()
    } else {
        " Prompt (Enter send · Ctrl-J newline) ".to_string()
    };
    let block = border(app, title, focused);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    frame.render_widget(&app.prompt, inner);
    if focused && app.overlay.is_empty() {
        let cursor = app.prompt.screen_cursor();
        frame.set_cursor_position((
            inner.x + (cursor.col as u16).min(inner.width.saturating_sub(1)),
            inner.y + (cursor.row as u16).min(inner.height.saturating_sub(1)),
        ));
    }
}

#[cfg(test)]
mod tests;
