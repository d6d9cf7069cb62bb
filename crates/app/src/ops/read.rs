//! Reading runs back: one run's state and result, the recent runs, the journal, a stage's
//! attempts.

use std::path::Path;

use loopwright_engine::ports::RunSummary;
use loopwright_engine::result::PipelineResult;
use loopwright_engine::{EventRecord, RunId, RunState, RunStatus, Store};
use loopwright_spec::Pipeline;
use loopwright_store::Journal;
use serde::Serialize;

use crate::error::Error;
use crate::ownership::{shown, shown_status};
use crate::workspace::Workspace;

/// Resolves `latest` or parses a run id.
pub async fn resolve_run(store: &Journal, run: &str) -> Result<RunId, Error> {
    if run == "latest" {
        return store
            .runs(1)
            .await?
            .into_iter()
            .next()
            .map(|r| r.run_id)
            .ok_or_else(|| Error::not_found("no runs yet in this workspace"));
    }
    RunId::parse(run).ok_or_else(|| Error::no_run(run))
}

/// A run's state from its journal, and its pipeline as it was when the run started.
pub async fn load_run(ws: &Workspace, store: &Journal, run: &RunId) -> Result<(Pipeline, RunState), Error> {
    let (pipeline, state, _) = load_run_events(ws, store, run).await?;
    Ok((pipeline, state))
}

/// [`load_run`], with the journal it was folded from.
pub async fn load_run_events(
    ws: &Workspace,
    store: &Journal,
    run: &RunId,
) -> Result<(Pipeline, RunState, Vec<EventRecord>), Error> {
    let events = store.events(run).await?;
    let state = RunState::replay(run.clone(), &events);
    let started = state.started.as_ref().ok_or_else(|| Error::no_run(run))?;
    let inputs: Vec<String> = started.inputs.keys().cloned().collect();
    let pipeline = ws.compile_text(Path::new(&started.pipeline_path), started.pipeline_source.clone(), &inputs)?;
    Ok((pipeline, state, events))
}

/// A run's state from its journal, with the status shown to people (`interrupted` when its
/// owner died).
pub async fn state(store: &Journal, run: &RunId) -> Result<RunState, Error> {
    shown_to_people(RunState::replay(run.clone(), &store.events(run).await?))
}

/// A folded state as [`state`] returns it: a run that never started is not found, and the
/// status is the one shown to people.
fn shown_to_people(mut state: RunState) -> Result<RunState, Error> {
    if state.started.is_none() {
        return Err(Error::no_run(&state.run_id));
    }
    state.status = shown_status(&state);
    Ok(state)
}

/// Runs' states as folded so far, kept between reads by a long-lived process (the daemon): a
/// read folds only the events appended since the last one — a journal only grows — so
/// following a long run costs its new events per read, not its whole journal. Holds the
/// `capacity` runs read most recently.
pub struct Folds {
    capacity: usize,
    states: std::sync::Mutex<Folded>,
}

/// Run → (its state as folded, when it was last read), and the read clock.
type Folded = (std::collections::HashMap<RunId, (RunState, u64)>, u64);

