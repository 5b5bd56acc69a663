//! What sits over the screen: the after-crash panel, help, confirmations, the quit
//! question and the permission modal.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::short_id;
use crate::app::{Act, App, Overlay};
use crate::keymap::help_lines;
use crate::theme::Role;

pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let Some(overlay) = app.overlay.last() else {
        return;
    };
    match overlay {
        Overlay::Help { scroll } => help(app, frame, area, *scroll),
        Overlay::Panel { lines, selected } => panel(app, frame, area, lines, *selected),
        Overlay::Confirm {
            act,
            execution_id,
            label,
            ..
        } => confirm(app, frame, area, *act, execution_id, label),
        Overlay::Quit { running } => quit(app, frame, area, running),
        Overlay::Permission {
            request, scroll, ..
        } => permission(app, frame, area, request, *scroll),
        Overlay::Rename { session, title } => rename(app, frame, area, session, title),
        Overlay::Delete { session, title } => delete(app, frame, area, session, title),
    }
}

fn rename(app: &App, frame: &mut Frame, area: Rect, session: &str, title: &str) {
    let t = &app.theme;
    let text = vec![
        Line::from(Span::styled(session.to_string(), t.style(Role::Accent))),
        Line::default(),
        Line::from(vec![
            Span::raw("New title: "),
            Span::styled(format!("{title}▌"), t.style(Role::Title)),
        ]),
    ];
    let width = area.width.saturating_sub(4).min(76);
    let height =
        u16::try_from(super::transcript::wrap(text.clone(), width.saturating_sub(2)).len() + 2)
            .unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height);
    frame.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(block(
            app,
            " rename ".into(),
            "Enter rename · Esc leave it · Ctrl-U clear",
        )),
        cell,
    );
}

fn delete(app: &App, frame: &mut Frame, area: Rect, session: &str, title: &str) {
    let t = &app.theme;
    let text = vec![
        Line::from(Span::styled(title.to_string(), t.style(Role::Title))),
        Line::from(Span::styled(session.to_string(), t.style(Role::Accent))),
        Line::default(),
        Line::from(
            "Delete this session for good? Its transcript, inputs and recovery history go with it; nothing brings them back. (Archiving, a, only hides it.)",
        ),
    ];
    let width = area.width.saturating_sub(4).min(76);
    let height =
        u16::try_from(super::transcript::wrap(text.clone(), width.saturating_sub(2)).len() + 2)
            .unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height);
    frame.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(block(
            app,
            " delete ".into(),
            "y delete · n keep it",
        )),
        cell,
    );
}

