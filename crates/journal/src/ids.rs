//! Run and task identifiers, and the epoch of a run's lease.

use std::fmt;

use serde::{Deserialize, Serialize};

/// True for an id that can name a file: letters, digits, `-`, `_` and `.`, at most 100, not
/// starting with a dot.
fn file_safe(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 100
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.')
}

/// A run's id: `YYYYMMDD-HHMMSS-xxxxxx` (UTC time of creation, then random hex), so ids sort by
/// time and are short enough to type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// A new id from the creation time and some random bits.
    pub fn generate(now: jiff::Timestamp, random: u64) -> Self {
        let t = now.to_zoned(jiff::tz::TimeZone::UTC);
        Self(format!("{}-{:06x}", t.strftime("%Y%m%d-%H%M%S"), random & 0xff_ffff))
    }

    /// An id as given by a user or read from the store.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// An id from outside (a command line, a URL), if it could name a run: letters, digits,
    /// `-`, `_` and `.`, at most 100, not starting with a dot (it names files under `runs/`).
    pub fn parse(id: &str) -> Option<Self> {
        file_safe(id).then(|| Self(id.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// A task's id, e.g. `task-a1b2c3-fix-login-button`: artifacts of runs of the same task can
/// be reused (`--start-from`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// A task id as given with `--task-id`, if it is usable in file names.
    pub fn parse(id: &str) -> Option<Self> {
        file_safe(id).then(|| Self(id.to_owned()))
    }

    /// A new id from random bits and the task's text: `task-xxxxxx-first-words`.
    pub fn generate(task: &str, random: u64) -> Self {
        let mut slug = String::new();
        for word in task.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).take(5) {
            if slug.len() + word.len() > 40 {
                break;
            }
            if !slug.is_empty() {
                slug.push('-');
            }
            slug.push_str(&word.to_ascii_lowercase());
        }
        let hex = format!("{:06x}", random & 0xff_ffff);
        Self(if slug.is_empty() { format!("task-{hex}") } else { format!("task-{hex}-{slug}") })
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_time() {
        let t: jiff::Timestamp = "2026-04-04T10:15:00Z".parse().expect("timestamp");
        assert_eq!(RunId::generate(t, 0xabc).as_str(), "20260404-101500-000abc");
    }

    #[test]
    fn task_ids_slug_the_task() {
        assert_eq!(
            TaskId::generate("Fix login button not responding!", 0xa1b2c3).as_str(),
            "task-a1b2c3-fix-login-button-not-responding"
        );
        assert_eq!(TaskId::generate("", 1).as_str(), "task-000001");
        assert!(TaskId::parse("task-x7y8z9-fix-login").is_some());
        assert!(TaskId::parse("../etc").is_none());
        assert!(TaskId::parse("a b").is_none());
    }
}

/// The epoch of a run's lease on the fleet: one more with every claim, the fence of every
/// write the worker holding it makes for the run. Kept as a BIGINT in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseEpoch(u64);

impl LeaseEpoch {
    /// Epoch `n`.
    pub fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// From the database's BIGINT (never negative there; a negative one reads as 0).
    pub fn from_sql(value: i64) -> Self {
        Self(u64::try_from(value).unwrap_or(0))
    }

    /// As the database's BIGINT.
    pub fn to_sql(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// The mark the processes `worker` starts under this lease carry (`LOOPWRIGHT_LEASE`):
    /// `worker:epoch`.
    pub fn tag(self, worker: &str) -> String {
        format!("{worker}:{}", self.0)
    }
}

impl fmt::Display for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
