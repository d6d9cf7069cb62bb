//! Workers on PostgreSQL (SPEC §13): the runs submitted to them, their claims, the leases they
//! hold and the fence every write of a lease holder passes.
//!
//! A worker claims the oldest submitted run it may run — queued, or running or interrupted
//! with no live lease — with `FOR UPDATE SKIP LOCKED` (two workers never wait on or take the
//! same run) and raises the lease's epoch. Heartbeats renew the lease; the database's clock
//! says when it expired, so machines need not agree on the time. A store handle
//! [`PgStore::fenced`] by a lease checks, in every append's transaction under the run's row
//! lock, that the lease is still its own: once another worker took the run over, the old
//! holder's writes are refused with [`StoreError::Fenced`].

use std::collections::BTreeMap;
use std::time::Duration;

use loopwright_journal::{Event, EventRecord, LeaseEpoch, RunId, StoreError};

use super::{PgStore, backend, lost_a_race, pool_error};

/// The lease a worker's writes to a run are fenced by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The worker holding it.
    pub worker: String,
    /// Its epoch (raised by every claim).
    pub epoch: LeaseEpoch,
}

/// Where a submitted run's work is done: its repository, the ref it starts from, and the
/// labels a worker must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The git repository (a URL, or a path on a disk every worker sees).
    pub repo: String,
    /// The branch, tag or commit the run starts from.
    pub base: String,
    /// `runs_on:`.
    pub labels: BTreeMap<String, String>,
}

/// A run a worker claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The run.
    pub run: RunId,
    /// The lease's epoch: the fence of every write from now on.
    pub epoch: LeaseEpoch,
    /// Where its work is done.
    pub submission: Submission,
}

/// A worker as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Its id.
    pub id: String,
    /// Its machine.
    pub host: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// How many runs it drives at once.
    pub slots: u32,
    /// How long its leases last without a heartbeat.
    pub lease: Duration,
    /// When it started.
    pub started_at: jiff::Timestamp,
    /// When it last said it was alive.
    pub heartbeat_at: jiff::Timestamp,
    /// When it stopped (gave its leases back), if it did.
    pub stopped_at: Option<jiff::Timestamp>,
    /// The leases it holds now.
    pub leases: Vec<LeaseInfo>,
}

/// A lease held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The run.
    pub run: RunId,
    /// Its epoch.
    pub epoch: LeaseEpoch,
    /// When it expires unless renewed.
    pub expires_at: jiff::Timestamp,
}

/// Labels as the store keeps them (a JSON object, compared with `<@`).
fn labels_json(labels: &BTreeMap<String, String>) -> String {
    serde_json::to_string(labels).unwrap_or_else(|_| "{}".to_owned())
}

fn labels_of(json: &str) -> BTreeMap<String, String> {
    serde_json::from_str(json).unwrap_or_default()
}

fn timestamp(micros: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_microsecond(micros).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Refuses the append unless `fence` is still the run's lease (called under the run's row
/// lock, in the append's transaction; the lease row is read `FOR SHARE`, so a claim raising
/// the epoch waits for this append's commit, or this append sees the raised epoch).
pub(crate) async fn check_fence(
    tx: &deadpool_postgres::Transaction<'_>,
    run: &RunId,
    fence: &Fence,
) -> Result<(), StoreError> {
    let row = tx
        .query_opt("SELECT worker_id, epoch FROM leases WHERE run_id = $1 FOR SHARE", &[&run.as_str()])
        .await
        .map_err(|e| backend(&e))?;
    let (holder, epoch): (Option<String>, i64) = match row {
        Some(row) => (row.get(0), row.get(1)),
        None => (None, 0),
    };
    if holder.as_deref() == Some(fence.worker.as_str()) && LeaseEpoch::from_sql(epoch) == fence.epoch {
        Ok(())
    } else {
        Err(StoreError::Fenced { run: run.clone(), epoch: fence.epoch, holder })
    }
}

/// Records a run's submission (in the transaction that journals its start).
pub(crate) async fn insert_submission(
    tx: &deadpool_postgres::Transaction<'_>,
    run: &RunId,
    submission: &Submission,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO submissions (run_id, repo, base, labels) VALUES ($1, $2, $3, $4::text::jsonb)",
        &[&run.as_str(), &submission.repo, &submission.base, &labels_json(&submission.labels)],
    )
    .await
    .map_err(|e| backend(&e))?;
    Ok(())
}

