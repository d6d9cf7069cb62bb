//! Spend over time shared by every process of a store (SPEC §15): each agent attempt's use is
//! recorded (tokens, cost, and what caps count it by: pipeline, provider, person); an attempt
//! takes a hold under every `[[spend]]` cap that counts it, or is told the period's use is
//! already at or over the cap. Near a cap — when the attempts in flight could each use as much
//! as the largest attempt of the period and reach it — attempts under it go one at a time, so
//! that at most one attempt ends over a cap. Holds are leased, renewed with the provider slots.
//!
//! Each take is one transaction over every cap it names (SQLite `BEGIN IMMEDIATE`, PostgreSQL
//! an advisory lock). What to answer is [`judge`], a pure function of what the store holds.

use std::time::Duration;

use jiff::Timestamp;
use loopwright_journal::StoreError;
use rusqlite::params;

use crate::pg::{PgStore, backend as pg_backend, pool_error};
use crate::{SqliteStore, backend};

/// One cap as the store counts it, for the period now.
#[derive(Debug, Clone, PartialEq)]
pub struct CapRule {
    /// Its identity (`day:workspace`).
    pub key: String,
    /// How people read it.
    pub shown: String,
    /// The period's start.
    pub start: Timestamp,
    /// The period's end (the next one's start).
    pub end: Timestamp,
    /// At most this many tokens.
    pub tokens: Option<u64>,
    /// At most this many US dollars.
    pub cost_usd: Option<f64>,
    /// Only uses of runs of this pipeline.
    pub pipeline: Option<String>,
    /// Only uses of agents of this provider.
    pub provider: Option<String>,
    /// Only uses of runs this person started.
    pub person: Option<String>,
}

/// What an attempt is counted by: its run's pipeline and person, its agent's provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spender {
    /// The run's pipeline.
    pub pipeline: String,
    /// The agent's provider (empty when unknown).
    pub provider: String,
    /// Who started the run (empty when nobody is named).
    pub person: String,
}

/// What a period's uses under a cap add up to, and what is in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Standing {
    /// Tokens used.
    pub tokens: u64,
    /// US dollars spent.
    pub cost_usd: f64,
    /// The most tokens one attempt used.
    pub largest_tokens: u64,
    /// The most one attempt spent.
    pub largest_cost: f64,
    /// Other attempts holding the cap now.
    pub in_flight: u64,
}

/// What a take found.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The attempt holds every cap: it may go.
    Go,
    /// Attempts near the cap go one at a time: this one waits for those in flight.
    Wait {
        /// In words.
        reason: String,
    },
    /// The period's use is already at or over the cap.
    Over {
        /// The cap.
        key: String,
        /// In words.
        reason: String,
        /// When the period ends.
        until: Timestamp,
    },
}

/// Whether an attempt may take a hold under `cap`, given what the store holds (`None`: it may).
pub fn judge(cap: &CapRule, s: &Standing) -> Option<Answer> {
    let tokens_over = cap.tokens.is_some_and(|most| s.tokens >= most);
    let cost_over = cap.cost_usd.is_some_and(|most| s.cost_usd >= most);
    if tokens_over || cost_over {
        let what = if cost_over {
            format!("${:.2} of ${:.2}", s.cost_usd, cap.cost_usd.unwrap_or_default())
        } else {
            format!("{} of {} tokens", s.tokens, cap.tokens.unwrap_or_default())
        };
        return Some(Answer::Over {
            key: cap.key.clone(),
            reason: format!("{} is used up: {what} this period, until {}", cap.shown, cap.end),
            until: cap.end,
        });
    }
    let ahead = s.in_flight + 1;
    let near_tokens = cap.tokens.is_some_and(|most| s.tokens + ahead * s.largest_tokens >= most);
    let near_cost = cap.cost_usd.is_some_and(|most| s.cost_usd + ahead as f64 * s.largest_cost >= most);
    if s.in_flight > 0 && (near_tokens || near_cost) {
        return Some(Answer::Wait {
            reason: format!(
                "{} is nearly used up: attempts under it go one at a time ({} in flight)",
                cap.shown, s.in_flight
            ),
        });
    }
    None
}

fn micros(t: Timestamp) -> i64 {
    t.as_microsecond()
}

fn duration_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// How long a use is kept: the longest period (a month) and then some.
const KEEP_US: i64 = 62 * 24 * 3_600_000_000;

/// The sums of uses under a cap, on SQLite (`?1` the period's start, `?2..?4` its filters).
const SQLITE_SUMS: &str = "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost_usd), 0.0), COALESCE(MAX(tokens), 0),
            COALESCE(MAX(cost_usd), 0.0) FROM spend_uses
     WHERE at_us >= ?1 AND (?2 IS NULL OR pipeline = ?2) AND (?3 IS NULL OR provider = ?3)
       AND (?4 IS NULL OR person = ?4)";

