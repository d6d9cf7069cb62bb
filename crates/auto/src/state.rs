//! A loop's state as it is stored (the `task_auto` row): the status object every reader sees
//! (SPEC §10) and what the supervisor keeps beside it to take over after a crash. Every field
//! is typed; the row's text columns are written from these types and nothing reads them back
//! by key.

use jiff::Timestamp;
use loopwright_store::auto::AutoRow;
use serde::{Deserialize, Serialize};

use crate::Settings;
use crate::signal::{Signal, StopReason};

/// Where a loop is (the status object's `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoopStatus {
    /// The agent works; the supervisor watches.
    #[default]
    Running,
    /// A prompt the policy will not answer, or added checks to approve: a person must look.
    NeedsHuman,
    /// A usage limit or the provider's rate limit: the clock is paused until the reset.
    QuotaWait,
    /// The loop ended and its checks passed.
    Complete,
    /// The loop ended blocked.
    Blocked,
    /// `.auto-stop` was honoured (see the stop reason).
    Stopped,
    /// Limits exhausted, or the agent could not be started.
    Failed,
}

impl LoopStatus {
    /// Every status.
    pub const ALL: [Self; 7] =
        [Self::Running, Self::NeedsHuman, Self::QuotaWait, Self::Complete, Self::Blocked, Self::Stopped, Self::Failed];

    /// As the status object and the row spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::NeedsHuman => "needs_human",
            Self::QuotaWait => "quota_wait",
            Self::Complete => "complete",
            Self::Blocked => "blocked",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    /// The status spelt `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// True once the loop has ended.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Complete | Self::Blocked | Self::Stopped | Self::Failed)
    }
}

impl std::fmt::Display for LoopStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the loop said (or was found) to end, before the supervisor closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// It claims completion: the checks decide.
    Complete,
    /// It ended blocked.
    Blocked,
    /// It honoured `.auto-stop`.
    Stopped,
    /// It cannot go on.
    Failed,
}

impl Ending {
    /// As the journal spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Blocked => "blocked",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    /// The final status of a loop that ended so, asked to stop for `stop`.
    pub fn status(self, stop: Option<StopReason>) -> LoopStatus {
        match (self, stop) {
            (Self::Failed, _) | (_, Some(StopReason::StallLimit)) => LoopStatus::Failed,
            (Self::Complete, None) => LoopStatus::Complete,
            (Self::Blocked, None) => LoopStatus::Blocked,
            _ => LoopStatus::Stopped,
        }
    }
}

/// Statuses a loop ends in, as a row spells them.
pub fn is_final(status: &str) -> bool {
    LoopStatus::parse(status).is_some_and(LoopStatus::is_final)
}

/// The status object (SPEC §10): `auto status --json` and `GET /api/sessions/{id}/task-auto`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AutoStatus {
    /// The session.
    pub session_name: String,
    /// The task module (absolute).
    pub task_dir: String,
    /// Where the loop is.
    pub status: LoopStatus,
    /// The agent's name.
    pub agent: String,
    /// Iterations completed (from the latest signal).
    pub iteration: u64,
    /// `maxIterations`.
    pub max_iterations: u64,
    /// Seconds of supervised time, quota waits and waits for a person excluded.
    pub elapsed_s: f64,
    /// `timeoutMinutes` in seconds.
    pub timeout_s: f64,
    /// The latest signal's step.
    pub step: String,
    /// Its result.
    pub result: String,
    /// What the agent runs next.
    pub next: String,
    /// Its checkpoint.
    pub checkpoint: String,
    /// When the latest valid signal came.
    pub last_signal_at: Option<Timestamp>,
    /// Unchanged screens in a row.
    pub stall_count: u32,
    /// Recoveries in this iteration.
    pub recovery_count_step: u32,
    /// Recoveries in all.
    pub recovery_count_total: u32,
    /// Restarts of the agent.
    pub restart_count: u32,
    /// When the current quota wait began.
    pub quota_wait_since: Option<Timestamp>,
    /// When the quota resets.
    pub quota_resets_at: Option<Timestamp>,
    /// The agent's own conversation id.
    pub agent_session_id: Option<String>,
    /// Why the loop was stopped.
    pub stop_reason: Option<StopReason>,
    /// When the loop started.
    pub started_at: Timestamp,
    /// What a person must look at (`needs_human`), with the screen excerpt.
    pub needs_human: Option<String>,
    /// The checks the supervisor ran when the loop said it was done, latest run.
    pub checks: Vec<CheckRun>,
    /// Seconds spent in quota waits.
    pub quota_paused_s: f64,
    /// When the current wait for a person (`needs_human`) began.
    #[serde(default)]
    pub human_wait_since: Option<Timestamp>,
    /// Seconds spent waiting for a person, the current wait not counted.
    #[serde(default)]
    pub human_paused_s: f64,
    /// Which loop of the session (keys `auto log`).
    pub loop_id: String,
    /// Checks the agent added to `.index.md` after the loop started: shown, and run only once
    /// a person approved them (`auto approve-checks`, `POST …/task-auto/checks`).
    #[serde(default)]
    pub checks_to_approve: Vec<String>,
}

