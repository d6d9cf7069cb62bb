//! The doubles: real implementations of the ports, kept in memory and scripted.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use loopwright_engine::ports::{CommandRequest, ExecOutcome, Execution, Notice, ProcessGroup, StageRequest};
use loopwright_engine::{Clock, Runner};
use loopwright_journal::event::RollbackStatus;
use loopwright_journal::{
    Event, EventRecord, FeedEntry, Outputs, Owner, RunId, RunPage, RunQuery, RunStatus, RunSummary, Store, StoreError,
    TaskId,
};
use loopwright_spec::StageId;
use loopwright_spec::pipeline::RollbackStrategy;
use tokio::sync::mpsc::UnboundedSender;

/// One run as the memory store keeps it.
#[derive(Debug, Clone)]
struct Journal {
    pipeline: String,
    task: TaskId,
    status: RunStatus,
    created_at: jiff::Timestamp,
    owner: Option<Owner>,
    events: Vec<EventRecord>,
    /// The latest value of each output, by stage (what SQLite's `artifacts` table holds).
    artifacts: BTreeMap<StageId, Outputs>,
}

/// Every run, and the feed across them.
#[derive(Debug, Clone, Default)]
struct Memory {
    runs: BTreeMap<RunId, Journal>,
    feed: Vec<(RunId, u64)>,
}