/// The same on PostgreSQL.
const PG_SUMS: &str =
    "SELECT COALESCE(SUM(tokens), 0)::BIGINT, COALESCE(SUM(cost_usd), 0.0), COALESCE(MAX(tokens), 0)::BIGINT,
            COALESCE(MAX(cost_usd), 0.0) FROM spend_uses
     WHERE at_us >= $1 AND ($2::TEXT IS NULL OR pipeline = $2) AND ($3::TEXT IS NULL OR provider = $3)
       AND ($4::TEXT IS NULL OR person = $4)";

impl SqliteStore {
    /// Takes a hold under every cap for `holder` (an attempt), or says why it may not.
    pub fn take_spend(
        &self,
        holder: &str,
        caps: &[CapRule],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<Answer, StoreError> {
        let conn = self.conn();
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        tx.execute("DELETE FROM spend_holds WHERE expires_us < ?1", [micros(now)]).map_err(backend)?;
        for cap in caps {
            let (tokens, cost_usd, largest_tokens, largest_cost) = tx
                .query_row(SQLITE_SUMS, params![micros(cap.start), cap.pipeline, cap.provider, cap.person], |r| {
                    Ok((count(r.get(0)?), r.get::<_, f64>(1)?, count(r.get(2)?), r.get::<_, f64>(3)?))
                })
                .map_err(backend)?;
            let in_flight: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM spend_holds WHERE cap_key = ?1 AND holder <> ?2",
                    params![cap.key, holder],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            let standing = Standing { tokens, cost_usd, largest_tokens, largest_cost, in_flight: count(in_flight) };
            if let Some(answer) = judge(cap, &standing) {
                tx.commit().map_err(backend)?;
                return Ok(answer);
            }
        }
        for cap in caps {
            tx.execute(
                "INSERT OR REPLACE INTO spend_holds (holder, cap_key, expires_us) VALUES (?1, ?2, ?3)",
                params![holder, cap.key, micros(now) + duration_us(ttl)],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(Answer::Go)
    }

    /// Keeps `holder`'s holds for another `ttl`.
    pub fn renew_spend(&self, holder: &str, ttl: Duration, now: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "UPDATE spend_holds SET expires_us = ?2 WHERE holder = ?1",
                params![holder, micros(now) + duration_us(ttl)],
            )
            .map_err(backend)?;
        Ok(())
    }

    /// Records what `holder` used (counted by `spender`) and gives its holds back.
    pub fn give_spend(
        &self,
        holder: &str,
        spender: &Spender,
        tokens: u64,
        cost_usd: f64,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate).map_err(backend)?;
        tx.execute("DELETE FROM spend_holds WHERE holder = ?1", [holder]).map_err(backend)?;
        if tokens > 0 || cost_usd > 0.0 {
            tx.execute("DELETE FROM spend_uses WHERE at_us < ?1", [micros(now) - KEEP_US]).map_err(backend)?;
            tx.execute(
                "INSERT INTO spend_uses (at_us, pipeline, provider, person, tokens, cost_usd) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    micros(now),
                    spender.pipeline,
                    spender.provider,
                    spender.person,
                    i64::try_from(tokens).unwrap_or(i64::MAX),
                    cost_usd
                ],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)
    }

    /// What the period's uses under `cap` add up to (nothing in flight counted).
    pub fn spend_used(&self, cap: &CapRule) -> Result<Standing, StoreError> {
        self.conn()
            .query_row(SQLITE_SUMS, params![micros(cap.start), cap.pipeline, cap.provider, cap.person], |r| {
                Ok(Standing {
                    tokens: count(r.get(0)?),
                    cost_usd: r.get(1)?,
                    largest_tokens: count(r.get(2)?),
                    largest_cost: r.get(3)?,
                    in_flight: 0,
                })
            })
            .map_err(backend)
    }
}

/// The advisory lock every take and give of spend holds on PostgreSQL (`spnd` in ASCII).
const SPEND_LOCK: i64 = 0x7370_6e64;

impl PgStore {
    /// [`SqliteStore::take_spend`] on PostgreSQL.
    pub async fn take_spend(&self, holder: &str, caps: &[CapRule], ttl: Duration) -> Result<Answer, StoreError> {
        let now = micros(Timestamp::now());
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| pg_backend(&e))?;
        let pg = |e: tokio_postgres::Error| pg_backend(&e);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SPEND_LOCK]).await.map_err(pg)?;
        tx.execute("DELETE FROM spend_holds WHERE expires_us < $1", &[&now]).await.map_err(pg)?;
        for cap in caps {
            let row = tx
                .query_one(PG_SUMS, &[&micros(cap.start), &cap.pipeline, &cap.provider, &cap.person])
                .await
                .map_err(pg)?;
            let in_flight: i64 = tx
                .query_one("SELECT COUNT(*) FROM spend_holds WHERE cap_key = $1 AND holder <> $2", &[&cap.key, &holder])
                .await
                .map_err(pg)?
                .get(0);
            let standing = Standing {
                tokens: count(row.get(0)),
                cost_usd: row.get(1),
                largest_tokens: count(row.get(2)),
                largest_cost: row.get(3),
                in_flight: count(in_flight),
            };
            if let Some(answer) = judge(cap, &standing) {
                tx.commit().await.map_err(pg)?;
                return Ok(answer);
            }
        }
        for cap in caps {
            tx.execute(
                "INSERT INTO spend_holds (holder, cap_key, expires_us) VALUES ($1, $2, $3)
                 ON CONFLICT (holder, cap_key) DO UPDATE SET expires_us = EXCLUDED.expires_us",
                &[&holder, &cap.key, &(now + duration_us(ttl))],
            )
            .await
            .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)?;
        Ok(Answer::Go)
    }

    /// [`SqliteStore::renew_spend`] on PostgreSQL.
    pub async fn renew_spend(&self, holder: &str, ttl: Duration) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let until = micros(Timestamp::now()) + duration_us(ttl);
        client
            .execute("UPDATE spend_holds SET expires_us = $2 WHERE holder = $1", &[&holder, &until])
            .await
            .map_err(|e| pg_backend(&e))?;
        Ok(())
    }

    /// [`SqliteStore::give_spend`] on PostgreSQL.
    pub async fn give_spend(
        &self,
        holder: &str,
        spender: &Spender,
        tokens: u64,
        cost_usd: f64,
    ) -> Result<(), StoreError> {
        let now = micros(Timestamp::now());
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(|e| pg_backend(&e))?;
        let pg = |e: tokio_postgres::Error| pg_backend(&e);
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SPEND_LOCK]).await.map_err(pg)?;
        tx.execute("DELETE FROM spend_holds WHERE holder = $1", &[&holder]).await.map_err(pg)?;
        if tokens > 0 || cost_usd > 0.0 {
            tx.execute("DELETE FROM spend_uses WHERE at_us < $1", &[&(now - KEEP_US)]).await.map_err(pg)?;
            tx.execute(
                "INSERT INTO spend_uses (at_us, pipeline, provider, person, tokens, cost_usd) VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &now,
                    &spender.pipeline,
                    &spender.provider,
                    &spender.person,
                    &i64::try_from(tokens).unwrap_or(i64::MAX),
                    &cost_usd,
                ],
            )
            .await
            .map_err(pg)?;
        }
        tx.commit().await.map_err(pg)
    }

    /// [`SqliteStore::spend_used`] on PostgreSQL.
    pub async fn spend_used(&self, cap: &CapRule) -> Result<Standing, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let row = client
            .query_one(PG_SUMS, &[&micros(cap.start), &cap.pipeline, &cap.provider, &cap.person])
            .await
            .map_err(|e| pg_backend(&e))?;
        Ok(Standing {
            tokens: count(row.get(0)),
            cost_usd: row.get(1),
            largest_tokens: count(row.get(2)),
            largest_cost: row.get(3),
            in_flight: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(tokens: Option<u64>, cost: Option<f64>) -> CapRule {
        CapRule {
            key: "day:workspace".into(),
            shown: "the workspace's daily spend cap".into(),
            start: Timestamp::UNIX_EPOCH,
            end: "2026-12-01T00:00:00Z".parse().expect("time"),
            tokens,
            cost_usd: cost,
            pipeline: None,
            provider: None,
            person: None,
        }
    }

    #[test]
    fn a_cap_refuses_at_its_limit_and_goes_one_at_a_time_near_it() {
        let s = |tokens, cost_usd, largest_tokens, in_flight| Standing {
            tokens,
            cost_usd,
            largest_tokens,
            largest_cost: 0.0,
            in_flight,
        };
        let go = None;
        let table: [(CapRule, Standing, Option<&str>); 7] = [
            (cap(Some(1000), None), s(0, 0.0, 0, 5), go),
            (cap(Some(1000), None), s(999, 0.0, 10, 0), go),
            (cap(Some(1000), None), s(1000, 0.0, 10, 0), Some("is used up: 1000 of 1000 tokens")),
            (cap(None, Some(5.0)), s(0, 5.25, 0, 0), Some("is used up: $5.25 of $5.00")),
            // Two in flight that could each use 300: this one waits for them.
            (
                cap(Some(1000), None),
                s(200, 0.0, 300, 2),
                Some("nearly used up: attempts under it go one at a time (2 in flight)"),
            ),
            // Far from the cap, attempts go together.
            (cap(Some(10_000), None), s(200, 0.0, 300, 2), go),
            // Nothing in flight: the one attempt near the cap goes.
            (cap(Some(1000), None), s(900, 0.0, 300, 0), go),
        ];
        for (cap, standing, expected) in table {
            let got = judge(&cap, &standing).map(|a| match a {
                Answer::Over { reason, .. } | Answer::Wait { reason } => reason,
                Answer::Go => "go".into(),
            });
            match expected {
                None => assert_eq!(got, None, "{standing:?}"),
                Some(part) => assert!(got.as_deref().is_some_and(|g| g.contains(part)), "{standing:?}: {got:?}"),
            }
        }
    }
}
