//! The folds, one event type at a time, without a database.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::message::{ProcessIdentity, Usage};

const S: &str = "ses_1";

struct Log {
    p: Projection,
    seq: i64,
}

impl Log {
    fn new() -> Log {
        let mut log = Log {
            p: Projection::default(),
            seq: 0,
        };
        log.push(Event::SessionCreated {
            title: "t".into(),
            directory: "/w".into(),
        });
        log
    }

    fn push(&mut self, event: Event) {
        self.try_push(event).expect("event applies");
    }

    fn try_push(&mut self, event: Event) -> Result<(), ProjectionError> {
        let record = EventRecord {
            session_id: S.into(),
            seq: self.seq,
            time_created: 1000 + self.seq,
            origin: None,
            event,
        };
        self.seq += 1;
        apply(&mut self.p, &record)
    }

    fn assistant(&self, id: &str) -> &AssistantData {
        self.p.messages[id].data.as_assistant().unwrap()
    }

    fn start_step(&mut self, message_id: &str) {
        self.push(Event::StepStarted {
            tools: None,
            message_id: message_id.into(),
            execution_id: "exe_1".into(),
            provider: "scripted".into(),
            model: "demo".into(),
        });
    }

    fn call_tool(&mut self, message_id: &str, call_id: &str, input: Value) {
        self.push(Event::ToolCalled {
            message_id: message_id.into(),
            part_id: format!("prt_{call_id}"),
            call_id: call_id.into(),
            tool: "run_command".into(),
            input,
        });
    }
}

fn tool_state(a: &AssistantData, call_id: &str) -> ToolState {
    a.tools()
        .find(|t| t.call_id == call_id)
        .unwrap()
        .state
        .clone()
}

#[test]
fn r3_1_session_created_makes_the_session_row() {
    let log = Log::new();
    assert_eq!(
        log.p.session,
        Some(SessionRow {
            id: S.into(),
            title: "t".into(),
            directory: "/w".into(),
            time_created: 1000,
            time_updated: 1000,
            archived: false,
        })
    );
}

#[test]
fn r3_1_every_event_needs_its_session() {
    let mut p = Projection::default();
    let record = EventRecord {
        session_id: S.into(),
        seq: 0,
        time_created: 1,
        origin: None,
        event: Event::StepText {
            message_id: "msg_1".into(),
            part_id: "prt_1".into(),
            text: "x".into(),
        },
    };
    assert!(apply(&mut p, &record).is_err());
}

#[test]
fn r3_1_admission_and_promotion_project_inputs_and_messages() {
    let mut log = Log::new();
    log.push(Event::InputAdmitted {
        content: Vec::new(),
        input_id: "inp_1".into(),
        prompt: "hello".into(),
        delivery: Delivery::Queue,
        wake_pending: true,
        continuation_of: None,
    });
    assert_eq!(
        log.p.inputs["inp_1"],
        InputRow {
            content: Vec::new(),
            id: "inp_1".into(),
            session_id: S.into(),
            prompt: "hello".into(),
            delivery: Delivery::Queue,
            admitted_seq: 1,
            promoted_seq: None,
            wake_pending: true,
            time_created: 1001,
        }
    );
    log.p.take_touched();
    log.push(Event::InputPromoted {
        input_id: "inp_1".into(),
        message_id: "msg_1".into(),
    });
    let input = &log.p.inputs["inp_1"];
    assert_eq!((input.promoted_seq, input.wake_pending), (Some(2), false));
    assert_eq!(
        log.p.messages["msg_1"],
        MessageRow {
            id: "msg_1".into(),
            session_id: S.into(),
            seq: 2,
            time_created: 1002,
            time_updated: 1002,
            data: MessageData::User(UserData {
                content: Vec::new(),
                input_id: "inp_1".into(),
                text: "hello".into()
            }),
        }
    );
    let touched = log.p.take_touched();
    assert_eq!(
        touched,
        Touched {
            session: true,
            messages: ["msg_1".to_string()].into(),
            inputs: ["inp_1".to_string()].into(),
        }
    );
    let again = log.try_push(Event::InputPromoted {
        input_id: "inp_1".into(),
        message_id: "msg_2".into(),
    });
    assert!(again.unwrap_err().reason.contains("already promoted"));
}

#[test]
fn r5_6_a_promoted_continuation_is_a_labelled_synthetic_message() {
    let mut log = Log::new();
    log.push(Event::InputAdmitted {
        content: Vec::new(),
        input_id: "inp_rec_exe_9".into(),
        prompt: crate::message::CONTINUATION_TEXT.into(),
        delivery: Delivery::Queue,
        wake_pending: false,
        continuation_of: Some("exe_9".into()),
    });
    log.push(Event::InputPromoted {
        input_id: "inp_rec_exe_9".into(),
        message_id: "msg_c".into(),
    });
    let MessageData::Synthetic(data) = &log.p.messages["msg_c"].data else {
        panic!("not synthetic")
    };
    assert_eq!(data.kind, SyntheticKind::Continuation);
    assert_eq!(data.label.as_deref(), Some("Continuing after restart"));
    assert_eq!(data.execution_id.as_deref(), Some("exe_9"));
}

