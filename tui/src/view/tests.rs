//! What the screen looks like, as text snapshots of a `TestBackend` (committed under
//! `snapshots/`; review changes with `cargo insta review`).

use insta::assert_snapshot;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;

use super::view;
use crate::app::{App, Mode, Overlay, Pane, Screen, Tab};
use crate::fixtures;
use crate::theme::Theme;
use crate::update::panel_lines;

fn draw(app: &App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| view(app, f)).unwrap();
    terminal
}

fn screen(app: &App, width: u16, height: u16) -> String {
    draw(app, width, height).backend().to_string()
}

fn inspector(tab: Tab) -> App {
    let mut app = fixtures::chat();
    app.screen = Screen::Inspector;
    app.inspector.tab = tab;
    app.inspector.rows = match tab {
        Tab::Claims => fixtures::claims(),
        Tab::Quarantine => fixtures::quarantine(),
        Tab::Wakes => fixtures::wakes(),
        Tab::Recoveries => fixtures::recoveries(),
        Tab::Owners => fixtures::owners(),
        Tab::Servers => fixtures::servers(),
    };
    app.inspector.servers = fixtures::servers().len();
    app
}

#[test]
fn a_recovered_transcript_shows_each_restart_text_once_and_the_tool_error() {
    let app = fixtures::chat();
    let text = screen(&app, 110, 32);
    assert_eq!(
        text.matches("Session execution interrupted by server restart")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("Tool execution outcome unknown after server restart"));
    assert!(text.contains("↻ Continuing after restart"));
    assert_snapshot!(text);
}

#[test]
fn an_mcp_call_shows_its_server_and_tool_and_a_server_that_did_not_start_is_said() {
    let lines = crate::view::transcript::lines(
        &crate::theme::Theme::from_env(),
        &fixtures::mcp_transcript(),
        &[],
        false,
        100,
    );
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let text = text.join("\n");
    assert!(text.contains("notes › append (MCP)"), "{text}");
    assert!(
        text.contains("⚠ MCP server `search` did not start: cannot run `mcp-search`"),
        "{text}"
    );
}

#[test]
fn the_permission_question_shows_an_edits_diff_not_its_arguments() {
    let mut app = fixtures::chat();
    app.overlay.push(crate::app::Overlay::Permission {
        id: 7,
        request: fixtures::edit_permission(),
        scroll: 0,
    });
    let text = screen(&app, 110, 32);
    assert!(text.contains("+    let total = add(1, 1);"), "{text}");
    assert!(!text.contains("old_string"), "{text}");
    assert_snapshot!(text);
}

