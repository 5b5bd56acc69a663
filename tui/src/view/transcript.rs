//! The transcript as lines: user prompts, assistant text, each tool call with its
//! status and output (the first lines unless expanded), and what the engine wrote
//! itself — recovery and continuation notes, recovery's tool errors, cancellations —
//! set apart by a symbol and a word, so they read the same without colour. Each
//! restart text appears once.

use ratatui::text::{Line, Span};
use steward_engine::message::{
    AssistantData, MessageData, Part, SyntheticKind, TOOL_OUTCOME_UNKNOWN, ToolPart, ToolStatus,
};
use steward_engine::projection::{InputRow, MessageRow};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::theme::{Role, Theme};

/// Tool output lines shown before "… N more lines".
pub const COLLAPSED_LINES: usize = 6;

/// The lines that end a transcript whose last turn here stopped on a failure: what
/// stopped it, whole (wrapped, never cut at the edge).
pub fn failure_lines(theme: &Theme, text: &str, width: u16) -> Vec<Line<'static>> {
    let line = Line::from(vec![
        Span::styled("⚠ the turn stopped: ", theme.style(Role::Error)),
        Span::styled(clean(text), theme.style(Role::Error)),
    ]);
    let mut out = vec![Line::default()];
    out.extend(wrap(vec![line], width));
    out
}

/// The line that ends a transcript whose provider step waits to be tried again:
/// why, and a countdown to the next attempt.
pub fn retry_lines(
    theme: &Theme,
    retry: &crate::app::Retry,
    now_ms: i64,
    width: u16,
) -> Vec<Line<'static>> {
    let seconds = ((retry.at_ms - now_ms).max(0) as u64).div_ceil(1000);
    let line = Line::from(vec![
        Span::styled("⟳ ", theme.style(Role::Warn)),
        Span::styled(clean(&retry.error), theme.style(Role::Warn)),
        Span::styled(
            format!(
                " — trying again in {seconds} s (attempt {} of {})",
                retry.attempt, retry.of
            ),
            theme.style(Role::Muted),
        ),
    ]);
    let mut out = vec![Line::default()];
    out.extend(wrap(vec![line], width));
    out
}

/// A diff as lines: `+` lines green, `-` lines red, the rest muted; without its
/// `---`/`+++` header when the file is named already.
pub fn diff_lines(
    theme: &Theme,
    diff: &steward_engine::tools::FileDiff,
    header: bool,
) -> Vec<Line<'static>> {
    diff.unified()
        .lines()
        .skip(if header { 0 } else { 2 })
        .map(|line| {
            let role = if line.starts_with("+++") || line.starts_with("---") {
                Role::Title
            } else if line.starts_with('+') {
                Role::Ok
            } else if line.starts_with('-') {
                Role::Error
            } else {
                Role::Muted
            };
            Line::from(Span::styled(clean(line), theme.style(role)))
        })
        .collect()
}

/// What a call left open by a quarantined execution says instead of "running": the
/// file cannot tell how it ended, and nothing runs it any more.
pub const QUARANTINED_TOOL: &str = "outcome unknown: its execution is quarantined";

/// `messages` as a quarantined execution leaves them to be read: the calls it left
/// pending or running read as of unknown outcome, with the quarantine's reason
/// (`quarantined` holds (execution id, reason)). Display only: the file keeps them.
pub fn with_quarantine(
    messages: &[MessageRow],
    quarantined: &[(String, String)],
) -> Vec<MessageRow> {
    let mut messages = messages.to_vec();
    for message in &mut messages {
        let Some(a) = message.data.as_assistant_mut() else {
            continue;
        };
        let Some((_, reason)) = quarantined.iter().find(|(e, _)| *e == a.execution_id) else {
            continue;
        };
        for part in &mut a.parts {
            if let Part::Tool(tool) = part
                && tool.state.status.is_open()
            {
                tool.state.error = Some(format!("{QUARANTINED_TOOL}: {reason}"));
            }
        }
    }
    messages
}

