//! The journal's port: a durable, append-only log of events per run, with compare-and-append
//! for every decision made on what was read, and one feed across runs for whoever watches
//! them all (the daemon's event stream, `logs --follow`). Backends: `loopwright-store`
//! (SQLite), the in-memory double of `loopwright-testkit`.

use std::collections::BTreeMap;

use loopwright_spec::StageId;

use crate::event::{Event, EventRecord, Outputs, RunStatus};
use crate::ids::{RunId, TaskId};

/// A failure of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No run has this id.
    #[error("no run `{0}` in the store")]
    RunNotFound(RunId),
    /// A run with this id exists already.
    #[error("run `{0}` already exists")]
    Exists(RunId),
    /// Another writer appended to the run after the caller read it (compare-and-append): the
    /// caller's decision was made on a journal that is no longer the latest.
    #[error("run `{run}` moved on while this answer was made: its journal ended at event {expected}, now at {found}")]
    Conflict {
        /// The run.
        run: RunId,
        /// The last event the caller had read.
        expected: u64,
        /// The last event in the journal.
        found: u64,
    },
    /// The writer drives the run under a lease that another worker has taken over since (its
    /// lease expired): its writes are refused, and it must end what it started for the run.
    #[error("run `{run}` is no longer this worker's: its lease (epoch {epoch}) was taken over{}", holder.as_ref().map(|h| format!(" by {h}")).unwrap_or_default())]
    Fenced {
        /// The run.
        run: RunId,
        /// The epoch of the lease the writer held.
        epoch: crate::ids::LeaseEpoch,
        /// Who holds the run's lease now, if anyone.
        holder: Option<String>,
    },
    /// The store is locked by another process for longer than it waits.
    #[error("the store is busy (another process holds it): {0}")]
    Busy(String),
    /// What the store holds cannot be read back (a damaged file, an event this version does
    /// not know).
    #[error("the store is damaged: {0}")]
    Corrupt(String),
    /// Any other failure of the backend (I/O, a full disk).
    #[error("store: {0}")]
    Backend(String),
}

impl StoreError {
    /// True when trying again later may succeed (the lock was held, or the journal moved on
    /// and the caller can read it again and decide anew).
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Conflict { .. })
    }
}

/// One line of the runs table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// Its pipeline.
    pub pipeline: String,
    /// Its task.
    pub task_id: TaskId,
    /// Its status.
    pub status: RunStatus,
    /// When it was created.
    pub created_at: jiff::Timestamp,
    /// When its last event was recorded.
    pub updated_at: jiff::Timestamp,
    /// What it was asked to achieve.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task: String,
    /// When it left the queue and began to work (none while it waits in the queue, or when
    /// it was cancelled there): the time before it is queued time, not work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at: Option<jiff::Timestamp>,
    /// The people who acted on it — started, re-ran, approved, rejected, answered, cancelled
    /// or resumed it — each once, in the order they first did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub people: Vec<String>,
    /// Who drives it (the last owner its journal named: `run_started`, `run_resumed`), so a
    /// list can tell a run whose process died without reading its journal. Not shown.
    #[serde(skip)]
    pub owner: Option<crate::event::Owner>,
    /// The pull request it delivered, for a run from a forge (its latest `delivered`). Not
    /// shown by the API's summaries (the run's result has it).
    #[serde(skip)]
    pub pull_request: Option<PullRequestRef>,
}

/// A pull request a run delivered, as the runs list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestRef {
    /// Its number.
    pub number: u64,
    /// Where a person opens it.
    pub url: String,
}

/// Which runs a page of the runs list shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunQuery {
    /// Only runs whose stored status is one of these (all when empty).
    pub statuses: Vec<RunStatus>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// Only runs whose task text, task id or run id contains this (ignoring ASCII case).
    pub text: Option<String>,
    /// Only runs this person acted on (exactly their name).
    pub person: Option<String>,
    /// Only runs created at or after this.
    pub since: Option<jiff::Timestamp>,
    /// Only runs created before this.
    pub until: Option<jiff::Timestamp>,
    /// Runs waiting for a person before the others (each group newest first).
    pub waiting_first: bool,
    /// Skip this many.
    pub offset: usize,
    /// At most this many.
    pub limit: usize,
}

