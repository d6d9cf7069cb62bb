//! The supervision journal, typed: one variant per kind of entry (`auto log`). The supervisor
//! writes these, the app layer writes a person's keys, approvals and stops, and the CLI, the
//! dashboard and the report read them back as these types — never as JSON read by key.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::screen::{PromptClass, Subject};
use crate::signal::{Signal, StopReason};
use crate::state::{ChecksApproved, Ending, LoopStatus, WaitKind};

/// One entry of a loop's supervision journal (`kind` and `data` in the store).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum AutoEvent {
    /// The loop started.
    Started {
        /// The task module.
        task_dir: String,
        /// The agent's name.
        agent: String,
        /// The settings it runs with.
        settings: serde_json::Value,
        /// The checks fixed at the start.
        checks: Vec<String>,
    },
    /// The agent's process was started.
    AgentStarted {
        /// Its command line (long arguments shortened).
        argv: Vec<String>,
        /// The session it resumes.
        resume: Option<String>,
        /// Its session id.
        session_id: Option<String>,
        /// Its process group.
        pid: u32,
    },
    /// A supervisor took the loop over after the last one died.
    Reattached {
        /// The agent still ran.
        agent_alive: bool,
        /// Its process group.
        pid: u32,
    },
    /// The loop cannot go on: the agent could not be started.
    Failed {
        /// Why.
        reason: String,
    },
    /// The agent runs without a sandbox (`sandbox = "auto"` in config.toml: an auto loop's
    /// agent is never sandboxed), said once when the loop starts.
    Unsandboxed {
        /// Why.
        why: String,
    },
    /// The file watcher could not be set up: the files are read at every heartbeat.
    WatchUnavailable {
        /// Why.
        error: String,
        /// What is done instead.
        fallback: String,
    },
    /// `.auto-signal` held something that is not a valid signal.
    SignalInvalid {
        /// Its text (the start of it).
        text: String,
        /// Its size.
        bytes: usize,
        /// What is wrong.
        problems: Vec<String>,
        /// Signals seen and not journaled since the last entry.
        unjournaled: u64,
    },
    /// A valid signal.
    Signal {
        /// The signal.
        signal: Signal,
        /// What seed 002's routing table says comes next.
        table_next: Option<String>,
        /// Signals seen and not journaled since the last entry.
        unjournaled: u64,
    },
    /// A stop was asked for (`.auto-stop` written or read).
    StopRequested {
        /// Why.
        reason: StopReason,
        /// Who asked (absent: the supervisor).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The agent consumed `.auto-stop`: it left its loop.
    StopHonoured {},
    /// The agent ignored `.auto-stop` for the whole stop grace: its process group was ended.
    StopIgnored {
        /// The grace, in seconds.
        grace_s: f64,
        /// The screen's last rows.
        excerpt: String,
    },
    /// The loop said it ended (`next: (stop)`, or the module's status when the agent exited).
    LoopEnded {
        /// How.
        #[serde(rename = "as")]
        ending: Ending,
    },
    /// Keys typed into the agent's terminal.
    Keys {
        /// What was typed (long text as its length).
        keys: String,
        /// Why (a prompt's class, a nudge, the first message, `typed by …`).
        why: String,
        /// The screen rows it answered.
        excerpt: String,
    },
    /// A limit was reached.
    Limit {
        /// Of what: recoveries, restarts.
        what: String,
        /// The counts at that moment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recovery_count_step: Option<u32>,
        /// Recoveries in all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recovery_count_total: Option<u32>,
        /// Restarts in the window.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restart_count: Option<u32>,
    },
    /// Something the supervisor tried failed.
    Error {
        /// What it was doing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        doing: Option<String>,
        /// The error.
        error: String,
    },
    /// What a reading of the screen was taken to mean.
    Verdict {
        /// What was read.
        reading: String,
        /// What was decided.
        decision: String,
        /// The prompt's class, for a prompt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<PromptClass>,
        /// The pattern that recognised it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pattern: Option<String>,
        /// The agent's children's CPU time (a working agent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu_ticks: Option<u64>,
    },
    /// A prompt the policy will not answer: a person must.
    NeedsHuman {
        /// Its class.
        class: PromptClass,
        /// The pattern.
        pattern: String,
        /// Why it is not answered.
        reason: String,
        /// What it is about.
        subject: Subject,
        /// Its rows.
        excerpt: String,
    },
    /// The screen stayed the same for the stall window with nothing working.
    Stall {
        /// Unchanged looks.
        captures: u32,
        /// Seconds since the last signal.
        signal_age_s: Option<f64>,
        /// The screen's last rows.
        excerpt: String,
    },
    /// A model call showed no change for the hung-call limit: interrupted.
    HungCall {
        /// Seconds it was busy with nothing changing.
        busy_s: f64,
        /// The screen's last rows.
        excerpt: String,
    },
    /// A wait for the provider began (the clock is paused).
    QuotaWait {
        /// The pattern that recognised it.
        pattern: String,
        /// The line.
        excerpt: String,
        /// When the wait ends.
        resets_at: Timestamp,
        /// The reset time was read from the screen (not a fallback or a backoff).
        given: bool,
        /// A usage limit or a rate limit.
        #[serde(default)]
        wait: WaitKind,
    },
    /// The wait ended.
    QuotaResume {
        /// Why.
        why: String,
        /// Seconds paused so far in the loop.
        paused_s: f64,
    },
    /// The agent's process exited.
    Exited {
        /// Its exit code.
        code: u32,
        /// The signal that ended it.
        signal: Option<String>,
        /// The session id its exit banner gave.
        session_id: Option<String>,
        /// Its last screen rows.
        excerpt: String,
    },
    /// The agent is started again.
    Restart {
        /// Restarts so far.
        restart_count: u32,
        /// The session resumed (absent: a fresh session).
        resume: Option<String>,
        /// Why.
        #[serde(default)]
        why: String,
        /// Seconds waited before it (backoff).
        #[serde(default)]
        waited_s: f64,
    },
    /// One verification command ran.
    Check {
        /// The command.
        command: String,
        /// Its exit code.
        exit_code: Option<i32>,
        /// Passed.
        passed: bool,
        /// The end of its output.
        output_tail: String,
    },
    /// The agent added checks after the start: a person must approve them.
    ChecksNeedApproval {
        /// The added checks.
        checks: Vec<String>,
    },
    /// A person approved added checks.
    ChecksApproved(ChecksApproved),
    /// Every check passed.
    Verified {
        /// How many ran.
        checks: usize,
    },
    /// A check failed: the module was sent back.
    VerificationFailed {
        /// The failing command.
        command: String,
    },
    /// The loop ended.
    Finished {
        /// Its final status.
        status: LoopStatus,
        /// Why it was stopped.
        #[serde(default)]
        stop_reason: Option<StopReason>,
        /// Iterations completed.
        #[serde(default)]
        iteration: u64,
        /// Who ended it, when not its supervisor.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The store removed old entries of a long loop.
    Trimmed {
        /// How many.
        removed: u64,
        /// Of which kinds.
        #[serde(default)]
        kinds: serde_json::Value,
    },
}

impl AutoEvent {
    /// The entry's kind and data as the store keeps them.
    pub fn to_entry(&self) -> (String, String) {
        let value = serde_json::to_value(self).unwrap_or_default();
        let kind = value["kind"].as_str().unwrap_or("error").to_owned();
        let data = value.get("data").map_or_else(|| "{}".to_owned(), serde_json::Value::to_string);
        (kind, data)
    }

    /// An entry read back; `None` for a kind this version does not know.
    pub fn from_entry(kind: &str, data: &str) -> Option<Self> {
        let data: serde_json::Value = serde_json::from_str(data).ok()?;
        serde_json::from_value(serde_json::json!({ "kind": kind, "data": data })).ok()
    }

    /// The entry in a person's words, one line (the CLI's `auto log`, the dashboard).
    pub fn describe(&self) -> String {
        match self {
            Self::Started { agent, checks, .. } => match checks.as_slice() {
                [] => format!("loop started with {agent}; no check declared"),
                _ => format!("loop started with {agent}; done means {} pass", quoted(checks)),
            },
            Self::AgentStarted { resume: Some(id), pid, .. } => format!("agent resumed session {id} (pid {pid})"),
            Self::AgentStarted { session_id, pid, .. } => match session_id {
                Some(id) => format!("agent started, session {id} (pid {pid})"),
                None => format!("agent started (pid {pid})"),
            },
            Self::Reattached { agent_alive: true, .. } => "supervisor took over; the agent still runs".into(),
            Self::Reattached { agent_alive: false, .. } => "supervisor took over; the agent is gone".into(),
            Self::Failed { reason } => format!("failed: {reason}"),
            Self::Unsandboxed { why } => format!("the agent runs unsandboxed: {why}"),
            Self::WatchUnavailable { error, .. } => format!("no file watcher ({error}): reading at every heartbeat"),
            Self::SignalInvalid { problems, .. } => format!("invalid .auto-signal: {}", problems.join("; ")),
            Self::Signal { signal, .. } => {
                let iteration = signal.iteration.map(|i| format!("iteration {i}: ")).unwrap_or_default();
                format!("{iteration}{} → {}, next {}", signal.step, signal.result, signal.next)
            }
            Self::StopRequested { reason, by } => {
                format!("stop asked ({}) by {}", reason.as_str(), by.as_deref().unwrap_or("the supervisor"))
            }
            Self::StopHonoured {} => "the agent left its loop (stop honoured)".into(),
            Self::StopIgnored { grace_s, .. } => format!("the agent ignored the stop for {grace_s:.0} s: ended it"),
            Self::LoopEnded { ending } => format!("the loop says it ended: {}", ending.as_str()),
            Self::Keys { keys, why, .. } => format!("typed {keys:?} ({why})"),
            Self::Limit { what, .. } => format!("limit reached: {what}"),
            Self::Error { doing: Some(doing), error } => format!("error {doing}: {error}"),
            Self::Error { doing: None, error } => format!("error: {error}"),
            Self::Verdict { reading, decision, .. } => format!("{reading}: {decision}"),
            Self::NeedsHuman { reason, subject, .. } => match subject {
                Subject::Command(c) => format!("needs a person: {reason} — `{}`", first_line(c)),
                Subject::Files(f) => format!("needs a person: {reason} — {}", f.join(", ")),
                Subject::Url(u) => format!("needs a person: {reason} — {u}"),
                Subject::Unseen => format!("needs a person: {reason}"),
            },
            Self::Stall { captures, .. } => format!("stalled ({captures} unchanged looks)"),
            Self::HungCall { busy_s, .. } => format!("model call unchanged for {busy_s:.0} s: interrupted"),
            Self::QuotaWait { wait: WaitKind::RateLimit, resets_at, .. } => {
                format!("provider rate limit: backing off until {}", short_time(*resets_at))
            }
            Self::QuotaWait { resets_at, given, .. } => format!(
                "usage limit: waiting until {}{}",
                short_time(*resets_at),
                if *given { "" } else { " (no reset time shown)" }
            ),
            Self::QuotaResume { why, .. } => format!("wait over: {why}"),
            // The supervisor found the holder and the agent gone without a word (a reboot, a
            // `kill -9` of the whole group): there is no exit code to show.
            Self::Exited { code: u32::MAX, .. } => {
                "agent gone without an exit status (the machine restarted, or its processes were killed)".into()
            }
            Self::Exited { code, signal: Some(s), .. } => format!("agent exited (code {code}, signal {s})"),
            Self::Exited { code, .. } => format!("agent exited (code {code})"),
            Self::Restart { restart_count, why, resume, .. } => format!(
                "restart {restart_count}{}{}",
                if resume.is_some() { ", resuming its session" } else { ", a fresh session" },
                if why.is_empty() { String::new() } else { format!(": {why}") }
            ),
            Self::Check { command, passed: true, .. } => format!("check `{command}` passed"),
            Self::Check { command, exit_code, .. } => format!(
                "check `{command}` failed ({})",
                exit_code.map_or("no exit status".to_owned(), |c| format!("exit {c}"))
            ),
            Self::ChecksNeedApproval { checks } => format!("added checks wait for approval: {}", quoted(checks)),
            Self::ChecksApproved(a) => format!("{} approved {}", a.by, quoted(&a.checks)),
            Self::Verified { checks } => format!("verified: {checks} check(s) passed"),
            Self::VerificationFailed { command } => format!("verification failed on `{command}`: sent back"),
            Self::Finished { status, stop_reason, by, .. } => format!(
                "loop {status}{}{}",
                stop_reason.map(|r| format!(" ({})", r.as_str())).unwrap_or_default(),
                by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default()
            ),
            Self::Trimmed { removed, .. } => format!("{removed} older entries removed"),
        }
    }
}

/// What a person is told about a loop wherever they are (the notices stream; the
/// notifications build on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// The loop waits for a person: a prompt the policy will not answer, or added checks.
    NeedsHuman,
    /// The loop ended (complete, blocked, stopped or failed).
    Ended,
}