#[test]
fn i15_a_continuation_id_must_derive_from_its_own_execution() {
    let mut log = Log::new();
    let err = log
        .try_push(Event::InputAdmitted {
            content: Vec::new(),
            input_id: "inp_rec_exe_other".into(),
            prompt: "x".into(),
            delivery: Delivery::Queue,
            wake_pending: false,
            continuation_of: Some("exe_9".into()),
        })
        .unwrap_err();
    assert!(err.reason.contains("continuation"), "{err}");
}

#[test]
fn r3_3_a_step_streams_text_calls_tools_and_ends() {
    let mut log = Log::new();
    log.start_step("msg_a");
    for chunk in ["Look", "ing."] {
        log.push(Event::StepText {
            message_id: "msg_a".into(),
            part_id: "prt_t".into(),
            text: chunk.into(),
        });
    }
    log.push(Event::StepEnded {
        warnings: Vec::new(),
        message_id: "msg_a".into(),
        finish: Finish::ToolCalls,
        usage: Some(Usage {
            input_tokens: 5,
            output_tokens: 2,
            ..Usage::default()
        }),
    });
    log.call_tool("msg_a", "c1", json!({"command": "ls"}));
    let process = ProcessIdentity {
        pid: 42,
        pgid: 42,
        start_time: 7,
        boot_id: "b".into(),
        hostname: "h".into(),
    };
    log.push(Event::ToolStarted {
        mcp: None,
        message_id: "msg_a".into(),
        call_id: "c1".into(),
        process: Some(process.clone()),
    });
    log.push(Event::ToolCompleted {
        message_id: "msg_a".into(),
        call_id: "c1".into(),
        output: "a\nb".into(),
        structured: Some(json!({"exit_code": 0})),
    });
    let a = log.assistant("msg_a");
    assert_eq!(a.text_parts(), vec!["Looking."]);
    assert_eq!(
        (a.finish, a.time.completed),
        (Some(Finish::ToolCalls), Some(1004))
    );
    assert_eq!(
        tool_state(a, "c1"),
        ToolState {
            mcp: None,
            status: ToolStatus::Completed,
            input: json!({"command": "ls"}),
            output: Some("a\nb".into()),
            structured: Some(json!({"exit_code": 0})),
            content: None,
            error: None,
            time: Some(ToolTime {
                start: Some(1006),
                end: Some(1007)
            }),
            process: Some(process),
        }
    );
}

#[test]
fn tool_states_only_move_forward() {
    let mut log = Log::new();
    log.start_step("msg_a");
    log.call_tool("msg_a", "c1", json!({}));
    let complete_pending = log.try_push(Event::ToolCompleted {
        message_id: "msg_a".into(),
        call_id: "c1".into(),
        output: String::new(),
        structured: None,
    });
    assert!(complete_pending.unwrap_err().reason.contains("is pending"));
    log.push(Event::ToolFailed {
        message_id: "msg_a".into(),
        call_id: "c1".into(),
        error: "denied".into(),
    });
    let start_failed = log.try_push(Event::ToolStarted {
        mcp: None,
        message_id: "msg_a".into(),
        call_id: "c1".into(),
        process: None,
    });
    assert!(start_failed.unwrap_err().reason.contains("is error"));
}

#[test]
fn step_failed_records_the_error() {
    let mut log = Log::new();
    log.start_step("msg_a");
    let error = MessageError {
        reason: None,
        kind: "provider".into(),
        message: "HTTP 500".into(),
    };
    log.push(Event::StepFailed {
        message_id: "msg_a".into(),
        error: error.clone(),
    });
    let a = log.assistant("msg_a");
    assert_eq!(
        (a.finish, a.error.clone()),
        (Some(Finish::Error), Some(error))
    );
}

#[test]
fn r4_8_cancellation_errors_the_assistant_and_its_open_tools() {
    let mut log = Log::new();
    log.start_step("msg_a");
    log.call_tool("msg_a", "c1", json!({}));
    log.call_tool("msg_a", "c2", json!({}));
    log.push(Event::ToolStarted {
        mcp: None,
        message_id: "msg_a".into(),
        call_id: "c2".into(),
        process: None,
    });
    log.push(Event::StepInterrupted {
        execution_id: "exe_1".into(),
        message_id: Some("msg_a".into()),
    });
    let a = log.assistant("msg_a");
    assert_eq!(a.finish, Some(Finish::Error));
    assert_eq!(
        a.error.as_ref().unwrap().message,
        "Session execution interrupted"
    );
    for call in ["c1", "c2"] {
        let state = tool_state(a, call);
        assert_eq!(
            (state.status, state.error.as_deref()),
            (ToolStatus::Error, Some("Tool execution interrupted"))
        );
    }
}