/// The line that ends the transcript of a quarantined session: why, and where to act.
pub fn quarantine_lines(
    theme: &Theme,
    reasons: &[(String, String)],
    width: u16,
) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for (execution, reason) in reasons {
        out.push(Line::default());
        out.extend(wrap(
            vec![Line::from(vec![
                Span::styled("⚠ quarantined: ", theme.style(Role::Error)),
                Span::styled(clean(reason), theme.style(Role::Error)),
                Span::styled(
                    format!(
                        " — nothing runs {} until the inspector (i, Quarantine tab) wakes or discards it",
                        crate::view::short_id(execution)
                    ),
                    theme.style(Role::Muted),
                ),
            ])],
            width,
        ));
    }
    out
}

/// Every line of `messages` (and the pending inputs after them), wrapped to `width`.
pub fn lines(
    theme: &Theme,
    messages: &[MessageRow],
    pending: &[InputRow],
    expanded: bool,
    width: u16,
) -> Vec<Line<'static>> {
    lines_with_starts(theme, messages, pending, expanded, width, &Live::new()).0
}

/// The output of running commands as it comes, by call id (live, not durable).
pub type Live = std::collections::BTreeMap<String, String>;

/// [`lines`], with the line each message starts at, and what running commands
/// have written so far under them.
pub fn lines_with_starts(
    theme: &Theme,
    messages: &[MessageRow],
    pending: &[InputRow],
    expanded: bool,
    width: u16,
    live: &Live,
) -> (Vec<Line<'static>>, Vec<usize>) {
    let mut wrapped: Vec<Line<'static>> = Vec::new();
    let mut starts = Vec::with_capacity(messages.len());
    for message in messages {
        let mut out = Vec::new();
        if !wrapped.is_empty() {
            out.push(Line::default());
        }
        starts.push(wrapped.len() + out.len());
        match &message.data {
            MessageData::User(u) => {
                text_block(
                    &mut out,
                    theme,
                    Some(("you  ", Role::Accent)),
                    &u.text,
                    Role::Plain,
                );
            }
            MessageData::Synthetic(s) => synthetic(&mut out, theme, s),
            MessageData::Assistant(a) => assistant(&mut out, theme, a, expanded, width, live),
        }
        wrapped.extend(wrap(out, width));
    }
    let mut out = Vec::new();
    for input in pending {
        if !out.is_empty() || !wrapped.is_empty() {
            out.push(Line::default());
        }
        let label = if steward_engine::ids::continuation_execution(&input.id).is_some() {
            "waiting: continuation  "
        } else {
            "queued  "
        };
        text_block(
            &mut out,
            theme,
            Some((label, Role::Muted)),
            &input.prompt,
            Role::Muted,
        );
    }
    wrapped.extend(wrap(out, width));
    (wrapped, starts)
}

/// Text as a terminal line can show it (see [`steward_engine::printable`]).
pub fn clean(text: &str) -> String {
    steward_engine::printable::clean(text)
}

fn text_block(
    out: &mut Vec<Line<'static>>,
    theme: &Theme,
    label: Option<(&str, Role)>,
    text: &str,
    role: Role,
) {
    for (i, line) in clean(text).split('\n').enumerate() {
        let mut spans = Vec::new();
        if let Some((label, label_role)) = label {
            if i == 0 {
                spans.push(Span::styled(label.to_string(), theme.style(label_role)));
            } else {
                spans.push(Span::raw(" ".repeat(label.chars().count())));
            }
        }
        spans.push(Span::styled(line.to_string(), theme.style(role)));
        out.push(Line::from(spans));
    }
}

fn synthetic(
    out: &mut Vec<Line<'static>>,
    theme: &Theme,
    s: &steward_engine::message::SyntheticData,
) {
    let (symbol, role, text) = match s.kind {
        SyntheticKind::Recovery => ("↻ ", Role::Recovered, s.text.clone()),
        SyntheticKind::Continuation => (
            "↻ ",
            Role::Recovered,
            s.label.clone().unwrap_or_else(|| s.text.clone()),
        ),
        SyntheticKind::Interrupted => ("⊘ ", Role::Warn, format!("{} (cancelled)", s.text)),
        SyntheticKind::Compaction => (
            "≡ ",
            Role::Muted,
            format!(
                "{}: {}",
                s.label.as_deref().unwrap_or("Compacted conversation"),
                s.text
            ),
        ),
        SyntheticKind::Model => ("⇄ ", Role::Accent, s.text.clone()),
    };
    text_block(out, theme, Some((symbol, role)), &text, role);
}