impl AutoStatus {
    /// Ends the current quota wait (if one runs) at `now`: its time joins `quota_paused_s`.
    pub fn end_quota_wait(&mut self, now: Timestamp) {
        if let Some(began) = self.quota_wait_since.take() {
            self.quota_paused_s += seconds_between(began, now);
        }
    }

    /// Ends the current wait for a person (if one runs) at `now`: its time joins
    /// `human_paused_s`.
    pub fn end_human_wait(&mut self, now: Timestamp) {
        if let Some(began) = self.human_wait_since.take() {
            self.human_paused_s += seconds_between(began, now);
        }
    }

    /// Seconds supervised at `now`, quota waits and waits for a person (past and current)
    /// excluded.
    pub fn elapsed_at(&self, now: Timestamp) -> f64 {
        let quota = self.quota_wait_since.map_or(0.0, |t| seconds_between(t, now));
        let human = self.human_wait_since.map_or(0.0, |t| seconds_between(t, now));
        let paused = self.quota_paused_s + quota + self.human_paused_s + human;
        (seconds_between(self.started_at, now) - paused).max(0.0)
    }
}

/// Seconds from `from` to `to` (0 when `to` is earlier).
pub fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

/// A person's approval of checks the agent added (`checks_approved` in the journal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChecksApproved {
    /// The commands approved.
    pub checks: Vec<String>,
    /// Who approved them.
    pub by: String,
}

/// One verification command and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRun {
    /// The command.
    pub command: String,
    /// Its exit code (`None`: killed or timed out).
    pub exit_code: Option<i32>,
    /// Passed.
    pub passed: bool,
    /// The end of its output.
    pub output_tail: String,
}

/// A wait for the provider: a usage limit (reset time known or not) or its rate limit (429,
/// 529 overloaded: backed off and retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// A usage limit.
    #[default]
    Quota,
    /// The provider refused requests for a while (429, 529).
    RateLimit,
}

