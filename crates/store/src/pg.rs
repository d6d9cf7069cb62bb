//! The journal on PostgreSQL (SPEC §13): the same [`Store`] as SQLite's, for runs spread over
//! many machines.
//!
//! tokio-postgres with a deadpool pool (explicit SQL and typed row getters, as in the SQLite
//! store; a smaller binary and build than sqlx), TLS by rustls when the URL's `sslmode` asks. Every append is one transaction that locks
//! the run's row (one writer per run at a time) and then the feed counter's single row (feed
//! positions dense and in commit order); compare-and-append checks the run's last sequence
//! number under that lock. A serialization failure or a deadlock is retried; what is left
//! maps from its SQLSTATE to a typed [`StoreError`]. Versioned migrations (`src/pg/*.sql`) are
//! applied each in its own transaction under an advisory lock, so two processes starting at
//! once migrate once.

use std::collections::BTreeMap;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use loopwright_journal::{
    Event, EventRecord, FeedEntry, Outputs, Owner, RunId, RunPage, RunQuery, RunStatus, RunSummary, Store, StoreError,
    TaskId,
};
use loopwright_spec::StageId;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::Scrubber;

pub mod fleet;
mod forget;

/// The schema's migrations, oldest first: (version, SQL).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("pg/001_journal.sql")),
    (2, include_str!("pg/002_fleet.sql")),
    (3, include_str!("pg/003_limits.sql")),
    (4, include_str!("pg/004_runs_list.sql")),
    (5, include_str!("pg/005_pull_request.sql")),
    (6, include_str!("pg/006_spend.sql")),
];

/// The advisory lock migrations take (`loop` in ASCII).
const MIGRATION_LOCK: i64 = 0x6c6f_6f70;

/// The channel appends notify and feed watchers listen on.
const FEED_CHANNEL: &str = "loopwright_feed";

/// The channel told when a submitted run may be claimed: submitted, given back, or made
/// runnable again (approved, answered, resumed) while no live lease holds it. Idle workers
/// listen to it, not to every commit.
pub(crate) const WORK_CHANNEL: &str = "loopwright_work";

/// A watcher of the feed (see [`PgStore::watch_feed`]).
pub struct FeedWatch {
    _client: tokio_postgres::Client,
    woken: std::sync::Arc<tokio::sync::Notify>,
    alive: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FeedWatch {
    /// Waits until someone commits to the journal (true) or `pause` passes (false). Once the
    /// watcher's connection is gone it only waits out `pause`: the caller's polling carries on.
    pub async fn changed(&self, pause: Duration) -> bool {
        if !self.alive.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(pause).await;
            return false;
        }
        tokio::time::timeout(pause, self.woken.notified()).await.is_ok()
            && self.alive.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// True while its connection listens.
    pub fn listening(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for FeedWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The runtime every PostgreSQL connection of this process lives on: a thread of its own, so a
/// store opened on one runtime may be used from another (the daemon drives each run on a
/// runtime of its own) without its connections dying with the runtime that made them. A
/// client only talks to its connection over channels, which work across runtimes.
fn io() -> &'static tokio::runtime::Handle {
    static IO: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    IO.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot start the runtime of PostgreSQL connections: {e}"));
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("loopwright-pg".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .unwrap_or_else(|e| panic!("cannot start the thread of PostgreSQL connections: {e}"));
        handle
    })
}

/// deadpool's way of making connections, on [`io`]'s runtime.
struct OnIo {
    tls: tokio_postgres_rustls::MakeRustlsConnect,
}

impl deadpool_postgres::Connect for OnIo {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> futures_util::future::BoxFuture<
        '_,
        Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let (config, tls) = (config.clone(), self.tls.clone());
        Box::pin(async move {
            let made = io().spawn(async move {
                let (client, connection) = config.connect(tls).await?;
                let task = tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok((client, task))
            });
            match made.await {
                Ok(made) => made,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        })
    }
}

/// One event appended: the event row, the next feed position (the counter's row locked until
/// the commit) and its feed row, and the run's row brought up to date.
const APPEND: &str = "WITH position AS (UPDATE feed_counter SET last = last + 1 WHERE one RETURNING last),
     event AS (INSERT INTO events (run_id, seq, at, kind, stage, payload) VALUES ($1, $2, $3, $4, $5, $6)),
     fed AS (INSERT INTO feed (id, run_id, seq) SELECT last, $1, $2 FROM position)
UPDATE runs SET last_seq = $2, updated_at = $3, status = COALESCE($7, status) WHERE run_id = $1";

/// Tells idle workers of a submitted run that no live lease holds (`$1`, on channel `$2`).
const UNHELD_WORK: &str = "SELECT pg_notify($2, '') FROM submissions s
     WHERE s.run_id = $1 AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.run_id = $1 AND l.expires_at >= now())";