/// A box of `width`×`height` (clamped) in the middle of `area`, cleared.
fn centered(frame: &mut Frame, area: Rect, width: u16, height: u16) -> Rect {
    let [row] = Layout::vertical([Constraint::Length(height.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [cell] = Layout::horizontal([Constraint::Length(width.min(area.width))])
        .flex(Flex::Center)
        .areas(row);
    frame.render_widget(Clear, cell);
    cell
}

fn block(app: &App, title: String, hint: &str) -> Block<'static> {
    let t = &app.theme;
    Block::bordered()
        .title(Line::from(Span::styled(title, t.style(Role::Title))))
        .title_bottom(
            Line::from(Span::styled(format!(" {hint} "), t.style(Role::Muted))).right_aligned(),
        )
        .border_style(t.style(Role::Accent))
}

fn help(app: &App, frame: &mut Frame, area: Rect, scroll: usize) {
    let t = &app.theme;
    let mut lines = Vec::new();
    let mut last = None;
    for (context, label, text) in help_lines(app.mode == crate::app::Mode::ReadOnly) {
        if last != Some(context) {
            if last.is_some() {
                lines.push(Line::default());
            }
            lines.push(Line::from(Span::styled(
                context.title().to_string(),
                t.style(Role::Title),
            )));
            last = Some(context);
        }
        lines.push(Line::from(vec![
            Span::styled(format!("  {label:<22}"), t.style(Role::Accent)),
            Span::raw(text.to_string()),
        ]));
    }
    let cell = centered(
        frame,
        area,
        area.width.saturating_sub(4).min(100),
        area.height.saturating_sub(2),
    );
    // Wrapped to the box, each help text's continuation indented under it; the
    // scroll stops at the last line.
    let mut wrapped = Vec::new();
    for line in lines {
        let indent = if line.spans.len() == 2 { 24 } else { 0 };
        for (i, piece) in super::transcript::wrap(vec![line], cell.width.saturating_sub(2))
            .into_iter()
            .enumerate()
        {
            if i == 0 || indent == 0 {
                wrapped.push(piece);
            } else {
                let mut spans = vec![Span::raw(" ".repeat(indent))];
                spans.extend(piece.spans);
                wrapped.extend(super::transcript::wrap(
                    vec![Line::from(spans)],
                    cell.width.saturating_sub(2),
                ));
            }
        }
    }
    let lines = wrapped;
    let height = usize::from(cell.height.saturating_sub(2));
    let most = lines.len().saturating_sub(height);
    app.hidden.set(crate::app::Hidden {
        help: most,
        help_height: height.max(1),
        ..app.hidden.get()
    });
    let scroll = scroll.min(most);
    let paragraph = Paragraph::new(lines)
        .block(block(app, " Keys ".into(), "Esc close · j/k scroll"))
        .scroll((u16::try_from(scroll).unwrap_or(u16::MAX), 0));
    frame.render_widget(paragraph, cell);
}

fn panel(
    app: &App,
    frame: &mut Frame,
    area: Rect,
    lines: &[crate::app::PanelLine],
    selected: usize,
) {
    let t = &app.theme;
    let title = match &app.launch.report {
        Some(r) => format!(" Recovered at launch ({} ms) ", r.duration_ms),
        None => " Recovered at launch ".to_string(),
    };
    let width = area.width.saturating_sub(4).min(110);
    // Marker, symbol, title and what come first; the detail wraps under itself.
    let lead = 1 + 2 + 21 + 15;
    let room = usize::from(width.saturating_sub(2))
        .saturating_sub(lead)
        .max(10);
    let mut text = Vec::new();
    let mut selected_rows = (0, 0);
    for (i, line) in lines.iter().enumerate() {
        let name = app
            .launch
            .titles
            .get(&line.session_id)
            .filter(|t| !t.is_empty())
            .cloned()
            .unwrap_or_else(|| short_id(&line.session_id));
        let name = if name.chars().count() > 20 {
            let mut short: String = name.chars().take(19).collect();
            short.push('…');
            short
        } else {
            name
        };
        let role = match line.symbol {
            "⚠" => Role::Error,
            "↻" => Role::Recovered,
            _ => Role::Warn,
        };
        let marker = if i == selected { "▶" } else { " " };
        let detail = match &line.done {
            Some(done) => format!("{} · {done}", line.detail),
            None => line.detail.clone(),
        };
        if i == selected {
            selected_rows.0 = text.len();
        }
        for (j, chunk) in word_chunks(&detail, room).into_iter().enumerate() {
            let mut row = if j == 0 {
                Line::from(vec![
                    Span::raw(marker.to_string()),
                    Span::styled(format!("{} ", line.symbol), t.style(role)),
                    Span::styled(format!("{name:<20} "), t.style(Role::Title)),
                    Span::styled(format!("{:<14} ", line.what), t.style(role)),
                    Span::raw(chunk),
                ])
            } else {
                Line::from(vec![Span::raw(" ".repeat(lead)), Span::raw(chunk)])
            };
            if i == selected {
                row = row.style(t.style(Role::Selected));
            }
            text.push(row);
        }
        if i == selected {
            selected_rows.1 = text.len();
        }
    }
    let height = u16::try_from(text.len() + 2).unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height.max(5));
    // Scrolled so that the selected line is in view.
    let visible = usize::from(cell.height.saturating_sub(2));
    let scroll = selected_rows.1.saturating_sub(visible).min(selected_rows.0);
    let hint = if app.mode == crate::app::Mode::Chat {
        format!(
            "{}/{} · Enter go to · w wake · d discard · Esc close",
            selected + 1,
            lines.len()
        )
    } else {
        format!("{}/{} · Enter go to · Esc close", selected + 1, lines.len())
    };
    frame.render_widget(
        Paragraph::new(text)
            .block(block(app, title, &hint))
            .scroll((u16::try_from(scroll).unwrap_or(u16::MAX), 0)),
        cell,
    );
}

/// `text` in pieces of at most `width` characters, broken between words.
fn word_chunks(text: &str, width: usize) -> Vec<String> {
    let mut chunks = vec![String::new()];
    for word in text.split(' ') {
        let last = chunks.last_mut().expect("one chunk");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            chunks.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    chunks
}

fn confirm(app: &App, frame: &mut Frame, area: Rect, act: Act, execution_id: &str, label: &str) {
    let what = match act {
        Act::Wake => {
            "Continue this execution now? Its continuation is promoted and the session runs."
        }
        Act::Discard => {
            "Discard it? A wake is never continued; a quarantined claim is deleted and its session unblocked."
        }
        Act::Retry => "Hand this quarantined claim back to recovery?",
    };
    let text = vec![
        Line::from(Span::styled(
            label.to_string(),
            app.theme.style(Role::Title),
        )),
        Line::from(Span::styled(
            execution_id.to_string(),
            app.theme.style(Role::Accent),
        )),
        Line::default(),
        Line::from(what.to_string()),
    ];
    let width = area.width.saturating_sub(4).min(76);
    let height =
        u16::try_from(super::transcript::wrap(text.clone(), width.saturating_sub(2)).len() + 2)
            .unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height);
    frame.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(block(
            app,
            format!(" {} ", act.verb()),
            "y yes · n no",
        )),
        cell,
    );
}

