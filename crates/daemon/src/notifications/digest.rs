//! Notifications a team channel can live with: `on = "change"` (a pipeline's first failure and
//! its first success after failures) and `digest_minutes` (the runs' ends not sent on their
//! own, gathered into one message). What waits for a digest is kept in the notifications
//! journal (`held`), so a daemon restarted meanwhile sends it; a digest is claimed under a key
//! made from the first notification it gathers, so it is sent once.

use std::sync::Arc;

use loopwright_app::ops::read;
use loopwright_engine::{RunId, RunState, RunStatus};
use loopwright_spec::config::NotifyEvent;
use loopwright_store::notify::{Held, NotificationStatus};

use super::{Message, Notifier, Target};
use crate::Shared;

/// The most runs a digest names (it counts them all).
const NAMED: usize = 10;

/// Whether a run's end changes how its pipeline stands: its first failure, or its
/// first success after failures. The pipeline stands as its latest earlier run that failed or
/// succeeded left it (healthy when there is none); a cancelled run changes nothing.
pub(super) async fn changed(shared: &Shared, end: End) -> bool {
    let failed = match end.shown {
        RunStatus::Failed => true,
        RunStatus::Success => false,
        _ => return false,
    };
    let filter =
        read::PageFilter { pipeline: Some(end.pipeline), until: end.created_at, limit: 200, ..Default::default() };
    let Ok(page) = read::page(&shared.store, &filter).await else { return true };
    let before = page
        .runs
        .iter()
        .filter(|r| r.run_id != end.run && Some(r.created_at) <= end.created_at)
        .find_map(|r| match r.status {
            RunStatus::Failed => Some(true),
            RunStatus::Success => Some(false),
            _ => None,
        })
        .unwrap_or(false);
    failed != before
}

/// A run's end, as [`changed`] weighs it.
pub(super) struct End {
    /// The run.
    pub run: RunId,
    /// Its pipeline.
    pub pipeline: String,
    /// When it was started.
    pub created_at: Option<jiff::Timestamp>,
    /// How it ended, as people are shown it.
    pub shown: RunStatus,
}

impl End {
    /// `state`'s end.
    pub(super) fn of(state: &RunState, shown: RunStatus) -> Self {
        Self {
            run: state.run_id.clone(),
            pipeline: state.started.as_ref().map(|s| s.pipeline.clone()).unwrap_or_default(),
            created_at: state.created_at,
            shown,
        }
    }
}

/// The digest's words: how many runs ended, how, and the first few by name.
pub(super) fn words(held: &[Held]) -> String {
    let failed = held.iter().filter(|h| h.event == NotifyEvent::Failed.as_str()).count();
    let others = held.len() - failed;
    let runs: Vec<String> = held
        .iter()
        .take(NAMED)
        .map(|h| format!("{} {}", h.run_id.as_deref().unwrap_or("?"), h.event.replace('_', " ")))
        .collect();
    let more = held.len().saturating_sub(NAMED);
    format!(
        "{} run{} ended: {failed} failed, {others} finished otherwise — {}{}",
        held.len(),
        if held.len() == 1 { "" } else { "s" },
        runs.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() }
    )
}

impl Notifier {
    /// Keeps a run's end for `target`'s next digest.
    pub(super) async fn hold(&self, key: String, target: &Target, message: &Message) {
        let row = message.row(key, target, NotificationStatus::Held);
        let store = Arc::clone(&self.shared.auto_store);
        let _ = tokio::task::spawn_blocking(move || store.notify_hold(&row)).await;
    }

    /// Sends each digest whose oldest held notification has waited its target's minutes.
    pub(super) async fn digests(self: Arc<Self>) {
        let now = jiff::Timestamp::now();
        for target in self.targets.iter().filter(|t| t.config.digest_minutes.is_some()) {
            let minutes = i64::from(target.config.digest_minutes.unwrap_or(1));
            let (store, identity) = (Arc::clone(&self.shared.auto_store), target.hash.clone());
            let held =
                tokio::task::spawn_blocking(move || store.notify_held(&identity)).await.ok().and_then(Result::ok);
            let Some(held) = held.filter(|h| !h.is_empty()) else { continue };
            let oldest = held[0].at.parse::<jiff::Timestamp>().unwrap_or(now);
            if now.duration_since(oldest) < jiff::SignedDuration::from_mins(minutes) {
                continue;
            }
            let key = format!("digest:{}:{}", target.hash, held[0].key);
            let message = Message {
                event: NotifyEvent::Digest,
                run_id: None,
                session: None,
                pipeline: None,
                task: None,
                stage: None,
                headline: words(&held),
                url: format!("{}/", self.base_url()),
                pull_request: None,
                actions: Vec::new(),
                recipient: target.recipient.clone(),
            };
            // Claimed and marked in one write: a daemon that dies before it sends this digest
            // again (its claim is kept) and never tells these twice, nor loses one held since.
            let keys = held.into_iter().map(|h| h.key).collect();
            Arc::clone(&self).send_telling(key, target.clone(), message, keys).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_counts_every_run_and_names_the_first_ten() {
        let held: Vec<_> = (0..12)
            .map(|i| {
                let event = if i % 4 == 0 { "failed" } else { "finished" };
                Held {
                    key: format!("k{i}"),
                    run_id: Some(format!("run-{i:02}")),
                    event: event.into(),
                    at: String::new(),
                }
            })
            .collect();
        assert_eq!(
            words(&held),
            "12 runs ended: 3 failed, 9 finished otherwise — run-00 failed, run-01 finished, run-02 finished, \
             run-03 finished, run-04 failed, run-05 finished, run-06 finished, run-07 finished, run-08 failed, \
             run-09 finished and 2 more"
        );
        assert_eq!(words(&held[..1]), "1 run ended: 1 failed, 0 finished otherwise — run-00 failed");
    }
}
