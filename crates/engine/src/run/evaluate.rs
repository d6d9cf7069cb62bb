//! Evaluate (the closed loop, seed 000): before the first attempt the regression gate and its
//! baseline; after each generation VALIDATE, EVALUATE (the stage's checks) and the regression
//! re-check, each unless journaled already — the first that fails ends the step; then ANALYZE,
//! which chooses the FIX. A check failure nothing sure classified may be labelled by the
//! stage's agent.

use loopwright_spec::{Mode, Stage, StageId};
use tokio::sync::mpsc;

use super::attempt::{capped_timeout, usage_of};
use super::finish::Commit;
use super::{Engine, output_tail};
use crate::closed_loop::{self, CheckResult, FailureType};
use crate::event::Event;
use crate::ports::{
    Allowed, Changes, Clock, Delivery, ExecOutcome, Limits, Notice, Runner, StageRequest, Stopper, Store, StoreError,
};
use crate::state::RunState;

/// Whether an evaluation step passed.
#[derive(PartialEq, Eq)]
enum Verdict {
    Passed,
    /// Failed (journaled with its failure): ANALYZE is next.
    Failed,
}

impl From<bool> for Verdict {
    /// From "it failed".
    fn from(failed: bool) -> Self {
        if failed { Verdict::Failed } else { Verdict::Passed }
    }
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// ANALYZE (seed 000): a decision over the journal and the strategies' measured
    /// effectiveness, journaled before the FIX it chooses.
    pub(super) async fn analyze(
        &mut self,
        state: &mut RunState,
        stage_id: StageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let measured = match self.settings.effectiveness.get() {
            Some(measured) => measured,
            None => {
                let measured = closed_loop::effectiveness::Effectiveness::measure(
                    self.store,
                    closed_loop::effectiveness::MEASURED_RUNS,
                )
                .await?;
                self.settings.effectiveness.get_or_init(|| measured)
            }
        };
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let (_, lp, _) = state.looping(stage_id.as_str());
        let analysis = closed_loop::analyze(stage, lp, measured);
        self.defer(state, Event::Analyzed { stage: stage_id, attempt, analysis });
        Ok(())
    }