/// What the supervisor keeps beside the status object, so a new supervisor process can take
/// over where the last one died.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Internal {
    /// The settings the loop was started with.
    pub settings: Settings,
    /// Output bytes at the last keystroke sent: a prompt is answered only when output came
    /// after it.
    pub last_action_output: u64,
    /// The masked screen hash at the last keystroke.
    pub last_action_hash: u64,
    /// The masked hash of the last prompt answered or refused, with the rows above it.
    pub last_prompt_hash: u64,
    /// The masked hash of that prompt's own rows (its block, without the rows above it).
    pub last_block_hash: u64,
    /// The masked hash of the last capture (the stall baseline).
    pub last_hash: u64,
    /// When the stop was requested.
    pub stop_requested_at: Option<Timestamp>,
    /// The first message still has to be typed.
    pub pending_typed: Option<String>,
    /// When the agent was last started.
    pub launched_at: Option<Timestamp>,
    /// The agent's session id was started (a first message reached it, or it ran past its
    /// startup): a restart resumes it. Otherwise a restart starts a fresh one.
    pub session_started: bool,
    /// Agents that exited within their startup in a row (none started).
    pub failed_starts: u32,
    /// Continues sent in a row at quota or rate-limit resets without the agent resuming.
    pub quota_retries: u32,
    /// When the provider began refusing (the first rate-limit wait since the agent last made
    /// progress): bounded by `[auto] provider_wait_minutes`.
    #[serde(default)]
    pub provider_trouble_since: Option<Timestamp>,
    /// What the current wait is for.
    pub wait: WaitKind,
    /// A hash of the last `.auto-signal` read (to tell a new one; the text itself may be
    /// large and is not stored with every save).
    pub last_signal_hash: u64,
    /// The loop said it is done: verify (`complete`), or how it ended otherwise.
    pub ending: Option<Ending>,
    /// The checks passed for this claim of completion.
    pub verified: bool,
    /// When it said so (its closing turn is let through before the agent is ended).
    pub ended_at: Option<Timestamp>,
    /// The process id of the supervisor (a foreground `auto start` or the daemon).
    pub supervisor_pid: u32,
    /// Its start time (with the pid, names one process even after the pid is reused).
    pub supervisor_start: Option<u64>,
    /// The agent's process group.
    pub agent_pid: u32,
    /// The agent's CPU time in its children at the last look (clock ticks).
    pub child_cpu: u64,
    /// The checks that prove the module done, fixed when the loop started (the module's own,
    /// else the project's test command): the agent edits `.index.md`, so it may add checks
    /// but not remove or weaken these.
    pub checks: Vec<String>,
    /// Added checks a person approved.
    pub approved: Vec<String>,
    /// When each restart happened (the budget counts those in the last window).
    pub restarts_at: Vec<Timestamp>,
    /// A restart waits until then (backoff).
    pub restart_after: Option<Timestamp>,
    /// Since when the screen shows a model call with nothing else changing (the hung-call
    /// watchdog).
    pub busy_since: Option<Timestamp>,
    /// The masked screen hash while busy.
    pub busy_hash: u64,
    /// The agent's children's CPU time then.
    pub busy_cpu: u64,
    /// The workspace's commit when the loop started (the report's diff).
    pub start_commit: Option<String>,
    /// Which signals are journaled (not stored: a new supervisor starts counting afresh).
    #[serde(skip)]
    pub signals: SignalJournal,
}

/// Journal entries about `.auto-signal` (valid or not) in one second of one loop; more are
/// counted, not written: an agent rewriting the file in a loop cannot grow the journal faster.
pub const SIGNAL_ENTRIES_PER_SECOND: u32 = 4;

/// Which signals are journaled: a valid one when it says something new (the loop's end and a
/// new iteration always), any at most [`SIGNAL_ENTRIES_PER_SECOND`] a second; the rest counted
/// and the count written with the next entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SignalJournal {
    window: Option<Timestamp>,
    in_window: u32,
    unjournaled: u64,
    last: Option<Signal>,
}

impl SignalJournal {
    /// Whether a signal seen at `now` is journaled (`important` ones always): `Some` with how
    /// many were left out since the last one journaled.
    pub fn admit(&mut self, now: Timestamp, important: bool) -> Option<u64> {
        if self.window.is_none_or(|w| seconds_between(w, now) >= 1.0 || now < w) {
            self.window = Some(now);
            self.in_window = 0;
        }
        if !important && self.in_window >= SIGNAL_ENTRIES_PER_SECOND {
            self.unjournaled += 1;
            return None;
        }
        self.in_window += 1;
        Some(std::mem::take(&mut self.unjournaled))
    }

    /// Counts a signal that is not journaled (its count goes with the next entry).
    pub fn skip(&mut self) {
        self.unjournaled += 1;
    }

    /// Whether a valid signal repeats the last one (its time aside).
    pub fn repeats(&mut self, sig: &Signal) -> bool {
        let same = self.last.as_ref().is_some_and(|l| Signal { timestamp: sig.timestamp.clone(), ..l.clone() } == *sig);
        self.last = Some(sig.clone());
        same
    }
}

/// The row as stored: status and internals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Persisted {
    /// The status object.
    pub status: AutoStatus,
    /// The rest.
    pub internal: Internal,
}

impl Persisted {
    /// True while the process supervising this loop is alive (and is not this process).
    pub fn supervised_elsewhere(&self) -> bool {
        let pid = self.internal.supervisor_pid;
        pid != std::process::id()
            && pid != 0
            && loopwright_runners::process::same_process_alive(pid, self.internal.supervisor_start)
    }