impl Folds {
    /// A cache of at most `capacity` runs.
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), states: std::sync::Mutex::default() }
    }

    /// What [`state`] returns, folding only what was appended since this run was last read.
    pub async fn state(&self, store: &Journal, run: &RunId) -> Result<RunState, Error> {
        let cached = self.lock().0.get(run).map(|(state, _)| state.clone());
        let mut state = cached.unwrap_or_else(|| RunState::new(run.clone()));
        for record in store.events_since(run, state.last_seq).await? {
            state.apply(&record);
        }
        if state.started.is_none() {
            return Err(Error::no_run(run));
        }
        {
            let mut guard = self.lock();
            let (states, clock) = &mut *guard;
            *clock += 1;
            states.insert(run.clone(), (state.clone(), *clock));
            if states.len() > self.capacity
                && let Some(oldest) = states.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone())
            {
                states.remove(&oldest);
            }
        }
        shown_to_people(state)
    }

    /// What [`status`] returns, through [`Folds::state`].
    pub async fn status(&self, store: &Journal, run: &RunId) -> Result<(PipelineResult, RunState), Error> {
        let state = self.state(store, run).await?;
        Ok((PipelineResult::from_state(&state), state))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Folded> {
        self.states.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `status RUN`: the §2 result of a run.
pub async fn status(store: &Journal, run: &RunId) -> Result<(PipelineResult, RunState), Error> {
    let state = state(store, run).await?;
    Ok((PipelineResult::from_state(&state), state))
}

/// Which runs `list` returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only runs in this status.
    pub status: Option<RunStatus>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// At most this many (after filtering).
    pub limit: usize,
}

/// `status` without a run: the recent runs, newest first, with the status shown to people.
pub async fn list(store: &Journal, filter: &ListFilter) -> Result<Vec<RunSummary>, Error> {
    // A run recorded as running whose owner died shows as interrupted (the runs table names
    // the owner, so no journal is read); the filter applies to the status shown.
    let scan = if filter.status.is_some() || filter.pipeline.is_some() { 10_000 } else { filter.limit };
    let mut runs = store.runs(scan).await?;
    for r in &mut runs {
        r.status = shown(r.status, r.owner.as_ref());
    }
    runs.retain(|r| {
        filter.status.is_none_or(|s| r.status == s) && filter.pipeline.as_ref().is_none_or(|p| &r.pipeline == p)
    });
    runs.truncate(filter.limit);
    Ok(runs)
}

/// Which page of runs to show: [`ListFilter`]'s filters, and search.
#[derive(Debug, Clone, Default)]
pub struct PageFilter {
    /// Only runs in this status (as shown to people).
    pub status: Option<RunStatus>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// Only runs whose task text, task id or run id contains this.
    pub text: Option<String>,
    /// Only runs this person acted on.
    pub person: Option<String>,
    /// Only runs created at or after this.
    pub since: Option<jiff::Timestamp>,
    /// Only runs created before this.
    pub until: Option<jiff::Timestamp>,
    /// Skip this many.
    pub offset: usize,
    /// At most this many.
    pub limit: usize,
}

/// A page of runs, waiting ones first, then newest first, with the status shown to people
/// and the count of all the filter selects.
pub async fn page(store: &Journal, filter: &PageFilter) -> Result<loopwright_engine::RunPage, Error> {
    use loopwright_engine::{RunPage, RunQuery};
    let query = RunQuery {
        statuses: Vec::new(),
        pipeline: filter.pipeline.clone(),
        text: filter.text.clone(),
        person: filter.person.clone(),
        since: filter.since,
        until: filter.until,
        waiting_first: true,
        offset: filter.offset,
        limit: filter.limit,
    };
    match filter.status {
        // Whether a run recorded as running still is depends on its owner being alive: the
        // runs recorded running (few: as many as processes drive) are sorted out here.
        Some(wanted @ (RunStatus::Running | RunStatus::Interrupted)) => {
            let statuses = if wanted == RunStatus::Running {
                vec![RunStatus::Running]
            } else {
                vec![RunStatus::Running, RunStatus::Interrupted]
            };
            let all = RunQuery { statuses, offset: 0, limit: usize::MAX >> 1, ..query };
            let mut runs = store.runs_page(&all).await?.runs;
            for r in &mut runs {
                r.status = shown(r.status, r.owner.as_ref());
            }
            runs.retain(|r| r.status == wanted);
            let total = runs.len() as u64;
            Ok(RunPage { runs: runs.into_iter().skip(filter.offset).take(filter.limit).collect(), total })
        }
        status => {
            let mut page = store.runs_page(&RunQuery { statuses: status.into_iter().collect(), ..query }).await?;
            for r in &mut page.runs {
                r.status = shown(r.status, r.owner.as_ref());
            }
            Ok(page)
        }
    }
}

/// Orders runs as the API and the dashboard list them: those waiting for a person first, each
/// group as [`list`] gave it (newest first).
pub fn waiting_first(runs: &mut [RunSummary]) {
    runs.sort_by_key(|r| r.status != RunStatus::Waiting);
}

/// The journal of a run after `after` (0 for all of it); an unknown run is not found.
pub async fn events(store: &Journal, run: &RunId, after: u64) -> Result<Vec<EventRecord>, Error> {
    let events = store.events_since(run, after).await?;
    if events.is_empty() {
        // Nothing new, or no such run: the whole journal says which (not found when empty).
        store.events(run).await?;
    }
    Ok(events)
}

/// One attempt of a stage, as the dashboard and the API show it.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// 1-based.
    pub number: u32,
    /// `running`, `succeeded`, `failed`, or the closed loop's phase it ended in.
    pub status: String,
    /// When it started.
    pub started_at: Option<jiff::Timestamp>,
    /// When it ended.
    pub ended_at: Option<jiff::Timestamp>,
    /// How long it ran.
    pub duration_ms: Option<u64>,
    /// What the agent was told (agent stages keep their prompt per attempt).
    pub prompt: Option<String>,
    /// What it printed on stdout (capped as stored).
    pub output: Option<String>,
    /// What it printed on stderr.
    pub stderr: Option<String>,
    /// Why it failed.
    pub error: Option<loopwright_engine::StageError>,
    /// The `<retry_context>` block of its prompt, when it was a retry.
    pub retry_context: Option<String>,
    /// Tokens and cost.
    pub usage: Option<loopwright_engine::event::Usage>,
    /// The closed loop's phases of this attempt (generated, validated, evaluated, analyzed,
    /// fix_applied, …), as journaled.
    pub phases: Vec<loopwright_engine::Event>,
    /// The agent that made it, when the stage had fallen back from its own agent.
    pub agent: Option<String>,
    /// After it, the agent that took the stage over and why.
    pub fell_back: Option<loopwright_engine::state::FellBack>,
    /// Best of N: its candidates, side by side.
    pub candidates: Vec<Candidate>,
    /// Best of N: why the winner won, or why none did.
    pub chosen: Option<String>,
}

