use pretty_assertions::assert_eq;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyEventState};
use steward_engine::inspect::pages::ClaimOrder;
use steward_engine::runner::EngineEvent;

use super::*;
use crate::app::Overlay;
use crate::fixtures::{self, EXE_QUARANTINED, SESSION};
use crate::keymap::{Binding, Context, KEYMAP, Key};

fn press(key: &Key) -> Msg {
    Msg::Key(KeyEvent {
        code: key.code,
        modifiers: key.modifiers,
        kind: KeyEventKind::Press,
        state: KeyEventState::NONE,
    })
}

fn code(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::from(code))
}

/// An app where `context` is the most specific place a key lands, with something to
/// act on: a running session, rows, selections in the middle.
fn app_in(context: Context) -> App {
    let mut app = fixtures::chat();
    app.running.insert(SESSION.to_string());
    app.prompt.insert_str("hello");
    app.sessions.selected = 2;
    app.inspector.rows = fixtures::quarantine();
    app.inspector.tab = Tab::Quarantine;
    app.inspector.selected = 0;
    match context {
        Context::Prompt | Context::Always => app.pane = Pane::Prompt,
        Context::Chat | Context::Transcript => app.pane = Pane::Transcript,
        Context::Sessions => app.pane = Pane::Sessions,
        Context::Global => {
            app.pane = Pane::Sessions;
            app.running.clear();
        }
        Context::Inspector => app.screen = Screen::Inspector,
        Context::Filter => {
            app.screen = Screen::Inspector;
            app.inspector.editing_filter = true;
            app.inspector.filter = "exe".into();
        }
        Context::Panel => app.overlay.push(Overlay::Panel {
            lines: panel_lines(&fixtures::launch()),
            selected: 1,
        }),
        Context::Confirm => app.overlay.push(Overlay::Quit {
            running: vec![SESSION.into()],
        }),
        Context::Permission => app.overlay.push(Overlay::Permission {
            id: 7,
            request: fixtures::permission(),
        }),
        Context::Help => app.overlay.push(Overlay::Help { scroll: 3 }),
    }
    app
}

/// Whether `app` (after the key) shows that `action` was done, given `before`.
fn did(action: KeyAction, context: Context, before: &App, app: &App, effects: &[Effect]) -> bool {
    use KeyAction as A;
    let loads = effects.iter().any(|e| matches!(e, Effect::Load(_)));
    match action {
        A::Send => {
            matches!(effects, [Effect::Submit { session: Some(s), prompt }] if s == SESSION && prompt == "hello")
                && app.prompt.is_empty()
        }
        A::Newline => app.prompt.lines().len() == before.prompt.lines().len() + 1,
        A::CancelTurn | A::Interrupt if before.current_is_running() => {
            effects == [Effect::Cancel(SESSION.into())]
        }
        A::Interrupt | A::Quit => {
            app.quit
                && effects
                    == [Effect::Quit {
                        cancel_running: false,
                    }]
        }
        A::CancelTurn => false,
        A::NextPane => app.pane != before.pane,
        A::PrevPane => app.pane != before.pane,
        A::Up | A::Down | A::Top | A::Bottom | A::PageUp | A::PageDown => match context {
            Context::Help => match (before.overlay.last(), app.overlay.last()) {
                (Some(Overlay::Help { scroll: a }), Some(Overlay::Help { scroll: b })) => {
                    if action == A::Up { b < a } else { b > a }
                }
                _ => false,
            },
            Context::Panel => match (before.overlay.last(), app.overlay.last()) {
                (
                    Some(Overlay::Panel { selected: a, .. }),
                    Some(Overlay::Panel { selected: b, .. }),
                ) => matches!(action, A::Up | A::PageUp | A::Top) == (b < a) && a != b,
                _ => false,
            },
            Context::Inspector => {
                let (a, b) = (before.inspector.selected, app.inspector.selected);
                match action {
                    A::Down | A::PageDown | A::Bottom => b > a,
                    _ => b == 0 && (a == 0 || b < a),
                }
            }
            _ => {
                let (a, b) = (before.sessions.selected, app.sessions.selected);
                match action {
                    A::Up | A::PageUp | A::Top => b < a,
                    _ => b > a,
                }
            }
        },
        A::NewSession => app.transcript.session.is_none() && app.pane == Pane::Prompt,
        A::ToggleInspector => app.screen != before.screen && loads,
        A::NextTab => app.inspector.tab.index() == before.inspector.tab.index() + 1 && loads,
        A::PrevTab => app.inspector.tab.index() + 1 == before.inspector.tab.index() && loads,
        A::Tab(n) => app.inspector.tab == Tab::ALL[usize::from(n)],
        A::Filter => app.inspector.editing_filter,
        A::CycleSort => loads,
        A::Wake | A::Discard | A::Retry => {
            matches!(app.overlay.last(), Some(Overlay::Confirm { act, .. }) if act.verb() == format!("{action:?}").to_lowercase())
        }
        A::Help => matches!(app.overlay.last(), Some(Overlay::Help { .. })),
        A::Open => match context {
            Context::Sessions => app.current_session() == Some("ses_3"),
            Context::Transcript => app.transcript.expanded != before.transcript.expanded,
            Context::Panel => app.overlay.is_empty() && app.screen == Screen::Inspector,
            Context::Filter => {
                !app.inspector.editing_filter && app.inspector.filter == "exe" && loads
            }
            _ => false,
        },
        A::Close => match context {
            Context::Filter => !app.inspector.editing_filter && app.inspector.filter.is_empty(),
            _ => app.overlay.len() + 1 == before.overlay.len(),
        },
        A::Yes => {
            app.quit
                && effects
                    == [Effect::Quit {
                        cancel_running: false,
                    }]
        }
        A::CancelAndQuit => {
            app.quit
                && effects
                    == [Effect::Quit {
                        cancel_running: true,
                    }]
        }
        A::No => app.overlay.is_empty() && !app.quit,
        A::AllowOnce => effects == [Effect::Answer { id: 7, allow: true }],
        A::AllowAlways => {
            effects
                == [
                    Effect::AllowTool {
                        tool: "write_file".into(),
                        save: false,
                    },
                    Effect::Answer { id: 7, allow: true },
                ]
        }
        A::AllowAndSave => {
            effects
                == [
                    Effect::AllowTool {
                        tool: "write_file".into(),
                        save: true,
                    },
                    Effect::Answer { id: 7, allow: true },
                ]
        }
        A::Deny => {
            effects
                == [Effect::Answer {
                    id: 7,
                    allow: false,
                }]
        }
    }
}

