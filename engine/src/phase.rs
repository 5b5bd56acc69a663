//! The claim phase (protocol §4.6) and its one transition function.
//!
//! `ready`: claimed, no provider request in flight. `unknown`: a provider (or
//! compaction) request was dispatched and its step is not durably ended yet. `safe`: a
//! durable point that needs no reconciliation, reached only in the `compaction.ended`
//! commit (invariant 13).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where an execution stands, as recorded on its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Ready,
    Safe,
    Unknown,
}

/// What moves a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseChange {
    /// A provider or compaction request is about to be sent (dispatch boundary).
    Dispatched,
    /// `step.ended` or `step.failed` committed.
    StepSettled,
    /// An input was promoted or a step started: there is work recovery must see.
    WorkStarted,
    /// `compaction.ended` committed. `at_rest` is true when nothing else is left to
    /// do in the execution, so a crash right after loses nothing.
    CompactionEnded { at_rest: bool },
}

/// A change that is not allowed from the current phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("phase {from} cannot take {change:?}")]
pub struct InvalidTransition {
    pub from: Phase,
    pub change: PhaseChange,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Ready, Phase::Safe, Phase::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Ready => "ready",
            Phase::Safe => "safe",
            Phase::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        match s {
            "ready" => Some(Phase::Ready),
            "safe" => Some(Phase::Safe),
            "unknown" => Some(Phase::Unknown),
            _ => None,
        }
    }

    /// The phase after `change`, or why it cannot happen.
    pub fn next(self, change: PhaseChange) -> Result<Phase, InvalidTransition> {
        use Phase::*;
        use PhaseChange::*;
        let next = match (self, change) {
            (Ready | Safe, Dispatched) => Some(Unknown),
            (Ready | Unknown, StepSettled) => Some(Ready),
            (Ready | Safe, WorkStarted) => Some(Ready),
            (Unknown, CompactionEnded { at_rest: true }) => Some(Safe),
            (Unknown, CompactionEnded { at_rest: false }) => Some(Ready),
            _ => None,
        };
        next.ok_or(InvalidTransition { from: self, change })
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn r4_6_every_transition_is_decided_by_one_table() {
        use Phase::*;
        use PhaseChange::*;
        let changes = [
            Dispatched,
            StepSettled,
            WorkStarted,
            CompactionEnded { at_rest: true },
            CompactionEnded { at_rest: false },
        ];
        let mut table = Vec::new();
        for from in Phase::ALL {
            for change in changes {
                table.push((from, change, from.next(change).ok()));
            }
        }
        assert_eq!(
            table,
            vec![
                (Ready, Dispatched, Some(Unknown)),
                (Ready, StepSettled, Some(Ready)),
                (Ready, WorkStarted, Some(Ready)),
                (Ready, CompactionEnded { at_rest: true }, None),
                (Ready, CompactionEnded { at_rest: false }, None),
                (Safe, Dispatched, Some(Unknown)),
                (Safe, StepSettled, None),
                (Safe, WorkStarted, Some(Ready)),
                (Safe, CompactionEnded { at_rest: true }, None),
                (Safe, CompactionEnded { at_rest: false }, None),
                (Unknown, Dispatched, None),
                (Unknown, StepSettled, Some(Ready)),
                (Unknown, WorkStarted, None),
                (Unknown, CompactionEnded { at_rest: true }, Some(Safe)),
                (Unknown, CompactionEnded { at_rest: false }, Some(Ready)),
            ]
        );
    }

    #[test]
    fn i13_only_a_compaction_commit_reaches_safe() {
        for from in Phase::ALL {
            for change in [
                PhaseChange::Dispatched,
                PhaseChange::StepSettled,
                PhaseChange::WorkStarted,
                PhaseChange::CompactionEnded { at_rest: false },
            ] {
                assert_ne!(from.next(change), Ok(Phase::Safe), "{from} + {change:?}");
            }
        }
        assert_eq!(
            Phase::Unknown.next(PhaseChange::CompactionEnded { at_rest: true }),
            Ok(Phase::Safe)
        );
    }

    #[test]
    fn phases_round_trip_through_their_names() {
        for phase in Phase::ALL {
            assert_eq!(Phase::parse(phase.as_str()), Some(phase));
        }
        assert_eq!(Phase::parse("bogus"), None);
    }
}