/// A candidate of an attempt (best of N).
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// Which candidate (0-based).
    pub candidate: u32,
    /// Its agent.
    pub agent: String,
    /// What it did, once it ended.
    pub result: Option<loopwright_engine::event::CandidateResult>,
    /// It won.
    pub won: bool,
}

/// A stage's attempts.
pub async fn attempts(ws: &Workspace, store: &Journal, run: &RunId, stage: &str) -> Result<Vec<Attempt>, Error> {
    let (pipeline, state, events) = load_run_events(ws, store, run).await?;
    if pipeline.stage(stage).is_none() {
        return Err(Error::not_found(format!("run {run} has no stage `{stage}`")));
    }
    let of_stage = events_by_stage(&events).remove(stage).unwrap_or_default();
    Ok(attempts_in(&ws.runs_dir().join(run.as_str()), &state, stage, &of_stage))
}

/// A run's events grouped by the stage they concern (events of no stage are left out).
pub fn events_by_stage(events: &[EventRecord]) -> std::collections::HashMap<&str, Vec<&EventRecord>> {
    let mut by_stage: std::collections::HashMap<&str, Vec<&EventRecord>> = std::collections::HashMap::new();
    for r in events {
        if let Some(stage) = r.event.stage() {
            by_stage.entry(stage.as_str()).or_default().push(r);
        }
    }
    by_stage
}

