//! The daemon's runs: which it hosts now, the line of queued ones, and the loop that starts
//! them — at most `max_runs` at once, in the order they were queued, each when its working
//! tree is free — and takes up the runs a daemon owned when it starts (recovery).
//!
//! The queue is ordered per working tree: of the queued runs that share a tree, only the
//! oldest is tried, and only while no run this daemon hosts holds that tree. The loop is woken
//! by what can free a slot or a tree — a hosted run ending, a run's status changing in the
//! journal (a run of another process ended), a new run — not by a timer; a run whose host
//! found its tree taken (by a process elsewhere) stays first in its line and is tried again at
//! the next of those, or after a few seconds at most.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopwright_app::ownership::{alive_elsewhere, is_this_process};
use loopwright_app::workspace::Workspace;
use loopwright_engine::{RunId, RunStatus, Store};
use loopwright_store::Journal;
use tokio::sync::{Notify, watch};

use crate::host::{self, Ended, Job};

/// The runs this daemon drives.
pub struct Runs {
    ws: Workspace,
    max_runs: usize,
    hosted: Mutex<HashSet<RunId>>,
    /// Runs not to host before a time: their host failed (a pipeline that no longer compiles,
    /// a workspace moved: try again rarely, not in a loop).
    retry_after: Mutex<HashMap<RunId, std::time::Instant>>,
    /// The working tree of each run the queue has looked at (from its journal's start).
    trees: Mutex<HashMap<RunId, PathBuf>>,
    /// Wakes the scheduler (a run queued, answered or ended; the journal changed).
    pub wake: Arc<Notify>,
    /// Wakes the journal watcher (a host journaled something).
    pub poke: Arc<Notify>,
    /// The dashboard's address, for links in what runs deliver to a forge.
    dashboard: String,
    shutdown: watch::Receiver<bool>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Runs {
    /// The runs of the daemon of `ws`.
    pub fn new(ws: Workspace, max_runs: usize, shutdown: watch::Receiver<bool>, dashboard: String) -> Arc<Self> {
        Arc::new(Self {
            dashboard,
            ws,
            max_runs: max_runs.max(1),
            hosted: Mutex::default(),
            retry_after: Mutex::default(),
            trees: Mutex::default(),
            wake: Arc::new(Notify::new()),
            poke: Arc::new(Notify::new()),
            shutdown,
            threads: Mutex::default(),
        })
    }

    /// True while this daemon drives `run`.
    pub fn is_hosted(&self, run: &RunId) -> bool {
        self.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(run)
    }

    /// How many runs are driven now.
    pub fn hosted_count(&self) -> usize {
        self.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Starts a host for `job` on a thread of its own, now, whatever the limit (a cancel's
    /// rollback); false when the run is hosted already.
    pub fn host(self: &Arc<Self>, job: Job) -> bool {
        if !self.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(job.run.clone()) {
            return false;
        }
        let runs = Arc::clone(self);
        let id = job.run.clone();
        let handle = std::thread::Builder::new().name(format!("run {}", job.run)).spawn(move || {
            let ended = host::drive(&runs.ws, &job, runs.shutdown.clone(), Arc::clone(&runs.poke), &runs.dashboard);
            if let Ended::Failed(why) = &ended {
                eprintln!("loopwright serve: run {}: {why} (tried again in 30 s)", job.run);
                let retry = std::time::Instant::now() + Duration::from_secs(30);
                runs.retry_after
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(job.run.clone(), retry);
            }
            runs.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&job.run);
            // What the run's thread allocated is free now: given back once the daemon is quiet.
            crate::memory::worked();
            // A run that ended frees its slot and its tree: the next in line may start. One
            // that found its tree taken freed nothing, and waking the queue for it would only
            // try it again at once.
            if !matches!(ended, Ended::TreeBusy) {
                runs.wake.notify_one();
            }
        });
        match handle {
            Ok(h) => {
                let mut threads = self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                threads.retain(|t| !t.is_finished());
                threads.push(h);
                true
            }
            Err(e) => {
                eprintln!("loopwright serve: cannot start a thread for run {id}: {e}");
                self.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
                false
            }
        }
    }

    /// Waits for every host to stop (after the shutdown signal interrupted their runs).
    pub fn join_all(&self) {
        let threads: Vec<_> =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }

    /// One pass of the scheduler: hosts the runs this daemon should drive and is not driving.
    /// First the running ones it owns (answered, or claimed by a request), and the running,
    /// interrupted or queued ones a dead daemon owned (recovery); then queued runs in the
    /// order they were queued, up to `max_runs`.
    pub async fn schedule(self: &Arc<Self>, store: &Journal) {
        if *self.shutdown.borrow() {
            return;
        }
        let Ok(active) = store.runs_in(&[RunStatus::Running, RunStatus::Interrupted, RunStatus::Queued]).await else {
            return;
        };
        // The trees of runs that left the queue are forgotten (memory bounded over a long life).
        let ids: HashSet<&RunId> = active.iter().map(|s| &s.run_id).collect();
        self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|run, _| ids.contains(run));
        let now = std::time::Instant::now();
        let (mut first, mut queued) = (Vec::new(), Vec::new());
        for summary in active {
            let run = summary.run_id;
            if self.is_hosted(&run) {
                continue;
            }
            let busy_until =
                self.retry_after.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&run).copied();
            if busy_until.is_some_and(|t| t > now) {
                continue;
            }
            // The row names the status and the owner (both kept in step with the journal).
            let Some(owner) = summary.owner else { continue };
            let ours = is_this_process(&owner);
            let orphaned = owner.daemon && !ours && !alive_elsewhere(&owner);
            match summary.status {
                RunStatus::Running if ours => first.push(Job { run, claim: false }),
                RunStatus::Running | RunStatus::Interrupted if orphaned => first.push(Job { run, claim: true }),
                RunStatus::Queued if ours || orphaned => queued.push((summary.created_at, run)),
                _ => {}
            }
        }
        queued.sort();
        // Per working tree, only the oldest queued run, and only while no run hosted here
        // holds the tree.
        let mut taken: HashSet<PathBuf> = {
            let hosted = self.hosted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let trees = self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            hosted.iter().filter_map(|run| trees.get(run).cloned()).collect()
        };
        let mut next = Vec::new();
        for (_, run) in queued {
            let Some(tree) = self.tree_of(store, &run).await else { continue };
            if taken.insert(tree) {
                next.push(Job { run, claim: true });
            }
        }
        for job in first.into_iter().chain(next) {
            if self.hosted_count() >= self.max_runs {
                break;
            }
            self.host(job);
        }
    }