#[test]
fn r4_8_cancellation_before_any_step_leaves_a_synthetic_note() {
    let mut log = Log::new();
    log.push(Event::StepInterrupted {
        execution_id: "exe_1".into(),
        message_id: None,
    });
    assert_eq!(
        log.p.messages["msg_int_exe_1"].data.text(),
        "Session execution interrupted"
    );
}

#[test]
fn r5_4_recovery_without_an_assistant_appends_a_synthetic_message() {
    for (phase, text) in [
        (
            Phase::Unknown,
            "Provider Step outcome unknown after server restart",
        ),
        (
            Phase::Ready,
            "Session execution interrupted by server restart",
        ),
    ] {
        let mut log = Log::new();
        log.push(Event::StepRecovered {
            execution_id: "exe_1".into(),
            assistant_message_id: None,
            phase,
            stopped_tools: vec![],
            owner_alive: false,
        });
        let message = &log.p.messages["msg_rec_exe_1"];
        assert_eq!((message.seq, message.time_created), (1, 1001));
        assert_eq!(
            message.data,
            MessageData::Synthetic(SyntheticData {
                provider: None,
                model: None,
                kind: SyntheticKind::Recovery,
                text: text.into(),
                label: None,
                execution_id: Some("exe_1".into()),
                input_id: None,
                through_seq: None,
                phase: Some(phase),
            })
        );
    }
}

#[test]
fn r5_4_a_tool_whose_owner_was_alive_does_not_say_the_owner_died() {
    for (owner_alive, said) in [
        (false, crate::message::TOOL_PROCESS_STOPPED),
        (true, crate::message::TOOL_PROCESS_STOPPED_OWNER_ALIVE),
    ] {
        let mut log = Log::new();
        log.start_step("msg_a");
        log.call_tool("msg_a", "run", json!({"command": "sleep 9"}));
        log.push(Event::ToolStarted {
            mcp: None,
            message_id: "msg_a".into(),
            call_id: "run".into(),
            process: None,
        });
        log.push(Event::StepRecovered {
            execution_id: "exe_1".into(),
            assistant_message_id: Some("msg_a".into()),
            phase: Phase::Ready,
            stopped_tools: vec!["run".into()],
            owner_alive,
        });
        let error = tool_state(log.assistant("msg_a"), "run")
            .error
            .clone()
            .unwrap();
        assert_eq!(error, format!("{TOOL_OUTCOME_UNKNOWN}; {said}"));
        assert_eq!(error.contains("owner died"), !owner_alive, "{error}");
    }
    // An event written before the field existed reads as a dead owner's.
    let old: Event = serde_json::from_value(json!({"type": "step.recovered", "data":
        {"execution_id": "exe_1", "phase": "ready", "stopped_tools": ["run"]}}))
    .unwrap();
    assert!(matches!(
        old,
        Event::StepRecovered {
            owner_alive: false,
            ..
        }
    ));
}

#[test]
fn r5_4_recovery_completes_the_assistant_and_normalises_its_tools() {
    let mut log = Log::new();
    log.start_step("msg_a");
    log.call_tool("msg_a", "done", json!({"command": "true"}));
    log.push(Event::ToolStarted {
        mcp: None,
        message_id: "msg_a".into(),
        call_id: "done".into(),
        process: None,
    });
    log.push(Event::ToolCompleted {
        message_id: "msg_a".into(),
        call_id: "done".into(),
        output: "ok".into(),
        structured: None,
    });
    log.call_tool("msg_a", "raw", json!("{\"comm"));
    log.call_tool("msg_a", "run", json!({"command": "sleep 9"}));
    log.push(Event::ToolStarted {
        mcp: None,
        message_id: "msg_a".into(),
        call_id: "run".into(),
        process: None,
    });
    log.push(Event::StepRecovered {
        execution_id: "exe_1".into(),
        assistant_message_id: Some("msg_a".into()),
        phase: Phase::Ready,
        stopped_tools: vec!["run".into()],
        owner_alive: false,
    });
    let at = 1000 + log.seq - 1;
    let a = log.assistant("msg_a");
    assert_eq!(a.finish, Some(Finish::Error));
    assert_eq!(a.time.completed, Some(at));
    assert_eq!(
        a.error,
        Some(MessageError {
            reason: None,
            kind: "interrupted".into(),
            message: "Session execution interrupted by server restart".into()
        })
    );
    assert_eq!(
        a.parts.last(),
        Some(&Part::Text {
            id: "recovery:exe_1".into(),
            text: "Session execution interrupted by server restart".into()
        })
    );
    assert_eq!(tool_state(a, "done").status, ToolStatus::Completed);
    let raw = tool_state(a, "raw");
    assert_eq!(
        raw,
        ToolState {
            mcp: None,
            status: ToolStatus::Error,
            input: json!({}),
            output: None,
            structured: Some(json!({})),
            content: Some(vec![]),
            error: Some("Tool execution outcome unknown after server restart".into()),
            time: Some(ToolTime {
                start: None,
                end: Some(at)
            }),
            process: None,
        }
    );
    let run = tool_state(a, "run");
    assert_eq!(run.status, ToolStatus::Error);
    assert_eq!((run.structured, run.content), (None, None));
    assert!(
        run.error
            .unwrap()
            .starts_with("Tool execution outcome unknown after server restart; ")
    );
}