/// The attempts of `stage` of a run already read (its state, the stage's events, its folder
/// `run_dir`): what [`attempts`] returns, for a page that shows every stage without reading
/// the journal once per stage.
pub fn attempts_in(run_dir: &Path, state: &RunState, stage: &str, events: &[&EventRecord]) -> Vec<Attempt> {
    use loopwright_engine::Event;
    let Some(st) = state.stage(stage) else { return Vec::new() };
    let read = |name: String| std::fs::read_to_string(run_dir.join(name)).ok();
    let mut out = Vec::new();
    for number in 1..=st.attempts {
        let (stdout_file, stderr_file) = loopwright_runners::live::output_files(run_dir, stage, number);
        let mut a = Attempt {
            number,
            status: "running".into(),
            started_at: None,
            ended_at: None,
            duration_ms: None,
            prompt: read(format!("prompts/{stage}-{number}.md")),
            output: std::fs::read_to_string(&stdout_file).ok(),
            stderr: std::fs::read_to_string(&stderr_file).ok(),
            error: None,
            retry_context: None,
            usage: None,
            phases: Vec::new(),
            agent: st.attempt_log.iter().find(|a| a.attempt == number).and_then(|a| a.agent.clone()),
            fell_back: st.fell_back.iter().find(|f| f.attempt == number).cloned(),
            candidates: Vec::new(),
            chosen: None,
        };
        a.retry_context = a.prompt.as_deref().and_then(retry_context);
        for r in events {
            match &r.event {
                Event::AttemptStarted { attempt, .. } if *attempt == number => a.started_at = Some(r.at),
                Event::AttemptSucceeded { attempt, duration_ms, .. } if *attempt == number => {
                    (a.status, a.ended_at, a.duration_ms) = ("succeeded".into(), Some(r.at), Some(*duration_ms));
                }
                Event::AttemptFailed { attempt, duration_ms, error, .. } if *attempt == number => {
                    (a.status, a.ended_at, a.duration_ms) = ("failed".into(), Some(r.at), Some(*duration_ms));
                    a.error = Some(error.clone());
                }
                Event::UsageRecorded { attempt, usage, .. } if *attempt == number => {
                    a.usage = Some(usage.clone());
                }
                Event::CandidateStarted { attempt, candidate, agent, .. } if *attempt == number => {
                    a.candidates.retain(|c| c.candidate != *candidate);
                    let entry = Candidate { candidate: *candidate, agent: agent.clone(), result: None, won: false };
                    a.candidates.push(entry);
                    a.candidates.sort_by_key(|c| c.candidate);
                }
                Event::CandidateEnded { attempt, candidate, result, .. } if *attempt == number => {
                    if let Some(c) = a.candidates.iter_mut().find(|c| c.candidate == *candidate) {
                        c.result = Some(result.clone());
                    }
                }
                Event::CandidateChosen { attempt, winner, why, .. } if *attempt == number => {
                    for c in &mut a.candidates {
                        c.won = Some(c.candidate) == *winner;
                    }
                    a.chosen = Some(why.clone());
                }
                Event::Generated { attempt, .. }
                | Event::Validated { attempt, .. }
                | Event::Evaluated { attempt, .. }
                | Event::RegressionChecked { attempt, .. }
                | Event::Analyzed { attempt, .. }
                | Event::FixApplied { attempt, .. }
                | Event::LoopEscalated { attempt, .. }
                | Event::DeadLettered { attempt, .. }
                    if *attempt == number =>
                {
                    a.ended_at = Some(r.at);
                    a.status = r.event.kind().to_owned();
                    a.phases.push(r.event.clone());
                }
                _ => {}
            }
        }
        // A closed-loop attempt ends in a phase (its fix, its analysis), not in an attempt's
        // end, and a failed one may be journaled with no time: its span is what it took.
        if let (Some(start), Some(end)) = (a.started_at, a.ended_at)
            && a.duration_ms.is_none_or(|d| d == 0)
        {
            a.duration_ms = Some(u64::try_from(end.duration_since(start).as_millis()).unwrap_or(0));
        }
        out.push(a);
    }
    out
}

/// The `<retry_context>…</retry_context>` block of a prompt.
fn retry_context(prompt: &str) -> Option<String> {
    let start = prompt.find("<retry_context>")?;
    let end = prompt[start..].find("</retry_context>")? + start + "</retry_context>".len();
    Some(prompt[start..end].to_owned())
}

/// The escalation a run waits on, as seed 001 words it for a person: (stage, the report).
pub fn escalation_report(state: &RunState) -> Option<(loopwright_spec::StageId, String)> {
    let stage = state.waiting_for_escalation()?;
    let lp = stage.closed.as_deref()?;
    let started = state.started.as_ref()?;
    let reason = lp.escalation.as_deref()?;
    let message = loopwright_engine::closed_loop::context::escalation_message(
        state.run_id.as_str(),
        &started.task,
        started.task_id.as_str(),
        stage.id.as_str(),
        lp,
        reason,
    );
    Some((stage.id.clone(), message))
}

/// What a person did to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonAction {
    /// Approved a gate.
    Approved,
    /// Rejected a gate.
    Rejected,
    /// Answered an escalation.
    Answered,
    /// Asked for the run to be cancelled.
    Cancelled,
    /// Started the run.
    Started,
    /// Started the run as a re-run of another (or a retry from a stage).
    Reran,
    /// Asked for the interrupted run to be resumed.
    Resumed,
}

impl PersonAction {
    /// As a verb in a sentence.
    pub fn verb(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Answered => "answered",
            Self::Cancelled => "cancelled the run",
            Self::Started => "started the run",
            Self::Reran => "re-ran",
            Self::Resumed => "resumed the run",
        }
    }
}