#[test]
fn every_key_in_the_keymap_does_what_help_says() {
    let mut failures = Vec::new();
    for Binding {
        context,
        keys,
        action,
        label,
        ..
    } in KEYMAP
    {
        for key in *keys {
            let mut app = app_in(*context);
            if *action == KeyAction::PrevTab
                || (*action == KeyAction::Up && *context == Context::Inspector)
            {
                app.inspector.tab = Tab::Wakes;
                app.inspector.rows = fixtures::wakes();
                app.inspector.selected = 1;
            }
            if *context == Context::Inspector && matches!(action, KeyAction::Retry) {
                app.inspector.selected = 0;
            }
            if *context == Context::Inspector && matches!(action, KeyAction::CycleSort) {
                app.inspector.tab = Tab::Claims;
                app.inspector.rows = fixtures::claims();
            }
            let before_screen = (app.pane, app.screen);
            let before = snapshot_of(&app);
            let effects = update(&mut app, press(key));
            if !did(*action, *context, &before, &app, &effects) {
                failures.push(format!(
                    "{context:?} {label} ({key:?}) should {action:?}; was at {before_screen:?}, effects {effects:?}"
                ));
            }
        }
    }
    assert_eq!(failures, Vec::<String>::new());
}

/// A copy of what `did` compares (an `App` holds a text area, which is not `Clone`).
fn snapshot_of(app: &App) -> App {
    let mut copy = fixtures::chat();
    copy.pane = app.pane;
    copy.screen = app.screen;
    copy.running = app.running.clone();
    copy.sessions = app.sessions.clone();
    copy.inspector = app.inspector.clone();
    copy.overlay = app.overlay.clone();
    copy.transcript = app.transcript.clone();
    copy.prompt = app.prompt.clone();
    copy
}

#[test]
fn typing_in_the_prompt_never_triggers_a_binding_of_the_other_panes() {
    let mut app = fixtures::chat();
    for c in "quit now? i n j k / s w d r".chars() {
        assert_eq!(update(&mut app, code(KeyCode::Char(c))), Vec::new());
    }
    assert_eq!(app.prompt.lines(), ["quit now? i n j k / s w d r"]);
    assert!(!app.quit && app.overlay.is_empty() && app.screen == Screen::Chat);
}

#[test]
fn quitting_while_a_turn_runs_asks_first() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    app.running.insert("ses_2".into());
    assert_eq!(update(&mut app, code(KeyCode::Char('q'))), Vec::new());
    assert!(!app.quit);
    assert!(
        matches!(app.overlay.last(), Some(Overlay::Quit { running }) if running == &vec!["ses_2".to_string()])
    );
    assert_eq!(update(&mut app, code(KeyCode::Char('n'))), Vec::new());
    assert!(app.overlay.is_empty() && !app.quit);
}