    /// True when this process supervises the loop.
    pub fn supervised_here(&self) -> bool {
        self.internal.supervisor_pid == std::process::id()
    }

    /// Reads a row.
    pub fn from_row(row: &AutoRow) -> Result<Self, String> {
        serde_json::from_str(&row.state).map_err(|e| format!("auto loop {}: bad state: {e}", row.session_name))
    }

    /// The row for it.
    pub fn to_row(&self) -> AutoRow {
        let s = &self.status;
        let text = |t: Option<Timestamp>| t.map(|t| t.to_string()).unwrap_or_default();
        AutoRow {
            session_name: s.session_name.clone(),
            task_dir: s.task_dir.clone(),
            status: s.status.as_str().to_owned(),
            loop_id: s.loop_id.clone(),
            max_iterations: i64::try_from(s.max_iterations).unwrap_or(i64::MAX),
            timeout_minutes: s.timeout_s / 60.0,
            iteration_count: i64::try_from(s.iteration).unwrap_or(i64::MAX),
            recovery_count_step: s.recovery_count_step.into(),
            recovery_count_total: s.recovery_count_total.into(),
            last_capture_hash: format!("{:016x}", self.internal.last_hash),
            stall_count: s.stall_count.into(),
            quota_wait_since: text(s.quota_wait_since),
            started_at: s.started_at.to_string(),
            last_signal_at: text(s.last_signal_at),
            state: serde_json::to_string(self).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_the_final_ones_are_known() {
        for s in LoopStatus::ALL {
            assert_eq!(LoopStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(s.as_str()));
        }
        let finals: Vec<_> = LoopStatus::ALL.into_iter().filter(|s| s.is_final()).collect();
        assert_eq!(finals, [LoopStatus::Complete, LoopStatus::Blocked, LoopStatus::Stopped, LoopStatus::Failed]);
        assert!(!is_final("nonsense"));
    }

    #[test]
    fn an_ending_and_a_stop_reason_give_the_final_status() {
        use StopReason::*;
        let table = [
            (Ending::Complete, None, LoopStatus::Complete),
            (Ending::Complete, Some(UserStop), LoopStatus::Stopped),
            (Ending::Blocked, None, LoopStatus::Blocked),
            (Ending::Stopped, Some(Timeout), LoopStatus::Stopped),
            (Ending::Stopped, Some(StallLimit), LoopStatus::Failed),
            (Ending::Failed, None, LoopStatus::Failed),
        ];
        for (ending, stop, want) in table {
            assert_eq!(ending.status(stop), want, "{ending:?} {stop:?}");
        }
    }

    #[test]
    fn a_row_stored_by_the_last_version_reads() {
        let old = r#"{"status":{"session_name":"s","task_dir":"/m","status":"quota_wait","agent":"claude","iteration":2,
            "max_iterations":20,"elapsed_s":1.0,"timeout_s":1800.0,"step":"exec","result":"(done)","next":"check",
            "checkpoint":"","last_signal_at":"2026-11-25T07:00:00Z","stall_count":0,"recovery_count_step":0,
            "recovery_count_total":1,"restart_count":0,"quota_wait_since":"2026-11-25T07:01:00.5Z",
            "quota_resets_at":null,"agent_session_id":null,"stop_reason":"user_stop","started_at":"2026-11-25T06:00:00Z",
            "needs_human":null,"checks":[],"quota_paused_s":0.0,"loop_id":"s-1"},
            "internal":{"ending":"stopped","stop_requested_at":"2026-11-25T07:02:00Z","checks":["pytest"]}}"#;
        let p: Persisted = serde_json::from_str(old).expect("reads");
        assert_eq!(p.status.status, LoopStatus::QuotaWait);
        assert_eq!(p.status.stop_reason, Some(StopReason::UserStop));
        assert_eq!(p.internal.ending, Some(Ending::Stopped));
        assert_eq!(p.status.quota_wait_since.map(|t| t.to_string()).as_deref(), Some("2026-11-25T07:01:00.5Z"));
        let row = p.to_row();
        assert_eq!((row.status.as_str(), row.quota_wait_since.as_str()), ("quota_wait", "2026-11-25T07:01:00.5Z"));
    }
}
