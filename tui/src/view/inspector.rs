//! The inspector: tabs with counts, one page of the selected table, and the full row
//! (pretty-printed JSON) of the selection. Claims count down to their expiry and say
//! what the lock probe proves about their owners.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use steward_engine::claim::ClaimState;
use steward_engine::inspect::pages::{ClaimLine, ClaimOrder};
use steward_engine::owner::Liveness;

use super::{relative, short_id};
use crate::app::{App, Mode, Rows, Tab};
use crate::theme::Role;

pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let [tabs, table, detail] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(4),
        Constraint::Percentage(45),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(tab_line(app)), tabs);
    render_table(app, frame, table);
    render_detail(app, frame, detail);
}

fn tab_line(app: &App) -> Line<'static> {
    let t = &app.theme;
    let mut spans = Vec::new();
    for (i, tab) in Tab::ALL.iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" │ ", t.style(Role::Muted)));
        }
        let text = format!("{} {}", tab.title(), app.inspector.count(*tab));
        let role = if *tab == app.inspector.tab {
            Role::Selected
        } else {
            Role::Plain
        };
        spans.push(Span::styled(text, t.style(role)));
    }
    let filter = if app.inspector.editing_filter {
        format!("   / {}▌", app.inspector.filter)
    } else if app.inspector.filter.is_empty() {
        "   / filter".to_string()
    } else {
        format!("   / {}", app.inspector.filter)
    };
    spans.push(Span::styled(filter, t.style(Role::Accent)));
    let sort = match (app.inspector.order, app.inspector.request.reverse) {
        (ClaimOrder::Session, _) => "by session",
        (ClaimOrder::Created, false) => "oldest first",
        (ClaimOrder::Created, true) => "newest first",
    };
    spans.push(Span::styled(
        format!("   s sort: {sort}"),
        t.style(Role::Muted),
    ));
    Line::from(spans)
}

/// What a claim's state means for the user, as of `now_ms` (a live claim becomes
/// expired on screen when its lease runs out, without a reload).
pub fn claim_state(line: &ClaimLine, now_ms: i64) -> (String, Role) {
    let expired = line.claim.expires_at.as_i64().is_none_or(|at| at <= now_ms);
    match (line.claim.state, line.owner) {
        (ClaimState::Quarantined, _) => ("quarantined".into(), Role::Error),
        (_, _) if expired => ("expired: recoverable".into(), Role::Warn),
        (_, Liveness::Dead) => ("owner dead: recoverable now".into(), Role::Warn),
        (_, _) => ("live".into(), Role::Ok),
    }
}

fn owner_mark(liveness: Liveness) -> &'static str {
    match liveness {
        Liveness::Alive => "✓",
        Liveness::Dead => "✗",
        Liveness::Unknown => "?",
    }
}

/// A claim's expiry in the EXPIRES column: a countdown while the lease runs, then
/// the time it ran out — as a time of day today, as an age otherwise — and a value
/// no lease can have (before 2000, or more than a year ahead) as what it is, cut to
/// the column (the detail pane shows the value whole).
fn expiry(app: &App, at: i64) -> String {
    const YEAR_2000_MS: i64 = 946_684_800_000;
    const DAY_MS: i64 = 86_400_000;
    const YEAR_MS: i64 = 365 * DAY_MS;
    let ahead = at.saturating_sub(app.now_ms);
    if ahead > YEAR_MS {
        fit(&format!("bad: +{} y", ahead / YEAR_MS), 12)
    } else if ahead >= 2 * DAY_MS {
        format!("in {} d", ahead / DAY_MS)
    } else if at > app.now_ms {
        relative(ahead)
    } else if at < YEAR_2000_MS {
        fit(&format!("bad: {at}"), 12)
    } else {
        let time = super::clock_time(app, at);
        if time.len() <= 8 {
            format!("at {time}")
        } else {
            let days = (app.now_ms - at) / 86_400_000;
            if days >= 1 {
                format!("{days} d ago")
            } else {
                relative(at - app.now_ms)
            }
        }
    }
}

