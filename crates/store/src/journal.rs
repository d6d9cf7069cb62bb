//! The journal wherever it is kept: the workspace's SQLite file (the default) or a PostgreSQL
//! database shared by many machines (SPEC §13). Both are the same [`Store`]; what only one of
//! them has (a feed watcher woken by `NOTIFY`) is asked of it by name.

use std::collections::BTreeMap;

use loopwright_journal::{
    Event, EventRecord, FeedEntry, Outputs, RunId, RunPage, RunQuery, RunStatus, RunSummary, Store, StoreError, TaskId,
};
use loopwright_spec::StageId;

use crate::pg::PgStore;
use crate::{Scrubber, SqliteStore};

/// The journal's store.
pub enum Journal {
    /// The workspace's SQLite file.
    Sqlite(SqliteStore),
    /// A PostgreSQL database.
    Postgres(PgStore),
}

/// How many connections a process keeps to PostgreSQL.
const POOL: usize = 8;

impl Journal {
    /// Connects to the PostgreSQL database `url` names and migrates it, from synchronous code
    /// (the connection is made on the store's own runtime, this thread waits for it).
    pub fn connect_postgres(url: &str) -> Result<Self, crate::pg::Error> {
        PgStore::connect_blocking(url, POOL).map(Journal::Postgres)
    }

    /// Redacts every event stored from now on with `scrub` (once; a second call is ignored).
    pub fn set_scrubber(&self, scrub: Scrubber) {
        match self {
            Journal::Sqlite(s) => s.set_scrubber(scrub),
            Journal::Postgres(p) => p.set_scrubber(scrub),
        }
    }

    /// Gives back the memory the store's connections hold and do not need (SQLite: kept
    /// readers and page caches; PostgreSQL holds nothing of the kind).
    pub fn release_memory(&self) {
        if let Journal::Sqlite(s) = self {
            s.release_memory();
        }
    }

    /// Takes each of `runs` that ended out of the journal (`gc` after `[retention] runs_days`):
    /// their events, outputs, places in the feed and rows; returns those taken. A run that has
    /// not ended is left whole.
    pub async fn forget(&self, runs: &[RunId]) -> Result<Vec<RunId>, StoreError> {
        match self {
            Journal::Sqlite(s) => s.forget(runs),
            Journal::Postgres(p) => p.forget(runs).await,
        }
    }

