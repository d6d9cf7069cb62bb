//! Provider limits shared by every process of a store (SPEC §13 "Provider limits"): an attempt
//! takes a slot of each `[[limits]]` entry that governs its agent — if no entry is paused, has
//! no free slot, or has used its requests of the minute or its tokens of the hour — and gives it
//! back when it ends, with the tokens it used. Slots are leased (renewed while the attempt
//! runs), so a holder that died frees its slot when the lease runs out. A rate limit with a
//! reset time pauses an entry for everyone until then.
//!
//! Each take is one transaction over every entry it names: on SQLite `BEGIN IMMEDIATE`, on
//! PostgreSQL under one advisory lock (times there are the database's, not the machines').
//! What to answer is [`judge`], a pure function of what the store holds.

use std::time::Duration;

use jiff::Timestamp;
use loopwright_journal::StoreError;
use rusqlite::{OptionalExtension, params};

use crate::pg::{PgStore, backend as pg_backend, pool_error};
use crate::{SqliteStore, backend};

/// One `[[limits]]` entry as the store enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its identity (`provider/model/account`).
    pub key: String,
    /// How people read it (`anthropic (model claude-sonnet-4)`).
    pub shown: String,
    /// Attempts at once.
    pub concurrent: Option<u32>,
    /// Attempts started per minute.
    pub requests_per_minute: Option<u32>,
    /// Tokens per hour.
    pub tokens_per_hour: Option<u64>,
}

/// What a take found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The attempt holds a slot of every entry: it may go.
    Taken,
    /// It must wait: why, and until when at the latest when that is known.
    Wait {
        /// In words.
        reason: String,
        /// When the wait ends for sure (a pause, the minute's or hour's oldest use ageing out).
        until: Option<Timestamp>,
    },
}

/// What the store holds of one entry, as a take sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// A pause in force: until when, and why.
    pub pause: Option<(Timestamp, String)>,
    /// Slots other attempts hold.
    pub slots: u64,
    /// Attempts started in the last minute, and when the oldest of them started.
    pub requests: (u64, Option<Timestamp>),
    /// Tokens used in the last hour, and when the oldest of those uses was recorded.
    pub tokens: (u64, Option<Timestamp>),
}

/// Whether an attempt may take a slot of `rule`, given what the store holds (`None`: it may).
pub fn judge(rule: &Rule, standing: &Standing) -> Option<Answer> {
    let shown = &rule.shown;
    if let Some((until, why)) = &standing.pause {
        return Some(Answer::Wait {
            reason: format!("{shown} is paused until {until} after a rate limit: {why}"),
            until: Some(*until),
        });
    }
    if let Some(most) = rule.concurrent
        && standing.slots >= u64::from(most)
    {
        return Some(Answer::Wait {
            reason: format!("{shown}: {} of {most} concurrent stages in use", standing.slots),
            until: None,
        });
    }
    if let Some(most) = rule.requests_per_minute
        && standing.requests.0 >= u64::from(most)
    {
        return Some(Answer::Wait {
            reason: format!("{shown}: {} of {most} requests this minute", standing.requests.0),
            until: standing.requests.1.map(|t| t + jiff::SignedDuration::from_secs(60)),
        });
    }
    if let Some(most) = rule.tokens_per_hour
        && standing.tokens.0 >= most
    {
        return Some(Answer::Wait {
            reason: format!("{shown}: {} of {most} tokens this hour", standing.tokens.0),
            until: standing.tokens.1.map(|t| t + jiff::SignedDuration::from_secs(3600)),
        });
    }
    None
}

fn micros(t: Timestamp) -> i64 {
    t.as_microsecond()
}