fn assistant(
    out: &mut Vec<Line<'static>>,
    theme: &Theme,
    a: &AssistantData,
    expanded: bool,
    width: u16,
    live: &Live,
) {
    out.push(Line::from(vec![
        Span::styled("assistant".to_string(), theme.style(Role::Title)),
        Span::styled(
            format!(" ({}/{})", a.provider, a.model),
            theme.style(Role::Muted),
        ),
    ]));
    // An MCP server that did not start is said where the user looks, and so is
    // what the provider's answer suggests went wrong.
    for missing in &a.unavailable {
        let text = format!("MCP server `{}` {}", missing.server, missing.error);
        text_block(out, theme, Some(("⚠ ", Role::Warn)), &text, Role::Warn);
    }
    for warning in &a.warnings {
        text_block(out, theme, Some(("⚠ ", Role::Warn)), warning, Role::Warn);
    }
    let mut shown_texts: Vec<&str> = Vec::new();
    for part in &a.parts {
        match part {
            Part::Text { id, text } if id.starts_with("recovery:") => {
                text_block(
                    out,
                    theme,
                    Some(("↻ ", Role::Recovered)),
                    text,
                    Role::Recovered,
                );
                shown_texts.push(text);
            }
            Part::Text { text, .. } => {
                if !text.is_empty() {
                    text_block(out, theme, None, text, Role::Plain);
                }
            }
            Part::Tool(tool) => {
                tool_lines(out, theme, tool, expanded, width);
                // A running command's output so far: its last lines.
                if tool.state.status == ToolStatus::Running
                    && let Some(text) = live.get(&tool.call_id)
                {
                    let text = clean(text);
                    let lines: Vec<&str> = text.trim_end_matches('\n').split('\n').collect();
                    for line in &lines[lines.len().saturating_sub(COLLAPSED_LINES)..] {
                        out.push(Line::from(vec![
                            Span::raw("    "),
                            Span::styled(line.to_string(), theme.style(Role::Muted)),
                        ]));
                    }
                }
            }
            // What the model thought, folded to one line unless expanded.
            Part::Reasoning { text, redacted, .. } => {
                let shown = if redacted.is_some() {
                    "(redacted)".to_string()
                } else if expanded {
                    text.clone()
                } else {
                    let first = text.lines().next().unwrap_or_default();
                    let short: String = first.chars().take(80).collect();
                    if short.len() < text.len() {
                        format!("{short}…")
                    } else {
                        short
                    }
                };
                text_block(
                    out,
                    theme,
                    Some(("∴ thinking: ", Role::Muted)),
                    &shown,
                    Role::Muted,
                );
            }
        }
    }
    // The error, unless a recovery text part already said it.
    if let Some(error) = &a.error
        && !shown_texts.contains(&error.message.as_str())
    {
        // A recovery says so in its own part: an interruption left here is the
        // user's cancellation.
        if error.kind == "interrupted" {
            let text = format!("{} (cancelled)", error.message);
            text_block(out, theme, Some(("⊘ ", Role::Warn)), &text, Role::Warn);
        } else {
            text_block(
                out,
                theme,
                Some(("✗ ", Role::Error)),
                &error.message,
                Role::Error,
            );
        }
    }
}