    /// Takes a slot of every provider limit in `rules` for `holder` (an attempt), or says why
    /// it waits (see [`crate::limits`]).
    pub async fn take_slot(
        &self,
        holder: &str,
        rules: &[crate::limits::Rule],
        ttl: std::time::Duration,
    ) -> Result<crate::limits::Answer, StoreError> {
        match self {
            Journal::Sqlite(s) => s.take_slot(holder, rules, ttl, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.take_slot(holder, rules, ttl).await,
        }
    }

    /// The latest pause in force on any of `keys` (a provider's rate limit), read without
    /// writing: what a caller with nothing to count asks before each request.
    pub async fn paused_until(&self, keys: &[String]) -> Result<Option<jiff::Timestamp>, StoreError> {
        match self {
            Journal::Sqlite(s) => s.paused_until(keys, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.paused_until(keys).await,
        }
    }

    /// Keeps `holder`'s slots for another `ttl`.
    pub async fn renew_slot(&self, holder: &str, ttl: std::time::Duration) -> Result<(), StoreError> {
        match self {
            Journal::Sqlite(s) => s.renew_slot(holder, ttl, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.renew_slot(holder, ttl).await,
        }
    }

    /// Gives `holder`'s slots back with the tokens it used.
    pub async fn give_slot(&self, holder: &str, tokens: u64) -> Result<(), StoreError> {
        match self {
            Journal::Sqlite(s) => s.give_slot(holder, tokens, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.give_slot(holder, tokens).await,
        }
    }

    /// Takes a hold under every spend cap for `holder`, or says why it may not.
    pub async fn take_spend(
        &self,
        holder: &str,
        caps: &[crate::spend::CapRule],
        ttl: std::time::Duration,
    ) -> Result<crate::spend::Answer, StoreError> {
        match self {
            Journal::Sqlite(s) => s.take_spend(holder, caps, ttl, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.take_spend(holder, caps, ttl).await,
        }
    }

    /// Keeps `holder`'s spend holds for another `ttl`.
    pub async fn renew_spend(&self, holder: &str, ttl: std::time::Duration) -> Result<(), StoreError> {
        match self {
            Journal::Sqlite(s) => s.renew_spend(holder, ttl, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.renew_spend(holder, ttl).await,
        }
    }

    /// Records what `holder` used and gives its spend holds back.
    pub async fn give_spend(
        &self,
        holder: &str,
        spender: &crate::spend::Spender,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<(), StoreError> {
        match self {
            Journal::Sqlite(s) => s.give_spend(holder, spender, tokens, cost_usd, jiff::Timestamp::now()),
            Journal::Postgres(p) => p.give_spend(holder, spender, tokens, cost_usd).await,
        }
    }

    /// What the period's uses under `cap` add up to.
    pub async fn spend_used(&self, cap: &crate::spend::CapRule) -> Result<crate::spend::Standing, StoreError> {
        match self {
            Journal::Sqlite(s) => s.spend_used(cap),
            Journal::Postgres(p) => p.spend_used(cap).await,
        }
    }

    /// Pauses the limit `key` for everyone until `until`.
    pub async fn pause_limit(&self, key: &str, until: jiff::Timestamp, why: &str) -> Result<(), StoreError> {
        match self {
            Journal::Sqlite(s) => s.pause_limit(key, until, why),
            Journal::Postgres(p) => p.pause_limit(key, until, why).await,
        }
    }

    /// The PostgreSQL store, when the journal is there.
    pub fn postgres(&self) -> Option<&PgStore> {
        match self {
            Journal::Postgres(p) => Some(p),
            Journal::Sqlite(_) => None,
        }
    }
}

/// Calls the same method on whichever store holds the journal.
macro_rules! each {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match $self {
            Journal::Sqlite(s) => s.$method($($arg),*).await,
            Journal::Postgres(p) => p.$method($($arg),*).await,
        }
    };
}

impl Store for Journal {
    async fn append(&self, run: &RunId, event: &Event, at: jiff::Timestamp) -> Result<EventRecord, StoreError> {
        each!(self.append(run, event, at))
    }

    async fn append_all(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        each!(self.append_all(run, events))
    }

    async fn append_after(
        &self,
        run: &RunId,
        expected_last: u64,
        events: &[(Event, jiff::Timestamp)],
    ) -> Result<Vec<EventRecord>, StoreError> {
        each!(self.append_after(run, expected_last, events))
    }

    async fn events_since(&self, run: &RunId, after: u64) -> Result<Vec<EventRecord>, StoreError> {
        each!(self.events_since(run, after))
    }

    async fn events(&self, run: &RunId) -> Result<Vec<EventRecord>, StoreError> {
        each!(self.events(run))
    }

    async fn runs(&self, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        each!(self.runs(limit))
    }

    async fn task_outputs(&self, task: &TaskId) -> Result<BTreeMap<StageId, Outputs>, StoreError> {
        each!(self.task_outputs(task))
    }

    async fn cancel_requested(&self, run: &RunId, after: u64) -> Result<Option<(String, bool)>, StoreError> {
        each!(self.cancel_requested(run, after))
    }

    async fn runs_in(&self, statuses: &[RunStatus]) -> Result<Vec<RunSummary>, StoreError> {
        each!(self.runs_in(statuses))
    }

    async fn runs_page(&self, query: &RunQuery) -> Result<RunPage, StoreError> {
        each!(self.runs_page(query))
    }

    async fn feed_since(&self, after: u64, limit: usize) -> Result<Vec<FeedEntry>, StoreError> {
        each!(self.feed_since(after, limit))
    }

    async fn feed_last(&self) -> Result<u64, StoreError> {
        each!(self.feed_last())
    }

    async fn data_version(&self) -> Result<u64, StoreError> {
        each!(self.data_version())
    }
}
