//! Whether a run can be continued (`resume`), and why not.

use loopwright_engine::{RunState, RunStatus};
use loopwright_spec::StageId;

use crate::error::Error;
use crate::ownership::{owner_alive, resumable};

/// Why a run cannot be resumed, or that it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumable {
    /// It can: it was interrupted, left running by a crash, or queued by a daemon that is gone.
    Yes,
    /// It waits for the approval of this stage (`approve` or `reject` it).
    WaitsForApproval(StageId),
    /// It waits for a human otherwise (an escalation: `respond`).
    Waits,
    /// It ended.
    Ended(RunStatus),
}

/// Says whether `resume` may continue the run; a run driven by a live process is an error
/// (a conflict: wait for it, or cancel it).
pub fn check(state: &RunState) -> Result<Resumable, Error> {
    let run = &state.run_id;
    if resumable(state.status) && owner_alive(state) {
        let pid = state.owner.as_ref().map_or(0, |o| o.pid);
        let by = if state.owner.as_ref().is_some_and(|o| o.daemon) { "the daemon, process" } else { "process" };
        return Err(Error::conflict(format!(
            "run {run} is being driven by {by} {pid}; wait for it, or stop it with `loopwright cancel {run}`"
        )));
    }
    if resumable(state.status) {
        return Ok(Resumable::Yes);
    }
    Ok(match state.waiting_for_approval() {
        Some(stage) => Resumable::WaitsForApproval(stage.id.clone()),
        None if state.status == RunStatus::Waiting => Resumable::Waits,
        None => Resumable::Ended(state.status),
    })
}
