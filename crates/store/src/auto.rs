//! Auto mode's tables: `task_auto` (one row per supervised loop: seed 002's columns plus the
//! whole status object as JSON) and `auto_log` (the supervision journal).

use rusqlite::{OptionalExtension, params};

use crate::{SqliteStore, backend};
use loopwright_journal::StoreError;

/// Statuses of a loop that is still supervised (a second start for its session or its task
/// directory is refused while one of these holds).
pub const ACTIVE: &[&str] = &["running", "needs_human", "quota_wait"];

/// One `task_auto` row.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoRow {
    /// The session (primary key).
    pub session_name: String,
    /// The task module (unique).
    pub task_dir: String,
    /// The loop's status.
    pub status: String,
    /// Which loop of the session this is (keys the journal).
    pub loop_id: String,
    /// Seed 002's columns.
    pub max_iterations: i64,
    /// Minutes.
    pub timeout_minutes: f64,
    /// Iterations completed.
    pub iteration_count: i64,
    /// Recoveries in the current iteration.
    pub recovery_count_step: i64,
    /// Recoveries in all.
    pub recovery_count_total: i64,
    /// The last masked screen hash.
    pub last_capture_hash: String,
    /// Unchanged captures in a row.
    pub stall_count: i64,
    /// When the current quota wait began ("" when none).
    pub quota_wait_since: String,
    /// When the loop started.
    pub started_at: String,
    /// When the last valid signal came.
    pub last_signal_at: String,
    /// The whole status object (JSON).
    pub state: String,
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoLogEntry {
    /// Its position.
    pub id: i64,
    /// When.
    pub at: String,
    /// What (`signal`, `signal_invalid`, `answer`, `needs_human`, `stall`, `recovery`, …).
    pub kind: String,
    /// The details (JSON).
    pub data: String,
}

