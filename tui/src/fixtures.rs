//! States of the screen for tests and snapshots: a recovered session, every
//! inspector tab with rows, the after-crash panel, a permission question.

use serde_json::json;
use steward_engine::claim::ClaimState;
use steward_engine::events::Delivery;
use steward_engine::inspect::pages::{ClaimLine, Counts};
use steward_engine::inspect::{
    ClaimView, QuarantineView, RecoveryView, SessionState, SessionSummary, WakeView,
};
use steward_engine::message::{MessageData, MessageKind};
use steward_engine::owner::{Liveness, OwnerRow};
use steward_engine::phase::Phase;
use steward_engine::projection::{InputRow, MessageRow, SessionRow};
use steward_engine::recovery::{QuarantinedRow, Recovered, RecoveryReport, StoppedProcess};
use steward_engine::tools::PermissionRequest;

use crate::app::{App, Launch, Mode, Rows};
use crate::theme::Theme;

pub const NOW: i64 = 1_796_084_532_000;
pub const SESSION: &str = "ses_01a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6";
pub const EXE_RUNNING: &str = "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4be1f";
pub const EXE_DEAD: &str = "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a499b0";
pub const EXE_QUARANTINED: &str = "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4aaa1";
pub const EXE_RECOVERED: &str = "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4c0de";
pub const OWNER_THIS: &str = "own_01a2b3c4d5e6f7a8b9c0d1e2f3a40f88";
pub const OWNER_DEAD: &str = "own_01a2b3c4d5e6f7a8b9c0d1e2f3a40c3d";

fn message(kind: MessageKind, id: &str, seq: i64, data: serde_json::Value) -> MessageRow {
    MessageRow {
        id: id.into(),
        session_id: SESSION.into(),
        seq,
        time_created: NOW - 60_000,
        time_updated: NOW - 60_000,
        data: MessageData::from_json(kind, &data.to_string()).expect("fixture message"),
    }
}

/// A session interrupted while a tool ran, reconciled, and continued.
pub fn recovered_transcript() -> Vec<MessageRow> {
    vec![
        message(
            MessageKind::User,
            "msg_u1",
            1,
            json!({"input_id": "inp_1", "text": "fix the flaky test in tests/run.rs"}),
        ),
        message(
            MessageKind::Assistant,
            "msg_a1",
            3,
            json!({
                "execution_id": EXE_RECOVERED, "provider": "openai", "model": "qwen2.5-coder",
                "time": {"created": NOW - 59_000, "completed": NOW - 30_000},
                "finish": "error",
                "error": {"type": "interrupted", "message": "Session execution interrupted by server restart"},
                "parts": [
                    {"id": "prt_1", "type": "text", "text": "Looking at the test first."},
                    {"id": "prt_2", "type": "tool", "call_id": "call_1", "tool": "run_command",
                     "state": {"status": "completed", "input": {"command": "ls tests"},
                               "output": "campaign.rs\nclaims.rs\nfaults.rs\nrecovery.rs\nrun.rs\nstore_refusals.rs\nsupport.rs\ntool_processes.rs\n",
                               "time": {"start": NOW - 58_000, "end": NOW - 57_500}}},
                    {"id": "prt_3", "type": "tool", "call_id": "call_2", "tool": "run_command",
                     "state": {"status": "error", "input": {"command": "cargo test -p steward run::"},
                               "error": "Tool execution outcome unknown after server restart",
                               "structured": {}, "content": [],
                               "time": {"start": NOW - 57_000, "end": NOW - 30_000}}},
                    {"id": format!("recovery:{EXE_RECOVERED}"), "type": "text",
                     "text": "Session execution interrupted by server restart"}
                ]
            }),
        ),
        message(
            MessageKind::Synthetic,
            "msg_c1",
            6,
            json!({"kind": "continuation", "text": "The server restarted while you were working. Continue from where you left off without repeating completed work.",
                   "label": "Continuing after restart", "input_id": format!("inp_rec_{EXE_RECOVERED}")}),
        ),
        message(
            MessageKind::Assistant,
            "msg_a2",
            7,
            json!({
                "execution_id": "exe_2", "provider": "openai", "model": "qwen2.5-coder",
                "time": {"created": NOW - 20_000, "completed": NOW - 19_000},
                "finish": "stop",
                "parts": [{"id": "prt_4", "type": "text", "text": "Resuming: the test run was interrupted, so I will run it again."}]
            }),
        ),
    ]
}