/// A status in which a submitted run is claimed by a worker (when no live lease holds it).
fn claimable(status: RunStatus) -> bool {
    matches!(status, RunStatus::Queued | RunStatus::Running | RunStatus::Interrupted)
}

/// The session setting that ends a transaction its client left idle (see `connect_trusting`).
const IDLE_IN_TRANSACTION: &str = "-c idle_in_transaction_session_timeout=5000";

/// How many times a transaction that lost a serialization race or a deadlock is tried.
const TRIES: u32 = 8;

/// A failure to open the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL does not say how to reach a database.
    #[error("`{url}` is not a PostgreSQL URL: {why}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// Why.
        why: String,
    },
    /// The database could not be reached or refused.
    #[error("cannot reach PostgreSQL at {url}: {why}")]
    Connect {
        /// The URL, its password hidden.
        url: String,
        /// Why.
        why: String,
    },
    /// The schema could not be brought up to date.
    #[error("cannot migrate the store at {url}: {why}")]
    Migrate {
        /// The URL, its password hidden.
        url: String,
        /// Why.
        why: String,
    },
}

/// The store on PostgreSQL. Clones share the pool.
#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: Pool,
    /// How to open a connection of its own (a feed watcher's `LISTEN`).
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// Redacts secrets from every event before it is written (as the SQLite store does).
    scrub: std::sync::Arc<std::sync::OnceLock<Scrubber>>,
    /// The lease every append of this handle must still hold (a worker's), if any.
    pub(crate) fence: Option<fleet::Fence>,
}

/// `url` with every password it carries replaced by `***`, for messages: the one in its user
/// information (up to the last `@` before the host, so a raw `@` in a password is hidden
/// too) and every `password` parameter of its query. A text that is not a URL is shown as
/// it is when it could hold no password (no `@`, `:` or `=`: a file name), else as `***`.
pub fn shown_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return if url.contains(['@', ':', '=']) { "***".to_owned() } else { url.to_owned() };
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query_pairs().any(|(k, _)| k.eq_ignore_ascii_case("password")) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") { "***".to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string().replace("%2A%2A%2A", "***")
}

/// Why the certificates of `sslrootcert` cannot be trusted.
#[derive(Debug, thiserror::Error)]
enum TlsError {
    #[error("cannot read the certificates in {file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("a certificate in {file} does not read: {reason}")]
    Malformed { file: String, reason: String },
    #[error("a certificate in {file} is refused: {reason}")]
    Refused { file: String, reason: String },
}

/// TLS for connections that ask for it (`sslmode`): rustls, trusting this machine's roots, or
/// only the certificates in the PEM file `root`.
fn tls(root: Option<&std::path::Path>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, TlsError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    // Fails only when another provider was installed first, which is as good.
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let config = match root {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let file = || path.display().to_string();
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| TlsError::Unreadable { file: file(), reason: e.to_string() })?;
            for cert in certs {
                let cert = cert.map_err(|e| TlsError::Malformed { file: file(), reason: e.to_string() })?;
                roots.add(cert).map_err(|e| TlsError::Refused { file: file(), reason: e.to_string() })?;
            }
            rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()
        }
        None => {
            use rustls_platform_verifier::ConfigVerifierExt;
            // A machine without roots can still reach a server without TLS; with TLS, every
            // certificate is then refused as unknown.
            rustls::ClientConfig::with_platform_verifier().unwrap_or_else(|_| {
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            })
        }
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A PostgreSQL failure as a store error: a lost serialization race or a deadlock (after the
/// retries) and a pool that waited too long are `Busy`, data that does not decode `Corrupt`,
/// anything else — a dropped connection, a full disk, a refused login — `Backend`.
pub(crate) fn backend(e: &tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED => {
            StoreError::Busy(e.to_string())
        }
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE || *c == SqlState::QUERY_CANCELED => {
            StoreError::Busy(e.to_string())
        }
        Some(c) if *c == SqlState::DATA_CORRUPTED || *c == SqlState::INDEX_CORRUPTED => {
            StoreError::Corrupt(e.to_string())
        }
        _ => match e.as_db_error() {
            Some(db) => StoreError::Backend(format!("PostgreSQL: {} ({})", db.message(), db.code().code())),
            None => {
                // The causes say what went wrong (a refused certificate, a closed port).
                let mut why = e.to_string();
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    why.push_str(&format!(": {c}"));
                    cause = c.source();
                }
                StoreError::Backend(format!("PostgreSQL: {why}"))
            }
        },
    }
}

