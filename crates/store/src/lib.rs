//! The SQLite store: loopwright's durable journal.
//!
//! Every event is appended in one `BEGIN IMMEDIATE` transaction together with the updates of
//! the tables derived from it (`runs`, `artifacts`), in WAL mode. The schema is versioned
//! with `rusqlite_migration` (SQLite `user_version`); migrations are never edited once
//! released, only added.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use loopwright_journal::{
    Event, EventRecord, FeedEntry, Outputs, Owner, RunId, RunPage, RunQuery, RunStatus, RunSummary, Store, StoreError,
    TaskId,
};
use loopwright_spec::StageId;
use loopwright_spec::config::Synchronous;
use rusqlite::{Connection, OptionalExtension, params};
use rusqlite_migration::{M, Migrations};

pub mod auto;
mod forget;
mod journal;
pub mod limits;
pub mod notify;
pub mod pg;
pub mod spend;

pub use journal::Journal;
pub use pg::fleet;

/// The schema's migrations, oldest first.
fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(include_str!("migrations/001_journal.sql")),
        M::up(include_str!("migrations/002_feed.sql")),
        M::up(include_str!("migrations/003_owner.sql")),
        M::up(include_str!("migrations/004_task_auto.sql")),
        M::up(include_str!("migrations/005_runs_list.sql")),
        M::up(include_str!("migrations/006_notifications.sql")),
        M::up(include_str!("migrations/007_limits.sql")),
        M::up(include_str!("migrations/008_notifier.sql")),
        M::up(include_str!("migrations/009_runs_list_indexes.sql")),
        M::up(include_str!("migrations/010_pull_request.sql")),
        M::up(include_str!("migrations/011_spend.sql")),
    ])
}

/// A failure to open the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SQLite refused.
    #[error("cannot open the store at {path}: {source}")]
    Open {
        /// The database file.
        path: String,
        /// Why.
        source: rusqlite::Error,
    },
    /// The schema could not be brought up to date.
    #[error("cannot migrate the store at {path}: {source}")]
    Migrate {
        /// The database file.
        path: String,
        /// Why.
        source: rusqlite_migration::Error,
    },
}

/// Reading connections a store keeps between reads.
const READERS: usize = 4;

/// The page cache of a reading connection, in KiB (SQLite's `cache_size` as a negative
/// number): a quarter of SQLite's default.
const READER_CACHE_KIB: i64 = -512;

/// A connection lent for reading (see [`SqliteStore::reader`]); given back when dropped.
pub(crate) struct Reader<'a> {
    store: &'a SqliteStore,
    own: Option<Connection>,
    writer: Option<MutexGuard<'a, Connection>>,
}

impl std::ops::Deref for Reader<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match (&self.own, &self.writer) {
            (Some(conn), _) => conn,
            (None, Some(writer)) => writer,
            (None, None) => unreachable!("a reader holds a connection"),
        }
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.own.take() {
            let mut kept = self.store.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if kept.len() < READERS {
                kept.push(conn);
            }
        }
    }
}

/// Rewrites an event's JSON before it is stored: `Some(clean)` when it changed something.
pub type Scrubber = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The SQLite store.
pub struct SqliteStore {
    /// The connection that writes (and answers `data_version`).
    conn: Mutex<Connection>,
    /// The database file (none in memory): readers open connections of their own to it.
    path: Option<std::path::PathBuf>,
    /// Connections that only read, kept for the next read: WAL lets them read while the
    /// writer writes, so a list or a page never waits behind a run's journal appends.
    readers: Mutex<Vec<Connection>>,
    /// Redacts secrets from every event before it is written (a last line of defence: the
    /// runners redact what they return, and this catches what reaches the journal otherwise).
    scrub: std::sync::OnceLock<Scrubber>,
}

/// A SQLite failure as a store error: a lock held too long is `Busy`, a damaged file
/// `Corrupt`, anything else `Backend`.
pub(crate) fn backend(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseCorrupt, DatabaseLocked, NotADatabase};
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => StoreError::Busy(e.to_string()),
        Some(DatabaseCorrupt | NotADatabase) => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Backend(e.to_string()),
    }
}

/// An owner as the runs table keeps it (JSON, as in the events).
fn owner_json(owner: Option<&Owner>) -> rusqlite::Result<Option<String>> {
    owner.map(serde_json::to_string).transpose().map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// A value read back from the journal that does not decode.
fn corrupt(run: &RunId, seq: i64, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("event {seq} of run {run}: {e}"))
}

