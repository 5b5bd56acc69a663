use pretty_assertions::assert_eq;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyEventState, KeyModifiers};
use steward_engine::inspect::pages::ClaimOrder;
use steward_engine::runner::{EngineEvent, Outcome};

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
    // As a frame would have left it: more to show in each scrollable box.
    app.hidden.set(crate::app::Hidden {
        help: 40,
        permission: 5,
        detail: 10,
        list: 5,
        table: 5,
        help_height: 12,
    });
    match context {
        Context::Prompt | Context::Always => app.pane = Pane::Prompt,
        Context::Chat => app.pane = Pane::Transcript,
        Context::Transcript => {
            app.pane = Pane::Transcript;
            // A search done, with matches above and below the view.
            app.transcript.search = Some(crate::app::Search {
                query: "test".into(),
                editing: false,
                current: None,
            });
            *app.transcript.found.borrow_mut() = vec![2, 30, 50];
            // Held at the assistant whose tools ran (for y and Y).
            app.transcript.scroll = Some(80);
            *app.transcript.starts.borrow_mut() = vec![0, 60, 90, 95];
            app.transcript.rendered.set(crate::app::Rendered {
                total: 100,
                height: 20,
                top: 80,
            });
        }
        Context::Search => {
            app.pane = Pane::Transcript;
            app.transcript.search = Some(crate::app::Search {
                query: "test".into(),
                editing: true,
                current: None,
            });
        }
        Context::Rename => app.overlay.push(Overlay::Rename {
            session: "ses_3".into(),
            title: "old title".into(),
        }),
        Context::Sessions => app.pane = Pane::Sessions,
        Context::Global => {
            app.pane = Pane::Sessions;
            app.running.clear();
        }
        Context::Inspector => {
            app.screen = Screen::Inspector;
            app.inspector.detail_scroll = 3;
        }
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
            scroll: 1,
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
                    if matches!(action, A::Up | A::PageUp | A::Top) {
                        b < a
                    } else {
                        b > a
                    }
                }
                _ => false,
            },
            Context::Permission => match (before.overlay.last(), app.overlay.last()) {
                (
                    Some(Overlay::Permission { scroll: a, .. }),
                    Some(Overlay::Permission { scroll: b, .. }),
                ) => {
                    if action == A::Up {
                        b < a
                    } else {
                        b > a
                    }
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
        A::ChooseModel => effects == [Effect::ChooseModel(SESSION.into())],
        A::DetailDown => app.inspector.detail_scroll > before.inspector.detail_scroll,
        A::DetailUp => app.inspector.detail_scroll < before.inspector.detail_scroll,
        A::ToggleInspector => app.screen != before.screen && loads,
        A::NextTab => app.inspector.tab.index() == before.inspector.tab.index() + 1 && loads,
        A::PrevTab => app.inspector.tab.index() + 1 == before.inspector.tab.index() && loads,
        A::Tab(n) => app.inspector.tab == Tab::ALL[usize::from(n)],
        A::Filter => match context {
            Context::Sessions => app.sessions.editing_filter,
            _ => app.inspector.editing_filter,
        },
        A::ClearText => match context {
            Context::Filter => app.inspector.filter.is_empty() && loads,
            Context::Search => app
                .transcript
                .search
                .as_ref()
                .is_some_and(|s| s.query.is_empty()),
            Context::Rename => {
                matches!(app.overlay.last(), Some(Overlay::Rename { title, .. }) if title.is_empty())
            }
            _ => false,
        },
        A::Search => app.transcript.search.as_ref().is_some_and(|s| s.editing),
        A::NextMatch | A::PrevMatch => {
            let current = |a: &App| a.transcript.search.as_ref().and_then(|s| s.current);
            // Down wraps around to the first match; up finds the last above the view's end.
            current(app) == Some(if action == A::NextMatch { 2 } else { 50 })
                && current(before).is_none()
        }
        A::Copy | A::CopyBlock => matches!(effects, [Effect::Copy(text)] if !text.is_empty()),
        A::Rename => {
            matches!(app.overlay.last(), Some(Overlay::Rename { session, .. }) if session == "ses_3")
        }
        A::Delete => {
            matches!(app.overlay.last(), Some(Overlay::Delete { session, .. }) if session == "ses_3")
        }
        A::Archive => {
            effects
                == [Effect::Housekeep {
                    session: "ses_3".into(),
                    op: crate::app::Housekeep::Archive(true),
                }]
        }
        A::ShowArchived => app.sessions.archived && loads,
        A::EditorChord => app.chord,
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
            Context::Search => app.transcript.search.as_ref().is_some_and(|s| !s.editing),
            Context::Rename => {
                app.overlay.is_empty()
                    && effects
                        == [Effect::Housekeep {
                            session: "ses_3".into(),
                            op: crate::app::Housekeep::Rename("old title".into()),
                        }]
            }
            _ => false,
        },
        A::Close => match context {
            Context::Filter => !app.inspector.editing_filter && app.inspector.filter.is_empty(),
            Context::Search => app.transcript.search.is_none(),
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
            // Quits once the turns have stopped.
            !app.quit
                && app.quitting
                && effects
                    == [Effect::Quit {
                        cancel_running: true,
                    }]
        }
        A::No => app.overlay.is_empty() && !app.quit,
        A::AllowOnce => {
            effects
                == [Effect::Answer {
                    id: 7,
                    allow: true,
                    always: false,
                }]
        }
        A::AllowAlways => {
            effects
                == [Effect::Answer {
                    id: 7,
                    allow: true,
                    always: true,
                }]
        }
        A::AllowAndSave => {
            effects
                == [
                    Effect::SaveTool {
                        tool: "write_file".into(),
                    },
                    Effect::Answer {
                        id: 7,
                        allow: true,
                        always: true,
                    },
                ]
        }
        A::Deny => {
            effects
                == [Effect::Answer {
                    id: 7,
                    allow: false,
                    always: false,
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
    app.mono_ms += 1_000;
    assert_eq!(
        update(&mut app, code(KeyCode::Char('y'))),
        vec![Effect::Act {
            act: Act::Retry,
            execution_id: EXE_QUARANTINED.into(),
            from_panel: None
        }]
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
fn a_turn_that_lost_its_lease_says_so_whichever_session_is_open() {
    let mut app = fixtures::chat();
    app.running.insert("ses_2".into());
    update(
        &mut app,
        Msg::Engine(EngineEvent::Idle {
            session_id: "ses_2".into(),
            outcome: SessionOutcome::Ran(Outcome::Lost),
        }),
    );
    assert_eq!(app.lease_lost, Some(("ses_2".to_string(), app.now_ms)));
    let status = app.status.clone().unwrap();
    assert!(
        status.starts_with("lease lost: the turn of ses_2"),
        "{status}"
    );
    // A key clears the note; the header keeps saying it.
    update(&mut app, code(KeyCode::Char('j')));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 20)).unwrap();
    terminal.draw(|f| crate::view::view(&app, f)).unwrap();
    let header: String = terminal
        .backend()
        .to_string()
        .lines()
        .next()
        .unwrap()
        .into();
    assert!(header.contains("lease lost"), "{header}");
    // The time is when this process noticed, not when the takeover happened.
    let noticed = format!(
        "lease lost (noticed {}, ses_2)",
        crate::view::clock_time(&app, app.now_ms)
    );
    assert!(header.contains(&noticed), "{header}");
}

#[test]
fn an_idle_session_leaves_the_running_set_and_reloads() {
    let mut app = fixtures::chat();
    app.running.insert(SESSION.into());
    let effects = update(
        &mut app,
        Msg::Engine(EngineEvent::Idle {
            session_id: SESSION.into(),
            outcome: SessionOutcome::Ran(Outcome::Idle),
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
fn a_wake_quarantined_during_the_launch_reads_as_quarantined_in_the_panel() {
    let mut launch = fixtures::launch();
    launch.auto_continue = false;
    // The launch's redrive quarantined the first recovery's wake; an earlier
    // launch's wake is quarantined too: the Quarantine tab lists both, and the
    // claim the launch quarantined.
    launch.quarantined_wakes = vec![(
        fixtures::EXE_RECOVERED.to_string(),
        fixtures::SESSION.to_string(),
        "continuation inp_rec_x does not exist".to_string(),
    )];
    launch.quarantine = vec![
        quarantined("claim", fixtures::EXE_QUARANTINED, "ses_4"),
        quarantined("recovery", fixtures::EXE_RECOVERED, fixtures::SESSION),
        quarantined("recovery", "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4ee02", "ses_5"),
    ];
    launch.quarantine_total = 3;
    let lines = panel_lines(&launch);
    let first = &lines[0];
    assert_eq!((first.symbol, first.what.as_str()), ("⚠", "quarantined"));
    assert!(
        !first.detail.contains("continuation waits for you"),
        "{}",
        first.detail
    );
    assert!(
        first
            .detail
            .contains("continuation inp_rec_x does not exist")
    );
    assert_eq!(first.target, Some(Tab::Quarantine));
    let quarantined: Vec<&str> = lines
        .iter()
        .filter(|l| l.what == "quarantined")
        .map(|l| l.execution_id.as_str())
        .collect();
    assert_eq!(
        quarantined,
        vec![
            fixtures::EXE_RECOVERED,
            fixtures::EXE_QUARANTINED,
            "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4ee02"
        ]
    );
    let earlier = lines.last().unwrap();
    assert!(
        earlier
            .detail
            .starts_with("wake quarantined before this launch"),
        "{}",
        earlier.detail
    );
}

fn quarantined(kind: &str, execution: &str, session: &str) -> crate::app::Quarantined {
    crate::app::Quarantined {
        kind: kind.into(),
        execution_id: execution.into(),
        session_id: session.into(),
        reason: format!("{kind} {execution} quarantined"),
    }
}

/// An old quarantined claim, and a wake the launch quarantined: the panel, its
/// heading, the header and the Quarantine tab all count two.
#[test]
fn the_panel_and_header_count_every_quarantined_row_as_the_quarantine_tab_does() {
    let mut app = fixtures::chat();
    app.last_recovery = None;
    let launch = Launch {
        report: Some(Default::default()),
        quarantined_wakes: vec![(
            "exe_wake_new".into(),
            "ses_2".into(),
            "recovery wake quarantined".into(),
        )],
        quarantine: vec![
            quarantined("claim", "exe_claim_old", "ses_1"),
            quarantined("recovery", "exe_wake_new", "ses_2"),
        ],
        quarantine_total: 2,
        ..Launch::default()
    };
    let lines = panel_lines(&launch);
    let rows: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.what.as_str(), l.execution_id.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("quarantined", "exe_wake_new"),
            ("Quarantine 2", ""),
            ("quarantined", "exe_claim_old"),
        ]
    );
    assert!(
        lines[0].detail.contains("at this launch"),
        "{}",
        lines[0].detail
    );
    assert!(
        lines[2]
            .detail
            .starts_with("claim quarantined before this launch"),
        "{}",
        lines[2].detail
    );
    assert_eq!(lines[1].target, Some(Tab::Quarantine));
    update(&mut app, Msg::Launched(launch));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 20)).unwrap();
    terminal.draw(|f| crate::view::view(&app, f)).unwrap();
    let header: String = terminal
        .backend()
        .to_string()
        .lines()
        .next()
        .unwrap()
        .into();
    assert!(header.contains("2 in quarantine at launch"), "{header}");
    assert!(!header.contains("nothing to recover"), "{header}");
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

#[test]
fn letters_typed_before_a_question_could_be_read_do_not_answer_it() {
    // Typing "please summarize" when a permission question appears mid-word.
    let mut app = fixtures::chat();
    for c in "please su".chars() {
        app.mono_ms += 250;
        update(&mut app, code(KeyCode::Char(c)));
    }
    app.mono_ms += 10;
    update(
        &mut app,
        Msg::Permission {
            id: 7,
            request: fixtures::permission(),
        },
    );
    for c in "mmarize".chars() {
        app.mono_ms += 250;
        assert_eq!(update(&mut app, code(KeyCode::Char(c))), Vec::new(), "{c}");
    }
    assert!(matches!(
        app.overlay.last(),
        Some(Overlay::Permission { .. })
    ));
    // A pause to read it, then the answer counts.
    app.mono_ms += 1_500;
    assert_eq!(
        update(&mut app, code(KeyCode::Char('n'))),
        vec![Effect::Answer {
            id: 7,
            allow: false,
            always: false,
        }]
    );
    // "why" typed at launch over the after-crash panel: `w` asks, `y` does not
    // confirm, and `q` never quits the panel.
    let mut app = fixtures::chat();
    let mut launch = fixtures::launch();
    launch.auto_continue = false;
    update(&mut app, Msg::Launched(launch));
    for c in "why q".chars() {
        app.mono_ms += 200;
        assert_eq!(update(&mut app, code(KeyCode::Char(c))), Vec::new(), "{c}");
    }
    assert!(!app.quit);
    assert!(matches!(app.overlay.last(), Some(Overlay::Confirm { .. })));
}

#[test]
fn a_prompt_that_is_not_admitted_goes_back_into_the_editor() {
    let mut app = fixtures::chat();
    app.prompt.insert_str("run the tests");
    let effects = update(&mut app, code(KeyCode::Enter));
    assert!(matches!(effects.as_slice(), [Effect::Submit { .. }]));
    assert!(app.prompt.is_empty());
    update(
        &mut app,
        Msg::SubmitFailed {
            prompt: "run the tests".into(),
            error: "session ses_1 is busy".into(),
        },
    );
    assert_eq!(app.prompt.lines(), ["run the tests"]);
    assert_eq!(app.status.as_deref(), Some("error: session ses_1 is busy"));
}

#[test]
fn an_empty_page_past_the_end_keeps_the_page_shown_and_g_goes_to_the_last_page() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    let one = fixtures::sessions()[0].clone();
    let full: Vec<_> = (0..PAGE)
        .map(|i| {
            let mut s = one.clone();
            s.id = format!("ses_{:03}", 999 - i);
            s
        })
        .collect();
    app.sessions.rows = full.clone();
    app.sessions.selected = PAGE - 1;
    let effects = update(&mut app, code(KeyCode::Char('j')));
    let [Effect::Load(view)] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    let asked = view.sessions.clone().unwrap();
    // Paged by recent activity, then id (protocol §3.6).
    assert_eq!(
        asked.after,
        Some(steward_engine::inspect::pages::session_key(
            one.time_updated,
            "ses_900"
        ))
    );
    // The next page is empty: the rows shown and the request stay, nothing jumps.
    update(
        &mut app,
        Msg::Loaded(Box::new(Loaded {
            sessions: Some((asked, Vec::new())),
            ..Loaded::default()
        })),
    );
    assert_eq!(app.sessions.rows.len(), PAGE);
    assert_eq!(app.sessions.request, app.sessions.shown);
    assert!(app.sessions.request.is_first());
    assert_eq!(app.sessions.selected, PAGE - 1);
    // G asks for the last page; g for the first.
    let effects = update(&mut app, code(KeyCode::Char('G')));
    let [Effect::Load(view)] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert!(view.sessions.as_ref().unwrap().last);
}

#[test]
fn ctrl_c_over_a_permission_question_cancels_the_turn_without_answering_for_the_user() {
    let mut app = app_in(Context::Permission);
    let effects = update(
        &mut app,
        Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
    );
    assert_eq!(effects, vec![Effect::Cancel(SESSION.into())]);
    assert!(app.overlay.is_empty() && !app.quit);
}

#[test]
fn a_too_small_terminal_takes_only_the_keys_that_leave() {
    let mut app = fixtures::chat();
    update(&mut app, Msg::Resize(40, 8));
    assert_eq!(update(&mut app, code(KeyCode::Char('x'))), Vec::new());
    assert!(app.prompt.is_empty());
    update(&mut app, code(KeyCode::Char('q')));
    assert!(app.quit);
}

#[test]
fn a_crlf_paste_keeps_its_lines() {
    let mut app = fixtures::chat();
    update(&mut app, Msg::Paste("alpha\rbeta\r\ngamma".into()));
    assert_eq!(app.prompt.lines(), ["alpha", "beta", "gamma"]);
}

#[test]
fn a_call_that_touches_a_guarded_path_cannot_be_allowed_always() {
    let mut app = app_in(Context::Permission);
    if let Some(Overlay::Permission { request, .. }) = app.overlay.last_mut() {
        request.guarded = Some(steward_engine::tools::Guarded {
            path: "/etc/hostname".into(),
            guard: steward_engine::tools::Guard::Outside,
            file: None,
        });
    }
    for key in ['a', 's'] {
        assert_eq!(update(&mut app, code(KeyCode::Char(key))), Vec::new());
        assert!(matches!(
            app.overlay.last(),
            Some(Overlay::Permission { .. })
        ));
        app.mono_ms += 1_000;
    }
    assert_eq!(
        update(&mut app, code(KeyCode::Char('y'))),
        vec![Effect::Answer {
            id: 7,
            allow: true,
            always: false
        }]
    );
}

#[test]
fn a_new_session_is_the_one_selected_once_the_list_reloads() {
    let mut app = fixtures::chat();
    app.sessions.selected = 2;
    let mut created = fixtures::sessions()[0].clone();
    created.id = "ses_new".into();
    update(
        &mut app,
        Msg::Created(steward_engine::projection::SessionRow {
            id: created.id.clone(),
            title: "new".into(),
            directory: "/".into(),
            time_created: 0,
            time_updated: 0,
            archived: false,
        }),
    );
    let mut rows = vec![created];
    rows.extend(fixtures::sessions());
    let request = app.sessions.request.clone();
    update(
        &mut app,
        Msg::Loaded(Box::new(Loaded {
            sessions: Some((request, rows)),
            ..Loaded::default()
        })),
    );
    assert_eq!(app.sessions.rows[app.sessions.selected].id, "ses_new");
}

fn ctrl(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
}

#[test]
fn page_down_and_up_move_the_rows_the_pane_shows_not_ten() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    let one = fixtures::sessions()[0].clone();
    app.sessions.rows = (0..40)
        .map(|i| {
            let mut s = one.clone();
            s.id = format!("ses_{i:03}");
            s
        })
        .collect();
    app.hidden.set(crate::app::Hidden {
        list: 7,
        table: 4,
        ..Default::default()
    });
    update(&mut app, code(KeyCode::PageDown));
    assert_eq!(app.sessions.selected, 7);
    update(&mut app, code(KeyCode::PageDown));
    assert_eq!(app.sessions.selected, 14);
    update(&mut app, code(KeyCode::PageUp));
    assert_eq!(app.sessions.selected, 7);
    app.screen = Screen::Inspector;
    app.inspector.tab = Tab::Claims;
    app.inspector.rows = fixtures::claims();
    update(&mut app, code(KeyCode::PageDown));
    assert_eq!(app.inspector.selected, 2, "the last of three rows");
}

#[test]
fn ctrl_u_clears_a_filter_and_the_filters_follow_typing() {
    let mut app = fixtures::chat();
    app.screen = Screen::Inspector;
    update(&mut app, code(KeyCode::Char('/')));
    for c in "exe_1".chars() {
        update(&mut app, code(KeyCode::Char(c)));
    }
    assert_eq!(app.inspector.filter, "exe_1");
    let effects = update(&mut app, ctrl('u'));
    assert_eq!(app.inspector.filter, "");
    assert!(app.inspector.editing_filter, "still typing");
    assert!(
        matches!(effects.as_slice(), [Effect::Load(view)] if view.table.as_ref().is_some_and(|t| t.2.filter.is_none()))
    );

    // The session list: `/` filters by what is typed, as it is typed.
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    update(&mut app, code(KeyCode::Char('/')));
    let mut last = Vec::new();
    for c in "light".chars() {
        last = update(&mut app, code(KeyCode::Char(c)));
    }
    let [Effect::Load(view)] = last.as_slice() else {
        panic!("{last:?}")
    };
    assert_eq!(
        view.sessions.as_ref().and_then(|r| r.filter.as_deref()),
        Some("light")
    );
    // `n` is typed into the filter, not a new session.
    update(&mut app, code(KeyCode::Char('n')));
    assert_eq!(app.sessions.filter, "lightn");
    update(&mut app, ctrl('u'));
    assert_eq!(app.sessions.filter, "");
    update(&mut app, code(KeyCode::Char('x')));
    update(&mut app, code(KeyCode::Enter));
    assert!(!app.sessions.editing_filter && app.sessions.filter == "x");
}

#[test]
fn delete_asks_first_and_deleting_the_open_session_closes_it() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    app.sessions.selected = 0;
    app.mono_ms = 10_000;
    assert_eq!(update(&mut app, code(KeyCode::Char('d'))), Vec::new());
    assert!(
        matches!(app.overlay.last(), Some(Overlay::Delete { session, .. }) if session == SESSION)
    );
    // Answered too soon: typing that ran on does not delete.
    app.mono_ms += 50;
    assert_eq!(update(&mut app, code(KeyCode::Char('y'))), Vec::new());
    app.mono_ms += 1_000;
    assert_eq!(
        update(&mut app, code(KeyCode::Char('y'))),
        vec![Effect::Housekeep {
            session: SESSION.into(),
            op: crate::app::Housekeep::Delete
        }]
    );
    assert!(app.overlay.is_empty());
    // Refused: said, and the session stays open.
    update(
        &mut app,
        Msg::Housekept {
            session: SESSION.into(),
            op: crate::app::Housekeep::Delete,
            result: Err("cannot delete session ses_1: it is running".into()),
        },
    );
    assert_eq!(app.current_session(), Some(SESSION));
    assert!(
        app.status
            .as_deref()
            .is_some_and(|s| s.contains("it is running"))
    );
    update(
        &mut app,
        Msg::Housekept {
            session: SESSION.into(),
            op: crate::app::Housekeep::Delete,
            result: Ok("deleted".into()),
        },
    );
    assert_eq!(app.current_session(), None);
}

#[test]
fn ctrl_x_ctrl_e_edits_the_prompt_and_a_failing_editor_leaves_it() {
    let mut app = fixtures::chat();
    app.prompt.insert_str("a long prompt");
    assert_eq!(update(&mut app, ctrl('x')), Vec::new());
    assert_eq!(
        update(&mut app, ctrl('e')),
        vec![Effect::EditPrompt("a long prompt".into())]
    );
    update(
        &mut app,
        Msg::Edited(Err("vim exited with exit status: 1".into())),
    );
    assert_eq!(app.prompt.lines(), ["a long prompt"]);
    assert!(
        app.status
            .as_deref()
            .is_some_and(|s| s.contains("as it was") && s.contains("vim"))
    );
    update(&mut app, Msg::Edited(Ok("line one\nline two".into())));
    assert_eq!(app.prompt.lines(), ["line one", "line two"]);
    // Ctrl-E alone (without Ctrl-X first) edits nothing.
    assert_eq!(update(&mut app, ctrl('e')), Vec::new());
}

#[test]
fn a_launch_with_a_session_to_open_opens_it() {
    let mut app = fixtures::chat();
    app.transcript = Default::default();
    let launch = Launch {
        open: Some("ses_3".into()),
        ..Default::default()
    };
    let effects = update(&mut app, Msg::Launched(launch));
    assert_eq!(app.current_session(), Some("ses_3"));
    assert!(
        matches!(effects.as_slice(), [Effect::Load(view)] if view.transcript.as_ref().is_some_and(|t| t.0 == "ses_3"))
    );
}

#[test]
fn the_row_number_counts_the_pages_before_it() {
    let request = |after: Option<&str>, before: Option<&str>, last: bool| PageRequest {
        after: after.map(str::to_string),
        before: before.map(str::to_string),
        last,
        ..PageRequest::first(PAGE)
    };
    assert_eq!(
        page_offset(&request(None, None, false), 300, 100, 100, 450),
        0
    );
    assert_eq!(
        page_offset(&request(Some("k"), None, false), 100, 100, 100, 450),
        200
    );
    assert_eq!(
        page_offset(&request(None, Some("k"), false), 200, 100, 100, 450),
        100
    );
    assert_eq!(
        page_offset(&request(None, None, true), 0, 100, 50, 450),
        400
    );
}

#[test]
fn copying_takes_the_message_in_view_or_its_last_code_block() {
    assert_eq!(
        super::find::last_code_block("text\n```rust\nfn a() {}\n```\nmore\n```\nlast\n```\n"),
        Some("last".into())
    );
    assert_eq!(super::find::last_code_block("no block"), None);
    let mut app = fixtures::chat();
    app.pane = Pane::Transcript;
    let effects = update(&mut app, code(KeyCode::Char('y')));
    let newest = app.transcript.messages.last().unwrap().data.text();
    assert_eq!(effects, vec![Effect::Copy(newest)]);
}

#[test]
fn esc_in_a_session_another_process_runs_says_where_to_stop_it() {
    let mut app = fixtures::chat();
    app.pane = Pane::Prompt;
    app.transcript.state = Some(steward_engine::inspect::SessionState::Running);
    app.transcript.holder = Some((fixtures::OWNER_DEAD.to_string(), 4242));
    let effects = update(&mut app, code(KeyCode::Esc));
    assert_eq!(effects, Vec::new());
    let status = app.status.clone().unwrap_or_default();
    assert!(
        status.contains("another Steward process (pid 4242"),
        "{status:?}"
    );
    // Neutral: that process may be `steward run` (Ctrl-C) or an ACP agent (the
    // editor's cancel), and a stopped one ends only once continued.
    assert!(!status.contains("with Esc"), "{status:?}");
    assert!(status.contains("kill -CONT 4242"), "{status:?}");
    // The footer does not offer to cancel the turn here.
    app.status = None;
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 30)).unwrap();
    terminal.draw(|f| crate::view::view(&app, f)).unwrap();
    let text = terminal.backend().to_string();
    let footer = text.lines().last().unwrap();
    assert!(!footer.contains("Esc cancel turn"), "{footer}");
    assert!(footer.contains("Esc which process runs it"), "{footer}");
}