fn tool_lines(
    out: &mut Vec<Line<'static>>,
    theme: &Theme,
    tool: &ToolPart,
    expanded: bool,
    width: u16,
) {
    let state = &tool.state;
    let error = state.error.as_deref().unwrap_or_default();
    // Recovery ends an interrupted call at the time it reconciled it (protocol
    // §5.4): that time includes the downtime, so no duration is shown for it.
    let by_recovery = error.starts_with(TOOL_OUTCOME_UNKNOWN);
    let quarantined = error.starts_with(QUARANTINED_TOOL);
    let (mark, role) = match state.status {
        _ if quarantined => ("? outcome unknown", Role::Error),
        ToolStatus::Error if by_recovery => ("✗ interrupted", Role::Error),
        ToolStatus::Pending => ("… pending", Role::Muted),
        ToolStatus::Running => ("◐ running", Role::Warn),
        ToolStatus::Completed => ("✓", Role::Ok),
        ToolStatus::Error => ("✗", Role::Error),
    };
    let took = state
        .time
        .as_ref()
        .and_then(|t| Some(t.end? - t.start?))
        .filter(|_| !by_recovery && !quarantined)
        .map(|ms| format!(" {:.1} s", ms as f64 / 1000.0))
        .unwrap_or_default();
    // An MCP tool is named by its server and its own name.
    let mcp = state
        .mcp
        .as_ref()
        .map(|m| (m.server.clone(), m.tool.clone()))
        .or_else(|| {
            tool.tool
                .split_once("__")
                .map(|(s, t)| (s.to_string(), t.to_string()))
        });
    let mut line = vec![Span::styled(" ▸ ".to_string(), theme.style(Role::Muted))];
    match mcp {
        Some((server, own)) => {
            line.push(Span::styled(clean(&server), theme.style(Role::Muted)));
            line.push(Span::styled(" › ".to_string(), theme.style(Role::Muted)));
            line.push(Span::styled(clean(&own), theme.style(Role::Title)));
            line.push(Span::styled(" (MCP)".to_string(), theme.style(Role::Muted)));
        }
        None => line.push(Span::styled(tool.tool.clone(), theme.style(Role::Title))),
    }
    // The input gives way so that the status stays on the header's line.
    let status = format!("{mark}{took}");
    let fixed: usize = line.iter().map(Span::width).sum::<usize>()
        + 4
        + status
            .chars()
            .map(|c| c.width().unwrap_or(0))
            .sum::<usize>();
    if fixed + 8 <= usize::from(width) {
        let room = (usize::from(width) - fixed).min(SUMMARY_CHARS);
        line.extend([
            Span::raw("  "),
            Span::styled(summary(&state.input, room), theme.style(Role::Muted)),
        ]);
    } else {
        // A name too long for the line (an MCP server's and tool's, say) is cut,
        // and the input left to the expanded call, so the status still fits.
        let name: String = line[1..].iter().map(|s| s.content.as_ref()).collect();
        let room = usize::from(width).saturating_sub(fixed - name.width() - 2);
        line.truncate(1);
        line.push(Span::styled(cut(&name, room), theme.style(Role::Title)));
    }
    line.extend([Span::raw("  "), Span::styled(status, theme.style(role))]);
    out.push(Line::from(line));
    if let Some(error) = &state.error {
        let (label, role) = if quarantined {
            ("   ⚠ ", Role::Error)
        } else if by_recovery {
            ("   ↻ error (recovery): ", Role::Recovered)
        } else {
            ("   error: ", Role::Error)
        };
        text_block(out, theme, Some((label, role)), error, role);
    }
    // An edit shows what it changed, folded like output.
    let diff = state
        .structured
        .as_ref()
        .and_then(|s| s.get("diff"))
        .and_then(|d| serde_json::from_value::<steward_engine::tools::FileDiff>(d.clone()).ok());
    if let Some(diff) = diff {
        let rows = wrap(
            diff_lines(theme, &diff, false)
                .into_iter()
                .map(|line| {
                    let mut spans = vec![Span::raw("    ")];
                    spans.extend(line.spans);
                    Line::from(spans)
                })
                .collect(),
            width,
        );
        let shown = if expanded {
            rows.len()
        } else {
            rows.len().min(COLLAPSED_LINES)
        };
        let more = rows.len() - shown;
        out.extend(rows.into_iter().take(shown));
        if more > 0 {
            out.push(Line::from(Span::styled(
                format!("    … {more} more lines of the diff (Enter in the transcript expands)"),
                theme.style(Role::Muted),
            )));
        }
        return;
    }
    if let Some(output) = state.output.as_deref().filter(|o| !o.trim().is_empty()) {
        let output = clean(output);
        // Counted in lines on screen: one long line of output folds like many.
        let rows = wrap(
            output
                .trim_end_matches('\n')
                .split('\n')
                .map(|line| {
                    Line::from(vec![
                        Span::raw("    "),
                        Span::styled(line.to_string(), theme.style(Role::Muted)),
                    ])
                })
                .collect(),
            width,
        );
        let shown = if expanded {
            rows.len()
        } else {
            rows.len().min(COLLAPSED_LINES)
        };
        let more = rows.len() - shown;
        out.extend(rows.into_iter().take(shown));
        if more > 0 {
            out.push(Line::from(Span::styled(
                format!("    … {more} more lines (Enter in the transcript expands)"),
                theme.style(Role::Muted),
            )));
        }
    }
}

