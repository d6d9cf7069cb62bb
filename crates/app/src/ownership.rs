//! Who drives a run (SPEC §9 "Ownership"): the `loopwright` process running it in the
//! foreground, or the daemon. The owner is journaled (`run_started`, `run_resumed`) as a pid
//! and its start time, which together name one process even after the pid is reused.

use loopwright_engine::{Owner, RunState, RunStatus};

/// This process, as the owner of a run; `daemon` for `loopwright serve`.
pub fn this_process(daemon: bool) -> Owner {
    let pid = std::process::id();
    Owner {
        pid,
        start_time: loopwright_runners::process::start_time(pid),
        daemon,
        host: Some(loopwright_runners::process::machine().to_owned()),
        worker: None,
    }
}

/// True while the process that owns a run is alive, and is another process than this one.
pub fn owner_alive(state: &RunState) -> bool {
    state.owner.as_ref().is_some_and(alive_elsewhere)
}

/// True while `owner` is alive and is another process than this one. A process on another
/// machine cannot be looked at from here: it counts as alive (a worker's lease says when it
/// is not).
pub fn alive_elsewhere(owner: &Owner) -> bool {
    if !loopwright_runners::process::is_this_machine(owner.host.as_deref()) {
        return true;
    }
    owner.pid != std::process::id() && loopwright_runners::process::same_process_alive(owner.pid, owner.start_time)
}

/// True when this process owns the run.
pub fn owned_here(state: &RunState) -> bool {
    state.owner.as_ref().is_some_and(is_this_process)
}

/// True when `owner` is this process.
pub fn is_this_process(owner: &Owner) -> bool {
    loopwright_runners::process::is_this_machine(owner.host.as_deref())
        && owner.pid == std::process::id()
        && owner.start_time == loopwright_runners::process::start_time(owner.pid)
}

/// True when a run in this status can be continued by `resume` (or taken up by a daemon).
pub fn resumable(status: RunStatus) -> bool {
    matches!(status, RunStatus::Running | RunStatus::Interrupted | RunStatus::Queued)
}

/// The status to show for a run: `interrupted` for one recorded as running whose owner is no
/// longer alive (loopwright was killed; `resume` continues it).
pub fn shown_status(state: &RunState) -> RunStatus {
    shown(state.status, state.owner.as_ref())
}

/// [`shown_status`] from a run's recorded status and owner alone (a line of the runs table).
pub fn shown(status: RunStatus, owner: Option<&Owner>) -> RunStatus {
    // Only a running run's owner is looked at (in `/proc`): a page of the runs list asks this
    // of every run it shows.
    let owner_gone = || owner.is_some_and(|o| !alive_elsewhere(o) && !is_this_process(o));
    if status == RunStatus::Running && owner_gone() { RunStatus::Interrupted } else { status }
}
