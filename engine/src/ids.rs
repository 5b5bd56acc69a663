//! Identifiers (protocol §2.6): prefixed, time-sortable UUIDv7 strings, and the IDs
//! recovery *derives* from an execution ID so that running it twice, or in two
//! processes, names the same rows.

use std::sync::Mutex;

use uuid::{ContextV7, Timestamp, Uuid};

pub const SESSION: &str = "ses_";
pub const MESSAGE: &str = "msg_";
pub const INPUT: &str = "inp_";
pub const EXECUTION: &str = "exe_";
pub const OWNER: &str = "own_";
pub const PART: &str = "prt_";

const RECOVERY_MESSAGE: &str = "msg_rec_";
const CONTINUATION_INPUT: &str = "inp_rec_";
const INTERRUPTED_MESSAGE: &str = "msg_int_";
const RECOVERY_PART: &str = "recovery:";

/// A new ID with `prefix`, ordered by `now_ms` (and by creation within one ms).
pub fn new(prefix: &str, now_ms: i64) -> String {
    // The context keeps IDs made within one millisecond in creation order.
    static CONTEXT: Mutex<Option<ContextV7>> = Mutex::new(None);
    let mut context = CONTEXT.lock().unwrap_or_else(|e| e.into_inner());
    let context = context.get_or_insert_with(ContextV7::new);
    let ms = u64::try_from(now_ms).unwrap_or(0);
    let ts = Timestamp::from_unix(&*context, ms / 1000, ((ms % 1000) * 1_000_000) as u32);
    format!("{prefix}{}", Uuid::new_v7(ts).simple())
}

/// `msg_rec_<execution id>`: the synthetic message recovery writes when the
/// interrupted execution had no assistant (protocol §5.4).
pub fn recovery_message(execution_id: &str) -> String {
    format!("{RECOVERY_MESSAGE}{execution_id}")
}

/// `inp_rec_<execution id>`: the continuation input recovery admits (protocol §5.3).
pub fn continuation_input(execution_id: &str) -> String {
    format!("{CONTINUATION_INPUT}{execution_id}")
}

/// `recovery:<execution id>`: the text part recovery appends to an assistant.
pub fn recovery_part(execution_id: &str) -> String {
    format!("{RECOVERY_PART}{execution_id}")
}

/// `msg_int_<execution id>`: the synthetic message a user cancellation writes when
/// the execution had not started an assistant yet (protocol §4.8).
pub fn interrupted_message(execution_id: &str) -> String {
    format!("{INTERRUPTED_MESSAGE}{execution_id}")
}

/// The execution a continuation input was derived from, if `input_id` is one.
pub fn continuation_execution(input_id: &str) -> Option<&str> {
    input_id.strip_prefix(CONTINUATION_INPUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_6_ids_are_prefixed_and_sort_by_time() {
        let a = new(SESSION, 1_700_000_000_000);
        let b = new(SESSION, 1_700_000_000_001);
        let c = new(SESSION, 1_700_000_000_001);
        assert!(a.starts_with("ses_") && a.len() == 4 + 32, "{a}");
        assert!(a < b && b < c, "{a} {b} {c}");
    }

    #[test]
    fn r2_6_recovery_ids_are_derived_from_the_execution() {
        let exe = "exe_0192";
        assert_eq!(recovery_message(exe), "msg_rec_exe_0192");
        assert_eq!(continuation_input(exe), "inp_rec_exe_0192");
        assert_eq!(recovery_part(exe), "recovery:exe_0192");
        assert_eq!(continuation_execution("inp_rec_exe_0192"), Some(exe));
        assert_eq!(continuation_execution("inp_0192"), None);
    }
}