#[test]
fn escape_in_the_prompt_cancels_only_a_running_turn() {
    let mut app = fixtures::chat();
    assert_eq!(update(&mut app, code(KeyCode::Esc)), Vec::new());
    app.running.insert(SESSION.into());
    assert_eq!(
        update(&mut app, code(KeyCode::Esc)),
        vec![Effect::Cancel(SESSION.into())]
    );
}

#[test]
fn a_prompt_sent_while_the_turn_runs_is_queued_to_the_same_session() {
    let mut app = fixtures::chat();
    app.running.insert(SESSION.into());
    app.prompt.insert_str("and then the lints");
    assert_eq!(
        update(&mut app, code(KeyCode::Enter)),
        vec![Effect::Submit {
            session: Some(SESSION.into()),
            prompt: "and then the lints".into()
        }]
    );
}

#[test]
fn the_read_only_inspector_refuses_actions_with_a_hint() {
    let mut app = fixtures::chat();
    app.mode = Mode::ReadOnly;
    app.screen = Screen::Inspector;
    app.inspector.tab = Tab::Quarantine;
    app.inspector.rows = fixtures::quarantine();
    for key in ['w', 'd', 'r'] {
        assert_eq!(update(&mut app, code(KeyCode::Char(key))), Vec::new());
        assert!(app.overlay.is_empty());
        assert!(app.status.as_deref().unwrap().starts_with("read-only"));
    }
}

#[test]
fn a_confirmed_action_goes_to_the_engine_with_its_execution() {
    let mut app = app_in(Context::Inspector);
    update(&mut app, code(KeyCode::Char('r')));
    assert_eq!(
        update(&mut app, code(KeyCode::Char('y'))),
        vec![Effect::Act(Act::Retry, EXE_QUARANTINED.into())]
    );
    // Retry does not apply to a recovery row.
    app.inspector.selected = 1;
    update(&mut app, code(KeyCode::Char('r')));
    assert!(app.overlay.is_empty());
    assert_eq!(
        app.status.as_deref(),
        Some("retry does not apply to this row")
    );
}

#[test]
fn an_idle_session_leaves_the_running_set_and_reloads() {
    let mut app = fixtures::chat();
    app.running.insert(SESSION.into());
    let effects = update(
        &mut app,
        Msg::Engine(EngineEvent::Idle {
            session_id: SESSION.into(),
        }),
    );
    assert!(app.running.is_empty());
    assert!(matches!(effects.as_slice(), [Effect::Load(_)]));
}

#[test]
fn the_launch_panel_lists_recoveries_quarantine_and_parked_wakes() {
    let lines = panel_lines(&fixtures::launch());
    let summary: Vec<(&str, &str)> = lines.iter().map(|l| (l.symbol, l.what.as_str())).collect();
    assert_eq!(
        summary,
        vec![
            ("↻", "phase ready"),
            ("⏸", "phase unknown"),
            ("⚠", "quarantined")
        ]
    );
    assert!(
        lines[0]
            .detail
            .starts_with("Session execution interrupted by server restart")
    );
    assert!(lines[0].detail.contains("1 process stopped"));
    assert!(
        lines[1]
            .detail
            .starts_with("Provider Step outcome unknown after server restart")
    );
    let mut app = fixtures::chat();
    update(&mut app, Msg::Launched(fixtures::launch()));
    assert!(matches!(app.overlay.last(), Some(Overlay::Panel { .. })));
    // Nothing to report: no panel.
    let mut quiet = fixtures::chat();
    update(&mut quiet, Msg::Launched(Launch::default()));
    assert!(quiet.overlay.is_empty());
}

#[test]
fn paging_past_the_last_row_asks_for_the_next_page() {
    let mut app = fixtures::chat();
    app.screen = Screen::Inspector;
    app.inspector.tab = Tab::Recoveries;
    let Rows::Recoveries(one) = fixtures::recoveries() else {
        unreachable!()
    };
    let mut rows = Vec::new();
    for i in 0..PAGE {
        let mut r = one[0].clone();
        r.execution_id = format!("exe_{i:04}");
        rows.push(r);
    }
    app.inspector.rows = Rows::Recoveries(rows);
    app.inspector.selected = PAGE - 1;
    let effects = update(&mut app, code(KeyCode::Down));
    let Some(Effect::Load(view)) = effects.first() else {
        panic!("{effects:?}")
    };
    let (tab, order, request) = view.table.clone().unwrap();
    assert_eq!((tab, order), (Tab::Recoveries, ClaimOrder::Created));
    assert_eq!(request.after.as_deref(), Some("exe_0099"));
}
