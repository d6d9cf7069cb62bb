//! Auto loops supervised by the daemon (SPEC §10): one task per loop on the daemon's runtime.
//! The agents themselves live in their holder processes (`loopwright auto hold`), so the
//! daemon may stop or die at any moment: the next daemon [`Loops::take_over`]s every loop
//! still recorded as active — a stale `.auto-stop` removed, the agent found again (or
//! restarted with its session id), the stall baseline reset.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use loopwright_app::Error;
use loopwright_app::ops::auto::{self, StartRequest};
use loopwright_app::workspace::Workspace;
use loopwright_auto::supervisor::{AutoStatus, Supervisor};
use loopwright_store::SqliteStore;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A supervisor's task and the channel that asks it to stop (kept open while it runs).
type Running = (watch::Sender<bool>, JoinHandle<()>);

/// The loops this daemon supervises.
pub struct Loops {
    ws: Workspace,
    store: Arc<SqliteStore>,
    /// Session name → its supervisor's task and the channel that asks it to stop.
    live: Mutex<HashMap<String, Running>>,
}

impl Loops {
    /// No loops yet.
    pub fn new(ws: Workspace, store: SqliteStore) -> Arc<Self> {
        Arc::new(Self { ws, store: Arc::new(store), live: Mutex::new(HashMap::new()) })
    }

    /// Starts a loop: claimed in `task_auto` (409 when its session or its directory already
    /// runs one), its agent started in a holder, supervised from now on. The status object
    /// as it is once the agent started.
    pub async fn start(self: &Arc<Self>, req: StartRequest) -> Result<AutoStatus, Error> {
        let this = Arc::clone(self);
        // Starting the agent blocks (the holder is waited for): off the runtime's workers.
        let handle = tokio::runtime::Handle::current();
        let sup = tokio::task::spawn_blocking(move || handle.block_on(auto::start(&this.ws, &this.store, &req, false)))
            .await
            .map_err(|e| Error::Internal(e.into()))??;
        let status = sup.status().clone();
        self.supervise(sup);
        Ok(status)
    }

    /// Takes over every loop recorded as active whose supervisor is gone (at the daemon's
    /// start); the sessions taken.
    pub async fn take_over(self: &Arc<Self>) -> Result<Vec<String>, Error> {
        let this = Arc::clone(self);
        let taken = tokio::task::spawn_blocking(move || auto::take_over(&this.ws, &this.store))
            .await
            .map_err(|e| Error::Internal(e.into()))??;
        let names = taken.iter().map(|s| s.status().session_name.clone()).collect();
        for sup in taken {
            self.supervise(sup);
        }
        Ok(names)
    }

    fn supervise(self: &Arc<Self>, sup: Supervisor) {
        let session = sup.status().session_name.clone();
        let (stop, stopped) = watch::channel(false);
        let this = Arc::clone(self);
        let name = session.clone();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let task = tokio::spawn(async move {
            let _ = sup.run(stopped).await;
            // This loop's entry only: a new loop of the session may have been started since.
            let me = tokio::task::id();
            let mut live = this.live.lock().unwrap_or_else(PoisonError::into_inner);
            if live.get(&name).is_some_and(|(_, t)| t.id() == me) {
                live.remove(&name);
            }
        });
        live.insert(session, (stop, task));
    }

    /// The journal connection the loops use.
    pub fn store(&self) -> &Arc<SqliteStore> {
        &self.store
    }

    /// True while this daemon supervises session `session`.
    pub fn supervises(&self, session: &str) -> bool {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).contains_key(session)
    }

    /// Sessions supervised here now.
    pub fn count(&self) -> usize {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The daemon stops: the supervisors end where they are (their state is saved at every
    /// step and keystrokes are journaled before they are typed); the agents keep running in
    /// their holders for the next daemon to take over.
    /// The channels asking them to stop are dropped only once every task ended: a supervisor
    /// that saw its channel closed would take it for a stop asked by a person.
    pub async fn detach_all(&self) {
        let all: Vec<_> = self.live.lock().unwrap_or_else(PoisonError::into_inner).drain().collect();
        for (_, (_, task)) in &all {
            task.abort();
        }
        let mut stops = Vec::new();
        for (_, (stop, task)) in all {
            let _ = task.await;
            stops.push(stop);
        }
        drop(stops);
    }
}
