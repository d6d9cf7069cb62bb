//! The notifications journal (SPEC §11): what the daemon told people, to whom (the target's
//! host only: a webhook's path may hold its secret) and how it went, and the one-tap links
//! used. A notification is claimed (`pending`) before it is sent, so two daemons, or a
//! daemon restarted mid-send, never send one twice from the journal's side.

use rusqlite::{OptionalExtension, params};

use crate::{SqliteStore, backend};
use loopwright_journal::StoreError;

/// How a notification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationStatus {
    /// Claimed, being sent (or retried).
    Pending,
    /// Delivered (`notification_sent`).
    NotificationSent,
    /// Given up on after its retries (`notification_failed`).
    NotificationFailed,
    /// Kept for its target's next digest, not sent on its own.
    Held,
    /// Sent in a digest.
    Digested,
}

impl NotificationStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::NotificationSent => "notification_sent",
            Self::NotificationFailed => "notification_failed",
            Self::Held => "held",
            Self::Digested => "digested",
        }
    }

    /// Parses a stored status.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::NotificationSent, Self::NotificationFailed, Self::Held, Self::Digested]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// One notification, as journaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Unique per happening and target.
    pub key: String,
    /// The run it is about.
    pub run_id: Option<String>,
    /// The auto loop it is about.
    pub session_name: Option<String>,
    /// `needs_human`, `failed`, …
    pub event: String,
    /// The target's scheme and host, and its kind.
    pub target: String,
    /// How it stands.
    pub status: NotificationStatus,
    /// Sending attempts made.
    pub attempts: u32,
    /// When it was claimed, or last tried.
    pub at: String,
    /// The last attempt's outcome in words (an HTTP status, a connection error).
    pub detail: String,
    /// When its one-tap link was used.
    pub link_used_at: Option<String>,
}

/// A notification held for a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its key.
    pub key: String,
    /// The run it is about.
    pub run_id: Option<String>,
    /// `failed`, `finished`, …
    pub event: String,
    /// When it was held (RFC 3339).
    pub at: String,
}

/// What using a one-tap link found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkUse {
    /// This is its first use: go on.
    First,
    /// It was used before, at this time.
    Used(String),
    /// No notification has this key.
    Unknown,
}

impl SqliteStore {
    /// Claims a notification, with what it sends (`request`, as the notifier encodes it, so a
    /// daemon that dies before it is sent lets the next one send it): true when this caller
    /// is the one to send it (no row had `key`).
    pub fn notify_claim(&self, n: &Notification, request: &str) -> Result<bool, StoreError> {
        claim_in(&self.conn(), n, request)
    }