#[test]
fn an_edit_shows_its_diff_folded_in_the_transcript() {
    let theme = crate::theme::Theme::from_env();
    let render = |expanded| {
        crate::view::transcript::lines(&theme, &fixtures::edit_transcript(), &[], expanded, 100)
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let folded = render(false);
    assert!(folded.contains("more lines of the diff"), "{folded}");
    assert!(!folded.contains("line twelve and a half"), "{folded}");
    assert_snapshot!(folded);
    let whole = render(true);
    assert!(whole.contains("+line twelve and a half"), "{whole}");
}

#[test]
fn tool_output_collapses_after_a_few_lines_and_expands() {
    let mut app = fixtures::chat();
    let collapsed = screen(&app, 110, 40);
    assert!(collapsed.contains("… 2 more lines"), "{collapsed}");
    assert!(!collapsed.contains("tool_processes.rs"));
    app.transcript.expanded = true;
    let expanded = screen(&app, 110, 40);
    assert!(expanded.contains("tool_processes.rs"));
}

#[test]
fn the_claims_tab_counts_down_and_says_what_the_lock_proves() {
    let app = inspector(Tab::Claims);
    let text = screen(&app, 110, 24);
    assert!(text.contains("in 24.1 s") && text.contains("owner dead: recoverable now"));
    assert_snapshot!(text);
}

#[test]
fn the_quarantine_tab_and_its_detail_pane() {
    let app = inspector(Tab::Quarantine);
    let text = screen(&app, 110, 24);
    assert!(
        text.contains("\"reason\": \"unknown phase \\\"bogus\\\"\""),
        "{text}"
    );
    assert_snapshot!(text);
}

#[test]
fn the_wakes_tab() {
    assert_snapshot!(screen(&inspector(Tab::Wakes), 110, 20));
}

#[test]
fn the_recoveries_tab() {
    assert_snapshot!(screen(&inspector(Tab::Recoveries), 110, 20));
}

#[test]
fn the_owners_tab() {
    assert_snapshot!(screen(&inspector(Tab::Owners), 110, 20));
}

#[test]
fn the_mcp_tab_shows_the_servers_this_process_runs_with_their_pids() {
    let text = screen(&inspector(Tab::Servers), 110, 20);
    assert!(text.contains("MCP 2"), "{text}");
    assert!(
        text.contains("5151") && text.contains("http://127.0.0.1:8000/mcp"),
        "{text}"
    );
    assert_snapshot!(text);
}

#[test]
fn the_read_only_inspector_shows_its_actions_disabled() {
    let mut app = inspector(Tab::Claims);
    app.mode = Mode::ReadOnly;
    app.owner_id = None;
    let text = screen(&app, 110, 24);
    assert!(text.contains("read-only: actions run from `steward`"));
    assert_snapshot!(text);
}

#[test]
fn the_help_overlay_lists_the_keymap() {
    let mut app = fixtures::chat();
    app.overlay.push(Overlay::Help { scroll: 0 });
    assert_snapshot!(screen(&app, 100, 60));
}

#[test]
fn the_after_crash_panel() {
    let mut app = fixtures::chat();
    app.launch = fixtures::launch();
    app.overlay.push(Overlay::Panel {
        lines: panel_lines(&fixtures::launch()),
        selected: 0,
    });
    assert_snapshot!(screen(&app, 110, 30));
}

#[test]
fn a_permission_modal() {
    let mut app = fixtures::chat();
    app.overlay.push(Overlay::Permission {
        scroll: 0,
        id: 1,
        request: fixtures::permission(),
    });
    assert_snapshot!(screen(&app, 100, 30));
}

#[test]
fn a_narrow_terminal_shows_one_pane_at_a_time() {
    let mut app = fixtures::chat();
    let transcript = screen(&app, 60, 20);
    assert_snapshot!("narrow_transcript", transcript);
    app.pane = Pane::Sessions;
    assert_snapshot!("narrow_sessions", screen(&app, 60, 20));
}

#[test]
fn a_terminal_too_small_says_so() {
    let app = fixtures::chat();
    let text = screen(&app, 40, 8);
    assert!(text.contains("Terminal too small"), "{text}");
    assert_snapshot!(text);
    // The smallest still says how to leave.
    let tiny = screen(&app, 20, 5);
    assert!(tiny.contains("q quits"), "{tiny}");
}

#[test]
fn without_colour_nothing_is_coloured_and_the_words_remain() {
    let mut app = inspector(Tab::Claims);
    app.theme = Theme { color: false };
    let terminal = draw(&app, 110, 24);
    let buffer = terminal.backend().buffer();
    for cell in buffer.content() {
        assert_eq!((cell.fg, cell.bg), (Color::Reset, Color::Reset), "{cell:?}");
    }
    let text = terminal.backend().to_string();
    assert!(text.contains("owner dead: recoverable now") && text.contains("quarantined"));
    let mut chat = fixtures::chat();
    chat.theme = Theme { color: false };
    let text = screen(&chat, 110, 32);
    assert!(text.contains("↻ error (recovery)") && text.contains("recovered"));
    assert_snapshot!(text);
}

#[test]
fn with_colour_recovery_lines_have_their_own_colour() {
    let app = fixtures::chat();
    let terminal = draw(&app, 110, 32);
    let buffer = terminal.backend().buffer();
    let recovered = buffer
        .content()
        .iter()
        .filter(|c| c.fg == Color::Magenta)
        .count();
    assert!(recovered > 40, "{recovered} recovered cells");
}

#[test]
fn a_prompt_queued_behind_a_running_turn_is_shown_as_queued() {
    let mut app = fixtures::chat();
    app.running.insert(fixtures::SESSION.into());
    app.transcript.pending = vec![fixtures::queued()];
    let text = screen(&app, 110, 32);
    assert!(text.contains("queued  and then the lints"), "{text}");
    assert!(text.contains("queued while the turn runs"), "{text}");
}

#[test]
fn a_transcript_scrolled_up_holds_its_place_while_text_streams_in_below() {
    use crate::update::update;
    use ratatui::crossterm::event::{KeyCode, KeyEvent};
    let mut app = fixtures::chat();
    app.pane = Pane::Transcript;
    let top_line = |app: &App| {
        let text = screen(app, 110, 20);
        text.lines().nth(2).unwrap_or_default().to_string()
    };
    screen(&app, 110, 20);
    for _ in 0..3 {
        update(&mut app, crate::app::Msg::Key(KeyEvent::from(KeyCode::Up)));
        screen(&app, 110, 20);
    }
    let held = top_line(&app);
    // More text arrives at the bottom.
    let mut more = app.transcript.messages.last().unwrap().clone();
    more.id = "msg_more".into();
    more.seq += 100;
    app.transcript.messages.push(more);
    assert_eq!(top_line(&app), held);
    // Down to the end follows the newest line again.
    for _ in 0..200 {
        update(
            &mut app,
            crate::app::Msg::Key(KeyEvent::from(KeyCode::Down)),
        );
        screen(&app, 110, 20);
    }
    assert_eq!(app.transcript.scroll, None);
}

#[test]
fn a_claim_whose_lease_ran_out_reads_expired_without_a_reload() {
    let mut app = inspector(Tab::Claims);
    let before = screen(&app, 110, 30);
    assert!(before.contains(" live"), "{before}");
    app.now_ms += 10 * 60_000;
    let after = screen(&app, 110, 30);
    assert!(!after.contains(" live "), "{after}");
    assert!(after.contains("expired: recoverable"), "{after}");
    assert!(!app.needs_ticks() || !app.running.is_empty());
}

#[test]
fn a_long_permission_input_is_shown_whole_or_scrolls() {
    let mut app = fixtures::chat();
    let mut request = fixtures::permission();
    request.tool = "run_command".into();
    request.input = serde_json::json!({
        "command": format!("{} && rm -rf ~/.ssh ~/important-stuff", "echo step; ".repeat(60))
    });
    app.overlay.push(Overlay::Permission {
        scroll: 0,
        id: 1,
        request,
    });
    let text = screen(&app, 120, 35);
    assert!(text.contains("important-stuff"), "{text}");
    let small = screen(&app, 60, 14);
    assert!(small.contains("more line"), "{small}");
}

#[test]
fn the_read_only_help_lists_only_the_inspectors_keys() {
    let mut app = inspector(Tab::Claims);
    app.mode = Mode::ReadOnly;
    app.owner_id = None;
    app.overlay.push(Overlay::Help { scroll: 0 });
    let text = screen(&app, 100, 50);
    for chat_only in [
        "Shift-Enter",
        "new session",
        "search the transcript",
        "after-crash panel",
    ] {
        assert!(!text.contains(chat_only), "{chat_only}: {text}");
    }
    assert!(
        text.contains("inspector") && text.contains("filter the table"),
        "{text}"
    );
    assert_snapshot!(text);
}

#[test]
fn the_transcript_pane_shows_its_own_keys_and_a_search() {
    let mut app = fixtures::chat();
    app.pane = Pane::Transcript;
    let text = screen(&app, 110, 32);
    assert!(text.contains("/ search  n/N match  y copy"), "{text}");
    assert!(!text.contains("n new  Enter open"), "{text}");
    app.transcript.search = Some(crate::app::Search {
        query: "restart".into(),
        editing: false,
        current: None,
    });
    let text = screen(&app, 110, 32);
    assert!(text.contains("/ restart  3 lines found"), "{text}");
    assert_snapshot!(text);
}

#[test]
fn the_session_list_filtered_with_its_row_and_archived_sessions_marked() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    app.sessions.filter = "flaky".into();
    app.sessions.editing_filter = true;
    app.sessions.rows.truncate(2);
    app.sessions.rows[1].archived = true;
    app.sessions.rows[1].state = steward_engine::inspect::SessionState::Idle;
    app.sessions.archived = true;
    app.sessions.total = 2;
    app.sessions.selected = 1;
    let text = screen(&app, 110, 20);
    assert!(text.contains("Sessions 2 of 5"), "{text}");
    assert!(text.contains(" 2 of 2 "), "{text}");
    assert!(
        text.contains("/ flaky▌") && text.contains("+archived"),
        "{text}"
    );
    assert!(text.contains("archived"), "{text}");
    assert_snapshot!(text);
}

