//! The supervisor: keeps one agent session going until its loop ends, observing and stopping
//! only. Each heartbeat it reads the holder's screen; each change of `.auto-signal` or
//! `.auto-stop` (a file watcher) it reads the file. It journals every decision.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use loopwright_spec::Agent;
use loopwright_store::SqliteStore;
use loopwright_store::auto::AutoRow;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::holder::{self, Client, Request, Response};
use crate::module::{self, Index, ModuleStatus};
use crate::policy::{Decision, Policy};
use crate::screen::{self, PromptClass, Reading, Subject};
use crate::signal::{self, Signal, StopReason};
use crate::{Settings, protocol};

/// Seconds a CLI that draws nothing is given before its first message is typed anyway.
const STARTUP_GRACE_S: f64 = 10.0;

/// The status object (SPEC §10): `auto status --json` and `GET /api/sessions/{id}/task-auto`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct AutoStatus {
    /// The session.
    pub session_name: String,
    /// The task module (absolute).
    pub task_dir: String,
    /// running, needs_human, quota_wait, complete, blocked, stopped or failed.
    pub status: String,
    /// The agent's name.
    pub agent: String,
    /// Iterations completed (from the latest signal).
    pub iteration: u64,
    /// `maxIterations`.
    pub max_iterations: u64,
    /// Seconds of supervised time, quota waits excluded.
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
    pub last_signal_at: Option<String>,
    /// Unchanged screens in a row.
    pub stall_count: u32,
    /// Recoveries in this iteration.
    pub recovery_count_step: u32,
    /// Recoveries in all.
    pub recovery_count_total: u32,
    /// Restarts of the agent.
    pub restart_count: u32,
    /// When the current quota wait began.
    pub quota_wait_since: Option<String>,
    /// When the quota resets.
    pub quota_resets_at: Option<String>,
    /// The agent's own conversation id.
    pub agent_session_id: Option<String>,
    /// Why the loop was stopped.
    pub stop_reason: Option<String>,
    /// When the loop started.
    pub started_at: String,
    /// What a person must look at (`needs_human`), with the screen excerpt.
    pub needs_human: Option<String>,
    /// The checks the supervisor ran when the loop said it was done, latest run.
    pub checks: Vec<CheckRun>,
    /// Seconds spent in quota waits.
    pub quota_paused_s: f64,
    /// Which loop of the session (keys `auto log`).
    pub loop_id: String,
    /// Checks the agent added to `.index.md` after the loop started: shown, and run only once
    /// a person approved them (`auto approve-checks`, `POST …/task-auto/checks`).
    #[serde(default)]
    pub checks_to_approve: Vec<String>,
}

impl AutoStatus {
    /// Seconds supervised at `now`, quota waits (past and current) excluded.
    pub fn elapsed_at(&self, now: Timestamp) -> f64 {
        let secs = |t: &str| t.parse::<Timestamp>().map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0));
        let waiting = self.quota_wait_since.as_deref().map_or(0.0, secs);
        (secs(&self.started_at) - self.quota_paused_s - waiting).max(0.0)
    }
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

/// What the supervisor keeps beside the status object, so a new supervisor process can take
/// over where the last one died.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Internal {
    /// The settings the loop was started with.
    pub settings: Settings,
    /// Output bytes and masked screen hash at the last keystroke sent: a prompt is answered
    /// only when output came after it and the screen differs.
    pub last_action_output: u64,
    /// The screen hash at the last keystroke.
    pub last_action_hash: u64,
    /// The masked hash of the last capture.
    pub last_hash: u64,
    /// When the stop was requested.
    pub stop_requested_at: Option<String>,
    /// The first message still has to be typed.
    pub pending_typed: Option<String>,
    /// When the agent was last started.
    #[serde(default)]
    pub launched_at: Option<String>,
    /// Quota continues sent in a row without the agent resuming (backoff).
    pub quota_retries: u32,
    /// The text of the last `.auto-signal` read (to tell a new one).
    pub last_signal_text: String,
    /// The loop said it is done: verify (`complete`), or how it ended otherwise.
    pub ending: Option<String>,
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
        AutoRow {
            session_name: s.session_name.clone(),
            task_dir: s.task_dir.clone(),
            status: s.status.clone(),
            loop_id: s.loop_id.clone(),
            max_iterations: i64::try_from(s.max_iterations).unwrap_or(i64::MAX),
            timeout_minutes: s.timeout_s / 60.0,
            iteration_count: i64::try_from(s.iteration).unwrap_or(i64::MAX),
            recovery_count_step: s.recovery_count_step.into(),
            recovery_count_total: s.recovery_count_total.into(),
            last_capture_hash: format!("{:016x}", self.internal.last_hash),
            stall_count: s.stall_count.into(),
            quota_wait_since: s.quota_wait_since.clone().unwrap_or_default(),
            started_at: s.started_at.clone(),
            last_signal_at: s.last_signal_at.clone().unwrap_or_default(),
            state: serde_json::to_string(self).unwrap_or_default(),
        }
    }
}

/// Statuses a loop ends in.
pub fn is_final(status: &str) -> bool {
    matches!(status, "complete" | "blocked" | "stopped" | "failed")
}

/// Everything a supervisor needs besides its row.
pub struct Context {
    /// The journal.
    pub store: Arc<SqliteStore>,
    /// The loopwright binary (runs the holder).
    pub exe: PathBuf,
    /// The workspace root (the agent's working directory and the checks').
    pub root: PathBuf,
    /// Where the session's holder files go.
    pub session_dir: PathBuf,
    /// The agent.
    pub agent: Agent,
}

/// A running supervisor.
pub struct Supervisor {
    cx: Context,
    p: Persisted,
    policy: Policy,
    holder: Client,
    task_dir: PathBuf,
    settings: Settings,
    signals: SignalJournal,
}

