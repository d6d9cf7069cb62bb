//! `loopwright worker` (SPEC §13): a process on any machine that claims the runs submitted to
//! the PostgreSQL store it names, drives each in a worktree of its cached clone of the run's
//! repository, and holds each run under a lease it renews by heartbeats.
//!
//! Every journal write of a run goes through a store fenced by the lease's epoch, and every
//! commit is pushed to the run's branch (`loopwright/RUN`) before the stage that made it is
//! journaled. A lease that could not be renewed in time — the database out of reach, the
//! process frozen — or that another worker took over ends the run here: its processes are
//! ended, and nothing it would still write is accepted. SIGTERM interrupts the runs driven
//! here (resumable) and gives their leases back, for another worker to continue.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopwright_app::Error;
use loopwright_app::files::Projector;
use loopwright_app::ops::{answer, read};
use loopwright_app::session::Session;
use loopwright_app::stop::CancelWatch;
use loopwright_app::workspace::Workspace;
use loopwright_engine::ids::LeaseEpoch;
use loopwright_engine::ports::{Slot, Slots};
use loopwright_engine::{Owner, RunId, RunStatus, Stop, Stopper, StoreError};
use loopwright_runners::git;
use loopwright_spec::sandbox::SandboxMode;
use loopwright_store::Journal;
use loopwright_store::fleet::{Claim, Fence};
use loopwright_store::pg::PgStore;
use tokio::sync::{Notify, watch};

/// How often a worker's run looks for a cancel request in the journal.
const CANCEL_POLL: Duration = Duration::from_millis(200);

/// The longest a worker that cannot listen for work waits before it looks for runs to claim
/// again.
const IDLE_LOOK: Duration = Duration::from_secs(5);

/// The longest an idle worker listening for work waits before it looks anyway (a safety net:
/// it is told of work, and looks when a lease it could take over runs out).
const QUIET_LOOK: Duration = Duration::from_secs(60);

/// How long after a lease runs out an idle worker looks for it (the database's clock and this
/// machine's wake-up may differ a little).
const EXPIRY_MARGIN: Duration = Duration::from_millis(50);

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The PostgreSQL store.
    pub store: String,
    /// Its labels (`runs_on:` of a pipeline must be among them).
    pub labels: BTreeMap<String, String>,
    /// How many runs it drives at once.
    pub slots: u32,
    /// Where it keeps its clones and the runs' worktrees.
    pub cache: PathBuf,
    /// How long a lease lasts without a heartbeat (heartbeats come three times as often).
    pub lease: Duration,
    /// The repositories it may run (as submissions name them): nothing else is claimed,
    /// cloned or run.
    pub repos: Vec<String>,
    /// The least confinement of every stage it runs (`required`: a repository's config.toml
    /// or a stage's `sandbox: off` cannot weaken it).
    pub sandbox: Option<loopwright_spec::sandbox::SandboxMode>,
}

/// A lease this worker holds.
struct Held {
    epoch: LeaseEpoch,
    /// Set when the lease is no longer this worker's (taken over, or not renewed in time).
    lost: watch::Sender<bool>,
    /// Until when (Unix milliseconds, this machine's clock) the lease is known to live.
    valid_until: Arc<AtomicI64>,
}

