//! `gc`: frees what finished runs no longer need, as `[retention]` says — their snapshots after
//! `snapshots_days`, the whole run (its files and its journal) after `runs_days` — then the
//! copies in the object store no snapshot names any more. A run that is queued, running,
//! waiting or interrupted is never touched (its rollback may still need its snapshots).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use loopwright_engine::{RunId, RunQuery, RunStatus, Store};
use loopwright_spec::config::RetentionConfig;
use loopwright_store::Journal;
use serde::Serialize;

use crate::error::Error;
use crate::workspace::Workspace;

/// A copy in the object store younger than this is kept whatever names it: a snapshot being
/// taken writes its copies before its manifest.
const YOUNG: std::time::Duration = std::time::Duration::from_secs(3600);

/// What `gc` frees of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Frees {
    /// Its snapshots.
    Snapshots,
    /// The whole run: its files (snapshots, outputs, prompts) and its journal.
    Run,
}

/// Which runs `gc` frees, and what of each: a pure decision over the runs' statuses and when
/// they last changed. Only a run that ended (succeeded, failed, was cancelled or rejected) is freed.
pub fn plan(
    runs: &[(RunId, RunStatus, jiff::Timestamp)],
    retention: &RetentionConfig,
    now: jiff::Timestamp,
) -> Vec<(RunId, Frees)> {
    let older = |at: jiff::Timestamp, days: u32| {
        now.duration_since(at) >= jiff::SignedDuration::from_hours(24 * i64::from(days))
    };
    runs.iter()
        .filter(|(_, status, _)| status.is_final())
        .filter_map(|(run, _, at)| {
            if retention.runs_days.is_some_and(|days| older(*at, days)) {
                Some((run.clone(), Frees::Run))
            } else if older(*at, retention.snapshots_days) {
                Some((run.clone(), Frees::Snapshots))
            } else {
                None
            }
        })
        .collect()
}

/// What `gc` freed (or, with `dry_run`, would free).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Freed {
    /// Nothing was removed: this is what would be.
    pub dry_run: bool,
    /// The runs freed, and what of each.
    pub runs: Vec<FreedRun>,
    /// Copies in the object store no snapshot names.
    pub objects: usize,
    /// Bytes in all.
    pub bytes: u64,
}

/// One run freed.
#[derive(Debug, Clone, Serialize)]
pub struct FreedRun {
    /// The run.
    pub run_id: String,
    /// What of it.
    pub frees: Frees,
    /// Bytes.
    pub bytes: u64,
}

/// Frees what `[retention]` says finished runs no longer need; with `dry_run`, says what it
/// would free and frees nothing.
pub async fn gc(ws: &Workspace, store: &Journal, now: jiff::Timestamp, dry_run: bool) -> Result<Freed, Error> {
    let query = RunQuery {
        statuses: vec![RunStatus::Success, RunStatus::Failed, RunStatus::Cancelled, RunStatus::Rejected],
        pipeline: None,
        text: None,
        person: None,
        since: None,
        until: None,
        waiting_first: false,
        offset: 0,
        limit: usize::MAX >> 1,
    };
    let found = store.runs_page(&query).await?.runs;
    let runs: Vec<_> = found.iter().map(|r| (r.run_id.clone(), r.status, r.updated_at)).collect();
    let runs_dir = ws.runs_dir();
    let mut freed = Freed { dry_run, ..Freed::default() };
    let mut gone: BTreeSet<PathBuf> = BTreeSet::new();
    let mut forgotten = Vec::new();
    for (run, frees) in plan(&runs, &ws.config.retention, now) {
        let dir = runs_dir.join(run.as_str());
        let target = match frees {
            Frees::Run => {
                forgotten.push(run.clone());
                dir
            }
            Frees::Snapshots => dir.join("snapshots"),
        };
        if !target.exists() {
            if frees == Frees::Run {
                freed.runs.push(FreedRun { run_id: run.to_string(), frees, bytes: 0 });
            }
            continue;
        }
        let bytes = size(&target);
        if !dry_run {
            std::fs::remove_dir_all(&target)
                .map_err(|e| Error::Internal(anyhow::anyhow!("cannot remove {}: {e}", ws.shown(&target))))?;
        }
        gone.insert(target);
        freed.bytes += bytes;
        freed.runs.push(FreedRun { run_id: run.to_string(), frees, bytes });
    }
    // Files first, then the journal: a gc that dies between the two leaves runs in the list
    // whose files are gone, which the next one takes out.
    if !dry_run && !forgotten.is_empty() {
        store.forget(&forgotten).await?;
    }
    let (objects, bytes) = sweep(&runs_dir, &gone, dry_run)?;
    freed.objects = objects;
    freed.bytes += bytes;
    Ok(freed)
}