/// The journal holds what agents printed and people answered: the database file is made (or
/// made again) readable by its owner only before SQLite opens it, and so are its WAL and
/// shared-memory files, which SQLite creates with the database's mode.
fn private(path: &Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let _ = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = std::path::PathBuf::from(name);
        if let Ok(meta) = std::fs::symlink_metadata(&file)
            && meta.is_file()
            && meta.permissions().mode() & 0o077 != 0
        {
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and migrates it to the current schema.
    /// Several processes may open a new store at once (concurrent runs): switching it to WAL
    /// can then report it locked without waiting, so that is tried again for a while.
    pub fn open(path: &Path, synchronous: Synchronous) -> Result<Self, Error> {
        let mut tries = 0;
        loop {
            match Self::open_once(path, synchronous) {
                Err(Error::Open { source, .. })
                    if tries < 50
                        && source.sqlite_error_code().is_some_and(|c| {
                            matches!(c, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                        }) =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, synchronous: Synchronous) -> Result<Self, Error> {
        let shown = path.display().to_string();
        let open_err = |source| Error::Open { path: shown.clone(), source };
        private(path);
        let mut conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(open_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(open_err)?;
        let sync = match synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(open_err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(open_err)?;
        // Checkpoints are the only fsyncs in WAL mode with synchronous=NORMAL: let the WAL grow
        // to ~16 MB before one, so a long run pays for a few rather than one every ~300 events.
        conn.pragma_update(None, "wal_autocheckpoint", 4000).map_err(open_err)?;
        // Two processes opening a new store at once both see version 0; the one that loses the
        // race fails on the tables the other created, and finds the store migrated next time.
        let mut tries = 0;
        loop {
            match migrations().to_latest(&mut conn) {
                Ok(()) => break,
                Err(_) if tries < 20 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(source) => return Err(Error::Migrate { path: shown, source }),
            }
        }
        Ok(Self {
            conn: Mutex::new(conn),
            path: Some(path.to_path_buf()),
            readers: Mutex::default(),
            scrub: std::sync::OnceLock::new(),
        })
    }

    /// An in-memory store (tests).
    pub fn in_memory() -> Result<Self, Error> {
        let mut conn =
            Connection::open_in_memory().map_err(|source| Error::Open { path: ":memory:".into(), source })?;
        migrations().to_latest(&mut conn).map_err(|source| Error::Migrate { path: ":memory:".into(), source })?;
        Ok(Self { conn: Mutex::new(conn), path: None, readers: Mutex::default(), scrub: std::sync::OnceLock::new() })
    }

    /// A connection to read with: one of the readers (opened on first need, at most
    /// [`READERS`] kept), or the writer's for a store in memory or when none can be opened.
    pub(crate) fn reader(&self) -> Reader<'_> {
        let kept = self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let conn = kept.or_else(|| {
            let path = self.path.as_ref()?;
            let conn = Connection::open(path).ok()?;
            conn.busy_timeout(Duration::from_secs(10)).ok()?;
            conn.pragma_update(None, "query_only", "ON").ok()?;
            // A small page cache of its own: the system's file cache holds the database for
            // every reader, and a kept reader's cache is memory the daemon holds while idle.
            conn.pragma_update(None, "cache_size", READER_CACHE_KIB).ok()?;
            Some(conn)
        });
        match conn {
            Some(conn) => Reader { store: self, own: Some(conn), writer: None },
            None => Reader { store: self, own: None, writer: Some(self.conn()) },
        }
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Redacts every event stored from now on with `scrub` (once; a second call is ignored).
    pub fn set_scrubber(&self, scrub: Scrubber) {
        let _ = self.scrub.set(scrub);
    }

    /// Gives back what the store's connections hold and do not need (a quiet daemon): the kept
    /// readers are closed (opened again when next needed) and the writer's page cache freed.
    pub fn release_memory(&self) {
        self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        let _ = self.conn().execute_batch("PRAGMA shrink_memory");
    }

    /// `text` as the scrubber leaves it (as it is without one).
    pub(crate) fn scrubbed<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match self.scrub.get().and_then(|scrub| scrub(text)) {
            Some(clean) => std::borrow::Cow::Owned(clean),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    /// The schema version (number of migrations applied).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn().pragma_query_value(None, "user_version", |r| r.get(0)).map_err(backend)
    }

    /// Appends events in one transaction: all of them are durable, or none.
    ///
    /// This is the hot path of every run (a transaction or two per stage), so the transaction
    /// statements are prepared once and cached rather than parsed each time (as rusqlite's
    /// `Transaction` would), and the run's last sequence number is read once per transaction.
    fn append_sync(
        &self,
        run: &RunId,
        expected: Option<u64>,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        let conn = self.conn();
        if !conn.is_autocommit() {
            // An append that panicked midway left its transaction open: none of it stays.
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut stmt| stmt.execute([])).map_err(backend)?;
        let mut cursor = None;
        let appended: Result<Vec<EventRecord>, StoreError> = Self::check_last(&conn, &mut cursor, run, expected)
            .and_then(|()| {
                events.iter().map(|(event, at)| self.append_in(&conn, &mut cursor, run, event, *at)).collect()
            })
            .and_then(|records: Vec<EventRecord>| {
                // The run's row says when its journal last moved, for the runs list.
                if let Some(last) = records.last() {
                    conn.prepare_cached("UPDATE runs SET last_seq = ?2, updated_at = ?3 WHERE run_id = ?1")
                        .and_then(|mut stmt| {
                            stmt.execute(params![
                                run.as_str(),
                                i64::try_from(last.seq).unwrap_or(i64::MAX),
                                last.at.to_string()
                            ])
                        })
                        .map_err(backend)?;
                }
                Ok(records)
            });
        let ended = match &appended {
            Ok(_) => conn.prepare_cached("COMMIT").and_then(|mut stmt| stmt.execute([])).map_err(backend),
            Err(_) => Ok(0),
        };
        if (appended.is_err() || ended.is_err()) && !conn.is_autocommit() {
            // Nothing of a failed append stays: the journal has all of the events or none.
            let _ = conn.execute_batch("ROLLBACK");
        }
        ended?;
        appended
    }

    /// Inside the open transaction: fails with `Conflict` unless the run's journal ends at
    /// `expected` (when one is given), and leaves the run's cursor for the appends that follow.
    fn check_last(
        conn: &Connection,
        cursor: &mut Option<(String, i64)>,
        run: &RunId,
        expected: Option<u64>,
    ) -> Result<(), StoreError> {
        let Some(expected) = expected else { return Ok(()) };
        *cursor = Self::cursor(conn, run)?;
        let Some((_, last)) = cursor else { return Err(StoreError::RunNotFound(run.clone())) };
        let found = u64::try_from(*last).map_err(|e| corrupt(run, *last, e))?;
        if found != expected {
            return Err(StoreError::Conflict { run: run.clone(), expected, found });
        }
        Ok(())
    }

    /// The run's task id and last sequence number, if the run exists.
    fn cursor(conn: &Connection, run: &RunId) -> Result<Option<(String, i64)>, StoreError> {
        conn.prepare_cached(
            "SELECT task_id, (SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1) FROM runs WHERE run_id = ?1",
        )
        .and_then(|mut stmt| stmt.query_row([run.as_str()], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(backend)
    }

    /// Writes one event inside the open transaction. `cursor` carries the run's task id and
    /// last sequence number from one event of the transaction to the next.
    fn append_in(
        &self,
        conn: &Connection,
        cursor: &mut Option<(String, i64)>,
        run: &RunId,
        event: &Event,
        at: jiff::Timestamp,
    ) -> Result<EventRecord, StoreError> {
        if cursor.is_none() && !matches!(event, Event::RunStarted(_)) {
            *cursor = Self::cursor(conn, run)?;
        }
        let at_text = at.to_string();
        let (seq, task_id): (i64, String) = match (cursor.take(), event) {
            (None, Event::RunStarted(started)) => {
                let exists = conn
                    .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
                    .and_then(|mut stmt| stmt.exists([run.as_str()]))
                    .map_err(backend)?;
                if exists {
                    return Err(StoreError::Exists(run.clone()));
                }
                conn.prepare_cached(
                    "INSERT INTO runs (run_id, pipeline, task_id, status, created_at, updated_at, last_seq, owner) VALUES (?1, ?2, ?3, ?4, ?5, ?5, 0, ?6)",
                )
                .and_then(|mut stmt| {
                    stmt.execute(params![
                        run.as_str(),
                        started.pipeline,
                        started.task_id.as_str(),
                        RunStatus::Running.as_str(),
                        at_text,
                        owner_json(started.owner.as_ref())?
                    ])
                })
                .map_err(backend)?;
                (1, started.task_id.to_string())
            }
            (None, _) => return Err(StoreError::RunNotFound(run.clone())),
            (Some(_), Event::RunStarted(_)) => return Err(StoreError::Exists(run.clone())),
            // The next sequence number comes from the journal itself (primary key lookup), so
            // an ordinary event writes only its own row.
            (Some((task, last)), _) => (last + 1, task),
        };
        *cursor = Some((task_id.clone(), seq));
        let seq_out = u64::try_from(seq).map_err(|e| corrupt(run, seq, e))?;
        let mut payload = serde_json::to_string(event).map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut stored = None;
        if let Some(clean) = self.scrub.get().and_then(|scrub| scrub(&payload)) {
            let event: Event = serde_json::from_str(&clean)
                .map_err(|e| StoreError::Backend(format!("redacting event {seq} of run {run} broke it: {e}")))?;
            (payload, stored) = (clean, Some(event));
        }
        conn.prepare_cached(
            "INSERT INTO events (run_id, seq, at, kind, stage, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![run.as_str(), seq, at_text, event.kind(), event.stage().map(StageId::as_str), payload])
        })
        .map_err(backend)?;
        conn.prepare_cached("INSERT INTO feed (run_id, seq) VALUES (?1, ?2)")
            .and_then(|mut stmt| stmt.execute(params![run.as_str(), seq]))
            .map_err(backend)?;
        if let Some(status) = event.run_status() {
            conn.prepare_cached("UPDATE runs SET status = ?2 WHERE run_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), status.as_str()]))
                .map_err(backend)?;
        }
        // What the runs list shows, as stored (redacted).
        let shown = stored.as_ref().unwrap_or(event);
        if let Event::RunStarted(started) = shown {
            conn.prepare_cached("UPDATE runs SET task = ?2 WHERE run_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), started.task]))
                .map_err(backend)?;
        }
        if shown.is_work() {
            conn.prepare_cached("UPDATE runs SET running_at = ?2 WHERE run_id = ?1 AND running_at IS NULL")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), at_text]))
                .map_err(backend)?;
        }
        if let Some(person) = shown.person() {
            conn.prepare_cached(
                "UPDATE runs SET people = CASE WHEN people = '' THEN char(10) || ?2 || char(10)
                     ELSE people || ?2 || char(10) END
                 WHERE run_id = ?1 AND instr(people, char(10) || ?2 || char(10)) = 0",
            )
            .and_then(|mut stmt| stmt.execute(params![run.as_str(), person]))
            .map_err(backend)?;
        }
        if let Event::Delivered(d) = event {
            conn.prepare_cached("UPDATE runs SET pr_number = ?2, pr_url = ?3 WHERE run_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), i64::try_from(d.number).unwrap_or(0), d.url]))
                .map_err(backend)?;
        }
        if let Event::RunResumed { owner, .. } = event {
            conn.prepare_cached("UPDATE runs SET owner = ?2 WHERE run_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), owner_json(Some(owner))?]))
                .map_err(backend)?;
        }
        if let Event::StageRolledBack {
            stage,
            strategy: loopwright_spec::pipeline::RollbackStrategy::MemoryCleanup,
            status: loopwright_journal::event::RollbackStatus::Success,
            ..
        } = event
        {
            conn.prepare_cached("DELETE FROM artifacts WHERE run_id = ?1 AND stage = ?2")
                .and_then(|mut stmt| stmt.execute(params![run.as_str(), stage.as_str()]))
                .map_err(backend)?;
        }
        if let Event::AttemptSucceeded { stage, outputs, .. } = event {
            let mut insert = conn
                .prepare_cached("INSERT OR REPLACE INTO artifacts (run_id, task_id, stage, key, value, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                .map_err(backend)?;
            for (key, value) in outputs {
                insert.execute(params![run.as_str(), task_id, stage.as_str(), key, value, seq]).map_err(backend)?;
            }
        }
        Ok(EventRecord { seq: seq_out, at, event: stored.unwrap_or_else(|| event.clone()) })
    }

    fn feed_since_sync(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare_cached(
                "SELECT f.id, f.run_id, e.seq, e.at, e.payload FROM feed f
                 JOIN events e ON e.run_id = f.run_id AND e.seq = f.seq
                 WHERE f.id > ?1 ORDER BY f.id LIMIT ?2",
            )
            .map_err(backend)?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![after, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(backend)?;
        let mut out = Vec::new();
        for row in rows {
            let (id, run, seq, at, payload) = row.map_err(backend)?;
            let run = RunId::new(run);
            let record = EventRecord {
                seq: u64::try_from(seq).map_err(|e| corrupt(&run, seq, e))?,
                at: at.parse().map_err(|e| corrupt(&run, seq, format!("bad time `{at}`: {e}")))?,
                event: serde_json::from_str(&payload).map_err(|e| corrupt(&run, seq, e))?,
            };
            out.push(FeedEntry { position: u64::try_from(id).unwrap_or(0), run, record });
        }
        Ok(out)
    }

    fn runs_in_sync(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError> {
        let wanted: Vec<String> = statuses.iter().map(|s| format!("'{}'", s.as_str())).collect();
        let mut runs = self.runs_where(
            &format!("FROM runs r WHERE r.status IN ({}) ORDER BY r.created_at DESC, r.run_id DESC", wanted.join(", ")),
            &[],
        )?;
        runs.reverse();
        Ok(runs)
    }

    fn feed_last_sync(&self) -> Result<u64, StoreError> {
        self.reader()
            .query_row("SELECT COALESCE(MAX(id), 0) FROM feed", [], |r| r.get::<_, i64>(0))
            .map(|v| u64::try_from(v).unwrap_or(0))
            .map_err(backend)
    }

    /// SQLite's `data_version` of this connection: it changes when another connection (another
    /// process, or another connection of this one) commits.
    fn data_version_sync(&self) -> Result<u64, StoreError> {
        self.conn()
            .query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
            .map(|v| u64::try_from(v).unwrap_or(0))
            .map_err(backend)
    }

    fn events_sync(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare_cached("SELECT seq, at, payload FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq")
            .map_err(backend)?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![run.as_str(), after], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            })
            .map_err(backend)?;
        let mut records = Vec::new();
        for row in rows {
            let (seq, at, payload) = row.map_err(backend)?;
            records.push(EventRecord {
                seq: u64::try_from(seq).map_err(|e| corrupt(run, seq, e))?,
                at: at.parse().map_err(|e| corrupt(run, seq, format!("bad time `{at}`: {e}")))?,
                event: serde_json::from_str(&payload).map_err(|e| corrupt(run, seq, e))?,
            });
        }
        Ok(records)
    }

    fn runs_sync(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_where(
            "FROM runs r ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?1",
            &[&i64::try_from(limit).unwrap_or(i64::MAX)],
        )
    }

    /// A page of the runs list: the `WHERE` built from the query's fields (each a parameter),
    /// the count and the page in one read transaction.
    fn runs_page_sync(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        use rusqlite::types::Value;
        let mut wheres: Vec<String> = Vec::new();
        let mut args: Vec<Value> = Vec::new();
        let arg = |v: Value, args: &mut Vec<Value>| {
            args.push(v);
            format!("?{}", args.len())
        };
        if !query.statuses.is_empty() {
            let names: Vec<String> =
                query.statuses.iter().map(|s| arg(Value::Text(s.as_str().to_owned()), &mut args)).collect();
            wheres.push(format!("r.status IN ({})", names.join(", ")));
        }
        if let Some(p) = &query.pipeline {
            wheres.push(format!("r.pipeline = {}", arg(Value::Text(p.clone()), &mut args)));
        }
        if let Some(t) = &query.text {
            // LIKE ignores ASCII case; `\` escapes the text's own `%` and `_`.
            let escaped = t.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            let p = arg(Value::Text(format!("%{escaped}%")), &mut args);
            wheres.push(format!(
                "(r.task LIKE {p} ESCAPE '\\' OR r.task_id LIKE {p} ESCAPE '\\' OR r.run_id LIKE {p} ESCAPE '\\')"
            ));
        }
        if let Some(person) = &query.person {
            let p = arg(Value::Text(format!("\n{person}\n")), &mut args);
            wheres.push(format!("instr(r.people, {p}) > 0"));
        }
        if let Some(since) = query.since {
            wheres.push(format!("r.created_at >= {}", arg(Value::Text(since.to_string()), &mut args)));
        }
        if let Some(until) = query.until {
            wheres.push(format!("r.created_at < {}", arg(Value::Text(until.to_string()), &mut args)));
        }
        let params: Vec<&dyn rusqlite::ToSql> = args.iter().map(|v| v as &dyn rusqlite::ToSql).collect();
        // Every run is counted as it is added; a filtered list counts what it matches.
        let count = if wheres.is_empty() {
            "SELECT n FROM run_count".to_owned()
        } else {
            format!("SELECT COUNT(*) FROM runs r WHERE {}", wheres.join(" AND "))
        };
        let conn = self.reader();
        // The count and the page's rows as of one moment: a run moving from the waiting to the
        // others meanwhile is listed once.
        let read = conn.unchecked_transaction().map_err(backend)?;
        let number = |sql: &str| {
            read.prepare_cached(sql)
                .and_then(|mut stmt| stmt.query_row(params.as_slice(), |r| r.get::<_, i64>(0)).optional())
                .map(|n| usize::try_from(n.unwrap_or(0)).unwrap_or(0))
                .map_err(backend)
        };
        let total = number(&count)?;
        let filter = |more: &str| {
            let all: Vec<&str> = wheres.iter().map(String::as_str).chain((!more.is_empty()).then_some(more)).collect();
            if all.is_empty() { String::new() } else { format!("WHERE {}", all.join(" AND ")) }
        };
        // The page's bounds are numbers of ours, written into the statement: a bound value that
        // may change the plan makes SQLite prepare the statement again at every step.
        let page = |filter: String, limit: usize, offset: usize| {
            let newest = "ORDER BY r.created_at DESC, r.run_id DESC";
            runs_in(&read, &format!("FROM runs r {filter} {newest} LIMIT {limit} OFFSET {offset}"), &params)
        };
        let (limit, offset) = (query.limit, query.offset);
        let runs = if query.waiting_first {
            // The waiting runs, newest first, then the others: each a walk of an index, the
            // second only when the first ends within the page. No sort of any run.
            let mut runs = page(filter("r.status = 'waiting'"), limit, offset)?;
            let taken = runs.len();
            if taken < limit {
                // The waiting runs ended on this page: there are `offset + taken` of them,
                // unless none was on it (then they are counted).
                let waiting = if taken > 0 || offset == 0 {
                    offset + taken
                } else {
                    number(&format!("SELECT COUNT(*) FROM runs r {}", filter("r.status = 'waiting'")))?
                };
                runs.extend(page(filter("r.status <> 'waiting'"), limit - taken, offset.saturating_sub(waiting))?);
            }
            runs
        } else {
            page(filter(""), limit, offset)?
        };
        Ok(RunPage { runs, total: u64::try_from(total).unwrap_or(0) })
    }

    /// Runs as `source` (`FROM … r WHERE … ORDER BY … LIMIT …`, `r` having the columns of
    /// `runs`) selects them, with `params` bound.
    fn runs_where(&self, source: &str, params: &[&dyn rusqlite::ToSql]) -> Result<Vec<RunSummary>, StoreError> {
        runs_in(&self.reader(), source, params)
    }

    fn task_outputs_sync(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError> {
        let conn = self.reader();
        // For each stage, the outputs of the latest run in which it succeeded.
        let mut stmt = conn
            .prepare_cached(
                "SELECT a.run_id, a.stage, a.key, a.value FROM artifacts a
                 JOIN runs r ON r.run_id = a.run_id
                 WHERE a.task_id = ?1
                 ORDER BY r.created_at, r.run_id, a.seq",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([task.as_str()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
            })
            .map_err(backend)?;
        let rows: Vec<(String, String, String, String)> = rows.collect::<Result<_, _>>().map_err(backend)?;
        Ok(loopwright_journal::store::latest_outputs(rows))
    }
}

/// A run's pull request from its row's columns.
pub(crate) fn pull_request(
    number: Option<i64>,
    url: Option<String>,
) -> Option<loopwright_journal::store::PullRequestRef> {
    Some(loopwright_journal::store::PullRequestRef { number: u64::try_from(number?).ok()?, url: url? })
}

/// [`SqliteStore::runs_where`] on `conn` (a reader, or a read transaction of one).
fn runs_in(conn: &Connection, source: &str, params: &[&dyn rusqlite::ToSql]) -> Result<Vec<RunSummary>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT r.run_id, r.pipeline, r.task_id, r.status, r.created_at, r.updated_at,
                    r.owner, r.task, r.running_at, r.people, r.pr_number, r.pr_url
             {source}"
        ))
        .map_err(backend)?;
    let rows = stmt
        .query_map(params, |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?),
                (r.get::<_, String>(4)?, r.get::<_, String>(5)?, r.get::<_, Option<String>>(6)?),
                (r.get::<_, String>(7)?, r.get::<_, Option<String>>(8)?, r.get::<_, String>(9)?),
                (r.get::<_, Option<i64>>(10)?, r.get::<_, Option<String>>(11)?),
            ))
        })
        .map_err(backend)?;
    let mut out = Vec::new();
    for row in rows {
        let (
            (run_id, pipeline, task_id, status),
            (created_at, updated_at, owner),
            (task, running_at, people),
            (pr_number, pr_url),
        ) = row.map_err(backend)?;
        let bad = |what: String| StoreError::Corrupt(format!("run {run_id}: {what}"));
        out.push(RunSummary {
            status: RunStatus::parse(&status).ok_or_else(|| bad(format!("unknown status `{status}`")))?,
            pipeline,
            task_id: TaskId::parse(&task_id).ok_or_else(|| bad(format!("bad task id `{task_id}`")))?,
            created_at: created_at.parse().map_err(|e| bad(format!("{e}")))?,
            updated_at: updated_at.parse().map_err(|e| bad(format!("{e}")))?,
            owner: owner.map(|o| serde_json::from_str(&o)).transpose().map_err(|e| bad(format!("owner: {e}")))?,
            task,
            running_at: running_at.map(|t| t.parse()).transpose().map_err(|e| bad(format!("{e}")))?,
            people: people.split('\n').filter(|p| !p.is_empty()).map(str::to_owned).collect(),
            pull_request: pull_request(pr_number, pr_url),
            run_id: RunId::new(run_id.clone()),
        });
    }
    Ok(out)
}

impl SqliteStore {
    fn cancel_requested_sync(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare_cached(
                "SELECT payload FROM events WHERE run_id = ?1 AND kind = 'cancel_requested' AND seq > ?2 ORDER BY seq LIMIT 1",
            )
            .map_err(backend)?;
        let payload: Option<String> = stmt
            .query_row(params![run.as_str(), i64::try_from(after).unwrap_or(i64::MAX)], |r| r.get(0))
            .optional()
            .map_err(backend)?;
        match payload.map(|p| serde_json::from_str::<Event>(&p)) {
            Some(Ok(Event::CancelRequested { by, rollback })) => Ok(Some((by, rollback))),
            Some(Ok(_)) | None => Ok(None),
            Some(Err(e)) => Err(StoreError::Corrupt(format!("a cancel request of run {run}: {e}"))),
        }
    }
}

impl Store for SqliteStore {
    async fn cancel_requested(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError> {
        self.cancel_requested_sync(run, after)
    }

    async fn append(&self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError> {
        let mut records = self.append_sync(run, None, &[(event.clone(), at)])?;
        records.pop().ok_or_else(|| StoreError::Backend("no event appended".into()))
    }

    async fn append_all(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.append_sync(run, None, events)
    }

    async fn append_after(
        &self,
        run: &RunId,
        expected_last: u64,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.append_sync(run, Some(expected_last), events)
    }

    async fn events(&self, run: &RunId) -> Result<Vec<EventRecord>, StoreError> {
        let records = self.events_sync(run, 0)?;
        if records.is_empty() {
            return Err(StoreError::RunNotFound(run.clone()));
        }
        Ok(records)
    }

    async fn events_since(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        self.events_sync(run, after)
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_sync(limit)
    }

    async fn runs_in(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_in_sync(statuses)
    }

    async fn runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        self.runs_page_sync(query)
    }

    async fn feed_since(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        self.feed_since_sync(after, limit)
    }

    async fn feed_last(&self) -> Result<u64, StoreError> {
        self.feed_last_sync()
    }

    async fn data_version(&self) -> Result<u64, StoreError> {
        self.data_version_sync()
    }

    async fn task_outputs(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError> {
        self.task_outputs_sync(task)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().expect("migrations apply to an empty database");
    }
}
