//! Forgetting runs that ended, on PostgreSQL: as [`crate::SqliteStore::forget`], and their
//! submissions and leases with them (feed positions come from a counter, so none is reused).

use loopwright_journal::{RunId, RunStatus, StoreError};

use super::{PgStore, backend, pool_error};

impl PgStore {
    /// Takes each of `runs` that ended (succeeded, failed, was cancelled or rejected) out of
    /// the journal, all in one transaction; returns those taken. Their rows are locked first, so
    /// an append racing with it waits, then finds the run gone.
    pub async fn forget(&self, runs: &[RunId]) -> Result<Vec<RunId>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| backend(&e))?;
        let asked: Vec<&str> = runs.iter().map(RunId::as_str).collect();
        let ended: Vec<&str> = RunStatus::ALL.into_iter().filter(|s| s.is_final()).map(RunStatus::as_str).collect();
        let rows = tx
            .query(
                "SELECT run_id FROM runs WHERE run_id = ANY($1) AND status = ANY($2) ORDER BY run_id FOR UPDATE",
                &[&asked, &ended],
            )
            .await
            .map_err(|e| backend(&e))?;
        let taken: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        for table in ["events", "artifacts", "feed", "submissions", "leases", "runs"] {
            tx.execute(&format!("DELETE FROM {table} WHERE run_id = ANY($1)"), &[&taken])
                .await
                .map_err(|e| backend(&e))?;
        }
        tx.commit().await.map_err(|e| backend(&e))?;
        Ok(runs.iter().filter(|r| taken.iter().any(|t| t == r.as_str())).cloned().collect())
    }
}