#[test]
fn rename_and_delete_ask_over_the_list() {
    let mut app = fixtures::chat();
    app.pane = Pane::Sessions;
    app.overlay.push(Overlay::Rename {
        session: fixtures::SESSION.into(),
        title: "a better title".into(),
    });
    let renaming = screen(&app, 110, 24);
    assert!(
        renaming.contains("New title: a better title▌"),
        "{renaming}"
    );
    assert_snapshot!("renaming_a_session", renaming);
    app.overlay.pop();
    app.overlay.push(Overlay::Delete {
        session: fixtures::SESSION.into(),
        title: "fix the flaky test".into(),
    });
    let deleting = screen(&app, 110, 24);
    assert!(deleting.contains("y delete · n keep it"), "{deleting}");
    assert_snapshot!("deleting_a_session", deleting);
}

#[test]
fn with_a_filter_the_tabs_count_what_it_matches_and_the_row_is_placed() {
    let mut app = inspector(Tab::Claims);
    app.inspector.filter = "ses_01".into();
    app.inspector.filtered = Some(steward_engine::inspect::pages::Counts {
        sessions: 1,
        claims: 130,
        quarantine: 0,
        wakes: 1,
        recoveries: 2,
        owners: 0,
    });
    app.inspector.offset = 100;
    app.inspector.selected = 1;
    let text = screen(&app, 110, 28);
    assert!(
        text.contains("Claims 130 │ Quarantine 0 │ Wakes 1 │ Recoveries 2 │ Owners 0 │ MCP 2"),
        "{text}"
    );
    assert!(text.contains("row 102 of 130"), "{text}");
    assert_snapshot!(text);
}