fn at(us: i64) -> Timestamp {
    Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn duration_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl SqliteStore {
    /// Takes a slot of every rule for `holder` (an attempt), or says why it waits; `ttl` is
    /// the slot's lease.
    pub fn take_slot(&self, holder: &str, rules: &[Rule], ttl: Duration, now: Timestamp) -> Result<Answer, StoreError> {
        let conn = self.conn();
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        let now_us = micros(now);
        tx.execute("DELETE FROM limit_slots WHERE expires_us < ?1", [now_us]).map_err(backend)?;
        tx.execute("DELETE FROM limit_uses WHERE at_us < ?1", [now_us - 3_600_000_000]).map_err(backend)?;
        tx.execute("DELETE FROM limit_pauses WHERE until_us <= ?1", [now_us]).map_err(backend)?;
        for rule in rules {
            let pause = tx
                .query_row("SELECT until_us, why FROM limit_pauses WHERE limit_key = ?1", [&rule.key], |r| {
                    Ok((at(r.get(0)?), r.get::<_, String>(1)?))
                })
                .optional()
                .map_err(backend)?;
            let slots: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM limit_slots WHERE limit_key = ?1 AND holder <> ?2",
                    params![rule.key, holder],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            let uses = |since: i64, column: &str| -> Result<(u64, Option<Timestamp>), StoreError> {
                tx.query_row(
                    &format!(
                        "SELECT COALESCE(SUM({column}), 0), MIN(at_us) FROM limit_uses
                         WHERE limit_key = ?1 AND at_us >= ?2 AND {column} > 0"
                    ),
                    params![rule.key, since],
                    |r| Ok((u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0), r.get::<_, Option<i64>>(1)?.map(at))),
                )
                .map_err(backend)
            };
            let standing = Standing {
                pause,
                slots: u64::try_from(slots).unwrap_or(0),
                requests: uses(now_us - 60_000_000, "requests")?,
                tokens: uses(now_us - 3_600_000_000, "tokens")?,
            };
            if let Some(wait) = judge(rule, &standing) {
                tx.commit().map_err(backend)?;
                return Ok(wait);
            }
        }
        for rule in rules {
            tx.execute(
                "INSERT OR REPLACE INTO limit_slots (holder, limit_key, expires_us) VALUES (?1, ?2, ?3)",
                params![holder, rule.key, now_us + duration_us(ttl)],
            )
            .map_err(backend)?;
            tx.execute(
                "INSERT INTO limit_uses (limit_key, at_us, requests, tokens) VALUES (?1, ?2, 1, 0)",
                params![rule.key, now_us],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(Answer::Taken)
    }

    /// The latest pause in force on any of `keys` at `now`, read without writing anything.
    pub fn paused_until(&self, keys: &[String], now: Timestamp) -> Result<Option<Timestamp>, StoreError> {
        let conn = self.conn();
        let mut latest: Option<Timestamp> = None;
        for key in keys {
            let until = conn
                .query_row(
                    "SELECT until_us FROM limit_pauses WHERE limit_key = ?1 AND until_us > ?2",
                    params![key, micros(now)],
                    |r| r.get::<_, i64>(0),
                )
                .optional()
                .map_err(backend)?
                .map(at);
            latest = latest.max(until);
        }
        Ok(latest)
    }

    /// Keeps `holder`'s slots for another `ttl`.
    pub fn renew_slot(&self, holder: &str, ttl: Duration, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "UPDATE limit_slots SET expires_us = ?2 WHERE holder = ?1",
                params![holder, micros(now) + duration_us(ttl)],
            )
            .map_err(backend)?;
        Ok(())
    }

    /// Gives `holder`'s slots back, recording the `tokens` it used against each.
    pub fn give_slot(&self, holder: &str, tokens: u64, now: Timestamp) -> Result<(), StoreError> {
        let conn = self.conn();
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        let keys: Vec<String> = {
            let mut stmt = tx.prepare("SELECT limit_key FROM limit_slots WHERE holder = ?1").map_err(backend)?;
            stmt.query_map([holder], |r| r.get(0)).and_then(Iterator::collect).map_err(backend)?
        };
        tx.execute("DELETE FROM limit_slots WHERE holder = ?1", [holder]).map_err(backend)?;
        if tokens > 0 {
            for key in keys {
                tx.execute(
                    "INSERT INTO limit_uses (limit_key, at_us, requests, tokens) VALUES (?1, ?2, 0, ?3)",
                    params![key, micros(now), i64::try_from(tokens).unwrap_or(i64::MAX)],
                )
                .map_err(backend)?;
            }
        }
        tx.commit().map_err(backend)
    }

    /// Pauses the entry `key` for everyone until `until` (a later pause wins).
    pub fn pause_limit(&self, key: &str, until: Timestamp, why: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "INSERT INTO limit_pauses (limit_key, until_us, why) VALUES (?1, ?2, ?3)
                 ON CONFLICT (limit_key) DO UPDATE SET until_us = MAX(until_us, excluded.until_us), why = excluded.why",
                params![key, micros(until), why],
            )
            .map_err(backend)?;
        Ok(())
    }
}

/// The advisory lock every take and give of limits holds on PostgreSQL (`limi` in ASCII).
const LIMITS_LOCK: i64 = 0x6c69_6d69;

