//! Roll back: stages rolled back, most recent first, each by its strategy (seed 004's
//! rollback protocol); and the layer an attempt left, dropped with what it held.

use loopwright_spec::StageId;
use loopwright_spec::pipeline::RollbackStrategy;

use super::Engine;
use crate::event::{Event, RollbackStatus};
use crate::ports::{Changes, Clock, Delivery, Limits, Runner, Stopper, Store, StoreError};
use crate::state::RunState;

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Rolls back stages, most recent first, each by its strategy.
    pub(super) async fn roll_back(
        &mut self,
        state: &mut RunState,
        trigger: Option<StageId>,
        stages: Vec<StageId>,
        resumed: bool,
    ) -> Result<(), StoreError> {
        if !resumed {
            self.record(state, Event::RollbackStarted { trigger, stages: stages.clone() }).await?;
        }
        let task = state.started.as_ref().map(|s| s.task_id.clone()).expect("a started run");
        for id in stages {
            let Some(rollback) = self.pipeline.stage(id.as_str()).and_then(|s| s.rollback.clone()) else { continue };
            if rollback.strategy == RollbackStrategy::GitRevert {
                self.repair(state, &id).await?;
            }
            let st = state.stage(id.as_str());
            let (status, detail) = match rollback.strategy {
                RollbackStrategy::GitRevert => match self.changes.revert(&task, &id) {
                    Ok(0) => (RollbackStatus::Success, "no commits to revert".to_owned()),
                    Ok(n) => (RollbackStatus::Success, format!("reverted {n} commit{}", if n == 1 { "" } else { "s" })),
                    Err(e) => (RollbackStatus::Failed, e.to_string()),
                },
                RollbackStrategy::FileRestore => match st.and_then(|s| s.snapshots.first()).map(|(_, n)| n.clone()) {
                    Some(name) => match self.changes.restore(&state.run_id, &name) {
                        Ok(c) => (
                            RollbackStatus::Success,
                            format!(
                                "restored {} file(s), recreated {}, removed {}",
                                c.restored, c.recreated, c.removed
                            ),
                        ),
                        Err(e) => (RollbackStatus::Failed, e.to_string()),
                    },
                    None => (RollbackStatus::Failed, "no snapshot was taken before the stage".to_owned()),
                },
                RollbackStrategy::MemoryCleanup => {
                    let n = st.map_or(0, |s| s.outputs.len());
                    (RollbackStatus::Success, format!("removed {n} artifact entr{}", if n == 1 { "y" } else { "ies" }))
                }
                RollbackStrategy::Manual => (
                    RollbackStatus::Pending,
                    rollback.description.clone().unwrap_or_else(|| "(no steps given)".to_owned()),
                ),
            };
            self.record(state, Event::StageRolledBack { stage: id, strategy: rollback.strategy, status, detail })
                .await?;
        }
        let overall = state.rollback_overall();
        self.record(state, Event::RollbackFinished { overall }).await
    }

    /// Discards the layer a stage's earlier attempt (or this one, interrupted) left, journaling
    /// what it held.
    /// `next` is the attempt about to start; `None` when the run has ended.
    pub(super) async fn drop_layer(
        &mut self,
        state: &mut RunState,
        stage: &StageId,
        next: Option<u32>,
    ) -> Result<(), StoreError> {
        let Some((made, name)) = state.stage(stage.as_str()).and_then(|s| s.layer.clone()) else {
            return Ok(());
        };
        let files = self.changes.drop_layer(&state.run_id, &name).unwrap_or(0);
        let reason = match next {
            Some(next) if next == made => "the attempt was interrupted; it runs again from the start".to_owned(),
            Some(next) => format!("attempt {made} did not pass; attempt {next} starts from the workspace as it was"),
            None => "the run ended without keeping what the attempt wrote".to_owned(),
        };
        self.record(state, Event::LayerDropped { stage: stage.clone(), attempt: made, files, reason }).await
    }
}