impl RunQuery {
    /// True when `run` is one the query selects (paging aside): what every store's `WHERE`
    /// means, said once for stores that filter in memory.
    pub fn selects(&self, run: &RunSummary) -> bool {
        let contains = |hay: &str, needle: &str| hay.to_ascii_lowercase().contains(&needle.to_ascii_lowercase());
        (self.statuses.is_empty() || self.statuses.contains(&run.status))
            && self.pipeline.as_ref().is_none_or(|p| &run.pipeline == p)
            && self.text.as_ref().is_none_or(|t| {
                contains(&run.task, t) || contains(run.task_id.as_str(), t) || contains(run.run_id.as_str(), t)
            })
            && self.person.as_ref().is_none_or(|p| run.people.contains(p))
            && self.since.is_none_or(|s| run.created_at >= s)
            && self.until.is_none_or(|u| run.created_at < u)
    }
}

/// A page of the runs list.
#[derive(Debug, Clone, PartialEq)]
pub struct RunPage {
    /// The runs on the page.
    pub runs: Vec<RunSummary>,
    /// How many runs the query selects in all.
    pub total: u64,
}

/// The durable journal. An append is durable when it returns; nothing is reported before.
// The engine runs on one thread; implementations need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Store {
    /// Appends an event to a run's journal in one transaction and returns it as stored.
    /// The first event of a run (`RunStarted`) creates it.
    async fn append(&self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError>;
    /// Appends several events in one transaction: all of them are durable, or none.
    async fn append_all(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError>;
    /// Compare-and-append: appends the events in one transaction only if the run's journal
    /// still ends at event `expected_last` (the last one the caller read), else fails with
    /// [`StoreError::Conflict`] and appends nothing. Every state change that follows a read of
    /// the journal (an answer, a cancel, a resume) goes through it, so of two processes that
    /// read the same journal and decide at once, one succeeds and the other is told.
    async fn append_after(
        &self,
        run: &RunId,
        expected_last: u64,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError>;
    /// A run's events after event `after`, oldest first (empty when there are none).
    async fn events_since(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError>;
    /// A run's whole journal, oldest first.
    async fn events(&self, run: &RunId) -> Result<Vec<EventRecord>, StoreError>;
    /// The most recent runs, newest first.
    async fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError>;
    /// The latest outputs of each stage of a task, over all its runs.
    async fn task_outputs(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError>;
    /// Who asked to cancel the run in a `cancel_requested` event after event `after`, if
    /// anyone, and whether they asked for rollback.
    async fn cancel_requested(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError>;
    /// The runs whose status is one of `statuses`, oldest first.
    async fn runs_in(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError>;
    /// A page of the runs `query` selects, newest first (waiting ones first when asked), with
    /// how many it selects in all.
    async fn runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError>;

    /// Every run's events committed after feed position `after`, in commit order, at most
    /// `limit`. Positions start at 1 and grow by one with every event of any run, so a watcher
    /// that remembers the last position it saw misses nothing and sees nothing twice.
    async fn feed_since(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError>;
    /// The last feed position (0 for an empty journal).
    async fn feed_last(&self) -> Result<u64, StoreError>;
    /// A number that changes whenever anyone else — another process, another connection —
    /// committed to the store since this handle last asked, and stays the same otherwise.
    /// Cheap enough to poll every few milliseconds; a watcher reads the feed only when it moved.
    async fn data_version(&self) -> Result<u64, StoreError>;
}

/// One event of the feed across runs.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntry {
    /// Its feed position (commit order over all runs, from 1).
    pub position: u64,
    /// The run it belongs to.
    pub run: RunId,
    /// The event, with its seq within the run.
    pub record: EventRecord,
}

/// A task's latest outputs per stage, from its artifact rows — (run, stage, key, value) in run
/// order, oldest first, as a store keeps them: a later run's outputs of a stage replace an
/// earlier run's whole. Rows naming no valid stage are left out.
pub fn latest_outputs(rows: impl IntoIterator<Item = (String, String, String, String)>) -> BTreeMap<StageId, Outputs> {
    let mut latest: BTreeMap<StageId, (String, Outputs)> = BTreeMap::new();
    for (run, stage, key, value) in rows {
        let Some(stage) = StageId::parse(&stage) else { continue };
        let entry = latest.entry(stage).or_insert_with(|| (run.clone(), Outputs::new()));
        if entry.0 != run {
            *entry = (run, Outputs::new());
        }
        entry.1.insert(key, value);
    }
    latest.into_iter().map(|(stage, (_, outputs))| (stage, outputs)).collect()
}