#[test]
fn a_quarantined_sessions_open_call_reads_as_unknown_with_the_reason() {
    let mut app = fixtures::chat();
    let mut messages = fixtures::recovered_transcript();
    messages.truncate(1);
    messages.push(steward_engine::projection::MessageRow {
        id: "msg_q".into(),
        session_id: fixtures::SESSION.into(),
        seq: 3,
        time_created: fixtures::NOW - 10_000,
        time_updated: fixtures::NOW - 10_000,
        data: steward_engine::message::MessageData::from_json(
            steward_engine::message::MessageKind::Assistant,
            &serde_json::json!({
                    "execution_id": fixtures::EXE_QUARANTINED, "provider": "openai",
                    "model": "qwen2.5-coder", "time": {"created": fixtures::NOW - 10_000},
                    "parts": [{"id": "prt_q", "type": "tool", "call_id": "call_q",
                               "tool": "run_command",
                               "state": {"status": "running", "input": {"command": "sleep 300"},
                                         "time": {"start": fixtures::NOW - 9_000}}}]})
            .to_string(),
        )
        .unwrap(),
    });
    app.transcript.messages = messages;
    app.transcript.state = Some(steward_engine::inspect::SessionState::Quarantined);
    app.transcript.quarantined = vec![(
        fixtures::EXE_QUARANTINED.to_string(),
        "unknown phase \"bogus\"".to_string(),
    )];
    let text = screen(&app, 110, 24);
    assert!(!text.contains("◐ running"), "{text}");
    assert!(text.contains("sleep 300  ? outcome unknown"), "{text}");
    assert!(
        text.contains("⚠ quarantined: unknown phase \"bogus\""),
        "{text}"
    );
    assert_snapshot!(text);
}