/// A step that edited a file: the diff it made, kept with the call.
pub fn edit_transcript() -> Vec<MessageRow> {
    let old: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let new = old
        .replace("line 10\n", "line ten\n")
        .replace("line 12\n", "line twelve\nline twelve and a half\n");
    let diff =
        steward_engine::tools::FileDiff::between("/home/me/steward/notes.txt", Some(&old), &new);
    vec![message(
        MessageKind::Assistant,
        "msg_e1",
        2,
        json!({
            "execution_id": "exe_e", "provider": "openai", "model": "qwen2.5-coder",
            "time": {"created": NOW - 10_000, "completed": NOW - 9_000},
            "finish": "stop",
            "parts": [
                {"id": "prt_e", "type": "tool", "call_id": "call_e", "tool": "edit_file",
                 "state": {"status": "completed",
                           "input": {"path": "notes.txt", "old_string": "line 10", "new_string": "line ten"},
                           "output": "edited /home/me/steward/notes.txt: 1 replacement (from line 7)",
                           "structured": {"replacements": 1, "diff": diff},
                           "time": {"start": NOW - 9_800, "end": NOW - 9_700}}}
            ]
        }),
    )]
}

/// A step whose MCP tool ran, with a server that did not start.
pub fn mcp_transcript() -> Vec<MessageRow> {
    vec![message(
        MessageKind::Assistant,
        "msg_m1",
        2,
        json!({
            "execution_id": "exe_m", "provider": "openai", "model": "qwen2.5-coder",
            "time": {"created": NOW - 10_000, "completed": NOW - 9_000},
            "finish": "stop",
            "unavailable": [{"server": "search", "error": "did not start: cannot run `mcp-search`: No such file or directory (os error 2)"}],
            "parts": [
                {"id": "prt_m", "type": "tool", "call_id": "call_m", "tool": "notes__append",
                 "state": {"status": "completed", "input": {"line": "buy milk"},
                           "output": "appended buy milk",
                           "mcp": {"server": "notes", "fingerprint": "sha256:00", "tool": "append", "request_id": 3},
                           "time": {"start": NOW - 9_800, "end": NOW - 9_500}}}
            ]
        }),
    )]
}

pub fn sessions() -> Vec<SessionSummary> {
    let row = |id: &str, title: &str, state| SessionSummary {
        id: id.into(),
        title: title.into(),
        directory: "/home/me/steward".into(),
        state,
        time_updated: NOW,
        archived: false,
    };
    vec![
        row(SESSION, "fix the flaky test", SessionState::Recovered),
        row("ses_2", "refactor store", SessionState::Running),
        row("ses_3", "lighthouse", SessionState::Waiting),
        row("ses_4", "old import", SessionState::Quarantined),
        row("ses_5", "notes", SessionState::Idle),
    ]
}

fn claim(
    execution_id: &str,
    session: &str,
    owner: &str,
    phase: &str,
    expires_at: i64,
    state: ClaimState,
) -> ClaimView {
    ClaimView {
        execution_id: execution_id.into(),
        session_id: session.into(),
        owner_id: owner.into(),
        epoch: json!(0),
        phase: phase.into(),
        assistant_message_id: Some("msg_a9".into()),
        assistant_seq: json!(4),
        time_created: json!(NOW - 5_000),
        expires_at: json!(expires_at),
        state,
        recovery_error: (state == ClaimState::Quarantined)
            .then(|| "unknown phase \"bogus\"".to_string()),
    }
}

