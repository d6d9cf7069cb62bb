//! Forgetting runs that ended: `gc` takes a run older than `[retention] runs_days` out of the
//! journal — its events, its stage outputs, its notifications, its row and its places in the
//! feed (in SQLite all but the feed's newest entry, whose id must never be given again). A run
//! that has not ended is never taken, whatever the caller asks: the check is made inside the
//! transaction that removes it.

use loopwright_journal::{RunId, RunStatus, StoreError};
use rusqlite::{Connection, OptionalExtension};

use crate::{SqliteStore, backend};

impl SqliteStore {
    /// Takes each of `runs` that ended (succeeded, failed, was cancelled or rejected) out of
    /// the journal, all in one transaction; returns those taken, in the order given.
    pub fn forget(&self, runs: &[RunId]) -> Result<Vec<RunId>, StoreError> {
        let conn = self.conn();
        if !conn.is_autocommit() {
            // A write that panicked midway left its transaction open: none of it stays.
            let _ = conn.execute_batch("ROLLBACK");
        }
        conn.execute_batch("BEGIN IMMEDIATE").map_err(backend)?;
        let taken = forget_in(&conn, runs);
        let ended = match &taken {
            Ok(_) => conn.execute_batch("COMMIT").map_err(backend),
            Err(_) => Ok(()),
        };
        if (taken.is_err() || ended.is_err()) && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        ended?;
        taken
    }
}

/// Inside the open transaction: takes out each of `runs` that ended.
fn forget_in(conn: &Connection, runs: &[RunId]) -> Result<Vec<RunId>, StoreError> {
    let mut taken = Vec::new();
    for run in runs {
        let status: Option<String> = conn
            .prepare_cached("SELECT status FROM runs WHERE run_id = ?1")
            .and_then(|mut stmt| stmt.query_row([run.as_str()], |r| r.get(0)).optional())
            .map_err(backend)?;
        if !status.as_deref().and_then(RunStatus::parse).is_some_and(RunStatus::is_final) {
            continue;
        }
        for sql in [
            "DELETE FROM events WHERE run_id = ?1",
            "DELETE FROM artifacts WHERE run_id = ?1",
            "DELETE FROM notifications WHERE run_id = ?1",
            "DELETE FROM runs WHERE run_id = ?1",
        ] {
            conn.prepare_cached(sql).and_then(|mut stmt| stmt.execute([run.as_str()])).map_err(backend)?;
        }
        taken.push(run.clone());
    }
    if !taken.is_empty() {
        // One pass over the feed for all of them (it is not indexed by run).
        let ids = serde_json::to_string(&taken.iter().map(RunId::as_str).collect::<Vec<_>>())
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        conn.execute(
            "DELETE FROM feed WHERE run_id IN (SELECT value FROM json_each(?1)) AND id < (SELECT MAX(id) FROM feed)",
            [ids],
        )
        .map_err(backend)?;
    }
    Ok(taken)
}