#[test]
fn an_empty_tables_header_stands_where_it_does_over_rows() {
    let full = inspector(Tab::Quarantine);
    let mut empty = inspector(Tab::Quarantine);
    empty.inspector.rows = crate::app::Rows::Quarantine(Vec::new());
    let header = |app: &App| {
        screen(app, 110, 24)
            .lines()
            .find(|l| l.contains("KIND"))
            .map(|l| l.find("KIND").unwrap())
            .unwrap()
    };
    assert_eq!(header(&empty), header(&full));
}

#[test]
fn a_claims_bad_or_old_expiry_reads_whole() {
    let mut app = inspector(Tab::Claims);
    let crate::app::Rows::Claims(rows) = &mut app.inspector.rows else {
        unreachable!()
    };
    rows[0].claim.expires_at = serde_json::json!(0);
    rows[1].claim.expires_at = serde_json::json!(fixtures::NOW - 3 * 86_400_000);
    let text = screen(&app, 110, 24);
    assert!(!text.contains("at 1970"), "{text}");
    assert!(text.contains("bad: 0"), "{text}");
    assert!(text.contains("3 d ago"), "{text}");
}

#[test]
fn a_claims_far_future_expiry_reads_with_its_unit_and_fits_its_column() {
    let mut app = inspector(Tab::Claims);
    let crate::app::Rows::Claims(rows) = &mut app.inspector.rows else {
        unreachable!()
    };
    rows[0].claim.expires_at = serde_json::json!(99_999_999_999_999_i64);
    rows[1].claim.expires_at = serde_json::json!(fixtures::NOW + 5 * 86_400_000);
    let text = screen(&app, 110, 24);
    assert!(!text.contains("in 27"), "{text}");
    let far = 99_999_999_999_999_i64 - fixtures::NOW;
    let years = far / (365 * 86_400_000);
    assert!(text.contains(&format!("bad: +{years} y")), "{text}");
    assert!(text.contains("in 5 d"), "{text}");
    // The STATE column still starts where the header says.
    let at = |line: &str, what: &str| line[..line.find(what).unwrap()].chars().count();
    let state = text.lines().find(|l| l.contains("STATE")).unwrap();
    let row = text.lines().find(|l| l.contains("bad: +")).unwrap();
    assert_eq!(at(row, "live"), at(state, "STATE"), "{text}");
}

#[test]
fn the_detail_pane_says_times_readably() {
    let app = inspector(Tab::Quarantine);
    let text = screen(&app, 110, 24);
    assert!(
        text.contains("\"time_created\": 1796084527000  (00:22:07)"),
        "{text}"
    );
}

#[test]
fn a_note_in_the_read_only_inspector_is_not_repeated_by_the_hints() {
    let mut app = inspector(Tab::Quarantine);
    app.mode = Mode::ReadOnly;
    app.owner_id = None;
    app.status = Some("read-only: wake from `steward` (or `steward wake EXECUTION_ID`)".into());
    let text = screen(&app, 110, 24);
    let lines: Vec<&str> = text.lines().collect();
    let footer = lines[lines.len() - 2..].join("\n");
    assert_eq!(footer.matches("read-only").count(), 1, "{footer}");
}

#[test]
fn a_long_note_wraps_whole_above_the_hints() {
    let mut app = fixtures::chat();
    let error = format!(
        "the turn stopped: error: {} END",
        "disk I/O error ".repeat(30)
    );
    app.status = Some(error);
    let text = screen(&app, 80, 30);
    assert!(text.contains("END"), "{text}");
}