/// `text` cut to `width` columns with `…` when it does not fit (the detail pane
/// below shows it whole).
fn fit(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr;
    if text.width() <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

fn render_table(app: &App, frame: &mut Frame, area: Rect) {
    // The last column of each table takes what the others leave (less the
    // selection marker).
    let rest = |used: u16| usize::from(area.width.saturating_sub(used + 1));
    let t = &app.theme;
    let (header, widths, rows): (Vec<&str>, Vec<Constraint>, Vec<Row>) = match &app.inspector.rows {
        Rows::Claims(lines) => (
            vec![
                "EXECUTION",
                "SESSION",
                "OWNER",
                "PHASE",
                "EPOCH",
                "EXPIRES",
                "STATE",
            ],
            vec![
                Constraint::Length(14),
                Constraint::Length(14),
                Constraint::Length(16),
                Constraint::Length(8),
                Constraint::Length(5),
                Constraint::Length(12),
                Constraint::Min(10),
            ],
            lines
                .iter()
                .map(|l| {
                    let (state, role) = claim_state(l, app.now_ms);
                    // A countdown while the lease runs; then the time it ran out
                    // (which does not need the clock to tick).
                    let expires = l
                        .claim
                        .expires_at
                        .as_i64()
                        .map(|at| expiry(app, at))
                        .unwrap_or_else(|| l.claim.expires_at.to_string());
                    Row::new(vec![
                        Span::raw(short_id(&l.claim.execution_id)),
                        Span::raw(short_id(&l.claim.session_id)),
                        Span::raw(format!(
                            "{} {}",
                            short_id(&l.claim.owner_id),
                            owner_mark(l.owner)
                        )),
                        Span::raw(l.claim.phase.clone()),
                        Span::raw(l.claim.epoch.to_string()),
                        Span::raw(expires),
                        Span::styled(state, t.style(role)),
                    ])
                })
                .collect(),
        ),
        Rows::Quarantine(rows) => (
            vec!["KIND", "EXECUTION", "SESSION", "REASON"],
            vec![
                Constraint::Length(9),
                Constraint::Length(14),
                Constraint::Length(14),
                Constraint::Min(20),
            ],
            rows.iter()
                .map(|q| {
                    Row::new(vec![
                        Span::raw(q.kind),
                        Span::raw(short_id(&q.execution_id)),
                        Span::raw(short_id(&q.session_id)),
                        Span::styled(fit(&q.reason, rest(9 + 14 + 14 + 3)), t.style(Role::Error)),
                    ])
                })
                .collect(),
        ),
        Rows::Wakes(rows) => (
            vec!["KIND", "EXECUTION / INPUT", "SESSION", "ATTEMPTS", "SINCE"],
            vec![
                Constraint::Length(9),
                Constraint::Length(18),
                Constraint::Length(14),
                Constraint::Length(8),
                Constraint::Min(10),
            ],
            rows.iter()
                .map(|w| {
                    Row::new(vec![
                        Span::raw(w.kind),
                        Span::raw(short_id(w.execution_id.as_deref().unwrap_or(&w.input_id))),
                        Span::raw(short_id(&w.session_id)),
                        Span::raw(w.attempts.to_string()),
                        Span::raw(super::clock_time(app, w.time_created)),
                    ])
                })
                .collect(),
        ),
        Rows::Recoveries(rows) => (
            vec![
                "EXECUTION",
                "SESSION",
                "PHASE",
                "WAKE",
                "ATTEMPTS",
                "RECOVERED",
            ],
            vec![
                Constraint::Length(14),
                Constraint::Length(14),
                Constraint::Length(8),
                Constraint::Length(12),
                Constraint::Length(8),
                Constraint::Min(10),
            ],
            rows.iter()
                .map(|r| {
                    let (wake, role) = match (&r.recovery_error, r.wake_pending) {
                        (Some(_), _) => ("quarantined", Role::Error),
                        (None, true) => ("pending", Role::Warn),
                        (None, false) => ("done", Role::Ok),
                    };
                    Row::new(vec![
                        Span::raw(short_id(&r.execution_id)),
                        Span::raw(short_id(&r.session_id)),
                        Span::raw(r.phase.clone()),
                        Span::styled(wake, t.style(role)),
                        Span::raw(r.wake_attempts.to_string()),
                        Span::raw(super::clock_time(app, r.time_created)),
                    ])
                })
                .collect(),
        ),
        Rows::Servers(rows) => (
            vec!["SERVER", "SESSION", "PID / URL", "TOOLS", "STARTED"],
            vec![
                Constraint::Length(18),
                Constraint::Length(16),
                Constraint::Length(36),
                Constraint::Length(6),
                Constraint::Min(10),
            ],
            rows.iter()
                .map(|s| {
                    let reach = match (s.pid, &s.url) {
                        (Some(pid), _) => pid.to_string(),
                        (None, Some(url)) => url.clone(),
                        (None, None) => String::new(),
                    };
                    Row::new(vec![
                        Span::raw(s.server.clone()),
                        Span::raw(short_id(&s.session_id)),
                        Span::raw(reach),
                        Span::raw(s.tools.to_string()),
                        Span::raw(super::clock_time(app, s.since_ms)),
                    ])
                })
                .collect(),
        ),
        Rows::Owners(rows) => (
            vec!["OWNER", "PID", "HOST", "ALIVE", "STARTED"],
            vec![
                Constraint::Length(20),
                Constraint::Length(8),
                Constraint::Length(16),
                Constraint::Length(14),
                Constraint::Min(10),
            ],
            rows.iter()
                .map(|(o, l)| {
                    let (alive, role) = match l {
                        Liveness::Alive => ("✓ alive", Role::Ok),
                        Liveness::Dead => ("✗ dead", Role::Warn),
                        Liveness::Unknown => ("? unknown", Role::Muted),
                    };
                    let this = if app.owner_id.as_deref() == Some(o.id.as_str()) {
                        " (this)"
                    } else {
                        ""
                    };
                    Row::new(vec![
                        Span::raw(format!("{}{this}", short_id(&o.id))),
                        Span::raw(o.pid.to_string()),
                        Span::raw(o.hostname.clone()),
                        Span::styled(alive, t.style(role)),
                        Span::raw(super::clock_time(app, o.time_started)),
                    ])
                })
                .collect(),
        ),
    };
    let empty = rows.is_empty();
    let servers_here = app.mode == Mode::Chat;
    app.hidden.set(crate::app::Hidden {
        table: usize::from(area.height.saturating_sub(1)).max(1),
        ..app.hidden.get()
    });
    // The marker's column is kept with no row selected too, so that the header of
    // an empty table stands where it does over rows.
    let table = Table::new(rows, widths)
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always)
        .header(Row::new(header).style(t.style(Role::Muted)))
        .row_highlight_style(t.style(Role::Selected))
        .highlight_symbol("▶");
    let mut state = TableState::default();
    if !empty {
        state.select(Some(app.inspector.selected));
    }
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        let [_, below] = Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(area);
        let note = if app.inspector.tab == Tab::Servers && !servers_here {
            "`steward inspect` runs no MCP servers: they run in the process that runs their session."
                .to_string()
        } else if app.inspector.tab == Tab::Servers && app.inspector.filter.is_empty() {
            "No MCP server runs in this process.".to_string()
        } else if app.inspector.filter.is_empty() {
            format!("No {} rows.", app.inspector.tab.title().to_lowercase())
        } else {
            format!("No rows match “{}”.", app.inspector.filter)
        };
        frame.render_widget(
            Paragraph::new(Span::styled(note, t.style(Role::Muted))),
            below,
        );
    }
}

