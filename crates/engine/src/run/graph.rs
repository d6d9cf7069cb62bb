//! Stages at once (SPEC §16): the driver of a pipeline whose stages form a graph (`needs:`).
//!
//! One writer: the run's state and journal are changed here only, one step at a time, as in
//! [`Engine::drive`]. What runs at once is the attempts' processes: each ready stage the state
//! machine names is launched (prepared, its slot taken, journaled, confined), its process
//! future kept in flight, and the driver waits for whichever in-flight attempt reports (a
//! notice) or ends (then it is judged like any attempt). Steps that need no process — a
//! condition, a gate, the closed loop's checks — are taken between.
//!
//! Stages may overlap only where nothing one writes can reach another: read-only (plan-mode)
//! attempts with each other; agent-mode attempts each in its own layer with each other, their
//! changes copied back in the pipeline's order (an attempt that ends before an earlier stage's
//! attempt in flight waits for it, parked), a file both changed merged line by line (in a
//! repository), the later one failing as a `merge-conflict` when both changed the same lines;
//! an agent-mode attempt that writes into the workspace itself runs alone.

use std::collections::{BTreeMap, BTreeSet};

use loopwright_spec::{Mode, Stage, StageId};

use super::attempt::LIMIT_RENEW;
use super::process::{Process, Reported, next_of};
use super::{Engine, Launched, Taken};
use crate::decide::{Step, next_steps};
use crate::ports::{
    Changes, Clock, Delivery, ExecOutcome, Execution, Limits, Notice, Runner, Stop, Stopper, Store, StoreError,
};
use crate::state::{RunState, StageStatus};

/// How an attempt may share the workspace with others in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Share {
    /// It only reads (plan mode, enforced): with other readers.
    Reads,
    /// It writes into a layer of its own: with other layered attempts.
    Layered,
    /// It writes into the workspace: alone.
    Alone,
}

/// An attempt whose process runs.
struct Flight<'a> {
    /// Its stage.
    stage: StageId,
    /// What it was launched with.
    launched: Launched,
    /// Its process, until it ends.
    process: Process<'a>,
    /// Files other stages' attempts brought into the workspace (or will) since its layer was
    /// made: changing one of them too is a merge conflict.
    others: BTreeSet<String>,
    /// The worker's slot it holds beyond the run's own (none for the first in flight).
    _slot: Option<crate::ports::Slot>,
    /// The commit the workspace was at when its layer was made (a repository's): what a file
    /// another stage changed meanwhile is merged from.
    base: Option<String>,
}

/// A layered attempt that ended well while an attempt of an earlier stage (in the pipeline's
/// order) still runs: its changes wait for that one's, so that changes are applied in the
/// pipeline's order and the later stage is the one that meets a conflict.
struct Parked<'a> {
    flight: Flight<'a>,
    execution: Execution,
}

/// What woke the driver.
enum Woke {
    Stopped(Stop),
    Notice(usize, Notice),
    Ended(usize, Execution),
    Renew,
    Timer,
}