/// Journal entries about `.auto-signal` (valid or not) in one second of one loop; more are
/// counted, not written: an agent rewriting the file in a loop cannot grow the journal faster.
pub const SIGNAL_ENTRIES_PER_SECOND: u32 = 4;

/// The most of an invalid signal's text kept in its journal entry.
pub const SIGNAL_TEXT_KEPT: usize = 2048;

/// Which signals are journaled: a valid one when it says something new (the loop's end and a
/// new iteration always), any at most [`SIGNAL_ENTRIES_PER_SECOND`] a second; the rest counted
/// and the count written with the next entry.
#[derive(Debug, Default)]
pub struct SignalJournal {
    window: Option<std::time::Instant>,
    in_window: u32,
    unjournaled: u64,
    last: Option<Signal>,
}

impl SignalJournal {
    /// Whether a signal seen at `now` is journaled (`important` ones always): `Some` with how
    /// many were left out since the last one journaled.
    pub fn admit(&mut self, now: std::time::Instant, important: bool) -> Option<u64> {
        if self.window.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1)) {
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

    /// Whether a valid signal repeats the last one (its time aside).
    pub fn repeats(&mut self, sig: &Signal) -> bool {
        let same = self.last.as_ref().is_some_and(|l| Signal { timestamp: sig.timestamp.clone(), ..l.clone() } == *sig);
        self.last = Some(sig.clone());
        same
    }
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// Seconds from `t` to now (0 for a time in the future).
fn since(t: Timestamp) -> f64 {
    now().duration_since(t).as_secs_f64().max(0.0)
}

impl Supervisor {
    /// A supervisor for a claimed row (a new loop or one to take over after a crash).
    pub fn new(cx: Context, p: Persisted) -> Result<Self, String> {
        let settings = p.internal.settings.clone();
        let policy = settings.policy()?;
        let task_dir = PathBuf::from(&p.status.task_dir);
        let holder = Client::new(&cx.session_dir);
        Ok(Self { cx, p, policy, holder, task_dir, settings, signals: SignalJournal::default() })
    }

    /// The status object now.
    pub fn status(&self) -> &AutoStatus {
        &self.p.status
    }

    fn save(&mut self) {
        self.p.status.elapsed_s = self.p.status.elapsed_at(now());
        if let Err(e) = self.cx.store.auto_save(&self.p.to_row()) {
            eprintln!("loopwright auto: cannot save the state of {}: {e}", self.p.status.session_name);
        }
    }

    fn log(&self, kind: &str, data: serde_json::Value) {
        let s = &self.p.status;
        if let Err(e) = self.cx.store.auto_log(&s.loop_id, &s.session_name, &now().to_string(), kind, &data.to_string())
        {
            eprintln!("loopwright auto: cannot journal {kind} of {}: {e}", s.session_name);
        }
    }

    /// Starts the agent (fresh, or resuming `resume`) with `message` first.
    fn launch(&mut self, message: &str, resume: Option<&str>) -> Result<(), String> {
        let new_id = new_uuid();
        let inv = loopwright_runners::presets::interactive(&self.cx.agent, message, resume, &new_id);
        let spawn = holder::Spawn {
            argv: inv.argv.clone(),
            env: inv.env.clone(),
            cwd: self.cx.root.clone(),
            rows: self.settings.rows,
            cols: self.settings.cols,
            linger_seconds: (self.settings.heartbeat_seconds * 3.0).clamp(2.0, 120.0),
        };
        let client = holder::start(&self.cx.exe, &self.cx.session_dir, &spawn)?;
        self.holder = client;
        if let Some(id) = inv.session_id {
            self.p.status.agent_session_id = Some(id);
        }
        self.p.internal.pending_typed = inv.typed;
        self.p.internal.launched_at = Some(now().to_string());
        self.p.internal.last_action_output = 0;
        self.p.internal.last_action_hash = 0;
        // A new process: nothing it shows continues the last one's stall.
        self.p.internal.last_hash = 0;
        self.p.status.stall_count = 0;
        let pids: serde_json::Value = std::fs::read(self.cx.session_dir.join(holder::PIDS))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        self.p.internal.agent_pid = pids["agent"].as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
        self.log(
            "agent_started",
            json!({ "argv": shorten_argv(&inv.argv), "resume": resume, "session_id": self.p.status.agent_session_id, "pid": self.p.internal.agent_pid }),
        );
        Ok(())
    }

    /// Starts a new loop: the agent with the protocol as its first message.
    /// What a past loop left in the module (`.auto-stop`, `.auto-signal`) was removed when
    /// this one was claimed.
    pub fn start(&mut self) -> Result<(), String> {
        self.p.internal.supervisor_pid = std::process::id();
        self.p.internal.supervisor_start = loopwright_runners::process::start_time(std::process::id());
        let declared = module::read_index(&self.task_dir).map(|(i, _)| i.checks).unwrap_or_default();
        self.p.internal.checks = if declared.is_empty() { default_checks(&self.cx.root) } else { declared };
        self.log(
            "started",
            json!({ "task_dir": self.p.status.task_dir, "agent": self.p.status.agent, "settings": self.settings, "checks": self.p.internal.checks }),
        );
        let message = protocol::render(&self.task_dir);
        if let Err(e) = self.launch(&message, None) {
            self.p.status.status = "failed".into();
            self.log("failed", json!({ "reason": e }));
            self.save();
            return Err(e);
        }
        self.save();
        Ok(())
    }

    /// Takes over a loop whose supervisor died: a stale `.auto-stop` is removed unless this
    /// loop asked for it, the stall baseline reset, and the agent found again (or restarted
    /// with its session id if it exited meanwhile: the next heartbeat sees the exit).
    pub fn reattach(&mut self) {
        self.p.internal.supervisor_pid = std::process::id();
        self.p.internal.supervisor_start = loopwright_runners::process::start_time(std::process::id());
        if self.p.status.stop_reason.is_none() {
            signal::remove(&self.task_dir, module::STOP);
        }
        self.p.status.stall_count = 0;
        self.p.internal.last_hash = 0;
        let alive = self.ask(&Request::Screen).map(|r| r.exit.is_none()).unwrap_or(false);
        self.log("reattached", json!({ "agent_alive": alive, "pid": self.p.internal.agent_pid }));
        self.save();
    }

    /// Supervises until the loop ends; `stop` turns true when a person asks to stop (Ctrl-C,
    /// `DELETE`). Returns the final status.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> AutoStatus {
        let (tx, mut files) = mpsc::unbounded_channel::<()>();
        let watcher = watch_dir(&self.task_dir, tx);
        // Without a watcher (inotify's limits reached, a file system without it) the files are
        // read at every heartbeat instead: later, never missed.
        let polling = watcher.is_err();
        if let Err(e) = &watcher {
            self.log("watch_unavailable", json!({ "error": e, "fallback": "reading the files every heartbeat" }));
        }
        let heartbeat = Duration::from_secs_f64(self.settings.heartbeat_seconds.max(0.01));
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A signal written while no one watched (a restart of the supervisor) is read now.
        self.on_files().await;
        loop {
            if is_final(&self.p.status.status) {
                break;
            }
            tokio::select! {
                _ = tick.tick() => {
                    if polling {
                        self.on_files().await;
                    }
                    if !is_final(&self.p.status.status) {
                        self.heartbeat().await;
                    }
                }
                Some(()) = files.recv() => {
                    while files.try_recv().is_ok() {}
                    self.on_files().await;
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        self.request_stop(StopReason::UserStop);
                        // Keep watching until the agent honours it or the grace ends.
                        stop = watch::channel(false).1;
                    }
                }
            }
            if self.p.status.status == "needs_human" && self.settings.exit_on_needs_human {
                break;
            }
        }
        self.p.status.clone()
    }

    /// `.auto-signal` or `.auto-stop` changed.
    async fn on_files(&mut self) {
        let path = self.task_dir.join(module::SIGNAL);
        if let Some(text) = read_capped(&path, SIGNAL_BYTES)
            && text != self.p.internal.last_signal_text
            && !text.trim().is_empty()
        {
            self.p.internal.last_signal_text = text.clone();
            match signal::parse(&text) {
                Err(problems) => {
                    if let Some(unjournaled) = self.signals.admit(std::time::Instant::now(), false) {
                        let kept: String = text.chars().take(SIGNAL_TEXT_KEPT).collect();
                        self.log(
                            "signal_invalid",
                            json!({ "text": kept, "bytes": text.len(), "problems": problems, "unjournaled": unjournaled }),
                        );
                    }
                }
                Ok(sig) => self.on_signal(sig),
            }
        }
        let stop_file = self.task_dir.join(module::STOP);
        match read_capped(&stop_file, SIGNAL_BYTES).ok_or(()) {
            Ok(text) if self.p.status.stop_reason.is_none() => {
                // Anyone may write the file: only the four reasons are taken, anything else is
                // a person's stop.
                let asked: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                let reason = asked["reason"]
                    .as_str()
                    .and_then(StopReason::parse)
                    .unwrap_or(StopReason::UserStop)
                    .as_str()
                    .to_owned();
                let by: String = asked["by"]
                    .as_str()
                    .filter(|b| !b.is_empty())
                    .unwrap_or("file")
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(100)
                    .collect();
                self.p.status.stop_reason = Some(reason.clone());
                self.p.internal.stop_requested_at = Some(now().to_string());
                self.log("stop_requested", json!({ "reason": reason, "by": by }));
                self.save();
            }
            // The agent consumed the stop file: it left its loop.
            Err(_)
                if self.p.status.stop_reason.is_some()
                    && self.p.internal.stop_requested_at.is_some()
                    && self.p.internal.ending.is_none() =>
            {
                self.p.internal.ending = Some("stopped".into());
                self.log("stop_honoured", json!({}));
            }
            _ => {}
        }
        if self.p.internal.ending.is_some() {
            self.finish_when_ended().await;
        }
    }

    fn on_signal(&mut self, sig: Signal) {
        let s = &mut self.p.status;
        let advanced = sig.iteration.is_some_and(|i| i > s.iteration);
        s.step.clone_from(&sig.step);
        s.result.clone_from(&sig.result);
        s.next.clone_from(&sig.next);
        s.checkpoint.clone_from(&sig.checkpoint);
        if let Some(i) = sig.iteration {
            s.iteration = s.iteration.max(i);
        }
        s.last_signal_at = Some(now().to_string());
        if advanced {
            s.recovery_count_step = 0;
        }
        s.stall_count = 0;
        if s.status == "needs_human" {
            s.status = "running".into();
            s.needs_human = None;
        }
        let routed = module::route(&sig.step, &sig.result, &sig.checkpoint);
        let repeats = self.signals.repeats(&sig);
        let important = advanced || sig.is_stop();
        let journaled = if important || !repeats {
            self.signals.admit(std::time::Instant::now(), important)
        } else {
            self.signals.unjournaled += 1;
            None
        };
        if let Some(unjournaled) = journaled {
            self.log("signal", json!({ "signal": sig, "table_next": routed.map(|r| r.0), "unjournaled": unjournaled }));
        }
        if sig.is_stop() {
            let ending = if self.p.status.stop_reason.is_some() {
                "stopped"
            } else if matches!(sig.result.as_str(), "BLOCKED" | "(blocked)" | "conflict") {
                "blocked"
            } else {
                "complete"
            };
            self.p.internal.ending = Some(ending.into());
            self.log("loop_ended", json!({ "as": ending }));
        } else if self.p.status.iteration >= self.p.status.max_iterations {
            self.request_stop(StopReason::MaxIterations);
        }
        self.save();
    }

    /// Writes `.auto-stop` (once per loop).
    fn request_stop(&mut self, reason: StopReason) {
        if self.p.status.stop_reason.is_some() {
            return;
        }
        if let Err(e) = signal::request_stop(&self.task_dir, reason, now(), "supervisor") {
            self.log("error", json!({ "writing": ".auto-stop", "error": e.to_string() }));
        }
        self.p.status.stop_reason = Some(reason.as_str().into());
        self.p.internal.stop_requested_at = Some(now().to_string());
        self.log("stop_requested", json!({ "reason": reason.as_str() }));
        self.save();
    }

    /// Types `text` into the agent's terminal, at most once: the keystroke and the screen it
    /// answers are journaled and saved *before* they are sent, so a supervisor that dies at
    /// any point (a `kill -9` of the daemon) is followed by one that knows this screen was
    /// answered and does not answer it again. A keystroke lost to such a death is a stall the
    /// next supervisor recovers from; a doubled one could confirm a second, different prompt.
    fn send(&mut self, text: &str, why: &str, excerpt: &str, screen: &Response) -> bool {
        self.p.internal.last_action_output = screen.output_bytes;
        self.p.internal.last_action_hash = screen::masked_hash(&screen.screen);
        // A stall is counted from the last thing typed: the agent needs time to react.
        self.p.status.stall_count = 0;
        let shown = if text.len() > 200 { format!("({} characters)", text.chars().count()) } else { text.to_owned() };
        self.log("keys", json!({ "keys": shown, "why": why, "excerpt": excerpt }));
        self.save();
        // Text that ends with Enter is typed, then submitted with an Enter of its own; a lone
        // key (`1`, `y`, Enter) is sent as it is.
        let request = match text.strip_suffix('\r') {
            Some(body) => Request::keys(body, true),
            None => Request::keys(text, false),
        };
        match self.ask(&request) {
            Ok(_) => true,
            Err(e) => {
                self.log("error", json!({ "sending": why, "error": e.to_string() }));
                false
            }
        }
    }

    /// Counts a recovery; false (and a `stall_limit` stop) when the limits are spent.
    fn spend_recovery(&mut self, what: &str) -> bool {
        let s = &self.p.status;
        if s.recovery_count_step >= self.settings.recoveries_per_iteration
            || s.recovery_count_total >= self.settings.recoveries_total
        {
            self.log("limit", json!({ "what": what, "recovery_count_step": s.recovery_count_step, "recovery_count_total": s.recovery_count_total }));
            self.fail_with_stall_limit();
            return false;
        }
        self.p.status.recovery_count_step += 1;
        self.p.status.recovery_count_total += 1;
        true
    }

    /// The limits are spent: `.auto-stop` with `stall_limit`; the agent has the stop grace to
    /// honour it, then its process group is ended; the loop ends `failed`.
    fn fail_with_stall_limit(&mut self) {
        self.request_stop(StopReason::StallLimit);
    }

    async fn heartbeat(&mut self) {
        let screen = match self.ask(&Request::Screen) {
            Ok(r) => r,
            Err(_) => match self.holder.recorded_exit() {
                Some(exit) => Response { exit: Some(exit), ..Response::default() },
                None => {
                    self.log("error", json!({ "error": "the holder is gone and recorded no exit" }));
                    Response {
                        exit: Some(holder::Exit {
                            code: u32::MAX,
                            signal: Some("lost".into()),
                            screen: String::new(),
                            at: now().to_string(),
                        }),
                        ..Response::default()
                    }
                }
            },
        };
        if let Some(exit) = screen.exit.clone() {
            self.on_exit(exit).await;
            return;
        }
        if self.p.internal.ending.is_some() {
            self.finish_when_ended().await;
            if is_final(&self.p.status.status) {
                return;
            }
        }
        // The stop grace: end the process group of an agent that ignores `.auto-stop`.
        if let Some(at) = self.p.internal.stop_requested_at.as_ref().and_then(|t| t.parse::<Timestamp>().ok())
            && since(at) > self.settings.stop_grace_seconds
        {
            self.log(
                "stop_ignored",
                json!({ "grace_s": self.settings.stop_grace_seconds, "excerpt": tail(&screen.screen, 6) }),
            );
            self.end_agent();
            self.p.internal.ending.get_or_insert_with(|| "stopped".into());
            self.finish();
            return;
        }
        // The first message is typed once the CLI drew its screen and paused (ready for
        // input), or after the startup grace if it draws nothing. Until then the agent has
        // nothing to do: no stall is counted.
        if let Some(text) = self.p.internal.pending_typed.clone() {
            let starting =
                self.p.internal.launched_at.as_ref().and_then(|t| t.parse::<Timestamp>().ok()).map_or(0.0, since);
            let grace =
                (self.settings.heartbeat_seconds * f64::from(self.settings.stall_captures)).max(STARTUP_GRACE_S);
            if (screen.output_bytes > 0 && screen.quiet_ms >= 300) || starting >= grace {
                let paste = format!("\x1b[200~{text}\x1b[201~\r");
                self.p.internal.pending_typed = None;
                if !self.send(&paste, "first message", "", &screen) {
                    self.p.internal.pending_typed = Some(text);
                }
            }
            self.save();
            return;
        }
        let new_rows = self.new_rows(&screen);
        let reading = screen::read_view(
            new_rows.as_deref().unwrap_or(&screen.screen),
            &screen.screen,
            &screen.above,
            now(),
            &jiff::tz::TimeZone::system(),
        );
        // Output since the last keystroke, and what is read of it is new: with the holder's
        // row ages the old rows are already blanked from the reading (so the same prompt asked
        // again on an identical screen is answered again); without them, a screen that differs.
        let hash = screen::masked_hash(&screen.screen);
        let fresh = screen.output_bytes > self.p.internal.last_action_output
            && (new_rows.is_some() || hash != self.p.internal.last_action_hash);

        // Quota wait: the clock is paused, nothing is typed until the reset.
        if self.p.status.quota_wait_since.is_some() {
            self.in_quota_wait(&screen, &reading, fresh);
            self.save();
            return;
        }
        if !is_final(&self.p.status.status) && self.p.status.status != "needs_human" {
            self.p.status.status = "running".into();
        }
        match &reading {
            Reading::Prompt(prompt) if fresh => {
                match self.policy.decide(prompt, &self.cx.root) {
                    Decision::Answer(key) => {
                        if prompt.class == PromptClass::Continuation && !self.spend_recovery("continuation") {
                            self.save();
                            return;
                        }
                        self.p.status.needs_human = None;
                        self.p.status.status = "running".into();
                        self.log("verdict", json!({ "reading": "prompt", "class": prompt.class, "pattern": prompt.pattern, "decision": "answer" }));
                        self.send(&key, &format!("{} prompt", prompt.class.as_str()), &prompt.excerpt, &screen);
                        if prompt.class == PromptClass::QuotaMenu {
                            self.enter_quota_wait(&prompt.pattern, &prompt.excerpt, None);
                        }
                    }
                    Decision::Refuse(reason) => {
                        self.p.status.status = "needs_human".into();
                        // The person sees the whole command, also when its start scrolled away.
                        let about = match &prompt.subject {
                            Subject::Command(c) => format!("command:\n{c}\n\n"),
                            Subject::Files(f) => format!("files: {}\n\n", f.join(", ")),
                            Subject::Unseen => String::new(),
                        };
                        self.p.status.needs_human = Some(format!("{reason}\n{about}{}", prompt.excerpt));
                        // Seen: do not decide on this screen again.
                        self.p.internal.last_action_output = screen.output_bytes;
                        self.p.internal.last_action_hash = hash;
                        self.log("needs_human", json!({ "class": prompt.class, "pattern": prompt.pattern, "reason": reason, "subject": prompt.subject, "excerpt": prompt.excerpt }));
                    }
                }
                self.p.status.stall_count = 0;
                self.p.internal.last_hash = hash;
            }
            Reading::Quota { pattern, excerpt, resets_at } if fresh => {
                let (pattern, excerpt, resets_at) = (pattern.clone(), excerpt.clone(), *resets_at);
                self.p.internal.last_action_output = screen.output_bytes;
                self.p.internal.last_action_hash = hash;
                self.enter_quota_wait(&pattern, &excerpt, resets_at);
            }
            _ if self.p.status.status == "needs_human" => {
                if hash != self.p.internal.last_action_hash
                    && screen.output_bytes > self.p.internal.last_action_output
                    && self.p.status.checks_to_approve.is_empty()
                {
                    self.p.status.status = "running".into();
                    self.p.status.needs_human = None;
                    self.log("verdict", json!({ "reading": "screen changed", "decision": "resume supervision" }));
                }
            }
            // Once a stop is asked for, the agent is waited for, not nudged.
            _ if self.p.status.stop_reason.is_some() => {}
            _ => self.stall_check(&screen, &reading, hash),
        }
        self.timeout_check();
        self.save();
    }

    /// The screen with the rows that were already there at the last keystroke blanked: only
    /// output newer than the last action is read for prompts and quota messages (an answered
    /// prompt that stays on screen while the agent works below it is not answered again).
    /// `None` when the holder gave no row ages.
    fn new_rows(&self, screen: &Response) -> Option<String> {
        let after = self.p.internal.last_action_output;
        let rows: Vec<&str> = screen.screen.split('\n').collect();
        (rows.len() == screen.row_ages.len()).then(|| {
            rows.iter()
                .zip(&screen.row_ages)
                .map(|(row, &age)| if age > after { *row } else { "" })
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    fn stall_check(&mut self, screen: &Response, reading: &Reading, hash: u64) {
        if hash != self.p.internal.last_hash || matches!(reading, Reading::Busy { .. }) {
            self.p.internal.last_hash = hash;
            self.p.status.stall_count = 0;
            self.p.internal.quota_retries = 0;
            return;
        }
        self.p.status.stall_count += 1;
        if self.p.status.stall_count < self.settings.stall_captures {
            return;
        }
        let cpu = loopwright_runners::process::descendants_cpu_ticks(self.p.internal.agent_pid);
        let working = cpu > self.p.internal.child_cpu;
        self.p.internal.child_cpu = cpu;
        let window = self.settings.heartbeat_seconds * f64::from(self.settings.stall_captures);
        let signal_age = self.p.status.last_signal_at.as_ref().and_then(|t| t.parse::<Timestamp>().ok()).map(since);
        if working {
            self.log("verdict", json!({ "reading": "unchanged screen", "decision": "working: a child process uses CPU", "cpu_ticks": cpu }));
            self.p.status.stall_count = 0;
            return;
        }
        if signal_age.is_some_and(|a| a < window) {
            self.p.status.stall_count = 0;
            return;
        }
        let excerpt = tail(&screen.screen, 8);
        self.log(
            "stall",
            json!({ "captures": self.p.status.stall_count, "signal_age_s": signal_age, "excerpt": excerpt }),
        );
        self.p.status.stall_count = 0;
        if self.spend_recovery("stall") {
            let nudge = format!("{}\r", protocol::nudge(&self.task_dir));
            self.send(&nudge, "stalled: nudge", &excerpt, screen);
        }
    }

    fn enter_quota_wait(&mut self, pattern: &str, excerpt: &str, resets_at: Option<Timestamp>) {
        let t = now();
        let backoff = (self.settings.quota_jitter_seconds.max(self.settings.heartbeat_seconds)
            * 2f64.powi(i32::try_from(self.p.internal.quota_retries).unwrap_or(10)))
        .min(3600.0);
        let fallback = SignedDuration::from_secs_f64(self.settings.quota_fallback_minutes * 60.0);
        let mut until = resets_at.unwrap_or_else(|| t + fallback);
        if until <= t {
            until = t + SignedDuration::from_secs_f64(backoff);
        }
        self.p.status.status = "quota_wait".into();
        self.p.status.quota_wait_since = Some(t.to_string());
        self.p.status.quota_resets_at = Some(until.to_string());
        self.p.status.stall_count = 0;
        self.log("quota_wait", json!({ "pattern": pattern, "excerpt": excerpt, "resets_at": until.to_string(), "given": resets_at.is_some() }));
    }

    fn in_quota_wait(&mut self, screen: &Response, reading: &Reading, fresh: bool) {
        // The agent went back to work by itself (a CLI that continues at the reset).
        if fresh && matches!(reading, Reading::Busy { .. }) && screen.output_bytes > self.p.internal.last_action_output
        {
            self.leave_quota_wait("the agent resumed by itself");
            return;
        }
        let until =
            self.p.status.quota_resets_at.as_ref().and_then(|t| t.parse::<Timestamp>().ok()).unwrap_or_else(now);
        let jitter = SignedDuration::from_secs_f64(self.settings.quota_jitter_seconds);
        if now() < until + jitter {
            return;
        }
        self.leave_quota_wait("reset passed");
        self.p.internal.quota_retries += 1;
        self.send("continue\r", "quota reset: one continue", &tail(&screen.screen, 4), screen);
    }

    fn leave_quota_wait(&mut self, why: &str) {
        if let Some(began) = self.p.status.quota_wait_since.take().and_then(|t| t.parse::<Timestamp>().ok()) {
            self.p.status.quota_paused_s += since(began);
        }
        self.p.status.quota_resets_at = None;
        self.p.status.status = "running".into();
        self.log("quota_resume", json!({ "why": why, "paused_s": self.p.status.quota_paused_s }));
    }

    fn timeout_check(&mut self) {
        let s = &self.p.status;
        if s.elapsed_at(now()) >= s.timeout_s && s.stop_reason.is_none() {
            self.request_stop(StopReason::Timeout);
        }
    }

    async fn on_exit(&mut self, exit: holder::Exit) {
        let banner_id = screen::session_id(&exit.screen);
        if let Some(id) = &banner_id {
            self.p.status.agent_session_id = Some(id.clone());
        }
        self.log("exited", json!({ "code": exit.code, "signal": exit.signal, "session_id": banner_id, "excerpt": tail(&exit.screen, 8) }));
        let _ = self.ask(&Request::Quit);
        if self.p.internal.ending.is_none() {
            // The agent may have finished its loop and cleaned up before we read the signal.
            self.on_files().await;
        }
        if self.p.internal.ending.is_none() && self.p.status.stop_reason.is_some() {
            self.p.internal.ending = Some("stopped".into());
        }
        if self.p.internal.ending.is_none()
            && let Ok((index, _)) = module::read_index(&self.task_dir)
        {
            match index.status {
                ModuleStatus::Complete => self.p.internal.ending = Some("complete".into()),
                ModuleStatus::Blocked | ModuleStatus::Cancelled => self.p.internal.ending = Some("blocked".into()),
                _ => {}
            }
        }
        if self.p.internal.ending.is_some() {
            self.finish_after_exit().await;
            return;
        }
        if self.p.status.restart_count >= self.settings.restarts {
            self.log("limit", json!({ "what": "restarts", "restart_count": self.p.status.restart_count }));
            self.request_stop(StopReason::StallLimit);
            self.p.internal.ending = Some("failed".into());
            self.finish();
            return;
        }
        self.p.status.restart_count += 1;
        let resume = self.p.status.agent_session_id.clone();
        let message = match &resume {
            Some(_) => protocol::resume_message(&self.task_dir),
            None => protocol::render(&self.task_dir),
        };
        self.log("restart", json!({ "restart_count": self.p.status.restart_count, "resume": resume }));
        // Counted before the agent starts: a supervisor that dies now is not granted a restart
        // more than the limit.
        self.save();
        if let Err(e) = self.launch(&message, resume.as_deref()) {
            self.log("failed", json!({ "reason": e }));
            self.p.internal.ending = Some("failed".into());
            self.finish();
        }
        self.save();
    }

    /// The loop said it ended (signal `(stop)`, the stop file consumed): verify if it claims
    /// completion, then end the session.
    async fn finish_when_ended(&mut self) {
        if !self.awaiting_approval() {
            return;
        }
        if self.p.internal.ending.as_deref() == Some("complete") && self.p.status.checks.is_empty() {
            // Verification runs once per claim; `verify` clears `checks` when it sends the
            // module back.
            let passed = self.verify().await;
            if !passed {
                return;
            }
        }
        self.end_agent();
        self.finish();
    }

    async fn finish_after_exit(&mut self) {
        if !self.awaiting_approval() {
            return;
        }
        if self.p.internal.ending.as_deref() == Some("complete") && self.p.status.checks.is_empty() {
            let passed = self.verify().await;
            if !passed {
                // Sent back: restart the agent to go on (not counted as a restart).
                let resume = self.p.status.agent_session_id.clone();
                let message = match &resume {
                    Some(_) => protocol::resume_message(&self.task_dir),
                    None => protocol::render(&self.task_dir),
                };
                if let Err(e) = self.launch(&message, resume.as_deref()) {
                    self.log("failed", json!({ "reason": e }));
                    self.p.internal.ending = Some("failed".into());
                    self.finish();
                }
                self.save();
                return;
            }
        }
        self.finish();
    }

    /// Runs the module's checks. All pass: true. One fails: the module goes back to
    /// `executing` with the output in `.summary.md`, the session is told once (a recovery),
    /// and false.
    /// A check the agent added after the start runs only once a person approved it: until
    /// then the fixed ones run, and the loop waits for the person with the added ones shown.
    async fn verify(&mut self) -> bool {
        let mut checks = self.p.internal.checks.clone();
        let approved = self.approved_checks();
        let mut waiting = Vec::new();
        for added in module::read_index(&self.task_dir).map(|(i, _)| i.checks).unwrap_or_default() {
            if checks.contains(&added) || waiting.contains(&added) {
                continue;
            }
            if approved.contains(&added) {
                checks.push(added);
            } else {
                waiting.push(added);
            }
        }
        let mut runs = Vec::new();
        for command in &checks {
            let run = run_check(command, &self.cx.root).await;
            let failed = !run.passed;
            runs.push(run);
            if failed {
                break;
            }
        }
        for run in &runs {
            self.log("check", json!({ "command": run.command, "exit_code": run.exit_code, "passed": run.passed, "output_tail": run.output_tail }));
        }
        self.p.status.checks = runs.clone();
        if runs.iter().all(|r| r.passed) && !waiting.is_empty() {
            if self.p.status.checks_to_approve != waiting {
                self.log("checks_need_approval", json!({ "checks": waiting }));
            }
            self.p.status.needs_human = Some(format!(
                "the agent added checks that were not declared when the loop started; they run only once a person approves them (loopwright auto approve-checks {}):\n{}",
                self.task_dir.display(),
                waiting.iter().map(|c| format!("- {c}")).collect::<Vec<_>>().join("\n")
            ));
            self.p.status.checks_to_approve = waiting;
            self.p.status.status = "needs_human".into();
            self.save();
            return false;
        }
        self.p.status.checks_to_approve.clear();
        if runs.iter().all(|r| r.passed) {
            self.log("verified", json!({ "checks": runs.len() }));
            return true;
        }
        let Some(failed) = runs.last().cloned() else { return true };
        self.log("verification_failed", json!({ "command": failed.command }));
        let mut summary =
            module::read_file(&self.task_dir.join(module::SUMMARY), module::FILE_BYTES).unwrap_or_default();
        summary.push_str(&format!(
            "\n\n## Verification failed (loopwright ran the checks)\n\n`{}` exited with {}:\n\n```\n{}\n```\n",
            failed.command,
            failed.exit_code.map_or("no status".to_owned(), |c| c.to_string()),
            failed.output_tail
        ));
        let _ = module::write(&self.task_dir.join(module::SUMMARY), &summary);
        if let Ok((mut index, body)) = module::read_index(&self.task_dir) {
            index.status = ModuleStatus::Executing;
            let _ = module::write_index(&self.task_dir, &Index { ..index }, &body);
        }
        self.p.internal.ending = None;
        self.p.status.next = "check".into();
        if !self.spend_recovery("verification failed") {
            return false;
        }
        self.p.status.checks.clear();
        let message = format!(
            "loopwright ran the module's checks and `{}` failed (its output is at the end of {}/.summary.md). The module is back in status executing: continue the loop with check (post-exec).\r",
            failed.command,
            self.task_dir.display()
        );
        if let Ok(screen) = self.ask(&Request::Screen) {
            self.send(&message, "verification failed", &failed.output_tail, &screen);
        }
        self.save();
        false
    }

    /// False while added checks wait for a person (the loop stays `needs_human`); once all are
    /// approved, the verification runs again with them.
    fn awaiting_approval(&mut self) -> bool {
        if self.p.status.checks_to_approve.is_empty() {
            return true;
        }
        let approved = self.approved_checks();
        if self.p.status.checks_to_approve.iter().all(|c| approved.contains(c)) {
            self.p.status.checks_to_approve.clear();
            self.p.status.checks.clear();
            self.p.status.needs_human = None;
            self.p.status.status = "running".into();
            return true;
        }
        self.p.status.status = "needs_human".into();
        false
    }

    /// The checks a person approved for this loop (`checks_approved` in its journal).
    fn approved_checks(&self) -> Vec<String> {
        let entries = self.cx.store.auto_log_since(&self.p.status.loop_id, 0).unwrap_or_default();
        entries
            .iter()
            .filter(|e| e.kind == "checks_approved")
            .filter_map(|e| serde_json::from_str::<ChecksApproved>(&e.data).ok())
            .flat_map(|a| a.checks)
            .collect()
    }

    /// A request to the holder: blocking socket I/O (the holder may pause before an Enter).
    fn ask(&self, request: &Request) -> Result<Response, holder::HolderError> {
        blocking(|| self.holder.request(request))
    }

    /// Ends the agent's process group (it has done its work or ignored the stop).
    fn end_agent(&mut self) {
        let holder = &self.holder;
        blocking(|| {
            if holder.request(&Request::Signal { signal: "TERM".into() }).is_ok() {
                for _ in 0..50 {
                    std::thread::sleep(Duration::from_millis(20));
                    if holder.request(&Request::Screen).map_or(true, |r| r.exit.is_some()) {
                        break;
                    }
                }
            }
            let _ = holder.request(&Request::Quit);
        });
    }

    /// Seed 002's cleanup on every exit path, and the final status.
    fn finish(&mut self) {
        let ending = self.p.internal.ending.clone().unwrap_or_else(|| "stopped".into());
        let status = match (ending.as_str(), self.p.status.stop_reason.as_deref()) {
            ("failed", _) | (_, Some("stall_limit")) => "failed",
            ("complete", None) => "complete",
            ("blocked", None) => "blocked",
            _ => "stopped",
        };
        signal::remove(&self.task_dir, module::SIGNAL);
        signal::remove(&self.task_dir, module::STOP);
        self.p.status.status = status.into();
        self.p.status.quota_wait_since = None;
        self.p.internal.pending_typed = None;
        self.log(
            "finished",
            json!({ "status": status, "stop_reason": self.p.status.stop_reason, "iteration": self.p.status.iteration }),
        );
        self.save();
    }
}

/// The project's default checks when a module declares none: its test command, found as the
/// closed loop finds it (`engine::closed_loop::checks::Project`).
pub fn default_checks(root: &Path) -> Vec<String> {
    let files = loopwright_runners::FsChanges::new(root.to_owned(), root.join(".loopwright/state/runs"));
    loopwright_engine::closed_loop::checks::Project::detect(&files).test_command().into_iter().collect()
}

/// Runs one check with `sh -c` in the workspace, as the leader of its own process group, for at
/// most 10 minutes.
async fn run_check(command: &str, root: &Path) -> CheckRun {
    use loopwright_runners::process::{self, ProcessEnd};
    let argv = ["sh".to_owned(), "-c".to_owned(), command.to_owned()];
    let spawn = process::Spawn {
        argv: &argv,
        stdin: None,
        env: &[],
        cwd: root,
        deadline: tokio::time::Instant::now() + Duration::from_secs(600),
        grace: Duration::from_secs(5),
        output_cap: 64 * 1024,
    };
    let result = process::run(spawn, |_, _| {}).await;
    let exit_code = match result.end {
        ProcessEnd::Exited(code) => Some(code),
        ProcessEnd::Signaled(_) | ProcessEnd::TimedOut | ProcessEnd::SpawnFailed(_) => None,
    };
    let mut output = result.stdout;
    output.push_str(&result.stderr);
    if let ProcessEnd::SpawnFailed(e) = &result.end {
        output.push_str(e);
    }
    CheckRun { command: command.to_owned(), exit_code, passed: exit_code == Some(0), output_tail: tail(&output, 30) }
}

/// The last `n` non-empty lines.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn shorten_argv(argv: &[String]) -> Vec<String> {
    argv.iter().map(|a| if a.len() > 120 { format!("({} characters)", a.chars().count()) } else { a.clone() }).collect()
}

/// Runs blocking work (the holder's socket, waits) from a supervisor's task: on a multi-thread
/// runtime (the daemon's, a foreground `auto start`'s) the runtime is told, so the other loops'
/// tasks and the API's move to other threads meanwhile.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// A random UUID (v4) for the agent's session id.
pub fn new_uuid() -> String {
    let mut b: [u8; 16] = module::random_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The most of `.auto-signal` read: a signal is a line of JSON; a bigger file (the agent's to
/// write) is not read whole into memory.
const SIGNAL_BYTES: u64 = 64 * 1024;

/// A file's text, at most `cap` bytes of it.
fn read_capped(path: &Path, cap: u64) -> Option<String> {
    module::read_file(path, cap).ok()
}

/// Watches a module directory for changes of its signal and stop files.
fn watch_dir(dir: &Path, tx: mpsc::UnboundedSender<()>) -> Result<notify::RecommendedWatcher, String> {
    use notify::Watcher;
    if std::env::var_os("LOOPWRIGHT_AUTO_NO_WATCH").is_some() {
        return Err("LOOPWRIGHT_AUTO_NO_WATCH is set".into());
    }
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        use notify::event::{AccessKind, AccessMode, EventKind};
        // Reading a file is an event too: the supervisor's own reads of `.auto-signal` must not
        // make it read the file again (a loop that kept a core busy). Only writes, creations,
        // removals and renames count.
        let read_only = |kind: &EventKind| {
            matches!(
                kind,
                EventKind::Access(AccessKind::Open(_) | AccessKind::Close(AccessMode::Read) | AccessKind::Read)
            )
        };
        if let Ok(ev) = ev
            && !read_only(&ev.kind)
            && ev.paths.iter().any(|p| p.file_name().is_some_and(|n| n == module::SIGNAL || n == module::STOP))
        {
            let _ = tx.send(());
        }
    })
    .map_err(|e| e.to_string())?;
    watcher.watch(dir, notify::RecursiveMode::NonRecursive).map_err(|e| e.to_string())?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(step: &str, at: &str) -> Signal {
        Signal {
            step: step.into(),
            result: "(done)".into(),
            next: "check".into(),
            checkpoint: String::new(),
            iteration: Some(1),
            timestamp: at.into(),
        }
    }

    #[test]
    fn signals_are_journaled_when_new_at_most_a_few_a_second_and_the_rest_counted() {
        let mut j = SignalJournal::default();
        let t0 = std::time::Instant::now();
        let admitted: Vec<Option<u64>> = (0..6).map(|_| j.admit(t0, false)).collect();
        assert_eq!(admitted, [Some(0), Some(0), Some(0), Some(0), None, None]);
        // An important one goes through anyway, and says nothing of the two left out...
        assert_eq!(j.admit(t0, true), Some(2));
        // ...which the next second's first entry does not count again.
        assert_eq!(j.admit(t0 + Duration::from_millis(1000), false), Some(0));
        assert!(!j.repeats(&sig("exec", "t1")));
        assert!(j.repeats(&sig("exec", "t2")), "the same signal at another time");
        assert!(!j.repeats(&sig("check", "t3")));
    }
}