pub fn claims() -> Rows {
    Rows::Claims(vec![
        ClaimLine {
            claim: claim(
                EXE_RUNNING,
                "ses_2",
                OWNER_THIS,
                "unknown",
                NOW + 24_100,
                ClaimState::Live,
            ),
            owner: Liveness::Alive,
        },
        ClaimLine {
            claim: claim(
                EXE_DEAD,
                "ses_3",
                OWNER_DEAD,
                "ready",
                NOW + 12_800,
                ClaimState::Live,
            ),
            owner: Liveness::Dead,
        },
        ClaimLine {
            claim: claim(
                EXE_QUARANTINED,
                "ses_4",
                OWNER_DEAD,
                "bogus",
                NOW - 3_000,
                ClaimState::Quarantined,
            ),
            owner: Liveness::Dead,
        },
    ])
}

pub fn quarantine() -> Rows {
    Rows::Quarantine(vec![
        QuarantineView {
            kind: "claim",
            execution_id: EXE_QUARANTINED.into(),
            session_id: "ses_4".into(),
            reason: "unknown phase \"bogus\"".into(),
            time_created: Some(NOW - 5_000),
        },
        QuarantineView {
            kind: "recovery",
            execution_id: EXE_RECOVERED.into(),
            session_id: SESSION.into(),
            reason: "Execution was interrupted repeatedly and will not be resumed automatically."
                .into(),
            time_created: Some(NOW - 60_000),
        },
    ])
}

pub fn wakes() -> Rows {
    Rows::Wakes(vec![
        WakeView {
            kind: "recovery",
            execution_id: Some(EXE_RECOVERED.into()),
            input_id: format!("inp_rec_{EXE_RECOVERED}"),
            session_id: SESSION.into(),
            attempts: 1,
            time_created: NOW - 21_000,
        },
        WakeView {
            kind: "input",
            execution_id: None,
            input_id: "inp_01a2b3c4d5e6f7a8b9c0d1e2f3a4b0b0".into(),
            session_id: "ses_3".into(),
            attempts: 0,
            time_created: NOW - 4_000,
        },
    ])
}

pub fn recoveries() -> Rows {
    Rows::Recoveries(vec![RecoveryView {
        execution_id: EXE_RECOVERED.into(),
        session_id: SESSION.into(),
        phase: "ready".into(),
        assistant_message_id: Some("msg_a1".into()),
        continuation_message_id: format!("inp_rec_{EXE_RECOVERED}"),
        wake_pending: true,
        wake_attempts: 0,
        recovery_error: None,
        time_created: NOW - 21_000,
    }])
}

pub fn owners() -> Rows {
    Rows::Owners(vec![
        (
            OwnerRow {
                id: OWNER_THIS.into(),
                pid: 4242,
                hostname: "laptop".into(),
                time_started: NOW - 90_000,
                lock_path: None,
                machine_id: None,
                boot_id: None,
            },
            Liveness::Alive,
        ),
        (
            OwnerRow {
                id: OWNER_DEAD.into(),
                pid: 4100,
                hostname: "laptop".into(),
                time_started: NOW - 600_000,
                lock_path: None,
                machine_id: None,
                boot_id: None,
            },
            Liveness::Dead,
        ),
    ])
}

pub fn servers() -> Rows {
    Rows::Servers(vec![
        steward_engine::mcp::RunningServer {
            session_id: SESSION.into(),
            server: "notes".into(),
            pid: Some(5151),
            group: Some(5150),
            url: None,
            tools: 3,
            since_ms: NOW - 45_000,
        },
        steward_engine::mcp::RunningServer {
            session_id: SESSION.into(),
            server: "search".into(),
            pid: None,
            group: None,
            url: Some("http://127.0.0.1:8000/mcp".into()),
            tools: 1,
            since_ms: NOW - 40_000,
        },
    ])
}

pub fn counts() -> Counts {
    Counts {
        sessions: 5,
        claims: 3,
        quarantine: 2,
        wakes: 2,
        recoveries: 14,
        owners: 2,
    }
}

