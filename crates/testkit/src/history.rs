//! A run's journal built event by event — what the engine's decisions read, without running
//! anything (anchor: temporal sdk-core's `TestHistoryBuilder`).

use loopwright_journal::RunStarted;
use loopwright_journal::event::{Event, EventRecord, FailureKind, StageError};
use loopwright_journal::ids::RunId;
use loopwright_journal::state::RunState;
use loopwright_spec::StageId;

/// A journal of run `r`, each event stamped one second after the one before, from
/// 2026-01-01T00:00:00Z.
#[derive(Debug, Clone, Default)]
pub struct History {
    records: Vec<EventRecord>,
}

impl History {
    /// A journal that starts with [`crate::run_started`] for `task-1`.
    pub fn started() -> Self {
        Self::started_with(crate::run_started("task-1"))
    }

    /// A journal that starts with `started`.
    pub fn started_with(started: RunStarted) -> Self {
        Self::default().then(Event::RunStarted(Box::new(started)))
    }

    /// `event` added.
    pub fn then(mut self, event: Event) -> Self {
        let seq = self.records.len() as u64 + 1;
        let at = crate::conformance::t("2026-01-01T00:00:00Z") + jiff::SignedDuration::from_secs(seq as i64 - 1);
        self.records.push(EventRecord { seq, at, event });
        self
    }

    /// Attempt `attempt` of `stage` started.
    pub fn attempt(self, stage: &str, attempt: u32) -> Self {
        self.then(Event::AttemptStarted { stage: id(stage), attempt })
    }

    /// Attempt `attempt` of `stage` started and succeeded in 10 ms, with no outputs.
    pub fn succeeded(self, stage: &str, attempt: u32) -> Self {
        self.attempt(stage, attempt).then(Event::AttemptSucceeded {
            stage: id(stage),
            attempt,
            duration_ms: 10,
            outputs: Default::default(),
        })
    }

    /// Attempt `attempt` of `stage` started and failed with [`History::error`] of `kind` in
    /// 10 ms.
    pub fn failed(self, stage: &str, attempt: u32, kind: FailureKind) -> Self {
        let error = Self::error(kind);
        self.attempt(stage, attempt).then(Event::AttemptFailed { stage: id(stage), attempt, duration_ms: 10, error })
    }

    /// The error [`History::failed`] journals: `kind`, "exited with status 1".
    pub fn error(kind: FailureKind) -> StageError {
        StageError {
            kind,
            message: "exited with status 1".into(),
            exit_code: Some(1),
            output_tail: String::new(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        }
    }

    /// The events so far.
    pub fn records(&self) -> &[EventRecord] {
        &self.records
    }

    /// When the last event was journaled.
    pub fn last_at(&self) -> jiff::Timestamp {
        self.records.last().map_or_else(|| crate::conformance::t("2026-01-01T00:00:00Z"), |r| r.at)
    }

    /// The state the events fold into.
    pub fn state(&self) -> RunState {
        let mut state = RunState::new(RunId::new("r"));
        for record in &self.records {
            state.apply(record);
        }
        state
    }
}

fn id(stage: &str) -> StageId {
    crate::conformance::stage(stage)
}
