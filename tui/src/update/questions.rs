//! Questions and answers: the inspector's actions and their confirmation, the
//! permission modal's answers, and the after-crash panel's lines.

use super::*;

/// Asks to confirm an inspector action on the selected row, where it applies.
pub(super) fn ask(app: &mut App, act: Act) -> Vec<Effect> {
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
pub(super) fn not_applicable(app: &App, act: Act) -> Option<String> {
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

pub(super) fn answer(app: &mut App, action: KeyAction) -> Vec<Effect> {
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
    let quarantined_wake = |execution: &str| {
        launch
            .quarantined_wakes
            .iter()
            .find(|(e, _, _)| e == execution)
            .map(|(_, _, reason)| reason.as_str())
    };
    for r in &report.recovered {
        let text = match r.phase {
            Phase::Unknown => PROVIDER_OUTCOME_UNKNOWN,
            Phase::Ready | Phase::Safe => EXECUTION_INTERRUPTED_BY_RESTART,
        };
        let mut detail = Vec::new();
        // What became of its wake since (the launch's redrive may have
        // quarantined it), as the session list says.
        let quarantined = quarantined_wake(&r.execution_id);
        if let Some(reason) = quarantined {
            detail.push(format!("its continuation was quarantined: {reason}"));
        } else if r.parked {
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
            symbol: match (quarantined, r.parked) {
                (Some(_), _) => "⚠",
                (None, true) => "⏸",
                (None, false) => "↻",
            },
            session_id: r.session_id.clone(),
            execution_id: r.execution_id.clone(),
            what: match quarantined {
                Some(_) => "quarantined".to_string(),
                None => format!("phase {}", r.phase.as_str()),
            },
            detail: format!("{text} · {}", detail.join(" · ")),
            target: (r.parked || quarantined.is_some()).then_some(Tab::Quarantine),
            actionable: r.parked || quarantined.is_some() || !launch.auto_continue,
            done: None,
        });
    }
    for q in &report.quarantined {
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: q.session_id.clone(),
            execution_id: q.execution_id.clone(),
            what: "quarantined".into(),
            detail: format!("quarantined at this launch: {}", q.reason),
            target: Some(Tab::Quarantine),
            actionable: true,
            done: None,
        });
    }
    let reported: Vec<String> = lines.iter().map(|l| l.execution_id.clone()).collect();
    for (execution_id, session_id, reason) in &launch.quarantined_wakes {
        if reported.contains(execution_id) {
            continue;
        }
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: session_id.clone(),
            execution_id: execution_id.clone(),
            what: "quarantined".into(),
            detail: format!("its continuation was quarantined at this launch: {reason}"),
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
    // Every row still quarantined, under its own heading with the Quarantine tab's
    // count: those quarantined before this launch too, which stay until discarded.
    if launch.quarantine_total > 0 {
        let n = launch.quarantine_total;
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: String::new(),
            execution_id: String::new(),
            what: format!("Quarantine {n}"),
            detail: format!(
                "{n} row{} quarantined in all (claims and wakes): see the Quarantine tab",
                if n == 1 { "" } else { "s" }
            ),
            target: Some(Tab::Quarantine),
            actionable: false,
            done: None,
        });
    }
    let reported: Vec<String> = lines.iter().map(|l| l.execution_id.clone()).collect();
    for q in &launch.quarantine {
        if reported.contains(&q.execution_id) {
            continue;
        }
        let what = if q.kind == "claim" { "claim" } else { "wake" };
        lines.push(PanelLine {
            symbol: "⚠",
            session_id: q.session_id.clone(),
            execution_id: q.execution_id.clone(),
            what: "quarantined".into(),
            detail: format!("{what} quarantined before this launch: {}", q.reason),
            target: Some(Tab::Quarantine),
            actionable: true,
            done: None,
        });
    }
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