/// Why a loop could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A loop is active for the session or the directory.
    #[error("{0}")]
    Busy(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AutoRow> {
    Ok(AutoRow {
        session_name: r.get(0)?,
        task_dir: r.get(1)?,
        status: r.get(2)?,
        loop_id: r.get(3)?,
        max_iterations: r.get(4)?,
        timeout_minutes: r.get(5)?,
        iteration_count: r.get(6)?,
        recovery_count_step: r.get(7)?,
        recovery_count_total: r.get(8)?,
        last_capture_hash: r.get(9)?,
        stall_count: r.get(10)?,
        quota_wait_since: r.get(11)?,
        started_at: r.get(12)?,
        last_signal_at: r.get::<_, Option<String>>(13)?.unwrap_or_default(),
        state: r.get(14)?,
    })
}

const COLUMNS: &str = "session_name, task_dir, status, loop_id, max_iterations, timeout_minutes, iteration_count, \
     recovery_count_step, recovery_count_total, last_capture_hash, stall_count, quota_wait_since, started_at, \
     last_signal_at, state";

impl SqliteStore {
    /// Claims a new loop: refused while a loop of the same session or task directory is
    /// active; a finished row of either is replaced. One `BEGIN IMMEDIATE` transaction, so two
    /// starts racing for one directory cannot both win. `won` runs inside the transaction once
    /// the claim is certain, before anyone can see the new row (the caller clears what a past
    /// loop left behind: nothing done for the new loop can be undone by it).
    ///
    /// `shares_tree` says whether another active loop's task directory is in the same working
    /// tree as the new one's: that refuses the claim too, inside the same transaction (two
    /// loops editing one tree see each other's changes — one's check once passed on the
    /// other's fix).
    pub fn auto_claim(
        &self,
        new: &AutoRow,
        shares_tree: impl Fn(&str) -> bool,
        won: impl FnOnce(),
    ) -> Result<(), ClaimError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        if let Some(busy) = active(&tx, &new.session_name, &new.task_dir)? {
            return Err(ClaimError::Busy(busy));
        }
        let others: Vec<(String, String)> = {
            let mut stmt = tx
                .prepare(
                    "SELECT session_name, task_dir FROM task_auto \
                     WHERE status IN ('running', 'needs_human', 'quota_wait') AND task_dir <> ?1",
                )
                .map_err(backend)?;
            let rows = stmt.query_map(params![new.task_dir], |r| Ok((r.get(0)?, r.get(1)?))).map_err(backend)?;
            rows.collect::<Result<_, _>>().map_err(backend)?
        };
        if let Some((session, dir)) = others.iter().find(|(_, dir)| shares_tree(dir)) {
            return Err(ClaimError::Busy(format!(
                "{dir} already runs an auto loop in session {session}, in the same working tree: one loop per tree — stop it, or give this module a worktree of its own (`git worktree add ../other`) and start it there"
            )));
        }
        won();
        tx.execute(
            "DELETE FROM task_auto WHERE session_name = ?1 OR task_dir = ?2",
            params![new.session_name, new.task_dir],
        )
        .map_err(backend)?;
        insert(&tx, &AutoRow { state: self.scrubbed(&new.state).into_owned(), ..new.clone() })?;
        tx.commit().map_err(backend)?;
        Ok(())
    }

    /// Why a loop for `session` on `task_dir` cannot start now (one is active for either), or
    /// `None`. A hint for an early answer: [`Self::auto_claim`] decides.
    pub fn auto_active(&self, session: &str, task_dir: &str) -> Result<Option<String>, StoreError> {
        active(&self.conn(), session, task_dir)
    }

    /// Writes a loop's row (it must exist).
    pub fn auto_save(&self, r: &AutoRow) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.execute(
            "UPDATE task_auto SET status = ?2, max_iterations = ?3, timeout_minutes = ?4, iteration_count = ?5, \
             recovery_count_step = ?6, recovery_count_total = ?7, last_capture_hash = ?8, stall_count = ?9, \
             quota_wait_since = ?10, last_signal_at = ?11, state = ?12 WHERE session_name = ?1 AND loop_id = ?13",
            params![
                r.session_name,
                r.status,
                r.max_iterations,
                r.timeout_minutes,
                r.iteration_count,
                r.recovery_count_step,
                r.recovery_count_total,
                r.last_capture_hash,
                r.stall_count,
                r.quota_wait_since,
                r.last_signal_at,
                self.scrubbed(&r.state),
                r.loop_id
            ],
        )
        .map_err(backend)?;
        Ok(())
    }

    /// A session's loop.
    pub fn auto_get(&self, session: &str) -> Result<Option<AutoRow>, StoreError> {
        let conn = self.conn();
        conn.query_row(&format!("SELECT {COLUMNS} FROM task_auto WHERE session_name = ?1"), [session], row)
            .optional()
            .map_err(backend)
    }

    /// The loop of a task directory.
    pub fn auto_by_dir(&self, task_dir: &str) -> Result<Option<AutoRow>, StoreError> {
        let conn = self.conn();
        conn.query_row(&format!("SELECT {COLUMNS} FROM task_auto WHERE task_dir = ?1"), [task_dir], row)
            .optional()
            .map_err(backend)
    }

    /// Every loop, newest first.
    pub fn auto_list(&self) -> Result<Vec<AutoRow>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare(&format!("SELECT {COLUMNS} FROM task_auto ORDER BY started_at DESC")).map_err(backend)?;
        let rows = stmt.query_map([], row).map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    /// Appends to a loop's journal.
    pub fn auto_log(&self, loop_id: &str, session: &str, at: &str, kind: &str, data: &str) -> Result<i64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO auto_log (loop_id, session_name, at, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![loop_id, session, at, kind, self.scrubbed(data)],
        )
        .map_err(backend)?;
        let id = conn.last_insert_rowid();
        if id % TRIM_EVERY == 0 {
            trim(&conn, loop_id, session, at)?;
        }
        Ok(id)
    }

    /// A loop's journal after position `after`, oldest first.
    pub fn auto_log_since(&self, loop_id: &str, after: i64) -> Result<Vec<AutoLogEntry>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached("SELECT id, at, kind, data FROM auto_log WHERE loop_id = ?1 AND id > ?2 ORDER BY id")
            .map_err(backend)?;
        let rows = stmt
            .query_map(params![loop_id, after], |r| {
                Ok(AutoLogEntry { id: r.get(0)?, at: r.get(1)?, kind: r.get(2)?, data: r.get(3)? })
            })
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }
}

impl SqliteStore {
    /// Entries of the kinds `kinds` in every loop's journal after position `after`, oldest
    /// first, at most `limit`, each with its session: what a person is told about (a loop
    /// that needs them, one that ended).
    pub fn auto_log_of_kinds(
        &self,
        kinds: &[&str],
        after: i64,
        limit: usize,
    ) -> Result<Vec<(String, AutoLogEntry)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, session_name, at, kind, data FROM auto_log WHERE id > ?1 AND kind IN (SELECT value FROM json_each(?2)) ORDER BY id LIMIT ?3",
            )
            .map_err(backend)?;
        let kinds = serde_json::to_string(kinds).map_err(|e| StoreError::Backend(e.to_string()))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![after, kinds, limit], |r| {
                Ok((r.get(1)?, AutoLogEntry { id: r.get(0)?, at: r.get(2)?, kind: r.get(3)?, data: r.get(4)? }))
            })
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }
}