/// The most a tool header shows of its input.
const SUMMARY_CHARS: usize = 60;

/// A tool input in one short line of at most `room` columns: the command or path
/// when there is one.
fn summary(input: &serde_json::Value, room: usize) -> String {
    let text = ["command", "path"]
        .iter()
        .find_map(|k| input.get(k).and_then(|v| v.as_str()).map(str::to_string))
        .unwrap_or_else(|| input.to_string());
    let text = clean(&text);
    let first = text.lines().next().unwrap_or_default();
    let cut = first.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>() > room
        || text.lines().count() > 1;
    let mut short = String::new();
    let mut used = 0;
    for c in first.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room.saturating_sub(usize::from(cut)) {
            break;
        }
        short.push(c);
        used += w;
    }
    if cut {
        short.push('…');
    }
    short
}

/// Breaks lines wider than `width` between words (a word longer than a line is
/// broken where it must be); spans keep their style.
pub fn wrap(lines: Vec<Line<'static>>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        if line.width() <= width {
            out.push(line);
            continue;
        }
        let mut current: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        for span in line.spans {
            for word in words(&span.content) {
                let w: usize = word.chars().map(|c| c.width().unwrap_or(0)).sum();
                // A word longer than a line starts where it is (it is broken
                // anyway), rather than leaving the rest of this line empty.
                if used + w > width && used > 0 && w <= width {
                    out.push(Line::from(std::mem::take(&mut current)));
                    used = 0;
                    if word.trim().is_empty() {
                        continue;
                    }
                }
                if w <= width {
                    current.push(Span::styled(word.to_string(), span.style));
                    used += w;
                    continue;
                }
                // A word longer than a line: break it by characters.
                let mut chunk = String::new();
                for c in word.chars() {
                    let cw = c.width().unwrap_or(0);
                    if used + cw > width {
                        current.push(Span::styled(std::mem::take(&mut chunk), span.style));
                        out.push(Line::from(std::mem::take(&mut current)));
                        used = 0;
                    }
                    chunk.push(c);
                    used += cw;
                }
                current.push(Span::styled(chunk, span.style));
            }
        }
        if !current.is_empty() {
            out.push(Line::from(current));
        }
    }
    out
}