impl<'a, S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery>
    Engine<'a, S, R, C, X, W, L, D>
{
    /// Drives a run whose stages form a graph until it ends or waits, running ready stages at
    /// once up to the pipeline's `max_parallel`.
    pub(super) async fn drive_graph(&mut self, mut state: RunState) -> Result<RunState, StoreError> {
        let mut flights: Vec<Flight<'a>> = Vec::new();
        let mut parked: Vec<Parked<'a>> = Vec::new();
        // Files of layered attempts that ended well, by stage, until their stage is done (their
        // changes are then in the workspace, where a new layer sees them).
        let mut claims: BTreeMap<StageId, Vec<String>> = BTreeMap::new();
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + LIMIT_RENEW, LIMIT_RENEW);
        loop {
            claims.retain(|stage, _| state.stage(stage.as_str()).is_some_and(|s| !s.status.is_done()));
            // Made before the look for free slots, so a slot given back after it is not missed.
            let freed = self.slots.freed();
            let (steps, mut slots, short) = self.ready(&state, &flights, &parked);
            let mut moved = false;
            let mut until = None;
            for step in steps {
                match step {
                    // A round of candidates runs its own attempts at once (it runs alone).
                    step @ Step::Execute { .. } if is_candidates(self.pipeline, &step) => {
                        moved = true;
                        if let Taken::Done = self.take(&mut state, step).await? {
                            return Ok(state);
                        }
                    }
                    Step::Execute { stage, attempt } => {
                        let others: BTreeSet<String> = claims.values().flatten().cloned().collect();
                        match self.lift(&mut state, stage, attempt, &mut flights, others, &mut slots).await? {
                            Some(again) => until = Some(until.map_or(again, |u: jiff::Timestamp| u.min(again))),
                            None => moved = true,
                        }
                    }
                    Step::Wait { until: at, .. } if !flights.is_empty() => {
                        until = Some(until.map_or(at, |u: jiff::Timestamp| u.min(at)));
                    }
                    step if flights.is_empty() || between(&step) => {
                        moved = true;
                        if let Taken::Done = self.take(&mut state, step).await? {
                            return Ok(state);
                        }
                    }
                    // The run's end, a rollback or a delivery waits for the attempts in flight.
                    _ => {}
                }
            }
            if moved {
                continue;
            }
            if flights.is_empty() {
                // Nothing in flight and nothing let start: one step at a time, as in a line.
                let step = crate::decide::next_step(self.pipeline, &state, self.clock.now());
                if let Taken::Done = self.take(&mut state, step).await? {
                    return Ok(state);
                }
                continue;
            }
            self.flush(&mut state).await?;
            let (clock, stopper) = (self.clock, self.stopper);
            let woke = tokio::select! {
                biased;
                stop = stopper.stopped() => Woke::Stopped(stop),
                reported = next_of(&mut flights, |f| &mut f.process) => match reported {
                    Reported::Notice(i, notice) => Woke::Notice(i, notice),
                    Reported::Ended(i, execution) => Woke::Ended(i, execution),
                },
                _ = renew.tick() => Woke::Renew,
                () = clock.sleep_until(until.unwrap_or_else(|| clock.now())), if until.is_some() => Woke::Timer,
                // A stage held back for want of a worker's slot may start when one comes free.
                () = freed, if short => Woke::Timer,
            };
            self.woke(&mut state, woke, &mut flights, &mut parked, &mut claims).await?;
        }
    }

    /// Launches an attempt the state machine named, in flight beside `flights`, or says when
    /// to ask again: with attempts in flight, a provider that says wait does not hold the
    /// driver (the others go on meanwhile). The run's own slot covers its first attempt in
    /// flight; each other takes one of `slots`.
    async fn lift(
        &mut self,
        state: &mut RunState,
        stage: StageId,
        attempt: u32,
        flights: &mut Vec<Flight<'a>>,
        others: BTreeSet<String>,
        slots: &mut Vec<crate::ports::Slot>,
    ) -> Result<Option<jiff::Timestamp>, StoreError> {
        let spec = self.pipeline.stage(stage.as_str()).expect("a pipeline stage");
        let taken = !flights.is_empty();
        if taken && let Some(again) = self.try_acquire(state, spec, attempt).await? {
            return Ok(Some(again));
        }
        if let Some(launched) = self.launch(state, &stage, attempt, taken).await? {
            let slot = if flights.is_empty() { None } else { slots.pop() };
            flights.push(self.fly(stage, launched, others, slot));
        }
        Ok(None)
    }

    /// What woke the driver, handled: a stop ends every attempt in flight; a notice is
    /// journaled; an attempt that ended is judged (after the merge check of its layer), or
    /// parked until the earlier stages' attempts in flight have ended.
    async fn woke(
        &mut self,
        state: &mut RunState,
        woke: Woke,
        flights: &mut Vec<Flight<'a>>,
        parked: &mut Vec<Parked<'a>>,
        claims: &mut BTreeMap<StageId, Vec<String>>,
    ) -> Result<(), StoreError> {
        match woke {
            Woke::Stopped(stop) => {
                // Dropping a flight's future ends its process; a parked attempt's end is not
                // journaled, so it runs again on resume.
                parked.clear();
                for flight in flights.drain(..) {
                    if flight.launched.request.agent.is_some() {
                        self.limits.give(&flight.launched.holder, &crate::ports::Used::default()).await;
                    }
                }
                self.stop(state, stop).await?;
            }
            Woke::Notice(i, notice) => {
                let (stage, attempt) = (flights[i].stage.clone(), flights[i].launched.request.attempt);
                self.notice(state, &stage, attempt, notice).await?;
            }
            Woke::Ended(i, execution) => {
                let mut flight = flights.remove(i);
                let (stage_id, attempt) = (flight.stage.clone(), flight.launched.request.attempt);
                for notice in flight.process.left() {
                    self.notice(state, &stage_id, attempt, notice).await?;
                }
                self.used(state, &flight.launched.request, &flight.launched.holder, &execution).await;
                parked.push(Parked { flight, execution });
                // Each attempt whose earlier stages have no attempt in flight lands, in the
                // pipeline's order.
                while let Some(j) = self.next_to_land(flights, parked) {
                    let Parked { flight, execution } = parked.remove(j);
                    self.land(state, flight, execution, flights, parked, claims).await?;
                }
            }
            Woke::Renew => {
                for flight in flights.iter().filter(|f| f.launched.request.agent.is_some()) {
                    self.limits.renew(&flight.launched.holder).await;
                }
            }
            Woke::Timer => {}
        }
        Ok(())
    }

    /// The parked attempt that may land now, first in the pipeline's order: one that failed,
    /// or one no attempt of an earlier stage with a layer of its own is still in flight before.
    fn next_to_land(&self, flights: &[Flight<'a>], parked: &[Parked<'a>]) -> Option<usize> {
        let index = |stage: &StageId| self.pipeline.index_of(stage.as_str()).unwrap_or(usize::MAX);
        parked
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                let writes =
                    p.flight.launched.request.confine.layer.is_some() && p.execution.outcome == ExecOutcome::Exited(0);
                !writes
                    || !flights
                        .iter()
                        .any(|f| f.launched.request.confine.layer.is_some() && index(&f.stage) < index(&p.flight.stage))
            })
            .min_by_key(|(_, p)| index(&p.flight.stage))
            .map(|(j, _)| j)
    }

    /// An attempt that ended, judged: its layer checked against what other stages brought
    /// meanwhile, then finished like any attempt.
    async fn land(
        &mut self,
        state: &mut RunState,
        mut flight: Flight<'a>,
        execution: Execution,
        flights: &mut [Flight<'a>],
        parked: &mut [Parked<'a>],
        claims: &mut BTreeMap<StageId, Vec<String>>,
    ) -> Result<(), StoreError> {
        let execution = self.merged(state, &flight, execution, flights, parked, claims);
        let stage = self.pipeline.stage(flight.stage.as_str()).expect("a pipeline stage");
        let snapshot = flight.launched.snapshot.take();
        self.finish(state, stage, &flight.launched.request, &execution, snapshot).await
    }

    /// The steps the state machine names now, the stages in flight aside, with only the
    /// attempts that may start beside them (their sharing, `max_parallel`, the worker's free
    /// slots: each beyond the run's first in flight takes one, returned with the steps, and
    /// whether one was held back for want of a slot).
    fn ready(
        &self,
        state: &RunState,
        flights: &[Flight<'a>],
        parked: &[Parked<'a>],
    ) -> (Vec<Step>, Vec<crate::ports::Slot>, bool) {
        let busy: BTreeSet<StageId> =
            flights.iter().map(|f| &f.stage).chain(parked.iter().map(|p| &p.flight.stage)).cloned().collect();
        // Who holds the workspace: every stage started and not done (in flight, or between
        // its attempts, or in its closed loop's checks).
        let mut held: Vec<Share> = state
            .stages
            .iter()
            .filter(|s| !s.status.is_done() && s.status != StageStatus::Pending)
            .filter_map(|s| self.pipeline.stage(s.id.as_str()))
            .map(|s| self.share(state, s))
            .collect();
        let mut room = self.pipeline.max_parallel.saturating_sub(flights.len());
        let mut slots = Vec::new();
        let mut first = flights.is_empty();
        let mut short = false;
        let mut admit = |stage: &Stage| {
            let started = state.stage(stage.id.as_str()).is_some_and(|s| s.status != StageStatus::Pending);
            let share = self.share(state, stage);
            // A stage between its attempts holds its place already: it is not counted twice.
            let others = held.len() - usize::from(started && held.contains(&share));
            let fits = others == 0 || (share != Share::Alone && held.iter().all(|h| *h == share));
            if room == 0 || !fits {
                return false;
            }
            if !std::mem::take(&mut first) {
                match self.slots.try_take() {
                    Some(slot) => slots.push(slot),
                    None => {
                        short = true;
                        return false;
                    }
                }
            }
            room -= 1;
            if !started {
                held.push(share);
            }
            true
        };
        let steps = next_steps(self.pipeline, state, self.clock.now(), &busy, &mut admit);
        (steps, slots, short)
    }

    /// How an attempt of `stage` would share the workspace.
    fn share(&self, state: &RunState, stage: &Stage) -> Share {
        if stage.candidates.is_some() {
            return Share::Alone;
        }
        if stage.mode == Mode::Plan {
            return Share::Reads;
        }
        let http = super::agent_now(self.pipeline, state, stage).is_some_and(|a| a.runner.is_http());
        if self.confinement(state, stage).sandbox && self.changes.confined() && !http {
            Share::Layered
        } else {
            Share::Alone
        }
    }

    /// A launched attempt's process, in flight.
    fn fly(
        &self,
        stage: StageId,
        launched: Launched,
        others: BTreeSet<String>,
        slot: Option<crate::ports::Slot>,
    ) -> Flight<'a> {
        let base = launched.request.confine.layer.as_ref().and_then(|_| self.changes.layer_base());
        let process = Process::start(self.runner, &launched.request);
        Flight { stage, launched, process, others, _slot: slot, base }
    }

    /// An attempt that ended well in its layer: failed as a merge conflict when it changed the
    /// same lines of a file (any part, outside a repository) as another stage's attempt brought
    /// into the workspace since its layer was made, else its files are claimed against the
    /// layers still in flight.
    fn merged(
        &self,
        state: &RunState,
        flight: &Flight<'a>,
        execution: Execution,
        flights: &mut [Flight<'a>],
        parked: &mut [Parked<'a>],
        claims: &mut BTreeMap<StageId, Vec<String>>,
    ) -> Execution {
        let Some(layer) = &flight.launched.request.confine.layer else { return execution };
        if execution.outcome != ExecOutcome::Exited(0) {
            return execution;
        }
        let changed: Vec<String> = self
            .changes
            .layer_changed(&state.run_id, layer)
            .map(|c| c.paths().into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
        // A file another stage changed meanwhile is merged line by line where the workspace is
        // a repository; only the same lines changed on both sides are a conflict.
        let clashes: Vec<&String> = changed
            .iter()
            .filter(|p| flight.others.contains(*p))
            .filter(|p| {
                let merged = flight.base.as_ref().map(|b| self.changes.merge_into_layer(&state.run_id, layer, p, b));
                !matches!(merged, Some(Ok(true)))
            })
            .collect();
        if clashes.is_empty() {
            for other in flights.iter_mut().chain(parked.iter_mut().map(|p| &mut p.flight)) {
                other.others.extend(changed.iter().cloned());
            }
            claims.insert(flight.stage.clone(), changed);
            return execution;
        }
        let mut said: String = clashes.iter().map(|p| format!("CONFLICT (content): Merge conflict in {p}\n")).collect();
        said.push_str(&format!(
            "stage `{}` changed the same lines of {} as an earlier stage running at the same time; its changes were not applied\n",
            flight.stage,
            clashes.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
        ));
        Execution { outcome: ExecOutcome::Exited(1), stderr: format!("{}{said}", execution.stderr), ..execution }
    }
}

/// True for the attempt of a stage with `candidates:`.
fn is_candidates(pipeline: &loopwright_spec::Pipeline, step: &Step) -> bool {
    matches!(step, Step::Execute { stage, .. } if pipeline.stage(stage.as_str()).is_some_and(|s| s.candidates.is_some()))
}

/// True for a step that may be taken while attempts are in flight: one about a stage
/// (journaling a decision, the closed loop's checks), never the run's end.
fn between(step: &Step) -> bool {
    match step {
        Step::Record(event) => event.stage().is_some() && event.run_status().is_none_or(|s| !s.is_final()),
        Step::Baseline { .. } | Step::Evaluate { .. } | Step::Analyze { .. } | Step::Fix { .. } => true,
        _ => false,
    }
}