/// What a launch after a crash found.
pub fn launch() -> Launch {
    Launch {
        error: None,
        report: Some(RecoveryReport {
            scanned: 3,
            recovered: vec![
                Recovered {
                    execution_id: EXE_RECOVERED.into(),
                    session_id: SESSION.into(),
                    phase: Phase::Ready,
                    assistant_message_id: Some("msg_a1".into()),
                    stopped_processes: vec![StoppedProcess {
                        call_id: "call_2".into(),
                        pid: 5001,
                        pgid: 5001,
                    }],
                    parked: false,
                },
                Recovered {
                    execution_id: "exe_01a2b3c4d5e6f7a8b9c0d1e2f3a4dd01".into(),
                    session_id: "ses_3".into(),
                    phase: Phase::Unknown,
                    assistant_message_id: None,
                    stopped_processes: Vec::new(),
                    parked: true,
                },
            ],
            quarantined: vec![QuarantinedRow {
                execution_id: EXE_QUARANTINED.into(),
                session_id: "ses_4".into(),
                reason: "unknown phase \"bogus\"".into(),
                stopped_processes: Vec::new(),
            }],
            duration_ms: 3,
            ..RecoveryReport::default()
        }),
        at_ms: NOW - 21_000,
        wakes: Vec::new(),
        more_wakes: 0,
        quarantined_wakes: Vec::new(),
        quarantine: Vec::new(),
        quarantine_total: 0,
        continued: Vec::new(),
        auto_continue: true,
        titles: [
            (SESSION.to_string(), "fix the flaky test".to_string()),
            ("ses_3".to_string(), "lighthouse".to_string()),
            ("ses_4".to_string(), "old import".to_string()),
        ]
        .into_iter()
        .collect(),
        open: None,
        note: None,
    }
}

pub fn permission() -> PermissionRequest {
    PermissionRequest {
        session_id: SESSION.into(),
        call_id: "call_9".into(),
        tool: "write_file".into(),
        input: json!({"path": "notes.txt", "content": "remember the milk"}),
        guarded: None,
        diff: None,
    }
}

/// An edit's question, with the diff it would make.
pub fn edit_permission() -> PermissionRequest {
    let old = "fn main() {\n    let total = 1 + 1;\n    println!(\"{total}\");\n}\n";
    let new = old.replace("1 + 1", "add(1, 1)");
    PermissionRequest {
        session_id: SESSION.into(),
        call_id: "call_10".into(),
        tool: "edit_file".into(),
        input: json!({"path": "src/main.rs", "old_string": "1 + 1", "new_string": "add(1, 1)"}),
        guarded: None,
        diff: Some(Box::new(steward_engine::tools::FileDiff::between(
            "/home/me/steward/src/main.rs",
            Some(old),
            &new,
        ))),
    }
}

/// The chat on the recovered session, the prompt focused.
pub fn chat() -> App {
    let mut app = App::new(
        Mode::Chat,
        "~/.local/share/steward".into(),
        "/home/me/steward".into(),
        Theme { color: true },
        NOW,
    );
    app.owner_id = Some(OWNER_THIS.into());
    app.counts = counts();
    app.inspector.counts = counts();
    app.sessions.rows = sessions();
    app.sessions.total = i64::try_from(app.sessions.rows.len()).unwrap_or(0);
    app.launch = launch();
    app.launch.report = Some(RecoveryReport {
        duration_ms: 3,
        recovered: launch().report.unwrap().recovered[..1].to_vec(),
        ..RecoveryReport::default()
    });
    app.transcript.session = Some(SessionRow {
        id: SESSION.into(),
        title: "fix the flaky test".into(),
        directory: "/home/me/steward".into(),
        time_created: NOW - 60_000,
        time_updated: NOW,
        archived: false,
    });
    app.transcript.messages = recovered_transcript();
    app.transcript.loaded = app.transcript.messages.len();
    app.transcript.state = Some(steward_engine::inspect::SessionState::Recovered);
    app.last_recovery = Some(crate::app::LastRecovery {
        at_ms: NOW - 21_000,
        executions: 1,
    });
    // Long after launch: keys answer questions (see `TYPE_AHEAD_MS`).
    app.mono_ms = 60_000;
    app
}

/// A queued prompt waiting behind a running turn.
pub fn queued() -> InputRow {
    InputRow {
        content: Vec::new(),
        id: "inp_q".into(),
        session_id: SESSION.into(),
        prompt: "and then the lints".into(),
        delivery: Delivery::Queue,
        admitted_seq: 9,
        promoted_seq: None,
        wake_pending: true,
        time_created: NOW,
    }
}