/// What the worker's tasks share.
struct Worker {
    id: String,
    options: Options,
    store: PgStore,
    held: Mutex<HashMap<RunId, Held>>,
    /// A run ended here (a slot came free).
    ended: Notify,
    /// One git operation on the cache at a time (fetches and worktrees of a shared clone).
    cache_lock: Mutex<()>,
    /// Its `--slots`: each run it drives holds one, and a run's stages at once beyond its
    /// first take more while they are free.
    slots: Slots,
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

impl Worker {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Held>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Runs a worker until SIGINT/SIGTERM, then interrupts its runs and gives their leases back.
pub async fn run(options: Options) -> Result<(), Error> {
    let shown = loopwright_store::pg::shown_url(&options.store);
    let store = PgStore::connect(&options.store, 4).await.map_err(|e| Error::usage(e.to_string()))?;
    std::fs::create_dir_all(options.cache.join("runs"))
        .map_err(|e| Error::usage(format!("--cache {}: {e}", options.cache.display())))?;
    // The cache is this worker's alone; what a worker killed there left is cleared.
    let _cache = loopwright_app::lock::try_exclusive(&options.cache.join("worker.lock"))?.ok_or_else(|| {
        Error::usage(format!(
            "--cache {}: another worker uses this folder; give each worker a cache of its own",
            options.cache.display()
        ))
    })?;
    clear_stale(&options.cache);
    let host = loopwright_runners::process::machine().to_owned();
    let name = host.split('/').next().unwrap_or("worker").to_owned();
    let id = format!("{name}-{}", std::process::id());
    store.register_worker(&id, &host, &options.labels, options.slots, options.lease).await?;
    let labels: Vec<String> = options.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!(
        "loopwright worker {id}: {} slot(s), labels {}, store {shown}, cache {}",
        options.slots,
        if labels.is_empty() { "(none)".to_owned() } else { labels.join(",") },
        options.cache.display()
    );
    let slots = Slots::new(options.slots as usize);
    let worker = Arc::new(Worker {
        id,
        options,
        store,
        held: Mutex::default(),
        ended: Notify::new(),
        cache_lock: Mutex::new(()),
        slots,
    });
    // Its heartbeat goes on while a first fetch of a large repository takes its time.
    let heart = tokio::spawn(heartbeat(Arc::clone(&worker)));
    let warming = Arc::clone(&worker);
    let _ = tokio::task::spawn_blocking(move || warm(&warming)).await;
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return;
        };
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        let _ = stop.send(true);
    });
    let listen = worker.store.watch_work().await.ok();
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut shutdown_seen = shutdown.clone();
    // How many times it asked the store for work, and how many runs it got.
    let (mut looked, mut claimed_runs) = (0u64, 0u64);
    // When the first lease it could take over runs out, as last asked of the store.
    let mut expiry: Option<tokio::time::Instant> = None;
    loop {
        if *shutdown.borrow() {
            break;
        }
        threads.retain(|t| !t.is_finished());
        // Made before the slots are looked at: a slot given back after the look wakes it.
        let freed = worker.slots.freed();
        while let Some(slot) = worker.slots.try_take() {
            looked += 1;
            let claimed = worker
                .store
                .claim(&worker.id, &worker.options.labels, &worker.options.repos, worker.options.lease)
                .await;
            let claim = match claimed {
                Ok(Some(claim)) => claim,
                Ok(None) => {
                    slot.unused();
                    break;
                }
                Err(e) => {
                    eprintln!("loopwright worker {}: cannot claim: {e}", worker.id);
                    slot.unused();
                    break;
                }
            };
            claimed_runs += 1;
            threads.push(start(&worker, claim, shutdown.clone(), slot));
        }
        // Woken by work it could take; a lease that runs out tells nobody, so the worker looks
        // again when the first one it could take over would run out. Without its listening
        // connection it looks at least twice per lease.
        let full = worker.slots.free() == 0;
        let look = match &listen {
            // No slot free: a run ending here wakes it. Leases given meanwhile go unseen: the
            // store is asked again once a slot is free.
            Some(watch) if watch.listening() && full => {
                expiry = None;
                QUIET_LOOK
            }
            Some(watch) if watch.listening() => {
                let now = tokio::time::Instant::now();
                match expiry.filter(|at| *at > now) {
                    // Woken by a submission another worker took: the lease it was given runs out
                    // a lease from now (one of this worker's length is taken for it), so the
                    // store need not be asked again — N idle workers add one query per
                    // submission, not two. A lease renewed meanwhile only makes it look early.
                    Some(at) => {
                        let at = at.min(now + worker.options.lease + EXPIRY_MARGIN);
                        expiry = Some(at);
                        at - now
                    }
                    None => {
                        let next = worker.store.next_expiry(&worker.options.labels, &worker.options.repos).await;
                        let look = match next {
                            Ok(Some(expiry)) => (expiry + EXPIRY_MARGIN).min(QUIET_LOOK),
                            Ok(None) => QUIET_LOOK,
                            Err(_) => IDLE_LOOK.min(worker.options.lease / 2),
                        };
                        expiry = Some(now + look);
                        look
                    }
                }
            }
            _ => IDLE_LOOK.min(worker.options.lease / 2),
        };
        let heard = async {
            match &listen {
                Some(watch) => {
                    watch.changed(look).await;
                }
                None => tokio::time::sleep(look).await,
            }
        };
        tokio::select! {
            () = heard => {}
            () = worker.ended.notified() => {}
            () = freed => {}
            _ = shutdown_seen.changed() => {}
        }
    }
    eprintln!(
        "loopwright worker {}: stopping; the runs driven here are interrupted and given back (it looked for work {looked} time(s) and claimed {claimed_runs} run(s))",
        worker.id
    );
    let _ = tokio::task::spawn_blocking(move || threads.into_iter().for_each(|t| drop(t.join()))).await;
    heart.abort();
    let _ = worker.store.worker_stopped(&worker.id).await;
    Ok(())
}