pub(crate) fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => backend(&e),
        deadpool_postgres::PoolError::Timeout(_) => StoreError::Busy("no connection to PostgreSQL came free".into()),
        other => StoreError::Backend(format!("PostgreSQL: {other}")),
    }
}

/// True when a transaction failed only because another one won a race: it may simply be
/// tried again.
pub(crate) fn lost_a_race(e: &StoreError) -> bool {
    matches!(e, StoreError::Busy(why) if why.contains("serializ") || why.contains("deadlock"))
}

fn corrupt(run: &RunId, seq: i64, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("event {seq} of run {run}: {e}"))
}

fn owner_json(owner: Option<&Owner>) -> Result<Option<String>, StoreError> {
    owner.map(serde_json::to_string).transpose().map_err(|e| StoreError::Backend(e.to_string()))
}

fn micros(at: jiff::Timestamp) -> i64 {
    at.as_microsecond()
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Connects to the database `url` names (`postgres://user[:password]@host[:port]/db`,
    /// `?sslmode=disable|prefer|require` as libpq has it), with a pool of `size` connections,
    /// and migrates it to the current schema. TLS trusts this machine's roots, or only the
    /// certificates in the file `PGSSLROOTCERT` names (as libpq does).
    pub async fn connect(url: &str, size: usize) -> Result<Self, Error> {
        let root = std::env::var_os("PGSSLROOTCERT").map(std::path::PathBuf::from);
        Self::connect_trusting(url, size, root.as_deref()).await
    }

    /// [`PgStore::connect`] from synchronous code: the store's own runtime connects while this
    /// thread waits.
    pub fn connect_blocking(url: &str, size: usize) -> Result<Self, Error> {
        let (done, made) = std::sync::mpsc::channel();
        let url = url.to_owned();
        io().spawn(async move {
            let _ = done.send(Self::connect(&url, size).await);
        });
        made.recv().unwrap_or_else(|_| panic!("the runtime of PostgreSQL connections stopped"))
    }

    /// [`PgStore::connect`], TLS trusting only the certificates in the PEM file `root` when
    /// given.
    pub async fn connect_trusting(url: &str, size: usize, root: Option<&std::path::Path>) -> Result<Self, Error> {
        let shown = shown_url(url);
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| Error::Url { url: shown.clone(), why: e.to_string() })?;
        // A process frozen (or cut off) in the middle of a transaction must not hold the run's
        // row lock for ever: the server ends a transaction left idle this long, and the locks
        // go with it. Every transaction here lasts milliseconds.
        let options = match config.get_options() {
            Some(given) => format!("{given} {IDLE_IN_TRANSACTION}"),
            None => IDLE_IN_TRANSACTION.to_owned(),
        };
        config.options(options);
        let tls = tls(root).map_err(|why| Error::Connect { url: shown.clone(), why: why.to_string() })?;
        let manager = Manager::from_connect(
            config.clone(),
            OnIo { tls: tls.clone() },
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(size.max(1))
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(10)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::Connect { url: shown.clone(), why: e.to_string() })?;
        // One connection first: a server that is not there, refuses the login or shows a
        // certificate nobody vouches for is said so, not reported as a failed migration.
        let first = pool.get().await.map_err(|e| {
            let mut why = pool_error(e).to_string();
            if why.contains("certificate") {
                why.push_str(
                    " (PGSSLROOTCERT names the file of the certificate authority to trust; on a network you trust, ?sslmode=disable does without TLS)",
                );
            }
            Error::Connect { url: shown.clone(), why }
        })?;
        drop(first);
        let store = Self { pool, config, tls, scrub: std::sync::Arc::default(), fence: None };
        store.migrate().await.map_err(|e| Error::Migrate { url: shown.clone(), why: e.to_string() })?;
        Ok(store)
    }

    /// Redacts every event stored from now on with `scrub` (once; a second call is ignored).
    pub fn set_scrubber(&self, scrub: Scrubber) {
        let _ = self.scrub.set(scrub);
    }

    /// The schema version (the highest migration applied).
    pub async fn schema_version(&self) -> Result<i64, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_one("SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_migrations", &[])
            .await
            .map_err(|e| backend(&e))?;
        Ok(row.get(0))
    }

    /// Applies the migrations not applied yet, each in one transaction under an advisory lock.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        for (version, sql) in MIGRATIONS {
            let tx = client.transaction().await.map_err(|e| backend(&e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(|e| backend(&e))?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                     version    INTEGER PRIMARY KEY,
                     applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .map_err(|e| backend(&e))?;
            let done = tx
                .query_opt("SELECT 1 FROM schema_migrations WHERE version = $1", &[version])
                .await
                .map_err(|e| backend(&e))?
                .is_some();
            if !done {
                tx.batch_execute(sql).await.map_err(|e| backend(&e))?;
                tx.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[version])
                    .await
                    .map_err(|e| backend(&e))?;
            }
            tx.commit().await.map_err(|e| backend(&e))?;
        }
        Ok(())
    }

    /// Appends events in one transaction (after checking the run's journal ends at `expected`,
    /// when given): all of them are durable, or none. A transaction that lost a race is tried
    /// again.
    async fn append_checked(
        &self,
        run: &RunId,
        expected: Option<u64>,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut tries = 0;
        loop {
            match self.append_once(run, expected, events).await {
                Err(e) if lost_a_race(&e) && tries + 1 < TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(5 << tries.min(6))).await;
                }
                other => return other,
            }
        }
    }

    async fn append_once(
        &self,
        run: &RunId,
        expected: Option<u64>,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.append_with(run, expected, events, None).await
    }

    /// [`PgStore::append_once`], and the run's submission to workers in the same transaction.
    pub(crate) async fn append_with(
        &self,
        run: &RunId,
        expected: Option<u64>,
        events: &[(Event, jiff::Timestamp)],
        submission: Option<&fleet::Submission>,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| backend(&e))?;
        let pg = |e: tokio_postgres::Error| backend(&e);
        // The run's row, locked until the commit: one writer per run at a time.
        let lock =
            tx.prepare_cached("SELECT task_id, last_seq FROM runs WHERE run_id = $1 FOR UPDATE").await.map_err(pg)?;
        let mut cursor: Option<(String, i64)> =
            tx.query_opt(&lock, &[&run.as_str()]).await.map_err(pg)?.map(|row| (row.get(0), row.get(1)));
        if let Some(fence) = &self.fence {
            fleet::check_fence(&tx, run, fence).await?;
        }
        if let Some(expected) = expected {
            let Some((_, last)) = &cursor else { return Err(StoreError::RunNotFound(run.clone())) };
            let found = u64::try_from(*last).map_err(|e| corrupt(run, *last, e))?;
            if found != expected {
                return Err(StoreError::Conflict { run: run.clone(), expected, found });
            }
        }
        let mut records = Vec::with_capacity(events.len());
        for (event, at) in events {
            let at_text = at.to_string();
            let (seq, task_id) = match (cursor.take(), event) {
                (None, Event::RunStarted(started)) => {
                    let owner = owner_json(started.owner.as_ref())?;
                    let made = tx
                        .execute(
                            "INSERT INTO runs (run_id, pipeline, task_id, status, created_at, created_us, updated_at, last_seq, owner)
                             VALUES ($1, $2, $3, $4, $5, $6, $5, 0, $7) ON CONFLICT (run_id) DO NOTHING",
                            &[
                                &run.as_str(),
                                &started.pipeline,
                                &started.task_id.as_str(),
                                &RunStatus::Running.as_str(),
                                &at_text,
                                &micros(*at),
                                &owner,
                            ],
                        )
                        .await
                        .map_err(pg)?;
                    if made == 0 {
                        return Err(StoreError::Exists(run.clone()));
                    }
                    (1_i64, started.task_id.to_string())
                }
                (None, _) => return Err(StoreError::RunNotFound(run.clone())),
                (Some(_), Event::RunStarted(_)) => return Err(StoreError::Exists(run.clone())),
                (Some((task, last)), _) => (last + 1, task),
            };
            cursor = Some((task_id.clone(), seq));
            let mut payload = serde_json::to_string(event).map_err(|e| StoreError::Backend(e.to_string()))?;
            let mut stored = None;
            if let Some(clean) = self.scrub.get().and_then(|scrub| scrub(&payload)) {
                let event: Event = serde_json::from_str(&clean)
                    .map_err(|e| StoreError::Backend(format!("redacting event {seq} of run {run} broke it: {e}")))?;
                (payload, stored) = (clean, Some(event));
            }
            // The event, its feed position and the run's row, in one statement (one round trip).
            // The feed counter's row stays locked until the commit: positions in commit order.
            let status = event.run_status().map(RunStatus::as_str);
            let append = tx.prepare_cached(APPEND).await.map_err(pg)?;
            tx.execute(
                &append,
                &[&run.as_str(), &seq, &at_text, &event.kind(), &event.stage().map(StageId::as_str), &payload, &status],
            )
            .await
            .map_err(pg)?;
            // What the runs list shows, as stored (redacted).
            let shown = stored.as_ref().unwrap_or(event);
            if let Event::RunStarted(started) = shown {
                tx.execute("UPDATE runs SET task = $2 WHERE run_id = $1", &[&run.as_str(), &started.task])
                    .await
                    .map_err(pg)?;
            }
            if shown.is_work() {
                tx.execute(
                    "UPDATE runs SET running_at = $2 WHERE run_id = $1 AND running_at IS NULL",
                    &[&run.as_str(), &at_text],
                )
                .await
                .map_err(pg)?;
            }
            if let Some(person) = shown.person() {
                let marked = format!("\n{person}\n");
                tx.execute(
                    "UPDATE runs SET people = CASE WHEN people = '' THEN $2 ELSE people || $3 END
                     WHERE run_id = $1 AND strpos(people, $2) = 0",
                    &[&run.as_str(), &marked, &format!("{person}\n")],
                )
                .await
                .map_err(pg)?;
            }
            if let Event::Delivered(d) = event {
                tx.execute(
                    "UPDATE runs SET pr_number = $2, pr_url = $3 WHERE run_id = $1",
                    &[&run.as_str(), &i64::try_from(d.number).unwrap_or(0), &d.url],
                )
                .await
                .map_err(pg)?;
            }
            if let Event::RunResumed { owner, .. } = event {
                tx.execute("UPDATE runs SET owner = $2 WHERE run_id = $1", &[&run.as_str(), &owner_json(Some(owner))?])
                    .await
                    .map_err(pg)?;
            }
            if let Event::StageRolledBack {
                stage,
                strategy: loopwright_spec::pipeline::RollbackStrategy::MemoryCleanup,
                status: loopwright_journal::event::RollbackStatus::Success,
                ..
            } = event
            {
                tx.execute("DELETE FROM artifacts WHERE run_id = $1 AND stage = $2", &[&run.as_str(), &stage.as_str()])
                    .await
                    .map_err(pg)?;
            }
            if let Event::AttemptSucceeded { stage, outputs, .. } = event {
                for (key, value) in outputs {
                    tx.execute(
                        "INSERT INTO artifacts (run_id, task_id, stage, key, value, seq) VALUES ($1, $2, $3, $4, $5, $6)
                         ON CONFLICT (run_id, stage, key) DO UPDATE SET value = EXCLUDED.value, seq = EXCLUDED.seq",
                        &[&run.as_str(), &task_id, &stage.as_str(), key, value, &seq],
                    )
                    .await
                    .map_err(pg)?;
                }
            }
            let seq_out = u64::try_from(seq).map_err(|e| corrupt(run, seq, e))?;
            records.push(EventRecord { seq: seq_out, at: *at, event: stored.unwrap_or_else(|| event.clone()) });
        }
        // Watchers listening are told at the commit (a wake-up; the feed stays the truth).
        let notify = tx.prepare_cached("SELECT pg_notify($1, '')").await.map_err(pg)?;
        if let Some(submission) = submission {
            fleet::insert_submission(&tx, run, submission).await?;
            tx.execute(&notify, &[&WORK_CHANNEL]).await.map_err(pg)?;
        } else if events.iter().any(|(e, _)| e.run_status().is_some_and(claimable)) {
            let unheld = tx.prepare_cached(UNHELD_WORK).await.map_err(pg)?;
            tx.execute(&unheld, &[&run.as_str(), &WORK_CHANNEL]).await.map_err(pg)?;
        }
        tx.execute(&notify, &[&FEED_CHANNEL]).await.map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(records)
    }

    /// A watcher of the feed: woken by `NOTIFY` when anyone commits to the journal, on a
    /// connection of its own (a pooled one would drop notifications). The wake-up is a hint:
    /// the caller reads the feed for what changed, and polls it at its own pace too, since a
    /// notification sent while the watcher's connection was down is lost.
    pub async fn watch_feed(&self) -> Result<FeedWatch, StoreError> {
        self.watch(FEED_CHANNEL).await
    }

    /// A watcher of work for idle workers: woken when a submitted run may be claimed
    /// (submitted, given back, or runnable again with no live lease), not by every commit. A
    /// lease that runs out tells nobody: the caller looks at its own pace too.
    pub async fn watch_work(&self) -> Result<FeedWatch, StoreError> {
        self.watch(WORK_CHANNEL).await
    }

    /// `LISTEN channel` on a connection of its own.
    async fn watch(&self, channel: &'static str) -> Result<FeedWatch, StoreError> {
        use futures_util::StreamExt;
        let (config, tls) = (self.config.clone(), self.tls.clone());
        let woken = std::sync::Arc::new(tokio::sync::Notify::new());
        let alive = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (tell, up) = (std::sync::Arc::clone(&woken), std::sync::Arc::clone(&alive));
        let (made, client) = tokio::sync::oneshot::channel();
        // Connected and driven on the connections' runtime, where the socket lives.
        let task = io().spawn(async move {
            let (client, mut connection) = match config.connect(tls).await {
                Ok(pair) => pair,
                Err(e) => {
                    let _ = made.send(Err(e));
                    return;
                }
            };
            let _ = made.send(Ok(client));
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => tell.notify_one(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            up.store(false, std::sync::atomic::Ordering::SeqCst);
            tell.notify_one();
        });
        let client = client
            .await
            .map_err(|_| StoreError::Backend("PostgreSQL: the feed watcher's connection ended".into()))?
            .map_err(|e| backend(&e))?;
        client.batch_execute(&format!("LISTEN {channel}")).await.map_err(|e| backend(&e))?;
        Ok(FeedWatch { _client: client, woken, alive, task })
    }

    /// Runs as `source` (`FROM … r WHERE … ORDER BY … LIMIT …`, `r` having the columns of `runs`)
    /// selects them.
    async fn runs_where(&self, source: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<RunSummary>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                &format!(
                    "SELECT r.run_id, r.pipeline, r.task_id, r.status, r.created_at, r.updated_at, r.owner, r.task,
                            r.running_at, r.people, r.pr_number, r.pr_url
                     {source}"
                ),
                params,
            )
            .await
            .map_err(|e| backend(&e))?;
        rows.iter()
            .map(|row| {
                let run_id: String = row.get(0);
                let bad = |what: String| StoreError::Corrupt(format!("run {run_id}: {what}"));
                let status: String = row.get(3);
                let task_id: String = row.get(2);
                let created_at: String = row.get(4);
                let updated_at: String = row.get(5);
                let owner: Option<String> = row.get(6);
                let running_at: Option<String> = row.get(8);
                let people: String = row.get(9);
                Ok(RunSummary {
                    status: RunStatus::parse(&status).ok_or_else(|| bad(format!("unknown status `{status}`")))?,
                    pipeline: row.get(1),
                    task_id: TaskId::parse(&task_id).ok_or_else(|| bad(format!("bad task id `{task_id}`")))?,
                    created_at: created_at.parse().map_err(|e| bad(format!("{e}")))?,
                    updated_at: updated_at.parse().map_err(|e| bad(format!("{e}")))?,
                    owner: owner
                        .map(|o| serde_json::from_str(&o))
                        .transpose()
                        .map_err(|e| bad(format!("owner: {e}")))?,
                    task: row.get(7),
                    running_at: running_at.map(|t| t.parse()).transpose().map_err(|e| bad(format!("{e}")))?,
                    people: people.split('\n').filter(|p| !p.is_empty()).map(str::to_owned).collect(),
                    pull_request: crate::pull_request(row.get(10), row.get(11)),
                    run_id: RunId::new(run_id.clone()),
                })
            })
            .collect()
    }

    async fn events_after(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT seq, at, payload FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq",
                &[&run.as_str(), &after],
            )
            .await
            .map_err(|e| backend(&e))?;
        rows.iter()
            .map(|row| {
                let (seq, at, payload): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
                Ok(EventRecord {
                    seq: u64::try_from(seq).map_err(|e| corrupt(run, seq, e))?,
                    at: at.parse().map_err(|e| corrupt(run, seq, format!("bad time `{at}`: {e}")))?,
                    event: serde_json::from_str(&payload).map_err(|e| corrupt(run, seq, e))?,
                })
            })
            .collect()
    }
}