/// Who answered a run, when, what and with which words: the run page's "Answers".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PersonAnswer {
    /// When.
    pub at: jiff::Timestamp,
    /// Who.
    pub by: String,
    /// What.
    pub action: PersonAction,
    /// The stage it was about.
    pub stage: Option<String>,
    /// The answer in words (an escalation's choice, a rollback asked for).
    pub detail: Option<String>,
    /// Their comment or guidance.
    pub comment: Option<String>,
    /// Where an answer to a gate or an escalation came from, when kept.
    pub via: Option<loopwright_engine::event::Via>,
}

/// Every answer people gave a run, in order, from its journal.
pub fn answers(events: &[EventRecord]) -> Vec<PersonAnswer> {
    use loopwright_engine::Event;
    use loopwright_engine::event::Answer;
    events
        .iter()
        .filter_map(|r| {
            let at = r.at;
            let one = |by: &str, action, stage: Option<&str>, detail: Option<String>, comment: Option<&String>| {
                PersonAnswer {
                    at,
                    by: by.to_owned(),
                    action,
                    stage: stage.map(str::to_owned),
                    detail,
                    comment: comment.cloned(),
                    via: None,
                }
            };
            let via = match &r.event {
                Event::ApprovalGranted { via, .. }
                | Event::ApprovalRejected { via, .. }
                | Event::EscalationAnswered { via, .. } => *via,
                _ => None,
            };
            let answer = match &r.event {
                Event::ApprovalGranted { stage, by, comment, .. } => {
                    Some(one(by, PersonAction::Approved, Some(stage.as_str()), None, comment.as_ref()))
                }
                Event::ApprovalRejected { stage, by, comment, rollback, .. } => Some(one(
                    by,
                    PersonAction::Rejected,
                    Some(stage.as_str()),
                    rollback.then(|| "and rolled back".to_owned()),
                    comment.as_ref(),
                )),
                Event::EscalationAnswered { stage, answer, by, .. } => {
                    let (detail, guidance) = match answer {
                        Answer::Retry => ("retry", None),
                        Answer::Fix { text } => ("fix", Some(text)),
                        Answer::Skip => ("skip the stage", None),
                        Answer::Abort => ("abort the run", None),
                    };
                    Some(one(by, PersonAction::Answered, Some(stage.as_str()), Some(detail.to_owned()), guidance))
                }
                Event::CancelRequested { by, rollback } => Some(one(
                    by,
                    PersonAction::Cancelled,
                    None,
                    rollback.then(|| "and asked for a rollback".to_owned()),
                    None,
                )),
                Event::RunStarted(started) => {
                    let by = started.by.as_deref()?;
                    Some(match &started.rerun_of {
                        Some(earlier) => one(
                            by,
                            PersonAction::Reran,
                            None,
                            Some(match &started.start_from {
                                Some(from) => format!("run {earlier} from stage {from}"),
                                None => format!("run {earlier}"),
                            }),
                            None,
                        ),
                        None => one(by, PersonAction::Started, None, None, None),
                    })
                }
                Event::RunResumed { by: Some(by), .. } => Some(one(by, PersonAction::Resumed, None, None, None)),
                _ => None,
            };
            answer.map(|a| PersonAnswer { via, ..a })
        })
        .collect()
}

/// What the run has committed so far (its agent-mode stages' commits), as `git show` prints
/// them with their stat and patch, at most `max_lines` lines; `None` when it committed
/// nothing or git cannot tell.
pub fn run_diff(state: &RunState, max_lines: usize) -> Option<String> {
    let root = std::path::PathBuf::from(&state.started.as_ref()?.workspace);
    let commits: Vec<&str> = state
        .stages
        .iter()
        .flat_map(|s| s.commits.iter().map(String::as_str))
        .filter(|c| (7..=64).contains(&c.len()) && c.chars().all(|ch| ch.is_ascii_hexdigit()))
        .collect();
    if commits.is_empty() {
        return None;
    }
    let mut args = vec!["show", "--no-color", "--no-ext-diff", "--format=commit %h %s", "--stat", "-p"];
    args.extend(commits);
    let text = loopwright_runners::git::git(&root, &args).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let mut shown = lines[..lines.len().min(max_lines)].join("\n");
    if lines.len() > max_lines {
        shown.push_str(&format!(
            "\n… {} more lines (the whole change is in the workspace's history)",
            lines.len() - max_lines
        ));
    }
    Some(shown)
}
