//! The workers sharing the store (SPEC §13), as people see them: labels, slots, the runs they
//! hold leases on and until when, and whether they are alive.

use std::collections::BTreeMap;

use loopwright_engine::RunId;
use loopwright_store::Journal;

use crate::error::Error;

/// Whether a worker is at work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// It said it was alive within its lease.
    Alive,
    /// It has not said so for longer than its lease (killed, frozen, cut off): its runs go to
    /// other workers.
    Silent,
    /// It stopped and gave its leases back.
    Stopped,
}

/// A run a worker holds a lease on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseView {
    /// The run.
    pub run_id: RunId,
    /// The lease's epoch (one more with every worker that took the run).
    pub epoch: loopwright_engine::ids::LeaseEpoch,
    /// When the lease runs out unless renewed.
    pub expires_at: jiff::Timestamp,
}

/// A worker.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerView {
    /// Its id (`HOST-PID`).
    pub id: String,
    /// Its machine.
    pub host: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// How many runs it drives at once.
    pub slots: u32,
    /// Seconds its leases last without a heartbeat.
    pub lease_seconds: u64,
    /// When it started.
    pub started_at: jiff::Timestamp,
    /// When it last said it was alive.
    pub heartbeat_at: jiff::Timestamp,
    /// When it stopped, if it did.
    pub stopped_at: Option<jiff::Timestamp>,
    /// Alive, silent or stopped.
    pub state: WorkerState,
    /// The runs it holds leases on.
    pub leases: Vec<LeaseView>,
}

/// The workers that share `store`, alive ones first (none for the SQLite store, which workers
/// do not share), as of `now`.
pub async fn workers(store: &Journal, now: jiff::Timestamp) -> Result<Vec<WorkerView>, Error> {
    let Some(pg) = store.postgres() else { return Ok(Vec::new()) };
    let mut views: Vec<WorkerView> = pg
        .workers()
        .await?
        .into_iter()
        .map(|w| {
            let silent_after = w.heartbeat_at + jiff::SignedDuration::try_from(w.lease).unwrap_or_default();
            let state = match w.stopped_at {
                Some(_) => WorkerState::Stopped,
                None if now > silent_after => WorkerState::Silent,
                None => WorkerState::Alive,
            };
            WorkerView {
                id: w.id,
                host: w.host,
                labels: w.labels,
                slots: w.slots,
                lease_seconds: w.lease.as_secs(),
                started_at: w.started_at,
                heartbeat_at: w.heartbeat_at,
                stopped_at: w.stopped_at,
                state,
                leases: w
                    .leases
                    .into_iter()
                    .map(|l| LeaseView { run_id: l.run, epoch: l.epoch, expires_at: l.expires_at })
                    .collect(),
            }
        })
        .collect();
    views.sort_by_key(|w| w.state != WorkerState::Alive);
    Ok(views)
}