impl PgStore {
    /// This store, every append of which must hold `fence` (a worker driving a run).
    pub fn fenced(&self, fence: Fence) -> PgStore {
        let mut fenced = self.clone();
        fenced.fence = Some(fence);
        fenced
    }

    /// The fence this handle's appends hold, if any.
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Journals a run's first events and submits it to workers, in one transaction.
    pub async fn submit(
        &self,
        run: &RunId,
        events: &[(Event, jiff::Timestamp)],
        submission: &Submission,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let mut tries = 0;
        loop {
            match self.append_with(run, None, events, Some(submission)).await {
                Err(e) if lost_a_race(&e) && tries + 1 < 8 => tries += 1,
                other => return other,
            }
        }
    }

    /// A submitted run's submission (none for a run started otherwise).
    pub async fn submission(&self, run: &RunId) -> Result<Option<Submission>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_opt("SELECT repo, base, labels::text FROM submissions WHERE run_id = $1", &[&run.as_str()])
            .await
            .map_err(|e| backend(&e))?;
        Ok(row.map(|row| Submission { repo: row.get(0), base: row.get(1), labels: labels_of(row.get(2)) }))
    }

    /// Says the worker `id` is alive on `host` with these labels, slots and lease (at its
    /// start).
    pub async fn register_worker(
        &self,
        id: &str,
        host: &str,
        labels: &BTreeMap<String, String>,
        slots: u32,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let slots = i32::try_from(slots).unwrap_or(i32::MAX);
        client
            .execute(
                "INSERT INTO workers (worker_id, host, labels, slots, lease_ms) VALUES ($1, $2, $3::text::jsonb, $4, $5)
                 ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host, labels = EXCLUDED.labels,
                     slots = EXCLUDED.slots, lease_ms = EXCLUDED.lease_ms, heartbeat_at = now(), stopped_at = NULL",
                &[&id, &host, &labels_json(labels), &slots, &millis(lease)],
            )
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    }

    /// Claims the oldest submitted run `worker` may run (its labels hold the run's): queued,
    /// or running or interrupted under no live lease (its worker died, was frozen, or gave it
    /// back). The lease lasts `lease` unless renewed; its epoch is one more than the last.
    pub async fn claim(
        &self,
        worker: &str,
        labels: &BTreeMap<String, String>,
        repos: &[String],
        lease: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| backend(&e))?;
        let pg = |e: tokio_postgres::Error| backend(&e);
        let Some(row) = tx
            .query_opt(
                "SELECT s.run_id, s.repo, s.base, s.labels::text
                 FROM submissions s
                 JOIN runs r ON r.run_id = s.run_id
                 LEFT JOIN leases l ON l.run_id = s.run_id
                 WHERE r.status IN ('queued', 'running', 'interrupted')
                   AND (l.run_id IS NULL OR l.expires_at < now())
                   AND s.labels <@ $1::text::jsonb
                   AND s.repo = ANY($2::text[])
                 ORDER BY s.position
                 LIMIT 1
                 FOR UPDATE OF s SKIP LOCKED",
                &[&labels_json(labels), &repos],
            )
            .await
            .map_err(pg)?
        else {
            return Ok(None);
        };
        let run: String = row.get(0);
        let submission = Submission { repo: row.get(1), base: row.get(2), labels: labels_of(row.get(3)) };
        let epoch = tx
            .query_opt(
                "INSERT INTO leases (run_id, worker_id, epoch, expires_at)
                 VALUES ($1, $2, 1, now() + $3::BIGINT * interval '1 millisecond')
                 ON CONFLICT (run_id) DO UPDATE
                     SET worker_id = EXCLUDED.worker_id, epoch = leases.epoch + 1, expires_at = EXCLUDED.expires_at
                     WHERE leases.expires_at < now()
                 RETURNING epoch",
                &[&run, &worker, &millis(lease)],
            )
            .await
            .map_err(pg)?;
        let Some(epoch) = epoch else { return Ok(None) };
        tx.commit().await.map_err(pg)?;
        Ok(Some(Claim { run: RunId::new(run), epoch: LeaseEpoch::from_sql(epoch.get(0)), submission }))
    }

    /// How long until the first live lease of a run `worker` could claim runs out (none held):
    /// a lease that runs out tells nobody, so an idle worker looks for work again then.
    pub async fn next_expiry(
        &self,
        labels: &BTreeMap<String, String>,
        repos: &[String],
    ) -> Result<Option<Duration>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM min(l.expires_at) - now()) * 1000)::BIGINT
                 FROM leases l
                 JOIN submissions s ON s.run_id = l.run_id
                 JOIN runs r ON r.run_id = l.run_id
                 WHERE l.expires_at >= now()
                   AND r.status IN ('queued', 'running', 'interrupted')
                   AND s.labels <@ $1::text::jsonb
                   AND s.repo = ANY($2::text[])",
                &[&labels_json(labels), &repos],
            )
            .await
            .map_err(|e| backend(&e))?;
        let ms: Option<i64> = row.get(0);
        Ok(ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    /// Renews the worker's heartbeat and the leases it holds for another `lease`; returns the
    /// runs whose lease is no longer its own (taken over: it must stop driving them).
    pub async fn renew(
        &self,
        worker: &str,
        held: &[(RunId, LeaseEpoch)],
        lease: Duration,
    ) -> Result<Vec<RunId>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| backend(&e))?;
        let pg = |e: tokio_postgres::Error| backend(&e);
        tx.execute("UPDATE workers SET heartbeat_at = now() WHERE worker_id = $1", &[&worker]).await.map_err(pg)?;
        let mut lost = Vec::new();
        for (run, epoch) in held {
            let epoch = epoch.to_sql();
            let renewed = tx
                .execute(
                    "UPDATE leases SET expires_at = now() + $4::BIGINT * interval '1 millisecond'
                     WHERE run_id = $1 AND worker_id = $2 AND epoch = $3",
                    &[&run.as_str(), &worker, &epoch, &millis(lease)],
                )
                .await
                .map_err(pg)?;
            if renewed == 0 {
                lost.push(run.clone());
            }
        }
        tx.commit().await.map_err(pg)?;
        Ok(lost)
    }

    /// Gives a lease back: the run may be claimed at once (by any worker, when it is still
    /// runnable), and the giver's writes are refused from now on.
    pub async fn release(&self, worker: &str, run: &RunId, epoch: LeaseEpoch) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let epoch = epoch.to_sql();
        client
            .execute(
                "UPDATE leases SET worker_id = NULL, expires_at = '-infinity'
                 WHERE run_id = $1 AND worker_id = $2 AND epoch = $3",
                &[&run.as_str(), &worker, &epoch],
            )
            .await
            .map_err(|e| backend(&e))?;
        // A run given back may be claimed by a worker waiting for one.
        client.execute("SELECT pg_notify($1, '')", &[&super::WORK_CHANNEL]).await.map_err(|e| backend(&e))?;
        Ok(())
    }

    /// Records that the worker stopped.
    pub async fn worker_stopped(&self, worker: &str) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        client
            .execute("UPDATE workers SET stopped_at = now() WHERE worker_id = $1", &[&worker])
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    }

    /// Every worker that said it was alive, most recent first, with the leases it holds.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let pg = |e: tokio_postgres::Error| backend(&e);
        let micros = |column: &str| format!("(extract(epoch FROM {column}) * 1000000)::BIGINT");
        let rows = client
            .query(
                &format!(
                    "SELECT worker_id, host, labels::text, slots, {}, {}, {}, lease_ms FROM workers ORDER BY heartbeat_at DESC",
                    micros("started_at"),
                    micros("heartbeat_at"),
                    micros("stopped_at"),
                ),
                &[],
            )
            .await
            .map_err(pg)?;
        let leases = client
            .query(
                &format!(
                    "SELECT worker_id, run_id, epoch, {} FROM leases WHERE worker_id IS NOT NULL ORDER BY run_id",
                    micros("expires_at")
                ),
                &[],
            )
            .await
            .map_err(pg)?;
        Ok(rows
            .iter()
            .map(|row| {
                let id: String = row.get(0);
                let stopped: Option<i64> = row.get(6);
                WorkerInfo {
                    leases: leases
                        .iter()
                        .filter(|l| l.get::<_, String>(0) == id)
                        .map(|l| LeaseInfo {
                            run: RunId::new(l.get::<_, String>(1)),
                            epoch: LeaseEpoch::from_sql(l.get(2)),
                            expires_at: timestamp(l.get(3)),
                        })
                        .collect(),
                    id,
                    host: row.get(1),
                    labels: labels_of(row.get(2)),
                    slots: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
                    lease: Duration::from_millis(u64::try_from(row.get::<_, i64>(7)).unwrap_or(0)),
                    started_at: timestamp(row.get(4)),
                    heartbeat_at: timestamp(row.get(5)),
                    stopped_at: stopped.map(timestamp),
                }
            })
            .collect())
    }
}