/// `text` cut into words, each with the spaces that follow it.
fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c == ' ' {
            in_space = true;
        } else if in_space {
            out.push(&text[start..i]);
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// `text` cut to `width` columns, ending in `…` when cut.
fn cut(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn lines_wrap_between_words_and_long_words_are_broken() {
        let wrapped = wrap(vec![Line::from("the quick brown fox jumps")], 10);
        assert_eq!(text(&wrapped), vec!["the quick ", "brown fox ", "jumps"]);
        let long = wrap(vec![Line::from("abcdefghijklmnop qr")], 6);
        assert_eq!(text(&long), vec!["abcdef", "ghijkl", "mnop ", "qr"]);
    }

    fn assistant_row(data: serde_json::Value) -> MessageRow {
        MessageRow {
            id: "msg_a".into(),
            session_id: "ses_1".into(),
            seq: 1,
            time_created: 0,
            time_updated: 0,
            data: MessageData::from_json(
                steward_engine::message::MessageKind::Assistant,
                &data.to_string(),
            )
            .unwrap(),
        }
    }

    #[test]
    fn a_tool_header_keeps_its_status_on_its_line_at_any_width() {
        let theme = Theme { color: false };
        let command = "cargo test --workspace --all-features -- --test-threads 1 a_long_filter";
        let row = assistant_row(serde_json::json!({
            "execution_id": "exe_1", "provider": "p", "model": "m", "time": {"created": 1},
            "parts": [{"id": "prt_1", "type": "tool", "call_id": "c1", "tool": "run_command",
                       "state": {"status": "error", "input": {"command": command},
                                 "error": "exit status 1",
                                 "time": {"start": 1000, "end": 34_700}}}]}));
        for width in [40u16, 60, 78, 86, 120] {
            let shown = text(&lines(
                &theme,
                std::slice::from_ref(&row),
                &[],
                false,
                width,
            ));
            let header = shown
                .iter()
                .position(|l| l.contains("▸ run_command"))
                .unwrap();
            assert!(
                shown[header].trim_end().ends_with("✗ 33.7 s"),
                "width {width}: {shown:#?}"
            );
            assert!(
                shown[header].chars().count() <= usize::from(width),
                "{shown:#?}"
            );
        }
    }

    #[test]
    fn an_mcp_tools_long_name_leaves_its_status_on_its_line() {
        let theme = Theme { color: false };
        let tool = "filesystem_server__a_very_long_tool_name_that_goes_on_and_on_for_a_while";
        let row = assistant_row(serde_json::json!({
            "execution_id": "exe_1", "provider": "p", "model": "m", "time": {"created": 1},
            "parts": [{"id": "prt_1", "type": "tool", "call_id": "c1", "tool": tool,
                       "state": {"status": "error", "input": {"path": "/tmp/some/long/path"},
                                 "error": "exit status 1",
                                 "time": {"start": 1000, "end": 34_700}}}]}));
        for width in [30u16, 40, 60, 78, 86, 120] {
            let shown = text(&lines(
                &theme,
                std::slice::from_ref(&row),
                &[],
                false,
                width,
            ));
            let header = shown
                .iter()
                .position(|l| l.contains("▸ filesystem_serv"))
                .unwrap_or_else(|| panic!("width {width}: {shown:#?}"));
            assert!(
                shown[header].trim_end().ends_with("✗ 33.7 s"),
                "width {width}: {shown:#?}"
            );
            assert!(
                shown[header].chars().count() <= usize::from(width),
                "width {width}: {shown:#?}"
            );
            // Nothing of the status spills onto the next line.
            assert!(
                shown
                    .get(header + 1)
                    .is_none_or(|next| !next.trim_start().starts_with('s')),
                "width {width}: {shown:#?}"
            );
        }
    }

    #[test]
    fn a_cancellation_reads_as_one_and_a_recovery_as_a_restart() {
        let theme = Theme { color: false };
        let cancelled = assistant_row(serde_json::json!({
            "execution_id": "exe_1", "provider": "p", "model": "m", "time": {"created": 1},
            "finish": "error",
            "error": {"type": "interrupted", "message": "Session execution interrupted"},
            "parts": [{"id": "prt_1", "type": "text", "text": "Half"}]}));
        let recovered = assistant_row(serde_json::json!({
            "execution_id": "exe_2", "provider": "p", "model": "m", "time": {"created": 1},
            "finish": "error",
            "error": {"type": "interrupted", "message": "Session execution interrupted by server restart"},
            "parts": [{"id": "recovery:exe_2", "type": "text",
                       "text": "Session execution interrupted by server restart"}]}));
        let shown = |row: MessageRow| text(&lines(&theme, &[row], &[], false, 80));
        assert!(
            shown(cancelled).contains(&"⊘ Session execution interrupted (cancelled)".to_string())
        );
        let restart = shown(recovered);
        assert_eq!(
            restart
                .iter()
                .filter(|l| l.contains("interrupted by server restart"))
                .collect::<Vec<_>>(),
            vec!["↻ Session execution interrupted by server restart"]
        );
    }
}