/// Clears what a worker killed in the middle of git or a run left in its cache: lock files in
/// the clones, and the runs' worktrees (each is made again from its branch when claimed).
fn clear_stale(cache: &Path) {
    fn locks(dir: &Path, depth: usize) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() && depth < 8 {
                locks(&path, depth + 1);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "lock") {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    locks(&cache.join("repos"), 0);
    for entry in std::fs::read_dir(cache.join("runs")).into_iter().flatten().flatten() {
        let _ = std::fs::remove_dir_all(entry.path());
    }
    for entry in std::fs::read_dir(cache.join("repos")).into_iter().flatten().flatten() {
        let _ = git::git(&entry.path(), &["worktree", "prune"]);
    }
}

/// Renews the heartbeat and the leases, three times per lease; a lease not renewed in time (the
/// database out of reach, this process frozen) or taken over is lost: its run stops here.
async fn heartbeat(worker: Arc<Worker>) {
    let every = worker.options.lease / 3;
    loop {
        let held: Vec<(RunId, LeaseEpoch)> = worker.held().iter().map(|(run, h)| (run.clone(), h.epoch)).collect();
        let asked = now_ms();
        let renewed = worker.store.renew(&worker.id, &held, worker.options.lease).await;
        let lease_ms = i64::try_from(worker.options.lease.as_millis()).unwrap_or(i64::MAX);
        {
            let all = worker.held();
            match &renewed {
                Ok(lost) => {
                    for (run, h) in all.iter() {
                        if lost.contains(run) {
                            let _ = h.lost.send(true);
                        } else if held.iter().any(|(r, e)| r == run && *e == h.epoch) {
                            h.valid_until.store(asked + lease_ms, Ordering::SeqCst);
                        }
                    }
                }
                Err(e) => eprintln!("loopwright worker {}: cannot renew its leases: {e}", worker.id),
            }
            let now = now_ms();
            for h in all.values() {
                if now >= h.valid_until.load(Ordering::SeqCst) {
                    let _ = h.lost.send(true);
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Starts driving a claimed run on a thread of its own.
/// The run holds `slot` until it ends here.
fn start(
    worker: &Arc<Worker>,
    claim: Claim,
    shutdown: watch::Receiver<bool>,
    slot: Slot,
) -> std::thread::JoinHandle<()> {
    let (lost, lost_seen) = watch::channel(false);
    let lease_ms = i64::try_from(worker.options.lease.as_millis()).unwrap_or(i64::MAX);
    let valid_until = Arc::new(AtomicI64::new(now_ms() + lease_ms));
    worker.held().insert(claim.run.clone(), Held { epoch: claim.epoch, lost, valid_until: Arc::clone(&valid_until) });
    let worker = Arc::clone(worker);
    std::thread::spawn(move || {
        let run = claim.run.clone();
        eprintln!("loopwright worker {}: claimed run {run} (lease epoch {})", worker.id, claim.epoch);
        let ended = drive(&worker, &claim, shutdown, lost_seen, valid_until);
        match &ended {
            Ok(status) => eprintln!("loopwright worker {}: run {run} {status}", worker.id),
            Err(why) => eprintln!("loopwright worker {}: run {run}: {why}", worker.id),
        }
        // Whatever happened, nothing of the run keeps working here.
        loopwright_runners::end_run_processes(&run, &claim.epoch.tag(&worker.id));
        let fence = worker.held().remove(&run);
        // A run whose work tree could not be made keeps its lease until it runs out: it is
        // tried again a lease later (by any worker), not claimed again at once for ever.
        let fence = fence.filter(|_| ended.is_ok());
        if let Some(held) = fence {
            let store = worker.store.clone();
            let id = worker.id.clone();
            let _ = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(async move { store.release(&id, &run, held.epoch).await }));
        }
        drop(slot);
        worker.ended.notify_one();
    })
}

/// Stops a worker's run: the lease lost or the worker stopping interrupts it; a cancel
/// request in the journal cancels it.
struct WorkerStopper<'a> {
    cancel: CancelWatch<'a>,
    shutdown: watch::Receiver<bool>,
    lost: watch::Receiver<bool>,
}

impl Stopper for WorkerStopper<'_> {
    async fn stopped(&self) -> Stop {
        let (mut shutdown, mut lost) = (self.shutdown.clone(), self.lost.clone());
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => Stop::Interrupt { signal: "SIGTERM".into() },
            _ = lost.wait_for(|lost| *lost) => Stop::Interrupt { signal: "lease lost".into() },
            stop = self.cancel.requested() => stop,
        }
    }
}

/// Drives a claimed run to its end, a wait for a person, or an interruption; says how it
/// stopped.
fn drive(
    worker: &Worker,
    claim: &Claim,
    shutdown: watch::Receiver<bool>,
    lost: watch::Receiver<bool>,
    valid_until: Arc<AtomicI64>,
) -> Result<String, Ended> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Ended::NoRuntime)?;
    let made = match checkout(worker, claim) {
        Ok(made) => made,
        Err(Checkout::Refused(why)) => {
            return runtime
                .block_on(refuse(worker, claim, &why))
                .map(|status| format!("stopped: {}", status.as_str()))
                .map_err(Ended::Failed);
        }
        Err(Checkout::Failed(why)) => {
            return match runtime.block_on(checkout_failed(worker, claim, &why)) {
                Ok(RunStatus::Failed) => Ok(format!("failed: {why}")),
                Ok(_) => Err(Ended::Checkout(why)),
                Err(e) => Err(Ended::Unjournaled { why, journal: e }),
            };
        }
    };
    let outcome = runtime.block_on(drive_async(worker, claim, &made, shutdown, lost, valid_until));
    let tree = made.tree;
    {
        // The worktree is made again from the run's branch by whoever continues it.
        let _guard = worker.cache_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let clone = clone_dir(&worker.options.cache, &claim.submission.repo);
        let _ = git::worktree_remove(&clone, &tree);
        let _ = std::fs::remove_dir_all(&tree);
        // The upkeep a fetch would have started (packing what runs fetched), when it is due.
        let _ = git::git(&clone, &["maintenance", "run", "--auto", "--quiet"]);
    }
    match outcome {
        Ok(status) => Ok(format!("stopped: {}", status.as_str())),
        // Not started here (its workspace or session could not be made): counted as a try to
        // make its work tree, so it is tried again a lease later and fails after a few tries,
        // never claimed again at once for ever.
        Err(Driven::NotStarted(e)) => {
            let why = format!("the run could not be started here: {e}");
            match runtime.block_on(checkout_failed(worker, claim, &why)) {
                Ok(RunStatus::Failed) => Ok(format!("failed: {why}")),
                Ok(_) => Err(Ended::Checkout(why)),
                Err(e) => Err(Ended::Unjournaled { why, journal: e }),
            }
        }
        Err(Driven::Failed(e)) => Err(Ended::Failed(e)),
    }
}

