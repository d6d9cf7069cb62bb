//! Best of N (SPEC §16): the candidates of a round run at once, each in its own layer; each
//! is checked over its layer as it ends and journaled (`candidate_ended`: checks, files,
//! tokens, cost); the winner, chosen by a pure function of those results, has its layer
//! committed and the others are dropped. None passing fails the attempt with the most
//! promising failure, which the next attempt's `<retry_context>` carries.
//!
//! After a crash, a candidate whose end is journaled is kept (its layer is still there, or on a
//! fleet made again from the commit it was kept as) and one that was in flight runs again in a
//! fresh layer.

use loopwright_spec::{Stage, StageId};

use super::Engine;
use super::attempt::LIMIT_RENEW;
use super::finish::{Commit, judge};
use super::process::{Process, Reported, next_of};
use crate::decide::candidates::{choose, entries_of};
use crate::event::{CandidateResult, Event, FailureKind, StageError};
use crate::ids::RunId;
use crate::ports::{
    Changes, Clock, Delivery, ExecOutcome, Execution, Limits, Notice, Runner, StageRequest, Stop, Stopper, Store,
    StoreError,
};
use crate::state::{CandidateState, RunState, StageState};

/// A candidate in flight.
struct Running<'a> {
    candidate: u32,
    request: StageRequest,
    holder: String,
    process: Process<'a>,
}

/// A round in progress: the candidates running, those not started yet (in order), how they
/// are confined, and when to ask their provider again.
struct Round<'a> {
    running: Vec<Running<'a>>,
    pending: Vec<u32>,
    confine: crate::ports::Confinement,
    again: Option<jiff::Timestamp>,
}

/// How waiting for a round ended.
enum Waited {
    /// Every candidate ended.
    Ended,
    /// The run was stopped (journaled).
    Stopped,
}

/// What woke the round.
enum Woke {
    Stopped(Stop),
    Notice(Notice),
    Ended(usize, Execution),
    /// Time to renew the slots, or to ask the provider again.
    Renew,
}

