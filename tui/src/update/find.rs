//! Searching the transcript (`/`, `n`, `N`) and copying from it (`y`, `Y`): both
//! work on what the last frame drew (its lines, and where each message starts).

use steward_engine::message::MessageData;

use super::*;

/// Moves to the next (down) or previous (up) line the search finds, holding the
/// view there; wraps around at either end, and says so.
pub(super) fn next_match(app: &mut App, down: bool) {
    let Some(search) = &app.transcript.search else {
        app.status = Some("nothing to find: / searches the transcript".into());
        return;
    };
    if search.query.is_empty() {
        return;
    }
    let found = app.transcript.found.borrow().clone();
    if found.is_empty() {
        app.status = Some(format!(
            "“{}” is not in the loaded transcript",
            search.query
        ));
        return;
    }
    let drawn = app.transcript.rendered.get();
    let bottom = drawn.total.saturating_sub(drawn.height);
    let top = match app.transcript.scroll {
        None => bottom,
        Some(_) => drawn.top.min(bottom),
    };
    // From the match shown; without one, from the view (the newest line first).
    let from = search.current;
    let next = if down {
        let after = from.unwrap_or(top.saturating_sub(1));
        found
            .iter()
            .copied()
            .find(|l| *l > after || (from.is_none() && *l >= top))
    } else {
        let before = from.unwrap_or(top + drawn.height);
        found.iter().rev().copied().find(|l| *l < before)
    };
    let (line, wrapped) = match next {
        Some(line) => (line, false),
        None if down => (found[0], true),
        None => (found[found.len() - 1], true),
    };
    let n = found.iter().position(|l| *l == line).unwrap_or(0) + 1;
    app.status = Some(format!(
        "match {n} of {}{}",
        found.len(),
        if wrapped { " (wrapped around)" } else { "" }
    ));
    if let Some(search) = app.transcript.search.as_mut() {
        search.current = Some(line);
    }
    hold_at(app, line.saturating_sub(drawn.height / 3));
}

/// Holds the transcript's view with line `line` at its top (or follows the newest
/// line when that is where the view ends anyway).
fn hold_at(app: &mut App, line: usize) {
    let t = &mut app.transcript;
    let drawn = t.rendered.get();
    let bottom = drawn.total.saturating_sub(drawn.height);
    if line >= bottom {
        t.scroll = None;
        t.anchor = None;
        t.pin = None;
        return;
    }
    t.scroll = Some(line);
    t.anchor = t.messages.first().map(|m| m.id.clone());
    if t.pin.is_none() {
        t.pin = t.messages.first().map(|m| (m.seq, 0));
    }
}

/// The message in view: the newest while the view follows it, else the one at the
/// top of the view.
fn message_in_view(app: &App) -> Option<&steward_engine::projection::MessageRow> {
    let t = &app.transcript;
    if t.scroll.is_none() {
        return t.messages.last();
    }
    let top = t.rendered.get().top;
    let starts = t.starts.borrow();
    let i = starts.iter().rposition(|s| *s <= top).unwrap_or(0);
    t.messages.get(i)
}

/// `y`: the message in view; `Y` (`block`): its last code block, or else its last
/// tool's output. Copied to the clipboard by OSC 52.
pub(super) fn copy(app: &mut App, block: bool) -> Vec<Effect> {
    let Some(message) = message_in_view(app) else {
        app.status = Some("nothing to copy: no message in view".into());
        return Vec::new();
    };
    let text = message.data.text();
    let (what, text) = if !block {
        ("the message", message_text(&message.data))
    } else if let Some(code) = last_code_block(&text) {
        ("its last code block", code)
    } else if let Some(output) = last_tool_output(&message.data) {
        ("its last tool output", output)
    } else {
        app.status =
            Some("that message has no code block and no tool output: y copies it whole".into());
        return Vec::new();
    };
    if text.is_empty() {
        app.status = Some("nothing to copy: the message is empty".into());
        return Vec::new();
    }
    app.status = Some(format!(
        "copied {what} ({} characters) to the clipboard",
        text.chars().count()
    ));
    vec![Effect::Copy(text)]
}

/// A message as text: what it says, and for an assistant each tool's call and
/// output in turn.
pub(crate) fn message_text(data: &MessageData) -> String {
    let Some(assistant) = data.as_assistant() else {
        return data.text();
    };
    let mut out = Vec::new();
    for part in &assistant.parts {
        match part {
            steward_engine::message::Part::Text { text, .. } => out.push(text.clone()),
            steward_engine::message::Part::Tool(tool) => {
                out.push(format!("[{}] {}", tool.tool, tool.state.input));
                if let Some(output) = tool.state.output.as_ref().or(tool.state.error.as_ref()) {
                    out.push(output.clone());
                }
            }
            steward_engine::message::Part::Reasoning { .. } => {}
        }
    }
    out.join("\n")
}

/// The last fenced code block of `text`, without its fences.
pub(crate) fn last_code_block(text: &str) -> Option<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match current.take() {
                Some(lines) => blocks.push(lines.join("\n")),
                None => current = Some(Vec::new()),
            }
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    blocks.pop()
}

fn last_tool_output(data: &MessageData) -> Option<String> {
    let tool = data.as_assistant()?.tools().last()?;
    tool.state.output.clone().or(tool.state.error.clone())
}