/// Why driving a run on this worker ended in an error.
enum Driven {
    /// Before the run was taken up: nothing of it ran here.
    NotStarted(Error),
    /// Once it was taken up.
    Failed(Error),
}

/// Why driving a claimed run ended in an error.
#[derive(Debug)]
enum Ended {
    /// No runtime could be made for it.
    NoRuntime(std::io::Error),
    /// Its work tree could not be made: tried again a lease later.
    Checkout(String),
    /// Its work tree could not be made, and that could not be journaled.
    Unjournaled {
        /// Why the work tree was not made.
        why: String,
        /// Why it was not journaled.
        journal: Error,
    },
    /// The run failed to be driven.
    Failed(Error),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoRuntime(e) => write!(f, "no runtime: {e}"),
            Self::Checkout(why) => f.write_str(why),
            Self::Unjournaled { why, journal } => write!(f, "{why}; and it could not be journaled: {journal}"),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

async fn drive_async(
    worker: &Worker,
    claim: &Claim,
    made: &Tree,
    shutdown: watch::Receiver<bool>,
    lost: watch::Receiver<bool>,
    valid_until: Arc<AtomicI64>,
) -> Result<RunStatus, Driven> {
    let not_started = Driven::NotStarted;
    let mut ws = Workspace::locate(Some(&made.tree))
        .and_then(|ws| ws.with_store(Some(worker.options.store.clone())))
        .map_err(not_started)?;
    let fence = Fence { worker: worker.id.clone(), epoch: claim.epoch };
    let store = Journal::Postgres(worker.store.fenced(fence));
    let (mut pipeline, mut state) = read::load_run(&ws, &store, &claim.run).await.map_err(not_started)?;
    // The store says which pipeline to run, never what it runs: the file must be the
    // repository's, as git holds it at the run's base. Whoever can write to the store can only
    // choose among the repository's pipelines (and give them inputs), not make workers run a
    // command.
    if let Err(Checkout::Refused(why) | Checkout::Failed(why)) = same_pipeline(&made.pipelines, &state) {
        return refused(worker, &store, &mut state, &why).await.map_err(Driven::Failed);
    }
    // The worker's own floor: a repository or a stage cannot weaken it.
    if let Some(floor) = worker.options.sandbox.filter(|m| *m != SandboxMode::Off) {
        ws.config.sandbox = ws.config.sandbox.max(floor);
        for stage in &mut pipeline.stages {
            stage.sandbox = Some(stage.sandbox.unwrap_or(floor).max(floor));
        }
    }
    let lost_now = lost.clone();
    let publish = loopwright_runners::Publish {
        repo: claim.submission.repo.clone(),
        branch: run_branch(&claim.run),
        pushed: Mutex::new(made.tip.clone().unwrap_or_default()),
        from: made.base.clone(),
        lease_held: Box::new(move || !*lost_now.borrow() && now_ms() < valid_until.load(Ordering::SeqCst)),
    };
    let session = Session::for_worker(
        &ws,
        &store,
        &pipeline,
        &claim.run,
        publish,
        claim.epoch.tag(&worker.id),
        worker.slots.clone(),
    )
    .map_err(not_started)?;
    let cancel = CancelWatch::new(&store, claim.run.clone(), state.last_seq, CANCEL_POLL);
    let stopper = WorkerStopper { cancel, shutdown, lost };
    let mut files = loopwright_app::telemetry::Traced::new(Projector::new(ws.runs_dir()), &ws.config);
    let mut engine = session.engine(&pipeline, &store, &stopper, &mut files);
    let owner = Owner { worker: Some(worker.id.clone()), ..loopwright_app::ownership::this_process(false) };
    answer::claim(&mut engine, &mut state, None, owner).await.map_err(Driven::Failed)?;
    match engine.drive(state).await {
        Ok(state) => Ok(state.status),
        Err(e @ StoreError::Fenced { .. }) => Err(Driven::Failed(Error::Conflict(e.to_string()))),
        Err(e) => Err(Driven::Failed(e.into())),
    }
}

/// Cancels a claimed run this worker refuses to run, saying why in its journal.
async fn refuse(worker: &Worker, claim: &Claim, why: &str) -> Result<RunStatus, Error> {
    let (store, mut state) = fenced_run(worker, claim).await?;
    refused(worker, &store, &mut state, why).await
}

/// The claimed run's journal through the store fenced by the claim's lease, and its state.
async fn fenced_run(worker: &Worker, claim: &Claim) -> Result<(Journal, loopwright_engine::RunState), Error> {
    let fence = Fence { worker: worker.id.clone(), epoch: claim.epoch };
    let store = Journal::Postgres(worker.store.fenced(fence));
    let events = loopwright_engine::Store::events(&store, &claim.run).await?;
    let state = loopwright_engine::RunState::replay(claim.run.clone(), &events);
    Ok((store, state))
}

/// Journals that this worker could not make the run's work tree (`checkout_failed`): the run
/// is tried again a lease later, and fails after [`Event::CHECKOUT_TRIES`] such tries.
async fn checkout_failed(worker: &Worker, claim: &Claim, why: &str) -> Result<RunStatus, Error> {
    use loopwright_engine::Event;
    let (store, mut state) = fenced_run(worker, claim).await?;
    let tries = state.checkout_failed.as_ref().map_or(0, |(t, _)| *t) + 1;
    let mut batch = vec![Event::CheckoutFailed { worker: worker.id.clone(), reason: why.to_owned(), tries }];
    if tries >= Event::CHECKOUT_TRIES {
        batch.push(Event::RunFinished { status: RunStatus::Failed });
    }
    loopwright_app::record::after_read(&store, &mut state, batch).await?;
    Ok(state.status)
}

/// Journals that this worker refused to run the run (`run_cancelled`, with why).
async fn refused(
    worker: &Worker,
    store: &Journal,
    state: &mut loopwright_engine::RunState,
    why: &str,
) -> Result<RunStatus, Error> {
    let by = format!("worker {}: refused to run it: {why}", worker.id);
    let event = loopwright_engine::Event::RunCancelled { stage: None, by, rollback: false };
    loopwright_app::record::after_read(store, state, vec![event]).await?;
    Ok(state.status)
}

/// Why a run's work tree was not made.
#[derive(Debug)]
enum Checkout {
    /// The run asks for what this worker does not do (a base on loopwright's run branches): it
    /// is cancelled, saying why.
    Refused(String),
    /// Something failed (the repository out of reach, a base not pushed yet): tried again later.
    Failed(String),
}

impl From<git::GitError> for Checkout {
    fn from(e: git::GitError) -> Self {
        Self::Failed(e.to_string())
    }
}

/// Checks that the run's journaled pipeline is the repository's file at the same path under
/// `.loopwright/pipelines/`, byte for byte, as git holds it at `base` (read from git's objects:
/// a link there is not followed, and nothing a stage wrote in the work tree counts).
fn same_pipeline(pipelines: &str, state: &loopwright_engine::RunState) -> Result<(), Checkout> {
    let refused = |why: String| Err(Checkout::Refused(why));
    let started = state.started.as_ref().ok_or_else(|| Checkout::Refused("the run has no start".to_owned()))?;
    let path = started.pipeline_path.trim_start_matches("./");
    if !loopwright_app::workspace::repository_file(path) || !path.starts_with(".loopwright/pipelines/") {
        return refused(format!(
            "its pipeline {} is not a file of the repository's .loopwright/pipelines/",
            started.pipeline_path
        ));
    }
    // `MODE blob ID\tPATH`: the file's content is known by its id, which the journaled text
    // must hash to (the content never read).
    let entry = pipelines
        .split('\0')
        .find(|entry| entry.split_once('\t').is_some_and(|(_, name)| name == path))
        .unwrap_or_default();
    let mut fields = entry.split_whitespace();
    let (mode, id) = (fields.next().unwrap_or_default(), fields.nth(1).unwrap_or_default());
    if entry.is_empty() {
        return refused(format!("the repository has no {path} at its base"));
    }
    if mode != "100644" && mode != "100755" {
        return refused(format!("{path} at the run's base is not a regular file (git mode {mode})"));
    }
    match blob_id(started.pipeline_source.as_bytes(), id.len()) {
        Some(hashed) if hashed == id => Ok(()),
        Some(_) => refused(format!(
            "its pipeline differs from {path} in the repository at its base: commit and push the pipeline, then submit again"
        )),
        None => refused(format!("cannot read {path} at the run's base: git named it `{id}`")),
    }
}

/// The id git gives a file of `content` (its blob), in the repository's hash: SHA-1 for ids of
/// 40 hex digits, SHA-256 for 64; `None` for any other length.
/// Matching it means the same bytes: forging other text with the repository's own file's SHA-1
/// is a second preimage, which SHA-1 still resists (its known attacks make two new files
/// collide, and git's own hashing refuses such files).
fn blob_id(content: &[u8], id_len: usize) -> Option<String> {
    use ring::digest;
    let algorithm = match id_len {
        40 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
        64 => &digest::SHA256,
        _ => return None,
    };
    let mut hash = digest::Context::new(algorithm);
    hash.update(format!("blob {}\0", content.len()).as_bytes());
    hash.update(content);
    Some(hash.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `name` is, or may be read as, one of loopwright's run branches.
fn run_branch_name(name: &str) -> bool {
    name.starts_with("loopwright/") || name.contains("/loopwright/")
}

/// The run's branch on its repository.
fn run_branch(run: &RunId) -> String {
    format!("loopwright/{run}")
}

/// The cached clone of `repo` (bare): named by the repository's last path segment and a hash
/// of its URL, stable across versions.
fn clone_dir(cache: &Path, repo: &str) -> PathBuf {
    let last = repo.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or("repo").trim_end_matches(".git");
    let last: String = last.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).take(40).collect();
    let hash = loopwright_engine::hash::fnv1a(repo.as_bytes());
    cache.join("repos").join(format!("{last}-{hash:016x}.git"))
}

/// Where the cached clone keeps what it fetched of the repository's branches: remote-tracking
/// refs, never `refs/heads/*` (what a clone kept of older versions' worktree branches,
/// `work/RUN`, stays as it was).
const FETCHED: &str = "refs/remotes/origin";

/// A run's worktree as [`checkout`] made it.
struct Tree {
    /// The worktree.
    tree: PathBuf,
    /// The run's base commit.
    base: String,
    /// The commit the run's branch holds on the repository, when it is there (its first
    /// commit creates it).
    tip: Option<String>,
    /// The files under `.loopwright/pipelines/` at the base, as `git ls-tree -r -z` lists them
    /// (the run's pipeline is checked against them).
    pipelines: String,
}

/// The run's worktree, from the cached clone brought up to date, and the run's base commit: at
/// the run's branch when it has one (another worker started it and pushed a commit; the base
/// is where that branch left the repository's history), else at its base. The branch is made
/// on the repository by the run's first commit (a push less per claim).
fn checkout(worker: &Worker, claim: &Claim) -> Result<Tree, Checkout> {
    let _guard = worker.cache_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let repo = &claim.submission.repo;
    let cache = &worker.options.cache;
    let clone = cached_clone(cache, repo)?;
    let branch = run_branch(&claim.run);
    let (tip, on_branch) = match fetch_branches(&clone, repo, &claim.submission.base, &branch) {
        Some(fetched) => fetched,
        None => {
            fetch_all(&clone, repo)?;
            let pushed = git::git(&clone, &["rev-parse", "--verify", "-q", &format!("{FETCHED}/{branch}^{{commit}}")]);
            (pushed.ok().map(|tip| tip.trim().to_owned()), None)
        }
    };
    let (start, base, tip) = match (tip, on_branch) {
        (Some(tip), _) => {
            let base = run_base(&clone, &tip, &claim.run)?;
            (tip.clone(), base, Some(tip))
        }
        // The base is a branch of the repository: its commit is on it.
        (None, Some(base)) => (base.clone(), base, None),
        (None, None) => {
            let base = resolve_base(&clone, &claim.submission.base, repo)?;
            (base.clone(), base, None)
        }
    };
    let tree = cache.join("runs").join(claim.run.as_str());
    if tree.exists() {
        let _ = git::worktree_remove(&clone, &tree);
        let _ = std::fs::remove_dir_all(&tree);
    }
    let path = tree.display().to_string();
    let pipelines = [&base, "--", ".loopwright/pipelines/"];
    // Detached at the run's start: its commits are pushed to the run's branch by name, and no
    // local branch is made for it (a process less per claim, no branch left behind).
    let add = ["worktree", "add", "--quiet", "--force", "--detach", &path, &start];
    // `--force` takes over what a worktree removed without git left registered; should that not
    // do, the registry is pruned and the worktree added again (a process less per claim).
    // The base's pipelines are listed while the worktree is made.
    let (pipelines, added) = std::thread::scope(|scope| {
        let listed = scope.spawn(|| git::git(&clone, &[&["ls-tree", "-r", "-z"][..], &pipelines].concat()));
        let added = git::git(&clone, &add);
        (listed.join().ok().and_then(Result::ok).unwrap_or_default(), added)
    });
    if added.is_err() {
        let _ = std::fs::remove_dir_all(&tree);
        let _ = git::git(&clone, &["worktree", "prune"]);
        git::git(&clone, &add)?;
    }
    Ok(Tree { tree, base, tip, pipelines })
}

/// The cached clone of `repo`, made (empty) when there is none yet.
fn cached_clone(cache: &Path, repo: &str) -> Result<PathBuf, Checkout> {
    let clone = clone_dir(cache, repo);
    if !clone.join("HEAD").is_file() {
        std::fs::create_dir_all(cache.join("repos"))
            .map_err(|e| Checkout::Failed(format!("cannot create {}: {e}", cache.display())))?;
        let target = clone.display().to_string();
        git::git(cache, &["init", "--quiet", "--bare", &target])?;
    }
    Ok(clone)
}

/// Brings the clone of each repository the worker may run up to date before it claims any
/// run: its first claim then costs what any other does, not a whole clone. A repository out
/// of reach now is fetched when a run of it is claimed.
fn warm(worker: &Worker) {
    let _guard = worker.cache_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for repo in &worker.options.repos {
        let fetched = cached_clone(&worker.options.cache, repo).and_then(|clone| fetch_all(&clone, repo));
        if let Err(Checkout::Failed(why) | Checkout::Refused(why)) = fetched {
            eprintln!(
                "loopwright worker {}: cannot fetch {repo} yet ({why}); it is fetched when a run of it is claimed",
                worker.id
            );
        }
    }
}

/// Brings the clone up to date with only what the run needs when its base names a branch of
/// the repository: that branch and the run's own (two refs, not every run's branch). Says the
/// run branch's commit, when it has one, and the base branch's. `None` when the base is not a
/// branch (a tag, a commit) or the fetch failed: then everything is fetched.
fn fetch_branches(clone: &Path, repo: &str, base: &str, branch: &str) -> Option<(Option<String>, Option<String>)> {
    if !plain_branch_name(base) || run_branch_name(base) {
        return None;
    }
    // Into remote-tracking refs only: a fetch must never delete or move the branch another
    // run's worktree has checked out. The run's branch as a pattern: one that matches nothing
    // (a run no commit of which was pushed yet) is no error.
    let refspecs =
        [format!("+refs/heads/{base}:{FETCHED}/{base}"), format!("+refs/heads/{branch}*:{FETCHED}/{branch}*")];
    git::git(clone, &[&FETCH[..], &[repo], &[refspecs[0].as_str(), refspecs[1].as_str()]].concat()).ok()?;
    let (base_ref, branch_ref) = (format!("{FETCHED}/{base}"), format!("{FETCHED}/{branch}"));
    let listed =
        git::git(clone, &["for-each-ref", "--format=%(refname) %(objecttype) %(objectname)", &base_ref, &branch_ref])
            .ok()?;
    let commit_of = |name: &str| {
        listed.lines().find_map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            [refname, "commit", commit] if refname == name => Some(commit.to_owned()),
            _ => None,
        })
    };
    let base_commit = commit_of(&base_ref)?;
    Some((commit_of(&branch_ref), Some(base_commit)))
}