    /// Closed loop, before the first attempt: regression detection's complexity gate
    /// (seed 000) and, when it is on, the baseline test results.
    pub(super) async fn baseline(&mut self, state: &mut RunState, stage_id: StageId) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let given = state.started.as_ref().and_then(|s| s.vars.get("complexity").cloned()).filter(|c| !c.is_empty());
        let config = stage.closed_loop.as_ref();
        let complexity = config.and_then(|c| c.complexity).map(|c| c.as_str().to_owned()).or(given);
        let settings = &self.settings.regression;
        let (enabled, reason) = match config.and_then(|c| c.regression) {
            Some(on) => (on, format!("closed_loop.regression: {on}")),
            None => match &complexity {
                Some(c) if settings.enabled_for_complexity.contains(c) => {
                    (true, format!("complexity {c} is in enabled_for_complexity"))
                }
                Some(c) => (false, format!("complexity {c} is not in enabled_for_complexity")),
                None => (false, "no complexity given".to_owned()),
            },
        };
        let command = settings
            .test_command
            .clone()
            .or_else(|| closed_loop::checks::Project::detect(self.changes).verbose_test_command());
        let baseline = match (enabled, command) {
            (true, Some(command)) => {
                self.flush(state).await?;
                self.runner.end_strays(&state.run_id, &stage_id);
                let run = self.shell(state, &stage_id, &command, stage.timeout).await;
                let output = format!("{}\n{}", run.stdout, run.stderr);
                let results = closed_loop::regression::parse_results(&output, self.changes);
                Some(closed_loop::Baseline { command, results })
            }
            _ => None,
        };
        let reason = if enabled && baseline.is_none() {
            format!("{reason}, but the project has no test command")
        } else {
            reason
        };
        self.record(state, Event::RegressionGate { stage: stage_id, complexity, reason, baseline }).await
    }

    /// Closed loop: VALIDATE, EVALUATE and the regression re-check, each unless journaled
    /// already; the first that fails ends the step (ANALYZE is next); success when all pass.
    pub(super) async fn evaluate(
        &mut self,
        state: &mut RunState,
        stage_id: StageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let (st, lp, it) = state.looping(stage_id.as_str());
        let it = it.clone();
        let snapshot = st.snapshots.iter().rev().find(|(a, _)| *a == attempt).map(|(_, n)| n.clone());
        let first_snapshot = st.snapshots.first().map(|(_, n)| n.clone());
        let layer = st.layer.as_ref().filter(|(a, _)| *a == attempt).map(|(_, n)| n.clone());
        let all_files = lp.files();
        let gate = lp.regression_gate.clone().flatten();
        self.flush(state).await?;
        // A crash may have left this stage's commands running: end them before running again.
        self.runner.end_strays(&state.run_id, &stage_id);
        if it.validation.is_none()
            && self.validate(state, stage, attempt, &it.files, snapshot.as_deref()).await? == Verdict::Failed
        {
            return Ok(());
        }
        if it.checks.is_none() && self.check(state, stage, attempt).await? == Verdict::Failed {
            return Ok(());
        }
        if let Some(baseline) = gate.filter(|_| it.regression.is_none())
            && self.recheck(state, stage, attempt, &baseline, &all_files.paths()).await? == Verdict::Failed
        {
            return Ok(());
        }
        // SUCCESS: the agent's changes are committed, then its outputs become the stage's.
        let commit = match layer {
            Some(layer) => Some(Commit::Layer(layer)),
            None => first_snapshot.filter(|_| stage.mode == Mode::Agent).map(Commit::Since),
        };
        self.succeed(state, stage_id, attempt, 0, it.outputs, commit).await?;
        self.flush(state).await
    }

    /// VALIDATE: the gates over what the attempt changed; a plan-mode stage that wrote has it
    /// put back (from `snapshot`).
    async fn validate(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        attempt: u32,
        files: &closed_loop::FileChanges,
        snapshot: Option<&str>,
    ) -> Result<Verdict, StoreError> {
        let stage_id = &stage.id;
        let violations = closed_loop::checks::validate(files, stage.mode, self.changes);
        let plan = violations.iter().any(|v| v.gate == closed_loop::Gate::PlanMode);
        if plan
            && let Some(name) = snapshot
            && let Ok(report) = self.changes.restore(&state.run_id, name)
        {
            // Plan mode is read-only: what the attempt changed is put back.
            self.record(state, Event::SnapshotRestored { stage: stage_id.clone(), attempt, report }).await?;
        }
        let failure = (!violations.is_empty()).then(|| {
            let text: Vec<String> = violations.iter().map(|v| format!("{}: {}", v.gate, v.message)).collect();
            let summary = format!(
                "pre-execution validation failed: {} violation{} ({})",
                violations.len(),
                if violations.len() == 1 { "" } else { "s" },
                violations.iter().map(|v| v.gate.as_str()).collect::<Vec<_>>().join(", ")
            );
            let kind = if plan { FailureType::SecurityViolation } else { FailureType::ValidationFailed };
            let text = text.join("\n");
            Box::new(closed_loop::classify(self.patterns, "pre_validation", kind, summary, &text, &Default::default()))
        });
        let verdict = Verdict::from(failure.is_some());
        let gates = closed_loop::Gate::ALL.to_vec();
        self.record(state, Event::Validated { stage: stage_id.clone(), attempt, gates, violations, failure }).await?;
        Ok(verdict)
    }

    /// EVALUATE: the stage's checks, in order, until one fails.
    async fn check(&mut self, state: &mut RunState, stage: &Stage, attempt: u32) -> Result<Verdict, StoreError> {
        let stage_id = &stage.id;
        let task_type = state.started.as_ref().and_then(|s| s.vars.get("task_type").cloned());
        let checks = closed_loop::checks::checks_for(&stage.checks, task_type.as_deref(), self.changes);
        let mut results = Vec::new();
        let mut failure = None;
        for check in checks {
            let run = self.shell(state, stage_id, &check.command, stage.timeout).await;
            let output = match (run.stdout.trim().is_empty(), run.stderr.trim().is_empty()) {
                (false, false) => format!("{}\n{}", run.stdout.trim_end(), run.stderr.trim_end()),
                (true, _) => run.stderr.clone(),
                (false, true) => run.stdout.clone(),
            };
            let exit_code = match run.outcome {
                ExecOutcome::Exited(c) => Some(c),
                _ => None,
            };
            let expected_ok = check.expected.as_ref().is_none_or(|e| output.contains(e.as_str()));
            let passed = exit_code == Some(0) && expected_ok;
            results.push(CheckResult {
                name: check.name.clone(),
                kind: check.kind,
                command: check.command.clone(),
                passed,
                exit_code,
                output: output_tail(&output),
                duration_ms: u64::try_from(run.duration.as_millis()).unwrap_or(u64::MAX),
            });
            if !passed {
                let how = failed_how(&run.outcome, expected_ok, check.expected.as_deref());
                let failure_type = if run.outcome == ExecOutcome::TimedOut {
                    FailureType::Timeout
                } else {
                    FailureType::VerificationFailed
                };
                let summary = format!("check `{}` (`{}`) {how}", check.name, check.command);
                let context = run.outcome.context(Some(&check.command), Some(check.kind.as_str()));
                let mut f = closed_loop::classify(self.patterns, &check.name, failure_type, summary, &output, &context);
                if closed_loop::ask::wanted(&f) {
                    self.ask_agent(state, stage_id, attempt, &mut f, &context).await;
                }
                failure = Some(Box::new(f));
                break;
            }
        }
        let verdict = Verdict::from(failure.is_some());
        self.record(state, Event::Evaluated { stage: stage_id.clone(), attempt, checks: results, failure }).await?;
        Ok(verdict)
    }

    /// The regression re-check: the baseline's tests run again when files depending on what
    /// changed (`changed`) exist; new failures there fail the attempt.
    async fn recheck(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        attempt: u32,
        baseline: &closed_loop::Baseline,
        changed: &[&str],
    ) -> Result<Verdict, StoreError> {
        let settings = &self.settings.regression;
        let dependents = closed_loop::regression::dependents(
            self.changes,
            changed,
            settings.search_depth,
            &settings.exclude_patterns,
        );
        let mut regressions = Vec::new();
        if !dependents.is_empty() {
            let run = self.shell(state, &stage.id, &baseline.command, stage.timeout).await;
            let current =
                closed_loop::regression::parse_results(&format!("{}\n{}", run.stdout, run.stderr), self.changes);
            regressions = closed_loop::regression::compare(&baseline.results, &current, &dependents);
        }
        let failure = (!regressions.is_empty()).then(|| Box::new(self.regression_failure(&regressions)));
        let verdict = Verdict::from(failure.is_some());
        let event = Event::RegressionChecked { stage: stage.id.clone(), attempt, dependents, regressions, failure };
        self.record(state, event).await?;
        Ok(verdict)
    }

    /// The failure new test failures in dependent files make: the `regression-detected`
    /// pattern's, for sure.
    fn regression_failure(&self, regressions: &[closed_loop::Regression]) -> closed_loop::Failure {
        let report = closed_loop::regression::report(regressions);
        let summary = format!(
            "regression check: {} dependent file{} with new test failures ({})",
            regressions.len(),
            if regressions.len() == 1 { "" } else { "s" },
            regressions.iter().map(|r| r.file.as_str()).collect::<Vec<_>>().join(", ")
        );
        let mut f = closed_loop::classify(
            self.patterns,
            "regression_check",
            FailureType::Regression,
            summary,
            &report,
            &Default::default(),
        );
        if let Some(p) = self.patterns.get(crate::patterns::Builtin::RegressionDetected.id()) {
            f.pattern = Some(p.id.clone());
            f.confidence = 1.0;
            f.strategy = p.strategy;
            f.alternatives = p.alternatives.clone();
            f.max_auto_retries = Some(p.max_auto_retries);
            f.retryable = p.retryable;
            f.lines = regressions
                .iter()
                .map(|r| format!("{}: {} new failure(s): {}", r.file, r.new_failures, r.tests.join(", ")))
                .collect();
        }
        f
    }

    /// Asks the stage's agent to label a failure nothing sure classified (SPEC §6, `[classify]
    /// ask_agent`): one request in plan mode, in the stage's sandbox, answered as JSON of
    /// [`closed_loop::ask::schema`], within `[classify] timeout_seconds`. Not asked when the
    /// stage's agent is not a model or an agent CLI, the budget is spent, or its provider's
    /// limits say wait. What it used is journaled with the failure (`usage_recorded`, against the
    /// run's budget); what it answered is the failure's evidence, used by
    /// [`closed_loop::ask::adopt`]'s rule.
    async fn ask_agent(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        failure: &mut closed_loop::Failure,
        context: &crate::patterns::Context,
    ) {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let Some(agent) = super::agent_now(self.pipeline, state, stage).filter(|a| a.runner.is_model_or_cli()) else {
            return;
        };
        if !self.settings.classify.ask_agent {
            return;
        }
        let unusable = |f: &mut closed_loop::Failure, why: String| {
            closed_loop::ask::adopt(self.patterns, f, &closed_loop::ask::Answer::Unusable(why));
        };
        if let Some(why) = crate::decide::budget_exceeded(self.pipeline, state, stage) {
            return unusable(failure, format!("not asked: {why}"));
        }
        let holder = format!("{}/{}/{}/classify", state.run_id, stage_id, attempt);
        match self.limits.take(agent, &holder, &super::limits::payer_of(self.pipeline, state)).await {
            Ok(Allowed::Yes) => {}
            Ok(Allowed::Wait { reason, .. } | Allowed::Refused { reason }) => {
                return unusable(failure, format!("not asked: {reason}"));
            }
            Err(e) => return unusable(failure, format!("not asked: the provider's limits could not be read: {e}")),
        }
        let question = closed_loop::ask::question(self.patterns, failure, context);
        // The stage's sandbox and network, the workspace read-only (plan mode): the question
        // carries what failed; the agent is to read, not change.
        let confine = self.confinement(state, stage);
        let limit = std::time::Duration::from_secs(self.settings.classify.timeout_seconds);
        let request = StageRequest {
            run_id: state.run_id.clone(),
            task_id: state.started.as_ref().expect("a started run").task_id.clone(),
            stage: stage_id.clone(),
            attempt,
            mode: Mode::Plan,
            agent: Some(agent.clone()),
            commands: Vec::new(),
            prompt: question.prompt,
            timeout: limit.min(capped_timeout(self.pipeline, state, stage)),
            workspace: self.workspace(state),
            confine,
            purpose: crate::ports::Purpose::Classify { schema: question.schema },
            traceparent: None,
        };
        // Its processes carry the run's and stage's marks: a crash leaves none that resume
        // would not end (`end_strays`). A rate limit it meets pauses the provider as usual.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let execution = self.runner.run(&request, tx).await;
        while let Ok(notice) = rx.try_recv() {
            if let Notice::RateLimited { detail, until } = notice {
                self.limits.exhausted(agent, &detail, until).await;
            }
        }
        let usage = usage_of(agent, &request, &execution, state);
        self.limits.give(&holder, &super::attempt::used_of(&usage)).await;
        self.defer(state, Event::UsageRecorded { stage: stage_id.clone(), attempt, usage });
        let answer = match closed_loop::ask::unanswered(&execution.outcome, request.timeout) {
            None => closed_loop::ask::read(&execution.stdout),
            Some(why) => closed_loop::ask::Answer::Unusable(why),
        };
        closed_loop::ask::adopt(self.patterns, failure, &answer);
    }
}

/// How a check failed, in words.
fn failed_how(outcome: &ExecOutcome, expected_ok: bool, expected: Option<&str>) -> String {
    match (outcome, expected_ok) {
        (ExecOutcome::Exited(0), false) => format!("did not print the expected `{}`", expected.unwrap_or_default()),
        (ExecOutcome::Exited(c), _) => format!("returned exit code {c}"),
        (ExecOutcome::TimedOut, _) => "ran past the stage's timeout".to_owned(),
        (ExecOutcome::Signaled(s), _) => format!("was killed by signal {s}"),
        (ExecOutcome::SpawnFailed(why), _) => format!("could not start: {why}"),
    }
}
