//! Test doubles for the engine's ports and the store conformance suite. Dev-only: no crate
//! depends on it outside `[dev-dependencies]`.
//!
//! - [`MemoryStore`]: a [`Store`](loopwright_journal::Store) in memory, with the same
//!   semantics as the SQLite store (it passes the same [`conformance`] suite).
//! - [`ScriptedRunner`]: plays a script of outcomes and records what it was asked to run.
//! - [`FakeClock`]: stands still except when the engine waits, and records the waits.
//! - [`History`]: a run's journal built event by event, for tables of decisions.

pub mod conformance;
mod doubles;
mod history;

pub use doubles::{FakeClock, MemoryStore, ScriptedRunner};
pub use history::History;

use std::collections::BTreeMap;

use loopwright_journal::{RunStarted, TaskId};

/// What a run of pipeline `bug-fix` for task `task` starts with: no vars, inputs, skips or
/// owner, workspace `/w`.
pub fn run_started(task: &str) -> RunStarted {
    RunStarted {
        pipeline: "bug-fix".into(),
        pipeline_path: "p.yml".into(),
        pipeline_source: "name: bug-fix".into(),
        task_id: TaskId::parse(task).expect("a valid task id"),
        task: "fix it".into(),
        vars: BTreeMap::new(),
        inputs: BTreeMap::new(),
        start_from: None,
        skip: vec![],
        auto_approve: false,
        prior_outputs: BTreeMap::new(),
        workspace: "/w".into(),
        owner: None,
        prices: Default::default(),
        budget: Default::default(),
        by: None,
        rerun_of: None,
        worktree: None,
        forge: None,
        trace_id: None,
    }
}

/// A check's failure as the library classified it: category `pattern`, strategy
/// `analyze_then_fix`, with `lines` as its key lines.
pub fn classified(summary: &str, pattern: &str, lines: &[&str]) -> loopwright_journal::closed_loop::Failure {
    loopwright_journal::closed_loop::Failure {
        source: "test".into(),
        failure_type: loopwright_journal::closed_loop::FailureType::VerificationFailed,
        summary: summary.into(),
        output: String::new(),
        lines: lines.iter().map(|l| (*l).to_owned()).collect(),
        pattern: Some(pattern.into()),
        classified_by: None,
        unfixable: None,
        confidence: 0.98,
        signals: vec![],
        evidence: vec![],
        strategy: loopwright_journal::closed_loop::Strategy::AnalyzeThenFix,
        alternatives: vec![],
        max_auto_retries: None,
        retryable: true,
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_memory_store_conforms() {
        crate::conformance::suite(&crate::MemoryStore::default()).await;
    }
}
