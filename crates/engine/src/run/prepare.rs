//! Prepare and recover: before an attempt starts, what an attempt in flight when loopwright
//! died left is ended and undone, and an earlier attempt's layer is dropped.

use loopwright_spec::StageId;

use super::Engine;
use crate::event::Event;
use crate::ports::{Changes, Clock, Delivery, Limits, Runner, Stopper, Store, StoreError};
use crate::state::{RunState, StageStatus};

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Before attempt `attempt` of a stage: the decisions so far journaled; an attempt of it in
    /// flight when loopwright died has its processes ended and what it changed restored, so
    /// running it again is safe; an earlier attempt's layer (it failed), or this attempt's (it
    /// was interrupted), is dropped — nothing of the workspace needs restoring then; that the
    /// sandbox cannot be made is said once.
    pub(super) async fn prepare(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        self.flush(state).await?;
        let interrupted = state.stage(stage_id.as_str()).filter(|s| s.status == StageStatus::Running);
        if let Some(st) = interrupted {
            if !st.process_groups.is_empty() {
                self.runner.end_leftovers(&st.process_groups);
            }
            self.runner.end_strays(&state.run_id, stage_id);
        }
        let snapshot =
            interrupted.and_then(|s| s.snapshots.iter().rev().find(|(a, _)| *a == attempt)).map(|(_, n)| n.clone());
        if let Some(name) = snapshot
            && let Ok(report) = self.changes.restore(&state.run_id, &name)
        {
            self.record(state, Event::SnapshotRestored { stage: stage_id.clone(), attempt, report }).await?;
        }
        self.drop_layer(state, stage_id, Some(attempt)).await?;
        if !state.sandbox_noted
            && let Some(reason) = self.runner.unsandboxed()
        {
            self.defer(state, Event::SandboxUnavailable { reason });
        }
        Ok(())
    }
}