    /// Keeps `n` for its target's next digest (once per key): true when this caller kept it.
    pub fn notify_hold(&self, n: &Notification) -> Result<bool, StoreError> {
        let held = Notification { status: NotificationStatus::Held, ..n.clone() };
        let conn = self.conn();
        let inserted = conn
            .prepare_cached(
                "INSERT OR IGNORE INTO notifications (key, run_id, session_name, event, target, status, attempts, at, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, '')",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    held.key,
                    held.run_id,
                    held.session_name,
                    held.event,
                    held.target,
                    held.status.as_str(),
                    held.at
                ])
            })
            .map_err(backend)?;
        Ok(inserted == 1)
    }

    /// The notifications held for a target's digest, oldest first: those whose key ends with
    /// `:` and the target's `identity` (a hex hash; two targets may share a name, never this).
    pub fn notify_held(&self, identity: &str) -> Result<Vec<Held>, StoreError> {
        if !identity.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, run_id, event, at FROM notifications
                 WHERE status = 'held' AND key LIKE '%:' || ?1 ORDER BY at, key",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([identity], |r| Ok(Held { key: r.get(0)?, run_id: r.get(1)?, event: r.get(2)?, at: r.get(3)? }))
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    /// Claims digest `n` with its request and marks the held notifications `keys` it tells as
    /// digested, in one transaction: a daemon that dies at any point leaves either both or
    /// neither, so every held end is told once. True when this caller claimed it.
    pub fn notify_claim_digest(&self, n: &Notification, request: &str, keys: &[String]) -> Result<bool, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        let claimed = claim_in(&tx, n, request)?;
        if claimed {
            for key in keys {
                tx.prepare_cached("UPDATE notifications SET status = 'digested' WHERE key = ?1 AND status = 'held'")
                    .and_then(|mut stmt| stmt.execute([key]))
                    .map_err(backend)?;
            }
        }
        tx.commit().map_err(backend)?;
        Ok(claimed)
    }

    /// The notifications claimed and not sent nor given up on, with their request (those a
    /// daemon that died left): (key, attempts made, request), oldest first.
    pub fn notify_pending(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, attempts, request FROM notifications
                 WHERE status = 'pending' AND request IS NOT NULL ORDER BY at",
            )
            .map_err(backend)?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    /// How many notifications are in each status (`pending`, `sent`, `failed`, …).
    pub fn notify_counts(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT status, COUNT(*) FROM notifications GROUP BY status").map_err(backend)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0))))
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    /// How far into the auto loops' log the notifier has looked, if it ever has.
    pub fn notifier_auto_position(&self) -> Result<Option<i64>, StoreError> {
        let found: Option<Option<i64>> = self
            .conn()
            .prepare_cached("SELECT auto_position FROM notifier WHERE id = 1")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)).optional())
            .map_err(backend)?;
        Ok(found.flatten())
    }

    /// Records that the notifier has looked at the auto loops' log up to `id`.
    pub fn notifier_auto_advance(&self, id: i64) -> Result<(), StoreError> {
        self.conn()
            // The row is made by the feed's side, which the notifier records first.
            .prepare_cached("UPDATE notifier SET auto_position = MAX(COALESCE(auto_position, 0), ?1) WHERE id = 1")
            .and_then(|mut stmt| stmt.execute([id]))
            .map_err(backend)?;
        Ok(())
    }

    /// How far into the journal's feed the notifier has looked, if it ever has.
    pub fn notifier_position(&self) -> Result<Option<u64>, StoreError> {
        let found: Option<i64> = self
            .conn()
            .prepare_cached("SELECT feed_position FROM notifier WHERE id = 1")
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)).optional())
            .map_err(backend)?;
        Ok(found.map(|p| u64::try_from(p).unwrap_or(0)))
    }

    /// Records that the notifier has looked at the feed up to `position`.
    pub fn notifier_advance(&self, position: u64) -> Result<(), StoreError> {
        let position = i64::try_from(position).unwrap_or(i64::MAX);
        self.conn()
            .prepare_cached(
                "INSERT INTO notifier (id, feed_position) VALUES (1, ?1)
                 ON CONFLICT (id) DO UPDATE SET feed_position = MAX(feed_position, excluded.feed_position)",
            )
            .and_then(|mut stmt| stmt.execute([position]))
            .map_err(backend)?;
        Ok(())
    }

    /// Records how sending went.
    pub fn notify_record(
        &self,
        key: &str,
        status: NotificationStatus,
        attempts: u32,
        detail: &str,
        at: &str,
    ) -> Result<(), StoreError> {
        let detail = self.scrubbed(detail);
        self.conn()
            .prepare_cached("UPDATE notifications SET status = ?2, attempts = ?3, detail = ?4, at = ?5 WHERE key = ?1")
            .and_then(|mut stmt| stmt.execute(params![key, status.as_str(), attempts, detail, at]))
            .map_err(backend)?;
        Ok(())
    }

    /// Marks the link of notification `key` used, once.
    pub fn notify_use_link(&self, key: &str, at: &str) -> Result<LinkUse, StoreError> {
        let conn = self.conn();
        let changed = conn
            .prepare_cached("UPDATE notifications SET link_used_at = ?2 WHERE key = ?1 AND link_used_at IS NULL")
            .and_then(|mut stmt| stmt.execute(params![key, at]))
            .map_err(backend)?;
        if changed == 1 {
            return Ok(LinkUse::First);
        }
        let used: Option<Option<String>> = conn
            .prepare_cached("SELECT link_used_at FROM notifications WHERE key = ?1")
            .and_then(|mut stmt| stmt.query_row([key], |r| r.get(0)).optional())
            .map_err(backend)?;
        Ok(match used {
            Some(Some(at)) => LinkUse::Used(at),
            _ => LinkUse::Unknown,
        })
    }

    /// When the link of notification `key` was used, if it was; `None` also when there is no
    /// such notification.
    pub fn notify_link_used(&self, key: &str) -> Result<Option<Option<String>>, StoreError> {
        self.conn()
            .prepare_cached("SELECT link_used_at FROM notifications WHERE key = ?1")
            .and_then(|mut stmt| stmt.query_row([key], |r| r.get(0)).optional())
            .map_err(backend)
    }

    /// The notifications about `run` (or, with `None`, all), oldest first, at most `limit`.
    pub fn notifications(&self, run: Option<&str>, limit: usize) -> Result<Vec<Notification>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, run_id, session_name, event, target, status, attempts, at, detail, link_used_at
                 FROM notifications WHERE ?1 IS NULL OR run_id = ?1 ORDER BY at, key LIMIT ?2",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map(params![run, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok((
                    (r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?, r.get::<_, String>(4)?),
                    (
                        r.get::<_, String>(5)?,
                        r.get::<_, u32>(6)?,
                        r.get::<_, String>(7)?,
                        r.get::<_, String>(8)?,
                        r.get(9)?,
                    ),
                ))
            })
            .map_err(backend)?;
        let mut out = Vec::new();
        for row in rows {
            let ((key, run_id, session_name, event, target), (status, attempts, at, detail, link_used_at)) =
                row.map_err(backend)?;
            let status = NotificationStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("notification {key}: unknown status `{status}`")))?;
            out.push(Notification {
                key,
                run_id,
                session_name,
                event,
                target,
                status,
                attempts,
                at,
                detail,
                link_used_at,
            });
        }
        Ok(out)
    }

    /// The last entry of any loop's supervision journal (0 when there is none): where a
    /// daemon starts following the loops' notices.
    pub fn auto_log_last(&self) -> Result<i64, StoreError> {
        self.conn().query_row("SELECT COALESCE(MAX(id), 0) FROM auto_log", [], |r| r.get(0)).map_err(backend)
    }
}

/// Claims notification `n` with its `request` on `conn` (once per key): true when this caller
/// claimed it.
fn claim_in(conn: &rusqlite::Connection, n: &Notification, request: &str) -> Result<bool, StoreError> {
    let inserted = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO notifications (key, run_id, session_name, event, target, status, attempts, at, detail, request)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, '', ?8)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![n.key, n.run_id, n.session_name, n.event, n.target, n.status.as_str(), n.at, request])
        })
        .map_err(backend)?;
    Ok(inserted == 1)
}