    /// The working tree `run` works in (its worktree, or the workspace), read once from the
    /// start of its journal.
    async fn tree_of(&self, store: &Journal, run: &RunId) -> Option<PathBuf> {
        if let Some(tree) = self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(run) {
            return Some(tree.clone());
        }
        let events = store.events_since(run, 0).await.ok()?;
        let tree = events.iter().find_map(|r| match &r.event {
            loopwright_engine::Event::RunStarted(started) => Some(PathBuf::from(&started.workspace)),
            _ => None,
        })?;
        self.trees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(run.clone(), tree.clone());
        Some(tree)
    }

    /// The scheduler's loop: a pass whenever woken; otherwise every few seconds at most (a
    /// working tree freed by a process elsewhere without a journal entry, a failed run's
    /// retry coming due).
    pub async fn run_scheduler(self: Arc<Self>, store: Journal) {
        let mut shutdown = self.shutdown.clone();
        loop {
            self.schedule(&store).await;
            let pause = {
                let retry = self.retry_after.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let now = std::time::Instant::now();
                retry.values().filter(|t| **t > now).map(|t| *t - now).min().unwrap_or(IDLE_PASS).min(IDLE_PASS)
            };
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// The longest the queue waits without being woken.
const IDLE_PASS: Duration = Duration::from_secs(5);
