//! A round's choice (SPEC §16): by the stage's selectors, or — `select: {judge: STAGE}` — by
//! asking the judge stage's agent, once, in plan mode, which of the candidates that passed
//! wins ([`crate::decide::judge`] builds the question and reads the answer).

use loopwright_spec::StageId;
use loopwright_spec::pipeline::Select;

use super::Engine;
use crate::decide::candidates::{Choice, choose, entries_of};
use crate::decide::judge::{Shown, Verdict};
use crate::ports::{Changes, Clock, Delivery, Limits, Notice, Runner, Stopper, Store, StoreError};
use crate::state::{CandidateState, RunState};

/// How much of each candidate's diff a judge is shown.
const JUDGE_DIFF_MAX: usize = 24 * 1024;

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// The round's choice: by the stage's selectors, or by its judge when more than one
    /// candidate passed. `None` when the run was stopped while the judge ran (journaled).
    pub(super) async fn choice(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        select: &Select,
    ) -> Result<Option<Choice>, StoreError> {
        let ended: Vec<CandidateState> =
            state.stage(stage_id.as_str()).map(|s| s.candidates.clone()).unwrap_or_default();
        let entries = entries_of(&ended);
        let passed = entries.iter().filter(|e| e.result.passed).count();
        Ok(Some(match select {
            Select::Judge(judge) if passed >= 2 => {
                let Some(verdict) = self.ask_judge(state, stage_id, attempt, judge, &ended).await? else {
                    return Ok(None);
                };
                crate::decide::judge::judged(select.selectors(), &entries, judge, &verdict)
            }
            select => choose(select.selectors(), &entries),
        }))
    }

    /// Asks the judge stage `judge` which of the candidates that passed wins: its own prompt,
    /// then theirs diffs and check results; one answer in plan mode, its usage journaled with
    /// the stage's attempt (budgets count it). `None` when the run was stopped meanwhile.
    async fn ask_judge(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        judge: &StageId,
        ended: &[CandidateState],
    ) -> Result<Option<Verdict>, StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("a pipeline stage");
        let judge_stage = self.pipeline.stage(judge.as_str()).expect("a judge is validated to be a stage");
        let Some(agent) = super::agent_now(self.pipeline, state, judge_stage).cloned() else {
            return Ok(Some(Verdict::Unusable("its stage has no agent".to_owned())));
        };
        if let Some(why) = crate::decide::budget_exceeded(self.pipeline, state, stage) {
            return Ok(Some(Verdict::Unusable(format!("not asked: {why}"))));
        }
        let holder = format!("{}/{stage_id}/{attempt}/judge", state.run_id);
        match self.limits.take(&agent, &holder, &super::limits::payer_of(self.pipeline, state)).await {
            Ok(crate::ports::Allowed::Yes) => {}
            Ok(crate::ports::Allowed::Wait { reason, .. } | crate::ports::Allowed::Refused { reason }) => {
                return Ok(Some(Verdict::Unusable(format!("not asked: {reason}"))));
            }
            Err(e) => {
                return Ok(Some(Verdict::Unusable(format!("not asked: the provider's limits could not be read: {e}"))));
            }
        }
        let diffs: Vec<(u32, String)> = ended
            .iter()
            .filter(|c| c.result.as_ref().is_some_and(|r| r.passed))
            .map(|c| {
                (c.candidate, self.changes.layer_diff(&state.run_id, &c.layer, JUDGE_DIFF_MAX).unwrap_or_default())
            })
            .collect();
        let entries = entries_of(ended);
        let shown: Vec<Shown<'_>> = entries
            .iter()
            .filter_map(|e| Some(Shown { entry: *e, diff: &diffs.iter().find(|(c, _)| *c == e.candidate)?.1 }))
            .collect();
        let passed: Vec<u32> = shown.iter().map(|s| s.entry.candidate).collect();
        let mut request = self.request(state, judge_stage, attempt, self.confinement(state, judge_stage));
        request.stage = stage_id.clone();
        request.agent = Some(agent.clone());
        request.prompt = crate::decide::judge::question(&request.prompt, &shown);
        request.purpose = crate::ports::Purpose::Judge { schema: crate::decide::judge::schema(&shown) };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let stopper = self.stopper;
        let execution = tokio::select! {
            biased;
            stop = stopper.stopped() => {
                self.limits.give(&holder, &crate::ports::Used::default()).await;
                self.stop(state, stop).await?;
                return Ok(None);
            }
            execution = self.runner.run(&request, tx) => execution,
        };
        while let Ok(notice) = rx.try_recv() {
            if let Notice::RateLimited { detail, until } = notice {
                self.limits.exhausted(&agent, &detail, until).await;
            }
        }
        self.used(state, &request, &holder, &execution).await;
        Ok(Some(match crate::closed_loop::ask::unanswered(&execution.outcome, request.timeout) {
            None => crate::decide::judge::read(&execution.stdout, &passed),
            Some(why) => Verdict::Unusable(why),
        }))
    }
}