impl Memory {
    /// Applies one event the way the SQLite store does in its transaction.
    fn append(&mut self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError> {
        let journal = match (self.runs.get_mut(run), event) {
            (None, Event::RunStarted(started)) => self.runs.entry(run.clone()).or_insert(Journal {
                pipeline: started.pipeline.clone(),
                task: started.task_id.clone(),
                status: RunStatus::Running,
                created_at: at,
                owner: started.owner.clone(),
                events: Vec::new(),
                artifacts: BTreeMap::new(),
            }),
            (None, _) => return Err(StoreError::RunNotFound(run.clone())),
            (Some(_), Event::RunStarted(_)) => return Err(StoreError::Exists(run.clone())),
            (Some(journal), _) => journal,
        };
        let record = EventRecord { seq: journal.events.len() as u64 + 1, at, event: event.clone() };
        if let Some(status) = event.run_status() {
            journal.status = status;
        }
        if let Event::RunResumed { owner, .. } = event {
            journal.owner = Some(owner.clone());
        }
        match event {
            Event::StageRolledBack {
                stage,
                strategy: RollbackStrategy::MemoryCleanup,
                status: RollbackStatus::Success,
                ..
            } => {
                journal.artifacts.remove(stage);
            }
            Event::AttemptSucceeded { stage, outputs, .. } => {
                journal.artifacts.entry(stage.clone()).or_default().extend(outputs.clone());
            }
            _ => {}
        }
        journal.events.push(record.clone());
        self.feed.push((run.clone(), record.seq));
        Ok(record)
    }

    fn summary(run: &RunId, j: &Journal) -> RunSummary {
        RunSummary {
            run_id: run.clone(),
            pipeline: j.pipeline.clone(),
            task_id: j.task.clone(),
            status: j.status,
            created_at: j.created_at,
            updated_at: j.events.last().map_or(j.created_at, |r| r.at),
            task: j
                .events
                .iter()
                .find_map(|r| match &r.event {
                    Event::RunStarted(started) => Some(started.task.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
            running_at: j.events.iter().find(|r| r.event.is_work()).map(|r| r.at),
            people: j.events.iter().filter_map(|r| r.event.person()).fold(Vec::new(), |mut people, p| {
                if !people.iter().any(|q| q == p) {
                    people.push(p.to_owned());
                }
                people
            }),
            owner: j.owner.clone(),
            pull_request: j.events.iter().rev().find_map(|r| match &r.event {
                Event::Delivered(d) => {
                    Some(loopwright_journal::store::PullRequestRef { number: d.number, url: d.url.clone() })
                }
                _ => None,
            }),
        }
    }

    /// Runs newest first (by creation, then id, as SQLite orders them).
    fn newest_first(&self) -> Vec<RunSummary> {
        let mut all: Vec<RunSummary> = self.runs.iter().map(|(id, j)| Self::summary(id, j)).collect();
        all.sort_by(|a, b| (b.created_at, &b.run_id).cmp(&(a.created_at, &a.run_id)));
        all
    }
}

/// A journal in memory. Batches are all-or-nothing (it works on a copy and keeps it only
/// when every event was accepted), so it behaves as the SQLite store's transactions do.
#[derive(Debug, Default)]
pub struct MemoryStore {
    memory: RefCell<Memory>,
}

impl MemoryStore {
    /// Every event of every run, in commit order.
    pub fn all_events(&self) -> Vec<EventRecord> {
        let memory = self.memory.borrow();
        memory.feed.iter().map(|(run, seq)| memory.runs[run].events[*seq as usize - 1].clone()).collect()
    }

    fn batch(
        &self,
        run: &RunId,
        expected_last: Option<u64>,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut copy = self.memory.borrow().clone();
        if let Some(expected) = expected_last {
            let found = copy.runs.get(run).ok_or_else(|| StoreError::RunNotFound(run.clone()))?.events.len() as u64;
            if found != expected {
                return Err(StoreError::Conflict { run: run.clone(), expected, found });
            }
        }
        let records = events.iter().map(|(e, at)| copy.append(run, e, *at)).collect::<Result<Vec<_>, _>>()?;
        *self.memory.borrow_mut() = copy;
        Ok(records)
    }
}

impl Store for MemoryStore {
    async fn append(&self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError> {
        let mut records = self.batch(run, None, &[(event.clone(), at)])?;
        records.pop().ok_or_else(|| StoreError::Backend("no event appended".into()))
    }

    async fn append_all(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.batch(run, None, events)
    }

    async fn append_after(
        &self,
        run: &RunId,
        expected_last: u64,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.batch(run, Some(expected_last), events)
    }

    async fn events_since(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        let memory = self.memory.borrow();
        Ok(memory.runs.get(run).map_or_else(Vec::new, |j| j.events.iter().filter(|r| r.seq > after).cloned().collect()))
    }

    async fn events(&self, run: &RunId) -> Result<Vec<EventRecord>, StoreError> {
        let memory = self.memory.borrow();
        memory.runs.get(run).map(|j| j.events.clone()).ok_or_else(|| StoreError::RunNotFound(run.clone()))
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        Ok(self.memory.borrow().newest_first().into_iter().take(limit).collect())
    }

    async fn task_outputs(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError> {
        // Oldest run first: a later run's outputs of a stage replace an earlier run's.
        let mut runs = self.memory.borrow().newest_first();
        runs.reverse();
        let memory = self.memory.borrow();
        let mut latest = BTreeMap::new();
        for summary in runs.iter().filter(|r| r.task_id == *task) {
            for (stage, outputs) in &memory.runs[&summary.run_id].artifacts {
                latest.insert(stage.clone(), outputs.clone());
            }
        }
        Ok(latest)
    }

    async fn cancel_requested(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError> {
        let memory = self.memory.borrow();
        let events = memory.runs.get(run).map_or(&[][..], |j| &j.events[..]);
        Ok(events.iter().filter(|r| r.seq > after).find_map(|r| match &r.event {
            Event::CancelRequested { by, rollback } => Some((by.clone(), *rollback)),
            _ => None,
        }))
    }

    async fn runs_in(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError> {
        let mut runs: Vec<RunSummary> =
            self.memory.borrow().newest_first().into_iter().filter(|r| statuses.contains(&r.status)).collect();
        runs.reverse();
        Ok(runs)
    }

    async fn runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let mut runs: Vec<RunSummary> =
            self.memory.borrow().newest_first().into_iter().filter(|r| query.selects(r)).collect();
        if query.waiting_first {
            runs.sort_by_key(|r| r.status != RunStatus::Waiting);
        }
        let total = runs.len() as u64;
        Ok(RunPage { runs: runs.into_iter().skip(query.offset).take(query.limit).collect(), total })
    }

    async fn feed_since(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        let memory = self.memory.borrow();
        let start = usize::try_from(after).unwrap_or(usize::MAX).min(memory.feed.len());
        Ok(memory.feed[start..]
            .iter()
            .take(limit)
            .zip(after + 1..)
            .map(|((run, seq), position)| FeedEntry {
                position,
                run: run.clone(),
                record: memory.runs[run].events[*seq as usize - 1].clone(),
            })
            .collect())
    }

    async fn feed_last(&self) -> Result<u64, StoreError> {
        Ok(self.memory.borrow().feed.len() as u64)
    }

    /// Nobody else writes to memory: it moves with every commit (a superset of what the
    /// trait promises, which is all a watcher needs).
    async fn data_version(&self) -> Result<u64, StoreError> {
        Ok(self.memory.borrow().feed.len() as u64)
    }
}

/// Plays outcomes in order (`(outcome, stdout)`; success with no output when the script is
/// empty) and records what it was asked to run.
#[derive(Debug, Default)]
pub struct ScriptedRunner {
    /// What the next attempts return, in order.
    pub script: RefCell<VecDeque<(ExecOutcome, &'static str)>>,
    /// `(stage, attempt)` of every attempt run, in order.
    pub calls: RefCell<Vec<(String, u32)>>,
    /// The process groups the engine asked it to end.
    pub ended: RefCell<Vec<ProcessGroup>>,
    /// Why each attempt's agent cannot go on, in order (none when empty).
    pub unfixable: RefCell<VecDeque<Option<loopwright_engine::event::Unfixable>>>,
    /// The agent of every attempt run, in order (`None`: a shell stage).
    pub agents: RefCell<Vec<Option<String>>>,
}

impl Runner for ScriptedRunner {
    async fn run(&self, request: &StageRequest, notices: UnboundedSender<Notice>) -> Execution {
        self.calls.borrow_mut().push((request.stage.to_string(), request.attempt));
        self.agents.borrow_mut().push(request.agent.as_ref().map(|a| a.name.clone()));
        let group = ProcessGroup { pgid: 100 + request.attempt as i32, start_time: None, host: None };
        let _ = notices.send(Notice::ProcessStarted { group, command: "x".into() });
        let (outcome, stdout) = self.script.borrow_mut().pop_front().unwrap_or((ExecOutcome::Exited(0), ""));
        Execution {
            outcome,
            stdout: stdout.into(),
            stderr: String::new(),
            duration: Duration::from_millis(10),
            usage: None,
            unfixable: self.unfixable.borrow_mut().pop_front().flatten(),
        }
    }

    fn end_leftovers(&self, groups: &[ProcessGroup]) {
        self.ended.borrow_mut().extend_from_slice(groups);
    }

    async fn command(&self, request: &CommandRequest<'_>) -> Execution {
        let why = format!("the scripted runner runs no commands ({})", request.command);
        Execution {
            outcome: ExecOutcome::SpawnFailed(why),
            stdout: String::new(),
            stderr: String::new(),
            duration: Duration::ZERO,
            usage: None,
            unfixable: None,
        }
    }
}

/// A clock that stands still except when the engine waits: a wait moves it to the deadline
/// and is recorded (in milliseconds) instead of slept.
#[derive(Debug)]
pub struct FakeClock {
    /// The time it shows.
    pub now: RefCell<jiff::Timestamp>,
    /// Every wait asked for, in milliseconds.
    pub waits: RefCell<Vec<u64>>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self {
            now: RefCell::new("2026-01-01T00:00:00Z".parse().expect("a valid timestamp")),
            waits: RefCell::default(),
        }
    }
}

impl Clock for FakeClock {
    fn now(&self) -> jiff::Timestamp {
        *self.now.borrow()
    }

    async fn sleep_until(&self, t: jiff::Timestamp) {
        let now = *self.now.borrow();
        self.waits.borrow_mut().push(u64::try_from(t.duration_since(now).as_millis()).unwrap_or(0));
        *self.now.borrow_mut() = t;
    }
}
