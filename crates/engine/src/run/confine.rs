//! Confine: how an attempt is kept apart. In a sandbox that keeps the workspace apart, an
//! agent-mode attempt writes into a layer and plan mode is mounted read-only (neither needs a
//! snapshot, SPEC §12); otherwise what the attempt changes is tracked by a snapshot. Plan mode
//! fails closed: a read-only stage that cannot be watched does not run.

use loopwright_spec::pipeline::RollbackStrategy;
use loopwright_spec::{Mode, Stage};

use super::Engine;
use crate::closed_loop;
use crate::event::{Event, FailureKind, StageError};
use crate::ports::{Changes, Clock, Confinement, Delivery, Limits, Runner, Stopper, Store, StoreError, Watch};
use crate::state::RunState;

/// An attempt set up to run.
pub(super) struct Setup {
    /// How its processes are confined, with the layer it writes into when it has one.
    pub confine: Confinement,
    /// The snapshot taken before it, by name, when one was.
    pub snapshot: Option<String>,
}

/// Whether the attempt may run.
pub(super) enum Confined {
    Ready(Setup),
    /// Plan mode could not be enforced: the attempt failed without running (journaled), and
    /// what it took of its provider went back.
    Refused,
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Sets attempt `attempt` of `stage` apart: its confinement, a layer for it or a snapshot
    /// before it, each journaled (deferred) before it runs.
    pub(super) async fn confine(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        attempt: u32,
        holder: &str,
    ) -> Result<Confined, StoreError> {
        let stage_id = &stage.id;
        let mut confine = self.confinement(state, stage);
        let apart = confine.sandbox && self.changes.confined();
        // A model's edits are written by loopwright itself, through the path guard, into the
        // workspace: its attempt is snapshotted, not given a layer its edits would miss.
        let http = super::agent_now(self.pipeline, state, stage).is_some_and(|a| a.runner.is_http());
        if apart && stage.mode == Mode::Agent && !http {
            let name = format!("{stage_id}-{attempt}");
            let event = match self.changes.make_layer(&state.run_id, &name) {
                Ok(how) => {
                    confine.layer = Some(name.clone());
                    Event::LayerMade { stage: stage_id.clone(), attempt, layer: name, how }
                }
                Err(reason) => Event::SnapshotFailed {
                    stage: stage_id.clone(),
                    attempt,
                    reason: format!("no layer could be made for the attempt ({reason}); it writes into the workspace"),
                },
            };
            self.defer(state, event);
        }
        // Plan mode is enforced, not trusted (SPEC §5): without a sandbox its attempts are
        // snapshotted too. A `file_restore` rollback needs the snapshot either way.
        let kept_apart = confine.layer.is_some() || (apart && stage.mode == Mode::Plan);
        let tracks_changes = self.changes.enabled()
            && (stage.rollback.as_ref().is_some_and(|r| r.strategy == RollbackStrategy::FileRestore)
                || (!kept_apart
                    && (closed_loop::is_closed_loop(stage) || stage.mode == Mode::Plan || stage.mode == Mode::Agent)));
        if !tracks_changes {
            return Ok(Confined::Ready(Setup { confine, snapshot: None }));
        }
        let watch = if stage.mode == Mode::Plan { Watch::ReadOnly } else { Watch::Files };
        let (snapshot, event) = match self.changes.snapshot(&state.run_id, &format!("{stage_id}-{attempt}"), watch) {
            Ok((name, files)) => {
                (Some(name.clone()), Event::SnapshotTaken { stage: stage_id.clone(), attempt, snapshot: name, files })
            }
            Err(reason) if stage.mode == Mode::Plan => {
                let error = StageError {
                    kind: FailureKind::ValidationError,
                    message: format!(
                        "plan mode cannot be enforced, so the stage was not run: {reason}. Free disk space or fix the permissions of the workspace and .loopwright/state, then `loopwright resume` (or run it with `mode: agent` if it may change files)"
                    ),
                    exit_code: None,
                    output_tail: String::new(),
                    pattern: None,
                    classified_by: None,
                    unfixable: None,
                };
                // What the attempt took of its provider goes back: it never ran.
                if super::agent_now(self.pipeline, state, stage).is_some() {
                    self.limits.give(holder, &crate::ports::Used::default()).await;
                }
                let failed = Event::AttemptFailed { stage: stage_id.clone(), attempt, duration_ms: 0, error };
                self.record(state, failed).await?;
                return Ok(Confined::Refused);
            }
            Err(e) => (None, Event::SnapshotFailed { stage: stage_id.clone(), attempt, reason: e.to_string() }),
        };
        self.defer(state, event);
        Ok(Confined::Ready(Setup { confine, snapshot }))
    }
}