#[test]
fn a_question_of_a_continuation_opens_its_session_when_none_is_open() {
    let mut app = fixtures::chat();
    app.transcript = Default::default();
    let effects = update(
        &mut app,
        Msg::Permission {
            id: 3,
            request: fixtures::permission(),
        },
    );
    assert_eq!(app.current_session(), Some(SESSION));
    assert!(
        matches!(effects.as_slice(), [Effect::Load(_)]),
        "{effects:?}"
    );
    assert!(matches!(
        app.overlay.last(),
        Some(Overlay::Permission { id: 3, .. })
    ));
    // A session the user has open stays open.
    let mut other = fixtures::chat();
    let mut request = fixtures::permission();
    request.session_id = "ses_2".into();
    update(&mut other, Msg::Permission { id: 4, request });
    assert_eq!(other.current_session(), Some(SESSION));
    assert!(other.waits_for_permission("ses_2"));
}

#[test]
fn a_question_of_a_continuation_leaves_the_inspector_and_the_typed_prompt_alone() {
    // In the inspector: the question comes up there, no session opens.
    let mut app = fixtures::chat();
    app.transcript = Default::default();
    app.screen = Screen::Inspector;
    let effects = update(
        &mut app,
        Msg::Permission {
            id: 5,
            request: fixtures::permission(),
        },
    );
    assert_eq!(app.screen, Screen::Inspector);
    assert_eq!(app.current_session(), None);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(matches!(
        app.overlay.last(),
        Some(Overlay::Permission { id: 5, .. })
    ));
    // Something typed: no session opens, and the question names the session by
    // its title.
    let mut typed = fixtures::chat();
    typed.transcript = Default::default();
    typed.launch.titles = [(fixtures::SESSION.to_string(), "fix the flaky test".into())]
        .into_iter()
        .collect();
    typed.prompt.insert_str("half a thought");
    update(
        &mut typed,
        Msg::Permission {
            id: 6,
            request: fixtures::permission(),
        },
    );
    assert_eq!(typed.current_session(), None);
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(120, 30)).unwrap();
    terminal.draw(|f| crate::view::view(&typed, f)).unwrap();
    let text = terminal.backend().to_string();
    assert!(text.contains("in “fix the flaky test”"), "{text}");
}

#[test]
fn the_header_says_continuations_started_at_launch_when_nothing_was_recovered() {
    let mut app = fixtures::chat();
    app.last_recovery = None;
    let launch = Launch {
        report: Some(Default::default()),
        continued: vec!["ses_2".into()],
        ..Launch::default()
    };
    update(&mut app, Msg::Launched(launch));
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 20)).unwrap();
    terminal.draw(|f| crate::view::view(&app, f)).unwrap();
    let header: String = terminal
        .backend()
        .to_string()
        .lines()
        .next()
        .unwrap()
        .into();
    // Worded as of the launch: the continuation may have finished since.
    assert!(header.contains("1 session continued at launch"), "{header}");
    assert!(!header.contains("nothing to recover at launch"), "{header}");
}