/// Removes the copies in the object store that no snapshot left (those under `gone` not
/// counted) names, and are not young: (how many, bytes).
fn sweep(runs_dir: &Path, gone: &BTreeSet<PathBuf>, dry_run: bool) -> Result<(usize, u64), Error> {
    let objects = loopwright_runners::objects_dir(runs_dir);
    let Ok(entries) = std::fs::read_dir(&objects) else { return Ok((0, 0)) };
    let mut named = BTreeSet::new();
    for run in std::fs::read_dir(runs_dir).into_iter().flatten().flatten() {
        let snapshots = run.path().join("snapshots");
        if gone.iter().any(|g| snapshots.starts_with(g)) {
            continue;
        }
        for manifest in std::fs::read_dir(&snapshots).into_iter().flatten().flatten() {
            let path = manifest.path();
            let Some(name) =
                path.file_stem().and_then(|n| n.to_str()).filter(|_| path.extension().is_some_and(|e| e == "json"))
            else {
                continue;
            };
            // A manifest that cannot be read keeps every copy: nothing is removed on a doubt.
            let manifest = loopwright_runners::snapshot::load(&snapshots, name)
                .map_err(|e| Error::Internal(anyhow::anyhow!("cannot read snapshot {}: {e}", path.display())))?;
            named.extend(manifest.objects().map(str::to_owned));
        }
    }
    let (mut count, mut bytes) = (0, 0);
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        let young = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_none_or(|age| age < YOUNG);
        if young || named.contains(&name) || !meta.is_file() {
            continue;
        }
        if !dry_run {
            std::fs::remove_file(entry.path())
                .map_err(|e| Error::Internal(anyhow::anyhow!("cannot remove {}: {e}", entry.path().display())))?;
        }
        count += 1;
        bytes += meta.len();
    }
    Ok((count, bytes))
}

/// The bytes of the files under `path`.
fn size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path).into_iter().flatten().flatten().map(|e| size(&e.path())).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn only_ended_runs_past_their_days_are_freed_a_table() {
        let now: jiff::Timestamp = "2026-11-30T12:00:00Z".parse().expect("time");
        let ago = |days: i64| now - jiff::SignedDuration::from_hours(24 * days);
        let run = |n: u8| RunId::parse(&format!("20261101-000000-00{n:02}")).expect("id");
        let runs = vec![
            (run(1), RunStatus::Success, ago(20)),
            (run(2), RunStatus::Failed, ago(15)),
            (run(3), RunStatus::Cancelled, ago(3)),
            (run(4), RunStatus::Waiting, ago(40)),
            (run(5), RunStatus::Running, ago(40)),
            (run(6), RunStatus::Queued, ago(40)),
            (run(7), RunStatus::Interrupted, ago(40)),
            (run(8), RunStatus::Success, ago(100)),
        ];
        let keep = |snapshots_days, runs_days| RetentionConfig { snapshots_days, runs_days };
        assert_eq!(
            plan(&runs, &keep(14, None), now),
            vec![(run(1), Frees::Snapshots), (run(2), Frees::Snapshots), (run(8), Frees::Snapshots)]
        );
        assert_eq!(
            plan(&runs, &keep(0, None), now),
            vec![
                (run(1), Frees::Snapshots),
                (run(2), Frees::Snapshots),
                (run(3), Frees::Snapshots),
                (run(8), Frees::Snapshots)
            ]
        );
        assert_eq!(
            plan(&runs, &keep(14, Some(30)), now),
            vec![(run(1), Frees::Snapshots), (run(2), Frees::Snapshots), (run(8), Frees::Run)]
        );
    }
}
