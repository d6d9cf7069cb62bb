//! Recording a decision made on what was read: the events go right after the journal as the
//! decision read it (compare-and-append), or nothing is recorded and the caller is told what
//! changed the run meanwhile, and who did. Every answer, claim and cancel goes through here.

use loopwright_engine::{Event, RunId, RunState, Store, StoreError};
use loopwright_store::Journal;

use crate::error::Error;

/// Appends `events` right after the journal as `state` read it (compare-and-append) and applies
/// them; a run changed meanwhile is refused with what changed it ([`moved_on`]).
pub async fn after_read(store: &Journal, state: &mut RunState, events: Vec<Event>) -> Result<(), Error> {
    let read = state.last_seq;
    let at = jiff::Timestamp::now();
    let batch: Vec<(Event, jiff::Timestamp)> = events.into_iter().map(|e| (e, at)).collect();
    match store.append_after(&state.run_id, read, &batch).await {
        Ok(records) => {
            records.iter().for_each(|r| state.apply(r));
            Ok(())
        }
        Err(e) => Err(moved_on(store, &state.run_id, read, e).await),
    }
}

/// The error for a change refused because another process changed the run first: what that
/// process did, and who it was.
pub async fn moved_on(store: &Journal, run: &RunId, read: u64, error: StoreError) -> Error {
    if !matches!(error, StoreError::Conflict { .. }) {
        return error.into();
    }
    let since = store.events_since(run, read).await.unwrap_or_default();
    let done = since.iter().find_map(|r| {
        let what = match &r.event {
            Event::ApprovalGranted { stage, by, .. } => {
                format!("the approval of stage `{stage}` was already granted by {by}")
            }
            Event::ApprovalRejected { stage, by, .. } => {
                format!("the approval of stage `{stage}` was already rejected by {by}")
            }
            Event::EscalationAnswered { stage, answer, by, .. } => {
                let answer = serde_json::to_value(answer)
                    .ok()
                    .and_then(|v| v["answer"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                format!("the escalation of stage `{stage}` was already answered (`{answer}`) by {by}")
            }
            Event::RunResumed { owner, .. } => format!("it was already taken up by process {}", owner.pid),
            Event::CancelRequested { by, .. } | Event::RunCancelled { by, .. } => {
                format!("it was already cancelled by {by}")
            }
            _ => return None,
        };
        Some(format!("{what} at {}", r.at))
    });
    let done =
        done.or_else(|| since.first().map(|r| format!("its journal moved on (event {}: {})", r.seq, r.event.kind())));
    Error::conflict(format!(
        "run {run}: {}; nothing was done here (see `loopwright status {run}`)",
        done.unwrap_or_else(|| "its journal moved on".to_owned())
    ))
}