/// Brings the clone up to date with every branch and tag of the repository.
fn fetch_all(clone: &Path, repo: &str) -> Result<(), Checkout> {
    let heads = format!("+refs/heads/*:{FETCHED}/*");
    git::git(clone, &[&FETCH[..], &[repo, &heads, "+refs/tags/*:refs/tags/*"]].concat())?;
    Ok(())
}

/// `git fetch`, with the clone's upkeep done after a run, not between a claim and its first
/// stage, and nothing written or checked that the worker does not read (`FETCH_HEAD`, which
/// branches were forced).
const FETCH: [&str; 9] = [
    "-c",
    "maintenance.auto=false",
    "fetch",
    "--quiet",
    "--prune",
    "--force",
    "--no-write-fetch-head",
    "--no-show-forced-updates",
    "--",
];

/// A branch name made of letters, digits and `-_./` only, in parts neither empty nor starting
/// with a dot: one that is a name as it stands in a refspec (no pattern, nothing git reads as
/// something else). Others are looked up after fetching everything.
fn plain_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.ends_with(".lock")
        && name.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && !part.contains("..")
                && part.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
        && !name.starts_with('-')
}

/// The commit `base` (a branch, a tag or a commit of the repository) names, as fetched: never
/// one of loopwright's run branches, nor a commit only they hold (what an agent wrote there is
/// not the repository's).
fn resolve_base(clone: &Path, base: &str, repo: &str) -> Result<String, Checkout> {
    if run_branch_name(base) {
        return Err(Checkout::Refused(format!(
            "the run's base `{base}` is one of loopwright's run branches, not the repository's"
        )));
    }
    let candidates =
        [format!("{FETCHED}/{base}"), format!("refs/tags/{base}"), base.to_owned()].map(|c| format!("{c}^{{commit}}"));
    let commit = candidates
        .iter()
        .find_map(|c| git::git(clone, &["rev-parse", "--verify", "-q", c]).ok())
        .map(|c| c.trim().to_owned())
        .ok_or_else(|| Checkout::Failed(format!("the run's base `{base}` is not in {repo}")))?;
    let holders =
        git::git(clone, &["for-each-ref", "--format=%(refname)", "--contains", &commit, FETCHED, "refs/tags"])
            .unwrap_or_default();
    let run_branches = format!("{FETCHED}/loopwright/");
    if !holders.lines().any(|r| !r.starts_with(&run_branches) && r != format!("{FETCHED}/HEAD")) {
        return Err(Checkout::Refused(format!(
            "the run's base `{base}` is on no branch or tag of {repo} but loopwright's run branches"
        )));
    }
    Ok(commit)
}

