//! Cancelling a run. A run driven by a live process is asked to stop through the journal
//! (`cancel_requested`; its owner ends the stage in flight and records the cancellation); any
//! other run (waiting, queued, interrupted, or left running by a crash) is cancelled here.

use loopwright_engine::{Event, RunId, RunState, RunStatus, Runner, Store, StoreError};
use loopwright_runners::ProcessRunner;
use loopwright_store::Journal;

use crate::error::Error;
use crate::ownership::owner_alive;
use crate::workspace::Workspace;

/// What a cancel did.
#[derive(Debug)]
pub enum Cancelled {
    /// The run's live owner was asked to stop it (`cancel_requested` is journaled); the run
    /// is cancelled once the owner has ended the stage in flight.
    Requested(RunState),
    /// The run is cancelled (`run_cancelled` is journaled).
    Done(RunState),
    /// The run must be driven to roll back its completed stages, starting with this event.
    RollBack(Event),
}

/// Cancels `run`. `hosted_here` is true when this process drives the run right now (the
/// daemon's hosts): then it is asked to stop, like a run driven by another live process.
pub async fn cancel(
    ws: &Workspace,
    store: &Journal,
    run: &RunId,
    by: String,
    rollback: bool,
    hosted_here: impl Fn(&RunId) -> bool,
) -> Result<Cancelled, Error> {
    loop {
        let mut state = RunState::replay(run.clone(), &store.events(run).await?);
        if state.started.is_none() {
            return Err(Error::no_run(run));
        }
        if state.status.is_final() {
            return Err(Error::conflict(format!("run {run} already ended ({})", state.status.as_str())));
        }
        let read = state.last_seq;
        // At work, or queued by its own process for a provider's or a spend cap's wait (which
        // watches for a stop): its owner ends it.
        let at_work =
            state.status == RunStatus::Running || (state.status == RunStatus::Queued && state.provider_wait.is_some());
        if at_work && (owner_alive(&state) || hosted_here(run)) {
            let request = Event::CancelRequested { by: by.clone(), rollback };
            match store.append_after(run, read, &[(request, jiff::Timestamp::now())]).await {
                Ok(records) => {
                    records.iter().for_each(|r| state.apply(r));
                    return Ok(Cancelled::Requested(state));
                }
                // The owner recorded something meanwhile (it is running): decide again on
                // the new journal.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // A crashed owner left the stage's processes: end the journaled groups and any strays.
        if let Some(in_flight) = state.in_flight() {
            let runner = ProcessRunner::new(ws.runs_dir());
            if !in_flight.process_groups.is_empty() {
                runner.end_leftovers(&in_flight.process_groups);
            }
            runner.end_strays(run, &in_flight.id);
        }
        let stage = state.in_flight().or(state.waiting_for_approval()).map(|s| s.id.clone());
        let event = Event::RunCancelled { stage, by, rollback };
        if rollback {
            return Ok(Cancelled::RollBack(event));
        }
        crate::record::after_read(store, &mut state, vec![event]).await?;
        return Ok(Cancelled::Done(state));
    }
}