/// The most entries a loop's journal keeps: past it, all but the first [`AUTO_LOG_HEAD`] and
/// the newest are summarised in one `trimmed` entry (how many of each kind were removed).
pub const AUTO_LOG_CAP: i64 = 10_000;
/// The first entries of a loop that are always kept (its start, settings, first signals).
pub const AUTO_LOG_HEAD: i64 = 100;
/// How often (in entries written, all loops) the cap is checked.
const TRIM_EVERY: i64 = 256;

fn trim(conn: &rusqlite::Connection, loop_id: &str, session: &str, at: &str) -> Result<(), StoreError> {
    let count: i64 = conn
        .query_row("SELECT count(*) FROM auto_log WHERE loop_id = ?1", params![loop_id], |r| r.get(0))
        .map_err(backend)?;
    if count <= AUTO_LOG_CAP {
        return Ok(());
    }
    // Keep the head and the newest half of the cap; the rest becomes one summary.
    let ids = "SELECT id FROM auto_log WHERE loop_id = ?1 ORDER BY id";
    let head_end: i64 = conn
        .query_row(&format!("{ids} LIMIT 1 OFFSET ?2"), params![loop_id, AUTO_LOG_HEAD - 1], |r| r.get(0))
        .map_err(backend)?;
    let tail_start: i64 = conn
        .query_row(&format!("{ids} DESC LIMIT 1 OFFSET ?2"), params![loop_id, AUTO_LOG_CAP / 2 - 1], |r| r.get(0))
        .map_err(backend)?;
    let mut kinds = serde_json::Map::new();
    {
        let mut stmt = conn
            .prepare("SELECT kind, count(*) FROM auto_log WHERE loop_id = ?1 AND id > ?2 AND id < ?3 GROUP BY kind")
            .map_err(backend)?;
        let rows = stmt
            .query_map(params![loop_id, head_end, tail_start], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(backend)?;
        for row in rows {
            let (kind, n) = row.map_err(backend)?;
            kinds.insert(kind, n.into());
        }
    }
    let removed = conn
        .execute(
            "DELETE FROM auto_log WHERE loop_id = ?1 AND id > ?2 AND id < ?3",
            params![loop_id, head_end, tail_start],
        )
        .map_err(backend)?;
    let data = serde_json::json!({ "removed": removed, "kinds": kinds, "kept_first": AUTO_LOG_HEAD });
    conn.execute(
        "INSERT INTO auto_log (loop_id, session_name, at, kind, data) VALUES (?1, ?2, ?3, 'trimmed', ?4)",
        params![loop_id, session, at, data.to_string()],
    )
    .map_err(backend)?;
    Ok(())
}

fn insert(tx: &rusqlite::Transaction<'_>, r: &AutoRow) -> Result<(), StoreError> {
    tx.execute(
        &format!("INSERT INTO task_auto ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"),
        params![
            r.session_name,
            r.task_dir,
            r.status,
            r.loop_id,
            r.max_iterations,
            r.timeout_minutes,
            r.iteration_count,
            r.recovery_count_step,
            r.recovery_count_total,
            r.last_capture_hash,
            r.stall_count,
            r.quota_wait_since,
            r.started_at,
            r.last_signal_at,
            r.state
        ],
    )
    .map_err(backend)?;
    Ok(())
}

/// The loop active for `session` or `task_dir`, as the reason a new one cannot start.
fn active(conn: &rusqlite::Connection, session: &str, task_dir: &str) -> Result<Option<String>, StoreError> {
    let found: Option<(String, String, String)> = conn
        .query_row(
            "SELECT session_name, task_dir, status FROM task_auto WHERE (session_name = ?1 OR task_dir = ?2) \
             AND status IN ('running', 'needs_human', 'quota_wait') LIMIT 1",
            params![session, task_dir],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(backend)?;
    Ok(found.map(|(found_session, dir, status)| {
        if found_session == session {
            format!("session {found_session} already runs an auto loop ({status}) on {dir}")
        } else {
            format!("{dir} already runs an auto loop ({status}) in session {found_session}")
        }
    }))
}