impl PgStore {
    /// [`SqliteStore::take_slot`] on PostgreSQL, timed by the database's clock.
    pub async fn take_slot(&self, holder: &str, rules: &[Rule], ttl: Duration) -> Result<Answer, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| pg_backend(&e))?;
        let pg = |e: tokio_postgres::Error| pg_backend(&e);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LIMITS_LOCK]).await.map_err(pg)?;
        tx.batch_execute(
            "DELETE FROM limit_slots WHERE expires_at < now();
             DELETE FROM limit_uses WHERE at < now() - interval '1 hour';
             DELETE FROM limit_pauses WHERE until <= now();",
        )
        .await
        .map_err(pg)?;
        let us = |column: &str| format!("(extract(epoch FROM {column}) * 1000000)::BIGINT");
        for rule in rules {
            let pause = tx
                .query_opt(&format!("SELECT {}, why FROM limit_pauses WHERE limit_key = $1", us("until")), &[&rule.key])
                .await
                .map_err(pg)?
                .map(|r| (at(r.get(0)), r.get::<_, String>(1)));
            let slots: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM limit_slots WHERE limit_key = $1 AND holder <> $2",
                    &[&rule.key, &holder],
                )
                .await
                .map_err(pg)?
                .get(0);
            let mut used = Vec::new();
            for (column, window) in [("requests", "1 minute"), ("tokens", "1 hour")] {
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT COALESCE(SUM({column}), 0)::BIGINT, {} FROM limit_uses
                             WHERE limit_key = $1 AND at >= now() - interval '{window}' AND {column} > 0",
                            us("MIN(at)")
                        ),
                        &[&rule.key],
                    )
                    .await
                    .map_err(pg)?;
                used.push((u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), row.get::<_, Option<i64>>(1).map(at)));
            }
            let standing =
                Standing { pause, slots: u64::try_from(slots).unwrap_or(0), requests: used[0], tokens: used[1] };
            if let Some(wait) = judge(rule, &standing) {
                tx.commit().await.map_err(pg)?;
                return Ok(wait);
            }
        }
        for rule in rules {
            tx.execute(
                "INSERT INTO limit_slots (holder, limit_key, expires_at) VALUES ($1, $2, now() + $3::BIGINT * interval '1 microsecond')
                 ON CONFLICT (holder, limit_key) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                &[&holder, &rule.key, &duration_us(ttl)],
            )
            .await
            .map_err(pg)?;
            tx.execute(
                "INSERT INTO limit_uses (limit_key, at, requests, tokens) VALUES ($1, now(), 1, 0)",
                &[&rule.key],
            )
            .await
            .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)?;
        Ok(Answer::Taken)
    }

    /// The latest pause in force on any of `keys`, read without writing anything.
    pub async fn paused_until(&self, keys: &[String]) -> Result<Option<Timestamp>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM MAX(until)) * 1000000)::BIGINT FROM limit_pauses
                 WHERE limit_key = ANY($1) AND until > now()",
                &[&keys],
            )
            .await
            .map_err(|e| pg_backend(&e))?;
        Ok(row.get::<_, Option<i64>>(0).map(at))
    }

    /// [`SqliteStore::renew_slot`] on PostgreSQL.
    pub async fn renew_slot(&self, holder: &str, ttl: Duration) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        client
            .execute(
                "UPDATE limit_slots SET expires_at = now() + $2::BIGINT * interval '1 microsecond' WHERE holder = $1",
                &[&holder, &duration_us(ttl)],
            )
            .await
            .map_err(|e| pg_backend(&e))?;
        Ok(())
    }

    /// [`SqliteStore::give_slot`] on PostgreSQL.
    pub async fn give_slot(&self, holder: &str, tokens: u64) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| pg_backend(&e))?;
        let pg = |e: tokio_postgres::Error| pg_backend(&e);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LIMITS_LOCK]).await.map_err(pg)?;
        let keys: Vec<String> = tx
            .query("DELETE FROM limit_slots WHERE holder = $1 RETURNING limit_key", &[&holder])
            .await
            .map_err(pg)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if tokens > 0 {
            for key in keys {
                tx.execute(
                    "INSERT INTO limit_uses (limit_key, at, requests, tokens) VALUES ($1, now(), 0, $2)",
                    &[&key, &i64::try_from(tokens).unwrap_or(i64::MAX)],
                )
                .await
                .map_err(pg)?;
            }
        }
        tx.commit().await.map_err(pg)
    }

    /// [`SqliteStore::pause_limit`] on PostgreSQL.
    pub async fn pause_limit(&self, key: &str, until: Timestamp, why: &str) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        client
            .execute(
                "INSERT INTO limit_pauses (limit_key, until, why) VALUES ($1, to_timestamp($2::BIGINT / 1000000.0), $3)
                 ON CONFLICT (limit_key) DO UPDATE SET until = GREATEST(limit_pauses.until, EXCLUDED.until), why = EXCLUDED.why",
                &[&key, &micros(until), &why],
            )
            .await
            .map_err(|e| pg_backend(&e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        Rule {
            key: "anthropic/*/*".into(),
            shown: "anthropic".into(),
            concurrent: Some(2),
            requests_per_minute: Some(10),
            tokens_per_hour: Some(1000),
        }
    }

    #[test]
    fn judge_says_the_first_limit_reached_and_until_when() {
        let t = |s: &str| s.parse::<Timestamp>().expect("time");
        let cases: Vec<(Standing, Option<Answer>)> = vec![
            (Standing::default(), None),
            (Standing { slots: 1, requests: (9, None), tokens: (999, None), ..Default::default() }, None),
            (
                Standing { slots: 2, ..Default::default() },
                Some(Answer::Wait { reason: "anthropic: 2 of 2 concurrent stages in use".into(), until: None }),
            ),
            (
                Standing { requests: (10, Some(t("2026-11-25T10:00:00Z"))), ..Default::default() },
                Some(Answer::Wait {
                    reason: "anthropic: 10 of 10 requests this minute".into(),
                    until: Some(t("2026-11-25T10:01:00Z")),
                }),
            ),
            (
                Standing { tokens: (1500, Some(t("2026-11-25T10:00:00Z"))), ..Default::default() },
                Some(Answer::Wait {
                    reason: "anthropic: 1500 of 1000 tokens this hour".into(),
                    until: Some(t("2026-11-25T11:00:00Z")),
                }),
            ),
            (
                Standing { pause: Some((t("2026-11-25T12:00:00Z"), "429".into())), slots: 5, ..Default::default() },
                Some(Answer::Wait {
                    reason: "anthropic is paused until 2026-11-25T12:00:00Z after a rate limit: 429".into(),
                    until: Some(t("2026-11-25T12:00:00Z")),
                }),
            ),
        ];
        for (standing, expected) in cases {
            assert_eq!(judge(&rule(), &standing), expected, "{standing:?}");
        }
    }

    #[test]
    fn slots_are_taken_up_to_the_limit_given_back_and_a_dead_holders_slot_expires() {
        let store = SqliteStore::in_memory().expect("store");
        let now = "2026-11-25T10:00:00Z".parse::<Timestamp>().expect("time");
        let ttl = Duration::from_secs(60);
        let rules = [rule()];
        assert_eq!(store.take_slot("a", &rules, ttl, now).expect("take"), Answer::Taken);
        assert_eq!(store.take_slot("b", &rules, ttl, now).expect("take"), Answer::Taken);
        let third = store.take_slot("c", &rules, ttl, now).expect("take");
        assert_eq!(third, Answer::Wait { reason: "anthropic: 2 of 2 concurrent stages in use".into(), until: None });
        store.give_slot("a", 400, now).expect("give");
        assert_eq!(store.take_slot("c", &rules, ttl, now).expect("take"), Answer::Taken);
        // b dies: its slot comes back once its lease ran out; c renews and keeps its own.
        let later = now + jiff::SignedDuration::from_secs(50);
        store.renew_slot("c", ttl, later).expect("renew");
        let after = now + jiff::SignedDuration::from_secs(61);
        assert_eq!(store.take_slot("d", &rules, ttl, after).expect("take"), Answer::Taken);
        assert!(matches!(store.take_slot("e", &rules, ttl, after).expect("take"), Answer::Wait { .. }));
        // Tokens: 400 + 700 used this hour is past 1000.
        store.give_slot("c", 700, after).expect("give");
        store.give_slot("d", 0, after).expect("give");
        let wait = store.take_slot("e", &rules, ttl, after).expect("take");
        assert_eq!(
            wait,
            Answer::Wait {
                reason: "anthropic: 1100 of 1000 tokens this hour".into(),
                until: Some(now + jiff::SignedDuration::from_secs(3600))
            }
        );
        // A pause holds everyone until it ends.
        let fresh = SqliteStore::in_memory().expect("store");
        fresh
            .pause_limit("anthropic/*/*", now + jiff::SignedDuration::from_secs(30), "429 Too Many Requests")
            .expect("pause");
        assert!(matches!(fresh.take_slot("a", &rules, ttl, now).expect("take"), Answer::Wait { until: Some(_), .. }));
        assert_eq!(
            fresh.take_slot("a", &rules, ttl, now + jiff::SignedDuration::from_secs(31)).expect("take"),
            Answer::Taken
        );
    }
}