fn render_detail(app: &App, frame: &mut Frame, area: Rect) {
    let t = &app.theme;
    let i = app.inspector.selected;
    // Serialized straight from the row (never through a JSON map), so the fields
    // keep their declared order.
    let text = match &app.inspector.rows {
        // The state as of now, as the table says it.
        Rows::Claims(r) => r.get(i).map(|line| {
            let mut line = line.clone();
            if line.claim.state == ClaimState::Live
                && line
                    .claim
                    .expires_at
                    .as_i64()
                    .is_none_or(|at| at <= app.now_ms)
            {
                line.claim.state = ClaimState::Expired;
            }
            pretty(&line)
        }),
        Rows::Quarantine(r) => r.get(i).map(pretty),
        Rows::Wakes(r) => r.get(i).map(pretty),
        Rows::Recoveries(r) => r.get(i).map(pretty),
        Rows::Servers(r) => r.get(i).map(pretty),
        Rows::Owners(r) => r.get(i).map(|(owner, liveness)| {
            #[derive(serde::Serialize)]
            struct OwnerDetail<'a> {
                #[serde(flatten)]
                owner: &'a steward_engine::owner::OwnerRow,
                liveness: &'a Liveness,
            }
            pretty(&OwnerDetail { owner, liveness })
        }),
    };
    let title = match app.inspector.rows.execution(i) {
        Some(e) => format!(" {e} "),
        None => " detail ".to_string(),
    };
    let mut block = Block::bordered()
        .title(Line::from(Span::styled(title, t.style(Role::Muted))))
        .border_style(t.style(Role::Muted));
    if !app.inspector.rows.is_empty() {
        // Where the selection is in the whole table (the filter's rows, when set).
        let total = app.inspector.count(app.inspector.tab);
        block = block.title_bottom(
            Line::from(Span::styled(
                format!(
                    " row {} of {total} ",
                    app.inspector.offset + app.inspector.selected + 1
                ),
                t.style(Role::Muted),
            ))
            .right_aligned(),
        );
    }
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines: Vec<Line> = text
        .unwrap_or_default()
        .lines()
        .map(|l| Line::from(readable_time(app, l)))
        .collect();
    if app.mode == Mode::ReadOnly {
        lines.insert(
            0,
            Line::from(Span::styled(
                "read-only: wake, discard and retry run from `steward`",
                t.style(Role::Warn),
            )),
        );
    }
    // Wrapped to the pane, and scrolled (J/K) as far as its last line.
    let lines = super::transcript::wrap(lines, inner.width);
    let most = lines.len().saturating_sub(usize::from(inner.height));
    app.hidden.set(crate::app::Hidden {
        detail: most,
        ..app.hidden.get()
    });
    let scroll = usize::from(app.inspector.detail_scroll).min(most);
    frame.render_widget(
        Paragraph::new(lines).scroll((u16::try_from(scroll).unwrap_or(u16::MAX), 0)),
        inner,
    );
}

/// A line of the detail's JSON holding a time in ms since the epoch
/// (`"time_created": 1796084527000,`), with the time it is, readable, after it.
fn readable_time(app: &App, line: &str) -> String {
    let Some((key, value)) = line.trim_start().split_once("\": ") else {
        return line.to_string();
    };
    let key = key.trim_start_matches('"');
    let is_time = key.starts_with("time") || key.ends_with("_at") || key.ends_with("_ms");
    let digits = value.trim_end_matches(',');
    match digits.parse::<i64>() {
        Ok(ms) if is_time && ms >= 946_684_800_000 => {
            format!("{line}  ({})", super::clock_time(app, ms))
        }
        _ => line.to_string(),
    }
}

fn pretty<T: serde::Serialize>(row: &T) -> String {
    serde_json::to_string_pretty(row).unwrap_or_default()
}