impl NoticeKind {
    /// The journal kinds that raise a notice.
    pub const JOURNAL_KINDS: [&'static str; 3] = ["needs_human", "checks_need_approval", "finished"];
}

impl AutoEvent {
    /// The notice this entry raises, if it raises one.
    pub fn notice(&self) -> Option<NoticeKind> {
        match self {
            Self::NeedsHuman { .. } | Self::ChecksNeedApproval { .. } => Some(NoticeKind::NeedsHuman),
            Self::Finished { .. } => Some(NoticeKind::Ended),
            _ => None,
        }
    }
}

fn quoted(items: &[String]) -> String {
    items.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

fn short_time(t: Timestamp) -> String {
    t.strftime("%H:%M:%S UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_the_kinds_and_fields_the_journal_has_always_had() {
        let entry = |e: &AutoEvent| {
            let (kind, data) = e.to_entry();
            (kind, serde_json::from_str::<serde_json::Value>(&data).expect("JSON"))
        };
        let stop = AutoEvent::StopRequested { reason: StopReason::UserStop, by: Some("ann".into()) };
        assert_eq!(entry(&stop), ("stop_requested".into(), serde_json::json!({"reason": "user_stop", "by": "ann"})));
        let ended = AutoEvent::LoopEnded { ending: Ending::Blocked };
        assert_eq!(entry(&ended), ("loop_ended".into(), serde_json::json!({"as": "blocked"})));
        let approved = AutoEvent::ChecksApproved(ChecksApproved { checks: vec!["make lint".into()], by: "bo".into() });
        assert_eq!(
            entry(&approved),
            ("checks_approved".into(), serde_json::json!({"checks": ["make lint"], "by": "bo"}))
        );
        for e in [stop, ended, approved] {
            let (kind, data) = e.to_entry();
            assert_eq!(AutoEvent::from_entry(&kind, &data), Some(e));
        }
        // What another version wrote and this one does not know is left to the raw view.
        assert_eq!(AutoEvent::from_entry("telepathy", "{}"), None);
        // A person's stop written by `auto stop` without a supervisor reads as a typed entry.
        let finished =
            AutoEvent::from_entry("finished", r#"{"status":"stopped","by":"auto stop (no supervisor alive)"}"#);
        assert_eq!(finished.map(|f| f.describe()).as_deref(), Some("loop stopped by auto stop (no supervisor alive)"));
        // An agent found gone after a reboot has no exit code to show (not 4294967295).
        let exited = |code, signal: Option<&str>| {
            let signal = signal.map(str::to_owned);
            AutoEvent::Exited { code, signal, session_id: None, excerpt: String::new() }.describe()
        };
        assert_eq!(
            [exited(u32::MAX, Some("lost")), exited(0, None), exited(0, Some("KILL"))],
            [
                "agent gone without an exit status (the machine restarted, or its processes were killed)",
                "agent exited (code 0)",
                "agent exited (code 0, signal KILL)"
            ]
        );
    }
}
