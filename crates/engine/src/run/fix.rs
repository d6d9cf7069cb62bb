//! Fix (the closed loop's FIX, seed 000): the strategy ANALYZE chose for an attempt's
//! failure is run, and what it did journaled for the next attempt's retry context.

use loopwright_spec::Stage;

use super::Engine;
use crate::closed_loop::{self, FixResult, Strategy};
use crate::event::Event;
use crate::ports::{Changes, Clock, Delivery, Limits, Runner, Stopper, Store, StoreError};
use crate::state::RunState;
use loopwright_spec::StageId;

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Closed loop, FIX: runs the strategy ANALYZE chose for an attempt's failure.
    pub(super) async fn fix(
        &mut self,
        state: &mut RunState,
        stage_id: StageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let (_, lp, it) = state.looping(stage_id.as_str());
        let it = it.clone();
        let failure = it.failure.clone().expect("FIX follows a failure");
        let strategy = it.analysis.as_ref().and_then(|a| a.strategy).unwrap_or(Strategy::AnalyzeThenFix);
        let backoffs = u32::try_from(
            lp.iterations
                .iter()
                .filter_map(|i| i.fix.as_ref())
                .filter(|f| f.strategy == Strategy::RetryWithBackoff)
                .count(),
        )
        .unwrap_or(u32::MAX);
        self.flush(state).await?;
        // A crash may have left this stage's commands running: end them before running again.
        self.runner.end_strays(&state.run_id, &stage_id);
        let ws: &dyn crate::ports::Changes = self.changes;
        let fix = match strategy {
            Strategy::AutoFix => self.auto_fix(state, stage, &it, &failure).await,
            Strategy::ContextExpand => {
                let (applied, context) = closed_loop::strategies::context_expand(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
            Strategy::DependencyCheck => {
                let (applied, context) = closed_loop::strategies::dependency_check(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
            Strategy::RetryWithBackoff => {
                let delay = closed_loop::strategies::backoff_delay(self.settings.backoff_initial, backoffs + 1);
                let wait_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                let applied =
                    format!("retry_with_backoff: waiting {:.1}s before generating again", delay.as_secs_f64());
                FixResult { strategy, applied, context: None, resolved: false, wait_ms }
            }
            // ANALYZE never chooses escalate for FIX (it escalates instead); a journal that
            // says so anyway gets the generic fix.
            Strategy::AnalyzeThenFix | Strategy::Escalate => {
                let (applied, context) = closed_loop::strategies::analyze_then_fix(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
        };
        self.record(state, Event::FixApplied { stage: stage_id, attempt, fix }).await
    }

    /// FIX by `auto_fix`: the project's fixer for the failure, then the check that failed run
    /// again to see whether it resolved it; without a fixer, the generic fix.
    async fn auto_fix(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        it: &closed_loop::Iteration,
        failure: &closed_loop::Failure,
    ) -> FixResult {
        let stage_id = &stage.id;
        let strategy = Strategy::AutoFix;
        let ws: &dyn crate::ports::Changes = self.changes;
        let fix_command =
            failure.pattern.as_deref().and_then(|p| self.patterns.get(p)).and_then(|p| p.fix_command.clone());
        match closed_loop::strategies::fixer_command(failure, fix_command.as_deref(), ws) {
            Some(command) => {
                let run = self.shell(state, stage_id, &command, stage.timeout).await;
                let fixed = run.outcome == crate::ports::ExecOutcome::Exited(0);
                // Re-run the check that failed, to see whether the fixer resolved it.
                let check = it.checks.as_ref().and_then(|c| c.iter().find(|c| !c.passed)).map(|c| c.command.clone());
                let resolved = match (fixed, check) {
                    (true, Some(check)) => {
                        self.shell(state, stage_id, &check, stage.timeout).await.outcome
                            == crate::ports::ExecOutcome::Exited(0)
                    }
                    _ => false,
                };
                let applied = format!(
                    "auto_fix: ran `{command}` ({}); the failed check {} afterwards",
                    if fixed { "exit 0" } else { "it failed" },
                    if resolved { "passes" } else { "still fails" }
                );
                FixResult { strategy, applied, context: None, resolved, wait_ms: 0 }
            }
            None => {
                let (applied, context) = closed_loop::strategies::analyze_then_fix(failure, ws);
                FixResult {
                    strategy,
                    applied: format!("auto_fix: no fixer found for this project; {applied}"),
                    context,
                    resolved: false,
                    wait_ms: 0,
                }
            }
        }
    }
}