#[test]
fn r5_5_recovering_one_execution_twice_fails_instead_of_doubling() {
    let mut log = Log::new();
    log.start_step("msg_a");
    let recovered = Event::StepRecovered {
        execution_id: "exe_1".into(),
        assistant_message_id: Some("msg_a".into()),
        phase: Phase::Unknown,
        stopped_tools: vec![],
        owner_alive: false,
    };
    log.push(recovered.clone());
    assert!(log.try_push(recovered).is_err());
    let synthetic = Event::StepRecovered {
        execution_id: "exe_2".into(),
        assistant_message_id: None,
        phase: Phase::Unknown,
        stopped_tools: vec![],
        owner_alive: false,
    };
    log.push(synthetic.clone());
    assert!(log.try_push(synthetic).is_err());
}

#[test]
fn i15_recovery_never_touches_an_assistant_of_another_session() {
    let mut log = Log::new();
    log.start_step("msg_a");
    log.p.messages.get_mut("msg_a").unwrap().session_id = "ses_other".into();
    let err = log
        .try_push(Event::StepRecovered {
            execution_id: "exe_1".into(),
            assistant_message_id: Some("msg_a".into()),
            phase: Phase::Ready,
            stopped_tools: vec![],
            owner_alive: false,
        })
        .unwrap_err();
    assert!(err.reason.contains("not in session"), "{err}");
}

#[test]
fn compaction_ended_adds_a_summary_message() {
    let mut log = Log::new();
    log.push(Event::CompactionStarted {
        execution_id: "exe_1".into(),
        message_id: "msg_s".into(),
    });
    log.push(Event::CompactionEnded {
        message_id: "msg_s".into(),
        summary: "we did things".into(),
        through_seq: 1,
    });
    let MessageData::Synthetic(data) = &log.p.messages["msg_s"].data else {
        panic!()
    };
    assert_eq!(
        (data.kind, data.text.as_str(), data.through_seq),
        (SyntheticKind::Compaction, "we did things", Some(1))
    );
}

#[test]
fn needs_names_every_stored_row_an_event_changes() {
    assert_eq!(
        needs(&Event::InputPromoted {
            input_id: "inp_1".into(),
            message_id: "msg_1".into()
        }),
        Needs {
            messages: vec![],
            inputs: vec!["inp_1".into()]
        }
    );
    assert_eq!(
        needs(&Event::StepRecovered {
            execution_id: "exe_1".into(),
            assistant_message_id: Some("msg_a".into()),
            phase: Phase::Ready,
            stopped_tools: vec![],
            owner_alive: false,
        })
        .messages,
        vec!["msg_a".to_string()]
    );
    // Rows an event creates are not read: the primary key refuses duplicates.
    assert_eq!(
        needs(&Event::StepRecovered {
            execution_id: "exe_1".into(),
            assistant_message_id: None,
            phase: Phase::Ready,
            stopped_tools: vec![],
            owner_alive: false,
        }),
        Needs::default()
    );
}

#[test]
fn i15_an_input_of_another_session_is_never_promoted_here() {
    let mut log = Log::new();
    log.p.inputs.insert(
        "inp_x".into(),
        InputRow {
            content: Vec::new(),
            id: "inp_x".into(),
            session_id: "ses_other".into(),
            prompt: "elsewhere".into(),
            delivery: Delivery::Queue,
            admitted_seq: 0,
            promoted_seq: None,
            wake_pending: true,
            time_created: 0,
        },
    );
    let err = log
        .try_push(Event::InputPromoted {
            input_id: "inp_x".into(),
            message_id: "msg_x".into(),
        })
        .unwrap_err();
    assert!(err.reason.contains("not in session"), "{err}");
}