fn quit(app: &App, frame: &mut Frame, area: Rect, running: &[String]) {
    let n = running.len();
    let text = vec![
        Line::from(format!(
            "{n} turn{} still running here.",
            if n == 1 { " is" } else { "s are" }
        )),
        Line::default(),
        Line::from("y  quit: they stop without being cancelled, are reconciled like a crash,"),
        Line::from("   and continue at the next launch (no claim is left behind)"),
        Line::from("c  cancel them (recorded as cancelled), then quit"),
        Line::from("n  stay"),
    ];
    let width = area.width.saturating_sub(4).min(84);
    let height =
        u16::try_from(super::transcript::wrap(text.clone(), width.saturating_sub(2)).len() + 2)
            .unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height);
    frame.render_widget(
        Paragraph::new(text).wrap(Wrap { trim: false }).block(block(
            app,
            " Quit? ".into(),
            "y · c · n",
        )),
        cell,
    );
}

/// A session by its title, with its short id; by its id alone when its title is
/// not known here.
fn session_name(app: &App, session_id: &str) -> String {
    let title = app
        .launch
        .titles
        .get(session_id)
        .cloned()
        .or_else(|| {
            app.sessions
                .rows
                .iter()
                .find(|s| s.id == session_id)
                .map(|s| s.title.clone())
        })
        .or_else(|| {
            app.transcript
                .session
                .as_ref()
                .filter(|s| s.id == session_id)
                .map(|s| s.title.clone())
        })
        .filter(|t| !t.is_empty());
    match title {
        Some(title) => format!("“{title}” ({})", short_id(session_id)),
        None => short_id(session_id),
    }
}

fn permission(
    app: &App,
    frame: &mut Frame,
    area: Rect,
    request: &steward_engine::tools::PermissionRequest,
    scroll: u16,
) {
    let t = &app.theme;
    let input = sorted_pretty(&request.input);
    let mut text = vec![Line::from(vec![
        Span::raw("The agent wants to run "),
        Span::styled(request.tool.clone(), t.style(Role::Accent)),
        Span::raw(format!(" in {}.", session_name(app, &request.session_id))),
    ])];
    if let Some(guarded) = &request.guarded {
        text.push(Line::from(Span::styled(
            format!(
                "It touches {}, {}: asked every time.",
                guarded.path.display(),
                guarded.guard.describe()
            ),
            t.style(Role::Warn),
        )));
    }
    text.push(Line::default());
    match &request.diff {
        // An edit shows what it would change, not its arguments.
        Some(diff) => text.extend(super::transcript::diff_lines(t, diff, true)),
        None => {
            for line in input.lines() {
                text.push(Line::from(Span::styled(
                    super::transcript::clean(line),
                    t.style(Role::Muted),
                )));
            }
        }
    }
    // The whole input, wrapped to the box; what does not fit scrolls (j/k), and
    // the box says so.
    let width = area.width.saturating_sub(4).min(100);
    let text = super::transcript::wrap(text, width.saturating_sub(2));
    let height = u16::try_from(text.len() + 2).unwrap_or(u16::MAX);
    let cell = centered(frame, area, width, height);
    let visible = usize::from(cell.height.saturating_sub(2));
    let hidden = text.len().saturating_sub(visible);
    app.hidden.set(crate::app::Hidden {
        permission: hidden,
        ..app.hidden.get()
    });
    let scroll = usize::from(scroll).min(hidden);
    let more = match hidden - scroll {
        0 if hidden == 0 => String::new(),
        0 => "end (k scrolls up) · ".to_string(),
        1 => "1 more line (j/k) · ".to_string(),
        n => format!("{n} more lines (j/k) · "),
    };
    // The longest wording that fits the box; a call that touches a guarded path is
    // asked about every time, so no "always" is offered for it.
    let room = usize::from(width.saturating_sub(4));
    let wordings: &[&str] = if request.guarded.is_some() {
        &["y allow once · n deny", "y · n"]
    } else {
        &[
            "y once · a always · s always + save to config · n deny",
            "y once · a always · s always + save · n deny",
            "y once · a always · s save · n deny",
            "y · a · s · n",
        ]
    };
    let hint = wordings
        .iter()
        .map(|keys| format!("{more}{keys}"))
        .find(|h| h.chars().count() <= room)
        .unwrap_or_else(|| wordings[wordings.len() - 1].to_string());
    frame.render_widget(
        Paragraph::new(text)
            .block(block(app, " Permission ".into(), &hint))
            .scroll((u16::try_from(scroll).unwrap_or(u16::MAX), 0)),
        cell,
    );
}

/// `value` pretty-printed with object keys sorted, whatever order the JSON map keeps
/// (it depends on the build's serde_json features): the same input always reads the
/// same.
fn sorted_pretty(value: &serde_json::Value) -> String {
    fn sort(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let sorted: std::collections::BTreeMap<&String, serde_json::Value> =
                    map.iter().map(|(k, v)| (k, sort(v))).collect();
                let mut out = serde_json::Map::new();
                for (k, v) in sorted {
                    out.insert(k.clone(), v);
                }
                serde_json::Value::Object(out)
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(sort).collect())
            }
            other => other.clone(),
        }
    }
    serde_json::to_string_pretty(&sort(value)).unwrap_or_default()
}
