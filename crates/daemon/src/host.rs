//! Run hosts: each run the daemon drives gets a thread of its own with a one-thread runtime,
//! its own connection to the journal and the same [`Session`] the CLI drives in the
//! foreground (the engine is not `Send`, and its blocking calls stay off the server's threads).

use std::time::Duration;

use loopwright_app::Error;
use loopwright_app::files::Projector;
use loopwright_app::ops::{answer, read};
use loopwright_app::ownership::this_process;
use loopwright_app::session::Session;
use loopwright_app::stop::CancelWatch;
use loopwright_app::workspace::Workspace;
use loopwright_engine::{EventRecord, Observer, RunId, RunState, RunStatus, Stop, Stopper};
use loopwright_spec::Pipeline;
use tokio::sync::{Notify, watch};

/// How often a hosted run looks for a cancel request in the journal.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// What a host is asked to do.
#[derive(Debug, Clone)]
pub struct Job {
    /// The run.
    pub run: RunId,
    /// Claim the run for this daemon before driving it (a queued run, a run taken over after
    /// a crash); false for a run already claimed by the request that hosted it.
    pub claim: bool,
}

/// How a host ended.
#[derive(Debug)]
pub enum Ended {
    /// The run stopped (ended, waits for a human, or was interrupted by the shutdown).
    Stopped(RunStatus),
    /// Its working tree is taken by another live run: it stays in line.
    TreeBusy,
    /// It could not be driven (a conflict: another process claimed it first; or a failure).
    Failed(String),
}

/// Stops a hosted run: the daemon shutting down interrupts it (resumable); a cancel request in
/// the journal (from the API, the CLI or the dashboard) cancels it.
struct DaemonStopper<'a> {
    cancel: CancelWatch<'a>,
    shutdown: watch::Receiver<bool>,
}

impl Stopper for DaemonStopper<'_> {
    async fn stopped(&self) -> Stop {
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => Stop::Interrupt { signal: "SIGTERM".into() },
            stop = self.cancel.requested() => stop,
        }
    }
}

/// The markdown files, and a poke to the journal watcher after every journaled event so that
/// live streams hear of it at once.
struct HostObserver {
    files: Projector,
    poke: std::sync::Arc<Notify>,
    telemetry: Option<loopwright_app::telemetry::Telemetry>,
}

impl Observer for HostObserver {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        self.files.on_event(record, state, pipeline);
        if let Some(t) = &mut self.telemetry {
            t.on_event(record, state, pipeline);
        }
        self.poke.notify_one();
    }
}

/// Drives one run on this thread until it stops.
pub fn drive(
    ws: &Workspace,
    job: &Job,
    shutdown: watch::Receiver<bool>,
    poke: std::sync::Arc<Notify>,
    dashboard: &str,
) -> Ended {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return Ended::Failed(format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(drive_async(ws, job, shutdown, poke, dashboard)) {
        Ok(ended) => ended,
        Err(e) => Ended::Failed(e.message()),
    }
}

async fn drive_async(
    ws: &Workspace,
    job: &Job,
    shutdown: watch::Receiver<bool>,
    poke: std::sync::Arc<Notify>,
    dashboard: &str,
) -> Result<Ended, Error> {
    let store = loopwright_app::assemble::open_existing_store(ws)?;
    let (pipeline, mut state) = read::load_run(ws, &store, &job.run).await?;
    let Ok(session) = Session::try_resume(ws, &store, &pipeline, &state)? else { return Ok(Ended::TreeBusy) };
    let session = session.with_dashboard(Some(dashboard.to_owned()));
    let cancel = CancelWatch::new(&store, job.run.clone(), state.last_seq, CANCEL_POLL);
    let stopper = DaemonStopper { cancel, shutdown };
    let telemetry = loopwright_app::telemetry::Telemetry::new(&ws.config);
    let mut observer = HostObserver { files: Projector::new(ws.runs_dir()), poke: poke.clone(), telemetry };
    let mut engine = session.engine(&pipeline, &store, &stopper, &mut observer);
    if job.claim {
        answer::claim(&mut engine, &mut state, None, this_process(true)).await?;
    }
    let mut state = engine.drive(state).await?;
    for note in loopwright_app::worktree::merge_back(&mut engine, &mut state).await? {
        eprintln!("loopwright serve: run {}: {note}", job.run);
    }
    poke.notify_one();
    Ok(Ended::Stopped(state.status))
}