impl Store for PgStore {
    async fn append(&self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError> {
        let mut records = self.append_checked(run, None, &[(event.clone(), at)]).await?;
        records.pop().ok_or_else(|| StoreError::Backend("an append returned no event".into()))
    }

    async fn append_all(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.append_checked(run, None, events).await
    }

    async fn append_after(
        &self,
        run: &RunId,
        expected_last: u64,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.append_checked(run, Some(expected_last), events).await
    }

    async fn events_since(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        self.events_after(run, after).await
    }

    async fn events(&self, run: &RunId) -> Result<Vec<EventRecord>, StoreError> {
        let records = self.events_after(run, 0).await?;
        if records.is_empty() {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        Ok(records)
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_where("FROM runs r ORDER BY r.created_us DESC, r.run_id DESC LIMIT $1", &[&count(limit)]).await
    }

    async fn task_outputs(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT a.run_id, a.stage, a.key, a.value FROM artifacts a
                 JOIN runs r ON r.run_id = a.run_id
                 WHERE a.task_id = $1
                 ORDER BY r.created_us, r.run_id, a.seq",
                &[&task.as_str()],
            )
            .await
            .map_err(|e| backend(&e))?;
        Ok(loopwright_journal::store::latest_outputs(
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))),
        ))
    }

    async fn cancel_requested(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_opt(
                "SELECT payload FROM events WHERE run_id = $1 AND kind = 'cancel_requested' AND seq > $2
                 ORDER BY seq LIMIT 1",
                &[&run.as_str(), &i64::try_from(after).unwrap_or(i64::MAX)],
            )
            .await
            .map_err(|e| backend(&e))?;
        match row.map(|r| serde_json::from_str::<Event>(&r.get::<_, String>(0))) {
            Some(Ok(Event::CancelRequested { by, rollback })) => Ok(Some((by, rollback))),
            Some(Ok(_)) | None => Ok(None),
            Some(Err(e)) => Err(StoreError::Corrupt(format!("a cancel request of run {run}: {e}"))),
        }
    }

    async fn runs_in(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError> {
        let wanted: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        self.runs_where("FROM runs r WHERE r.status = ANY($1) ORDER BY r.created_us, r.run_id", &[&wanted]).await
    }

    async fn runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        let mut wheres: Vec<String> = Vec::new();
        let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let mut arg = |v: Box<dyn ToSql + Sync + Send>| {
            args.push(v);
            format!("${}", args.len())
        };
        if !query.statuses.is_empty() {
            let names: Vec<String> = query.statuses.iter().map(|s| s.as_str().to_owned()).collect();
            wheres.push(format!("r.status = ANY({})", arg(Box::new(names))));
        }
        if let Some(p) = &query.pipeline {
            wheres.push(format!("r.pipeline = {}", arg(Box::new(p.clone()))));
        }
        if let Some(t) = &query.text {
            // ILIKE ignores case; `\` escapes the text's own `%` and `_`.
            let escaped = t.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            let p = arg(Box::new(format!("%{escaped}%")));
            wheres.push(format!("(r.task ILIKE {p} OR r.task_id ILIKE {p} OR r.run_id ILIKE {p})"));
        }
        if let Some(person) = &query.person {
            wheres.push(format!("strpos(r.people, {}) > 0", arg(Box::new(format!("\n{person}\n")))));
        }
        if let Some(since) = query.since {
            wheres.push(format!("r.created_us >= {}", arg(Box::new(micros(since)))));
        }
        if let Some(until) = query.until {
            wheres.push(format!("r.created_us < {}", arg(Box::new(micros(until)))));
        }
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a.as_ref() as &(dyn ToSql + Sync)).collect();
        // Every run is counted as it is added; a filtered list counts what it matches.
        let counted = if wheres.is_empty() {
            "SELECT n FROM run_count".to_owned()
        } else {
            format!("SELECT COUNT(*) FROM runs r WHERE {}", wheres.join(" AND "))
        };
        let total: i64 = {
            let client = self.pool.get().await.map_err(pool_error)?;
            client.query_opt(&counted, &params).await.map_err(|e| backend(&e))?.map_or(0, |row| row.get(0))
        };
        let (limit, offset, upto) =
            (count(query.limit), count(query.offset), count(query.limit.saturating_add(query.offset)));
        let mut all = params;
        all.push(&limit);
        all.push(&offset);
        let (limit_at, offset_at) = (all.len() - 1, all.len());
        let newest = "ORDER BY r.created_us DESC, r.run_id DESC";
        let filter = |more: &str| {
            let all: Vec<&str> = wheres.iter().map(String::as_str).chain((!more.is_empty()).then_some(more)).collect();
            if all.is_empty() { String::new() } else { format!("WHERE {}", all.join(" AND ")) }
        };
        let source = if query.waiting_first {
            // The waiting runs and the others (newest first), each cut at the page's end before
            // they are merged: no sort over every run.
            all.push(&upto);
            let upto_at = all.len();
            format!(
                "FROM ((SELECT * FROM runs r {} {newest} LIMIT ${upto_at})
                       UNION ALL
                       (SELECT * FROM runs r {} {newest} LIMIT ${upto_at})) r
                 ORDER BY (r.status = 'waiting') DESC, r.created_us DESC, r.run_id DESC LIMIT ${limit_at} OFFSET ${offset_at}",
                filter("r.status = 'waiting'"),
                filter("r.status <> 'waiting'"),
            )
        } else {
            format!("FROM runs r {} {newest} LIMIT ${limit_at} OFFSET ${offset_at}", filter(""))
        };
        let runs = self.runs_where(&source, &all).await?;
        Ok(RunPage { runs, total: u64::try_from(total).unwrap_or(0) })
    }

    async fn feed_since(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT f.id, f.run_id, e.seq, e.at, e.payload FROM feed f
                 JOIN events e ON e.run_id = f.run_id AND e.seq = f.seq
                 WHERE f.id > $1 ORDER BY f.id LIMIT $2",
                &[&i64::try_from(after).unwrap_or(i64::MAX), &count(limit)],
            )
            .await
            .map_err(|e| backend(&e))?;
        rows.iter()
            .map(|row| {
                let (id, run, seq, at, payload): (i64, String, i64, String, String) =
                    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                let run = RunId::new(run);
                let record = EventRecord {
                    seq: u64::try_from(seq).map_err(|e| corrupt(&run, seq, e))?,
                    at: at.parse().map_err(|e| corrupt(&run, seq, format!("bad time `{at}`: {e}")))?,
                    event: serde_json::from_str(&payload).map_err(|e| corrupt(&run, seq, e))?,
                };
                Ok(FeedEntry { position: u64::try_from(id).unwrap_or(0), run, record })
            })
            .collect()
    }

    async fn feed_last(&self) -> Result<u64, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let last: i64 = client.query_one("SELECT last FROM feed_counter", &[]).await.map_err(|e| backend(&e))?.get(0);
        Ok(u64::try_from(last).unwrap_or(0))
    }

    /// The feed's last position: it moves with every commit to the journal, by anyone.
    async fn data_version(&self) -> Result<u64, StoreError> {
        self.feed_last().await
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn every_password_a_url_carries_is_hidden() {
        let shown: Vec<String> = [
            "postgres://lw:secret@db.example:5432/loopwright",
            "postgres://lw:p@ss@db/loopwright",
            "postgresql://lw@db/loopwright?password=secret&sslmode=require",
            "postgres://db/loopwright?PASSWORD=secret",
            "postgres://lw@db/loopwright",
            "host=db password=secret",
            "state.db",
        ]
        .iter()
        .map(|u| shown_url(u))
        .collect();
        assert_eq!(
            shown,
            [
                "postgres://lw:***@db.example:5432/loopwright",
                "postgres://lw:***@db/loopwright",
                "postgresql://lw@db/loopwright?password=***&sslmode=require",
                "postgres://db/loopwright?PASSWORD=***",
                "postgres://lw@db/loopwright",
                "***",
                "state.db",
            ]
        );
    }
}
