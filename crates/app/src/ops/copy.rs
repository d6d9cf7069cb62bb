//! `loopwright store copy --to URL`: a workspace's journal moved to PostgreSQL (SPEC §13).
//!
//! Every run's events are appended to the target in one transaction per run, with their
//! sequence numbers and times, oldest run first. Copying again brings the target up to date:
//! a run already there whole is left alone, one the workspace has moved on since gets the
//! events it lacks (compare-and-append on where the target ends), and one whose events differ
//! is reported and left alone. The target's feed positions are its own (commit order there).

use loopwright_engine::{RunStatus, Store};
use loopwright_store::SqliteStore;
use loopwright_store::pg::PgStore;

use crate::error::Error;

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Copied {
    /// Runs written to the target (whole, or the events they lacked there).
    pub runs: usize,
    /// Events written.
    pub events: usize,
    /// Runs the target had whole already.
    pub unchanged: usize,
    /// Runs whose events differ in the target (left alone), with why.
    pub differ: Vec<(String, String)>,
}

/// Copies every run of `from` into `to`; `progress(done, all)` after each run.
pub async fn copy(from: &SqliteStore, to: &PgStore, mut progress: impl FnMut(usize, usize)) -> Result<Copied, Error> {
    let runs = from.runs_in(&RunStatus::ALL).await?;
    let mut copied = Copied::default();
    for (i, run) in runs.iter().enumerate() {
        let source = from.events(&run.run_id).await?;
        let target = to.events_since(&run.run_id, 0).await?;
        let same = |n: usize| source.iter().zip(&target).take(n).all(|(a, b)| a == b);
        if target.len() == source.len() && same(source.len()) {
            copied.unchanged += 1;
        } else if target.len() < source.len() && same(target.len()) {
            let rest: Vec<_> = source[target.len()..].iter().map(|r| (r.event.clone(), r.at)).collect();
            let written = if target.is_empty() {
                to.append_all(&run.run_id, &rest).await?
            } else {
                to.append_after(&run.run_id, target.len() as u64, &rest).await?
            };
            copied.runs += 1;
            copied.events += written.len();
        } else {
            let why = if target.len() > source.len() {
                format!("the target has {} events, this workspace {}", target.len(), source.len())
            } else {
                let at = source.iter().zip(&target).position(|(a, b)| a != b).map_or(0, |p| p + 1);
                format!("event {at} differs")
            };
            copied.differ.push((run.run_id.to_string(), why));
        }
        progress(i + 1, runs.len());
    }
    Ok(copied)
}

/// Connects to the PostgreSQL store at `url` (migrating it), for a user's command.
pub async fn connect(url: &str) -> Result<PgStore, Error> {
    PgStore::connect(url, 4).await.map_err(|e| Error::usage(e.to_string()))
}