/// Where the run's branch left the repository's history: the first commit, going back from
/// `tip` along first parents, that is not one of the run's own (`Loopwright-Run: RUN`).
fn run_base(clone: &Path, tip: &str, run: &RunId) -> Result<String, Checkout> {
    let log = git::git(
        clone,
        &["log", "--first-parent", "--format=%H %(trailers:key=Loopwright-Run,valueonly,separator=%x2C)", tip],
    )
    .map_err(|e| Checkout::Refused(e.to_string()))?;
    log.lines()
        .find_map(|line| {
            let (commit, runs) = line.split_once(' ').unwrap_or((line, ""));
            (!runs.split(',').any(|r| r.trim() == run.as_str())).then(|| commit.to_owned())
        })
        .ok_or_else(|| Checkout::Refused(format!("the run's branch holds no commit of the repository's own ({tip})")))
}

#[cfg(test)]
mod tests {
    use super::{blob_id, plain_branch_name};

    #[test]
    fn a_blob_id_is_git_s_own() {
        // `printf 'hello\n' | git hash-object --stdin` and with `--object-format=sha256`.
        assert_eq!(blob_id(b"hello\n", 40).as_deref(), Some("ce013625030ba8dba906f756967f9e9ca394464a"));
        assert_eq!(
            blob_id(b"hello\n", 64).as_deref(),
            Some("2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4")
        );
        assert_eq!(blob_id(b"", 40).as_deref(), Some("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"));
        assert_eq!(blob_id(b"hello\n", 12), None);
    }

    #[test]
    fn only_plain_branch_names_are_fetched_by_name() {
        for name in ["main", "release/2.x", "feature_1-b", "v1.0"] {
            assert!(plain_branch_name(name), "{name}");
        }
        for name in
            ["", "*", "refs/heads/*", "a..b", ".hidden", "a//b", "a/", "/a", "-x", "x.lock", "a:b", "a b", "^{commit}"]
        {
            assert!(!plain_branch_name(name), "{name}");
        }
    }
}