impl<'a, S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery>
    Engine<'a, S, R, C, X, W, L, D>
{
    /// Attempt `attempt` of a `candidates:` stage: its round of candidates, run, checked,
    /// chosen between and applied.
    pub(super) async fn candidates(
        &mut self,
        state: &mut RunState,
        stage_id: StageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let plan = stage.candidates.clone().expect("a candidates stage");
        self.prepare(state, &stage_id, attempt).await?;
        self.defer(state, Event::AttemptStarted { stage: stage_id.clone(), attempt });
        let confine = self.confinement(state, stage);
        if !(confine.sandbox && self.changes.confined()) {
            let error = StageError {
                kind: FailureKind::ValidationError,
                message: "best of N runs each candidate in a layer of its own, which needs the sandbox (bubblewrap and overlayfs; see `loopwright doctor`); it is off or not available here".into(),
                exit_code: None,
                output_tail: String::new(),
                pattern: None,
                classified_by: None,
                unfixable: None,
            };
            return self.record(state, Event::AttemptFailed { stage: stage_id, attempt, duration_ms: 0, error }).await;
        }
        // A round decided before a crash is applied; one cut short goes on where it stopped,
        // keeping each candidate whose end is journaled and whose layer is at hand: here, or
        // made here again from where it was kept (a takeover by another machine). A decided
        // round whose winner's layer is gone from this machine, where the run's layers are, was
        // applied (copied, committed, then removed) before its end was journaled: applying it
        // again adopts that commit; running the round again would redo finished work.
        let run_id = state.run_id.clone();
        let this_round = state.stage(stage_id.as_str()).filter(|s| s.round == attempt);
        let decided = this_round.is_some_and(|s| {
            s.chosen.is_some()
                && kept_of(stage, s)
                    .and_then(|k| s.candidates.iter().find(|c| c.candidate == k))
                    .is_none_or(|c| self.at_hand(&run_id, c) || self.changes.run_layers_here(&run_id))
        });
        if !decided {
            let ended: Vec<u32> = this_round
                .map(|s| {
                    s.candidates
                        .iter()
                        .filter(|c| c.result.is_some() && self.at_hand(&run_id, c))
                        .map(|c| c.candidate)
                        .collect()
                })
                .unwrap_or_default();
            let pending: Vec<u32> =
                (0..u32::try_from(plan.agents.len()).unwrap_or(u32::MAX)).filter(|c| !ended.contains(c)).collect();
            let mut round = Round { running: Vec::new(), pending, confine, again: None };
            if let Waited::Stopped = self.await_round(state, &stage_id, attempt, &mut round).await? {
                return Ok(());
            }
            let Some(choice) = self.choice(state, &stage_id, attempt, &plan.select).await? else {
                return Ok(());
            };
            let event =
                Event::CandidateChosen { stage: stage_id.clone(), attempt, winner: choice.winner, why: choice.why };
            self.record(state, event).await?;
        }
        self.apply_choice(state, &stage_id, attempt).await
    }

    /// Starts the round's pending candidates in order, each in a fresh layer with its
    /// provider's slot (deferred `candidate_started`), while the provider allows: with none
    /// running, a candidate waits for its slot (journaled); with some running, one told to wait
    /// stays pending until one ends or `round.again`. `Stopped` when the run was stopped while
    /// a candidate waited (journaled).
    async fn start_candidates(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        round: &mut Round<'a>,
    ) -> Result<Waited, StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let plan = stage.candidates.clone().expect("a candidates stage");
        round.again = None;
        while let Some(&candidate) = round.pending.first() {
            let mut refused: Option<String> = None;
            let agent_name = &plan.agents[usize::try_from(candidate).unwrap_or(usize::MAX)];
            let holder = format!("{}/{stage_id}/{attempt}/c{candidate}", state.run_id);
            let agent = self.pipeline.agents.get(agent_name).cloned();
            if let Some(agent) = &agent {
                if round.running.is_empty() {
                    match self.acquire_for(state, stage, attempt, &holder, agent).await? {
                        super::limits::Acquired::Taken => {}
                        super::limits::Acquired::Stopped => return Ok(Waited::Stopped),
                        super::limits::Acquired::Refused(reason) => refused = Some(reason),
                    }
                } else if let Some(again) = self.try_acquire_for(state, agent, &holder).await? {
                    round.again = Some(again);
                    break;
                }
            }
            round.pending.remove(0);
            let layer = format!("{stage_id}-{attempt}-c{candidate}");
            let started = Event::CandidateStarted {
                stage: stage_id.clone(),
                attempt,
                candidate,
                agent: agent_name.clone(),
                layer: layer.clone(),
            };
            self.defer(state, started);
            if let Some(reason) = refused {
                let result = CandidateResult { error: Some(reason), ..CandidateResult::default() };
                self.defer(state, Event::CandidateEnded { stage: stage_id.clone(), attempt, candidate, result });
                continue;
            }
            let _ = self.changes.drop_layer(&state.run_id, &layer);
            if let Err(reason) = self.changes.make_layer(&state.run_id, &layer) {
                if agent.is_some() {
                    self.limits.give(&holder, &crate::ports::Used::default()).await;
                }
                let error = Some(format!("no layer could be made for it: {reason}"));
                let result = CandidateResult { error, ..CandidateResult::default() };
                self.defer(state, Event::CandidateEnded { stage: stage_id.clone(), attempt, candidate, result });
                continue;
            }
            let mut request = self.request(state, stage, attempt, round.confine.clone());
            request.agent = agent;
            request.confine.layer = Some(layer);
            request.purpose = crate::ports::Purpose::Candidate { index: candidate };
            let process = Process::start(self.runner, &request);
            round.running.push(Running { candidate, request, holder, process });
        }
        // Each candidate is journaled as started before its process exists.
        self.flush(state).await?;
        Ok(Waited::Ended)
    }

    /// Runs the round's candidates to their ends, starting each pending one as its provider
    /// allows, checking and journaling each as it ends; their provider slots renewed meanwhile.
    async fn await_round(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        round: &mut Round<'a>,
    ) -> Result<Waited, StoreError> {
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + LIMIT_RENEW, LIMIT_RENEW);
        loop {
            if let Waited::Stopped = self.start_candidates(state, stage_id, attempt, round).await? {
                return self.stop_round(round).await;
            }
            if round.running.is_empty() && round.pending.is_empty() {
                return Ok(Waited::Ended);
            }
            let (clock, stopper) = (self.clock, self.stopper);
            let again = round.again;
            let woke = tokio::select! {
                biased;
                stop = stopper.stopped() => Woke::Stopped(stop),
                reported = next_of(&mut round.running, |r| &mut r.process) => match reported {
                    Reported::Notice(_, notice) => Woke::Notice(notice),
                    Reported::Ended(i, execution) => Woke::Ended(i, execution),
                },
                _ = renew.tick() => Woke::Renew,
                () = clock.sleep_until(again.unwrap_or_else(|| clock.now())), if again.is_some() => Woke::Renew,
            };
            match woke {
                Woke::Stopped(stop) => {
                    self.stop_round(round).await?;
                    self.stop(state, stop).await?;
                    return Ok(Waited::Stopped);
                }
                Woke::Notice(notice) => self.notice(state, stage_id, attempt, notice).await?,
                Woke::Renew => {
                    for r in round.running.iter().filter(|r| r.request.agent.is_some()) {
                        self.limits.renew(&r.holder).await;
                    }
                }
                Woke::Ended(i, execution) => {
                    let mut r = round.running.remove(i);
                    for notice in r.process.left() {
                        self.notice(state, stage_id, attempt, notice).await?;
                    }
                    self.used(state, &r.request, &r.holder, &execution).await;
                    let mut result = self.checked(state, stage_id, &r.request, &execution).await;
                    result.kept = r
                        .request
                        .confine
                        .layer
                        .as_deref()
                        .and_then(|layer| self.changes.keep_layer(&state.run_id, layer).ok().flatten());
                    let event =
                        Event::CandidateEnded { stage: stage_id.clone(), attempt, candidate: r.candidate, result };
                    self.record(state, event).await?;
                }
            }
        }
    }

    /// Ends the round's candidates in flight (dropping a process future ends its process) and
    /// gives their provider slots back.
    async fn stop_round(&mut self, round: &mut Round<'a>) -> Result<Waited, StoreError> {
        for r in round.running.drain(..) {
            if r.request.agent.is_some() {
                self.limits.give(&r.holder, &crate::ports::Used::default()).await;
            }
        }
        Ok(Waited::Stopped)
    }

    /// True when candidate `c`'s layer is here, or was kept and has been made here again.
    fn at_hand(&self, run: &RunId, c: &CandidateState) -> bool {
        self.changes.layer_here(run, &c.layer)
            || c.result
                .as_ref()
                .and_then(|r| r.kept.as_deref())
                .is_some_and(|kept| self.changes.bring_layer(run, &c.layer, kept).is_ok())
    }

    /// A candidate's end judged: its outputs, then the stage's checks over its layer.
    async fn checked(
        &mut self,
        state: &RunState,
        stage_id: &StageId,
        request: &StageRequest,
        execution: &Execution,
    ) -> CandidateResult {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("a pipeline stage");
        let layer = request.confine.layer.clone();
        let files: Vec<String> = layer
            .as_ref()
            .and_then(|l| self.changes.layer_changed(&state.run_id, l).ok())
            .map(|c| c.paths().into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
        let usage = request.agent.as_ref().map(|a| super::attempt::usage_of(a, request, execution, state));
        let mut result = CandidateResult {
            passed: false,
            checks: Vec::new(),
            files,
            tokens: usage.as_ref().map_or(0, |u| u.input_tokens + u.output_tokens),
            cost_usd: usage.and_then(|u| u.cost_usd),
            duration_ms: u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX),
            outputs: Default::default(),
            error: None,
            output_tail: super::output_tail(&format!("{}{}", execution.stdout, execution.stderr)),
            kept: None,
        };
        match judge(&stage.outputs, execution) {
            Err(error) => {
                result.error = Some(format!("its agent {}", error.message));
                return result;
            }
            Ok(outputs) => result.outputs = outputs,
        }
        // The closed loop's candidates are checked as EVALUATE checks (its defaults when the
        // stage names none).
        let checks = if crate::closed_loop::is_closed_loop(stage) {
            let task_type = state.started.as_ref().and_then(|s| s.vars.get("task_type").cloned());
            crate::closed_loop::checks::checks_for(&stage.checks, task_type.as_deref(), self.changes)
        } else {
            stage.checks.clone()
        };
        for check in &checks {
            let ran = self.shell_in(state, stage_id, &check.command, stage.timeout, layer.clone()).await;
            let printed = format!("{}{}", ran.stdout, ran.stderr);
            let ok = ran.outcome == ExecOutcome::Exited(0)
                && check.expected.as_ref().is_none_or(|e| printed.contains(e.as_str()));
            if !ok && result.error.is_none() {
                result.error = Some(format!("check `{}` failed", check.name));
                result.output_tail = super::output_tail(&printed);
            }
            result.checks.push((check.name.clone(), ok));
        }
        result.passed = result.error.is_none();
        result
    }

    /// The round's choice applied: the winner's layer committed and the attempt ended well,
    /// or the attempt failed with the most promising failure; every other layer dropped. In the
    /// closed loop the round stands for GENERATE ([`Engine::generated_by`]).
    async fn apply_choice(&mut self, state: &mut RunState, stage_id: &StageId, attempt: u32) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("a pipeline stage");
        let closed = crate::closed_loop::is_closed_loop(stage);
        let st = state.stage(stage_id.as_str()).expect("a started stage");
        let select = stage.candidates.as_ref().map(|c| c.select.selectors().to_vec()).unwrap_or_default();
        let choice = choose(&select, &entries_of(&st.candidates));
        let kept = kept_of(stage, st);
        let kept = st.candidates.iter().find(|c| Some(c.candidate) == kept).cloned();
        let best = choice.best.and_then(|b| st.candidates.iter().find(|c| c.candidate == b)).cloned();
        let durations = st.candidates.iter().filter_map(|c| c.result.as_ref().map(|r| r.duration_ms)).max();
        for c in &st.candidates.clone() {
            if kept.as_ref().is_none_or(|k| k.candidate != c.candidate) {
                let _ = self.changes.drop_layer(&state.run_id, &c.layer);
            }
        }
        if closed {
            return self.generated_by(state, stage_id, attempt, kept, &choice.why).await;
        }
        if let Some(c) = kept {
            let result = c.result.unwrap_or_else(unreachable_result);
            let commit = Some(Commit::Layer(c.layer));
            return self.succeed(state, stage_id.clone(), attempt, result.duration_ms, result.outputs, commit).await;
        }
        let (message, tail) = match &best {
            Some(b) => (
                format!(
                    "{} (best: candidate {} by {}: {})",
                    choice.why.split(';').next().unwrap_or_default(),
                    b.candidate + 1,
                    b.agent,
                    b.result.as_ref().and_then(|r| r.error.clone()).unwrap_or_default()
                ),
                b.result.as_ref().map(|r| r.output_tail.clone()).unwrap_or_default(),
            ),
            None => (choice.why.clone(), String::new()),
        };
        let error = StageError {
            kind: FailureKind::ExecutionError,
            message,
            exit_code: None,
            output_tail: tail,
            pattern: None,
            classified_by: None,
            unfixable: None,
        };
        let duration_ms = durations.unwrap_or(0);
        self.record(state, Event::AttemptFailed { stage: stage_id.clone(), attempt, duration_ms, error }).await
    }

    /// Closed loop: the round stands for GENERATE. The winner's layer — else the most
    /// promising failure's — becomes the attempt's (journaled together with what it generated,
    /// so a crash between cannot drop it), for EVALUATE to check and ANALYZE to read.
    async fn generated_by(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        kept: Option<CandidateState>,
        why: &str,
    ) -> Result<(), StoreError> {
        let result = kept.as_ref().and_then(|c| c.result.clone()).unwrap_or_default();
        // Its agent failed (no check ran): that is GENERATE's failure. A check that failed is
        // EVALUATE's, which runs the checks again over the layer and classifies what fails.
        let agent_failed = match (&kept, &result.error) {
            (None, _) => Some(format!("no candidate could be kept: {why}")),
            (Some(_), Some(error)) if result.checks.is_empty() => Some(error.clone()),
            _ => None,
        };
        let failure = agent_failed.map(|summary| {
            let context = Default::default();
            let f = crate::closed_loop::classify(
                self.patterns,
                "generate",
                crate::closed_loop::FailureType::ExecutionError,
                summary,
                &result.output_tail,
                &context,
            );
            Box::new(f)
        });
        let files = match &kept {
            Some(c) => {
                let how =
                    format!("the layer of candidate {} (agent {}), kept from the round", c.candidate + 1, c.agent);
                let (stage, layer) = (stage_id.clone(), c.layer.clone());
                self.defer(state, Event::LayerMade { stage, attempt, layer, how });
                self.changes.layer_changed(&state.run_id, &c.layer).unwrap_or_default()
            }
            None => Default::default(),
        };
        let event = Event::Generated {
            stage: stage_id.clone(),
            attempt,
            duration_ms: result.duration_ms,
            outputs: result.outputs,
            files,
            output: result.output_tail,
            exit_code: None,
            failure,
        };
        self.record(state, event).await
    }
}

/// The candidate whose layer a decided round keeps: its winner, or in the closed loop the
/// most promising failure when none passed.
fn kept_of(stage: &Stage, st: &StageState) -> Option<u32> {
    let winner = st.chosen.flatten();
    if !crate::closed_loop::is_closed_loop(stage) {
        return winner;
    }
    let select = stage.candidates.as_ref().map(|c| c.select.selectors().to_vec()).unwrap_or_default();
    winner.or(choose(&select, &entries_of(&st.candidates)).best)
}

/// A result for a winner journaled without one (never: a winner passed, so it ended).
fn unreachable_result() -> CandidateResult {
    CandidateResult { passed: true, ..CandidateResult::default() }
}
