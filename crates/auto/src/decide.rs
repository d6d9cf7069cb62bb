//! What the supervisor does, as a pure function: [`decide`] takes a loop's state, one thing
//! the supervisor observed and the time, and gives the next state and the actions to perform.
//! The driver (`supervisor`) only gathers observations (the holder's screen, the module's
//! files, exits, check results) and performs actions (typing, starting the agent, running
//! checks, journaling); every rule of auto mode lives here and is tested with built states,
//! without a terminal.

use std::path::{Path, PathBuf};

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::event::AutoEvent;
use crate::holder::{Exit, Response};
use crate::module::{self, ModuleStatus};
use crate::policy::{Decision, Policy};
use crate::screen::{self, Prompt, PromptClass, Reading, Subject};
use crate::signal::{self, Signal, StopReason};
use crate::state::{CheckRun, Ending, LoopStatus, Persisted, WaitKind, seconds_between};
pub use crate::state::{SIGNAL_ENTRIES_PER_SECOND, SignalJournal};

/// Milliseconds without output after which a screen is read for a prompt (a frame drawn
/// whole, not one in the middle of a redraw).
pub const SETTLE_MS: u64 = 250;

/// Agents that exit during their startup in a row before the loop fails.
pub const FAILED_STARTS: u32 = 3;

/// The most of an invalid signal's text kept in its journal entry.
pub const SIGNAL_TEXT_KEPT: usize = 2048;

/// Why the first message is typed (journaled with the keys).
const FIRST_MESSAGE: &str = "first message";

/// The longest restart backoff.
const RESTART_BACKOFF_MAX_S: f64 = 300.0;

/// The longest backoff after the provider's rate limit.
const RATE_BACKOFF_MAX_S: f64 = 1800.0;

/// The time, as the supervisor sees it: the system clock, or a fixed one in tests.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// One thing the supervisor observed.
#[derive(Debug, Clone)]
pub enum Observation {
    /// A look at the agent's terminal: when the screen changed and settled, or at a heartbeat
    /// (`heartbeat`: stalls, timeouts and hung calls are judged only then). `cpu_ticks`: the
    /// CPU time of the agent's children, measured at heartbeats.
    Look {
        /// The holder's answer.
        screen: Response,
        /// A heartbeat look.
        heartbeat: bool,
        /// The agent's children's CPU time.
        cpu_ticks: Option<u64>,
    },
    /// `.auto-signal` and `.auto-stop` as they are now (`None`: absent).
    Files {
        /// The signal file's text.
        signal: Option<String>,
        /// The stop file's text.
        stop: Option<String>,
    },
    /// The agent's process exited; `module` is the module's status then.
    Exited {
        /// The exit.
        exit: Exit,
        /// The module's status.
        module: Option<ModuleStatus>,
    },
    /// A timer with no agent to look at (a restart's backoff).
    Tick,
    /// A person asked to stop (Ctrl-C, `DELETE`).
    StopAsked,
    /// A person stops a loop no process supervises any more (`auto stop` after its supervisor
    /// died): it ends here, its agent's holder ended.
    Abandoned {
        /// Who stopped it.
        by: String,
    },
    /// The checks ran (stopping at the first failure); `waiting` are the added ones no person
    /// approved yet.
    Verified {
        /// Each check run.
        runs: Vec<CheckRun>,
        /// Added checks waiting for a person.
        waiting: Vec<String>,
    },
    /// The added checks people approved so far.
    Approved(Vec<String>),
    /// The agent was started.
    Launched {
        /// Its command line (shortened).
        argv: Vec<String>,
        /// The session it resumes.
        resume: Option<String>,
        /// Its session id.
        session_id: Option<String>,
        /// The first message to type, for a CLI that takes it typed.
        typed: Option<String>,
        /// Its process group.
        pid: u32,
    },
    /// The agent could not be started.
    LaunchFailed(String),
    /// Typing failed.
    TypingFailed {
        /// What was typed for.
        why: String,
        /// The error.
        error: String,
        /// What was typed.
        text: String,
    },
}

/// The message an agent is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstMessage {
    /// The protocol (a new session).
    Protocol,
    /// The resume message (its own session again).
    Resume,
}

/// One thing for the driver to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write a journal entry.
    Journal(AutoEvent),
    /// Save the state (the driver also saves before every keystroke and start, and after
    /// every observation).
    Save,
    /// Type into the agent's terminal (`\r` at the end: then submit with Enter).
    Type {
        /// The keys.
        text: String,
        /// Why.
        why: String,
    },
    /// Start the agent (observe `Launched` or `LaunchFailed`).
    Launch {
        /// Its first message.
        message: FirstMessage,
        /// The session to resume.
        resume: Option<String>,
    },
    /// Run the checks (observe `Verified`).
    Verify,
    /// Send the module back after a failed check: the failure into `.summary.md`, the module's
    /// status to `executing`.
    SendBack {
        /// The failed check.
        failed: CheckRun,
    },
    /// Write `.auto-stop`.
    WriteStop(StopReason),
    /// Signal the agent's process group with TERM, wait a moment, end the holder.
    EndAgent,
    /// End the holder of an agent that exited.
    QuitHolder,
    /// Remove `.auto-signal` and `.auto-stop` (every exit path).
    Cleanup,
}

/// What the rules read besides the state.
pub struct Rules<'a> {
    /// The answer policy.
    pub policy: &'a Policy,
    /// The workspace (the policy's judge of paths).
    pub root: &'a Path,
    /// The zone of reset times given without one.
    pub zone: &'a TimeZone,
}

/// The next state and what to do, for `obs` observed at `now`.
pub fn decide(state: &Persisted, obs: Observation, rules: &Rules<'_>, now: Timestamp) -> (Persisted, Vec<Action>) {
    let mut step = Step { p: state.clone(), actions: Vec::new(), rules, now };
    step.observe(obs);
    (step.p, step.actions)
}

/// When the driver should look again even if nothing happens: a restart's backoff, a quota's
/// reset, the end of a stop's grace, the startup grace of a first message; while a closing
/// turn is let through, every half second.
pub fn wake_at(p: &Persisted, now: Timestamp) -> Option<Timestamp> {
    let i = &p.internal;
    let s = &i.settings;
    let secs = |t: Timestamp, x: f64| t.checked_add(SignedDuration::from_secs_f64(x.max(0.0))).ok();
    let closing = i.ending.is_some() && !p.status.status.is_final();
    [
        i.restart_after,
        p.status.quota_resets_at.and_then(|t| secs(t, s.quota_jitter_seconds)),
        i.stop_requested_at.and_then(|t| secs(t, s.stop_grace_seconds)),
        i.pending_typed.as_ref().and(i.launched_at).and_then(|t| secs(t, s.startup_grace_seconds)),
        closing.then(|| secs(now, 0.5)).flatten(),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Which checks run and which wait: the fixed ones, then each added one a person approved;
/// the other added ones wait.
pub fn plan_checks(fixed: &[String], approved: &[String], declared: &[String]) -> (Vec<String>, Vec<String>) {
    let mut run = fixed.to_vec();
    let mut waiting: Vec<String> = Vec::new();
    for added in declared {
        if run.contains(added) || waiting.contains(added) {
            continue;
        }
        if approved.contains(added) {
            run.push(added.clone());
        } else {
            waiting.push(added.clone());
        }
    }
    (run, waiting)
}

struct Step<'a> {
    p: Persisted,
    actions: Vec<Action>,
    rules: &'a Rules<'a>,
    now: Timestamp,
}

impl Step<'_> {
    fn journal(&mut self, e: AutoEvent) {
        self.actions.push(Action::Journal(e));
    }

    fn task_dir(&self) -> PathBuf {
        PathBuf::from(&self.p.status.task_dir)
    }

    fn since(&self, t: Timestamp) -> f64 {
        seconds_between(t, self.now)
    }

    fn status(&self) -> LoopStatus {
        self.p.status.status
    }

    fn set_status(&mut self, status: LoopStatus) {
        if self.p.status.status.is_final() {
            return;
        }
        // The time a person is waited for is not the loop's: it is kept apart from the timeout.
        let s = &mut self.p.status;
        match (s.status == LoopStatus::NeedsHuman, status == LoopStatus::NeedsHuman) {
            (false, true) => s.human_wait_since = Some(self.now),
            (true, false) => s.end_human_wait(self.now),
            _ => {}
        }
        s.status = status;
    }

    fn observe(&mut self, obs: Observation) {
        if self.status().is_final() {
            return;
        }
        match obs {
            Observation::Look { screen, heartbeat, cpu_ticks } => self.look(&screen, heartbeat, cpu_ticks),
            Observation::Files { signal, stop } => self.files(signal, stop),
            Observation::Exited { exit, module } => self.exited(&exit, module),
            Observation::Tick => self.tick(),
            Observation::StopAsked => self.request_stop(StopReason::UserStop, Some("a person (Ctrl-C or the API)")),
            Observation::Abandoned { by } => {
                if self.p.status.stop_reason.is_none() {
                    self.p.status.stop_reason = Some(StopReason::UserStop);
                    self.p.internal.stop_requested_at = Some(self.now);
                    self.journal(AutoEvent::StopRequested { reason: StopReason::UserStop, by: Some(by.clone()) });
                }
                self.actions.push(Action::QuitHolder);
                self.end_by(Ending::Stopped, Some(by));
            }
            Observation::Verified { runs, waiting } => self.verified(runs, waiting),
            Observation::Approved(approved) => self.approved(approved),
            Observation::Launched { argv, resume, session_id, typed, pid } => {
                self.launched(argv, resume, session_id, typed, pid);
            }
            Observation::LaunchFailed(reason) => {
                self.journal(AutoEvent::Failed { reason });
                self.end(Ending::Failed);
            }
            Observation::TypingFailed { why, error, text } => {
                if why == FIRST_MESSAGE {
                    // Typed again at the next look.
                    let body =
                        text.trim_start_matches("\x1b[200~").trim_end_matches('\r').trim_end_matches("\x1b[201~");
                    self.p.internal.pending_typed = Some(body.to_owned());
                }
                self.journal(AutoEvent::Error { doing: Some(format!("typing ({why})")), error });
            }
        }
    }

    // ---- the agent's process ---------------------------------------------------------------

    fn launch(&mut self, message: FirstMessage, resume: Option<String>) {
        // A new process: nothing it shows continues the last one's stall.
        self.p.internal.launched_at = Some(self.now);
        self.p.internal.last_action_output = 0;
        self.p.internal.last_action_hash = 0;
        self.p.internal.last_hash = 0;
        self.p.internal.busy_since = None;
        self.p.internal.restart_after = None;
        self.p.internal.session_started = resume.is_some();
        self.p.status.stall_count = 0;
        self.actions.push(Action::Launch { message, resume });
    }

    fn launched(
        &mut self,
        argv: Vec<String>,
        resume: Option<String>,
        session_id: Option<String>,
        typed: Option<String>,
        pid: u32,
    ) {
        if session_id.is_some() {
            self.p.status.agent_session_id.clone_from(&session_id);
        }
        self.p.internal.pending_typed = typed;
        self.p.internal.agent_pid = pid;
        self.journal(AutoEvent::AgentStarted { argv, resume, session_id: self.p.status.agent_session_id.clone(), pid });
    }

    fn exited(&mut self, exit: &Exit, module: Option<ModuleStatus>) {
        if self.p.internal.restart_after.is_some() {
            // Already seen: a restart waits for its backoff.
            self.tick();
            return;
        }
        let banner_id = screen::session_id(&exit.screen);
        if let Some(id) = &banner_id {
            self.p.status.agent_session_id = Some(id.clone());
        }
        self.journal(AutoEvent::Exited {
            code: exit.code,
            signal: exit.signal.clone(),
            session_id: banner_id,
            excerpt: tail(&exit.screen, 8),
        });
        self.actions.push(Action::QuitHolder);
        self.p.internal.agent_pid = 0;
        if self.p.internal.ending.is_none() && self.p.status.stop_reason.is_some() {
            self.p.internal.ending = Some(Ending::Stopped);
        }
        if self.p.internal.ending.is_none() {
            match module {
                Some(ModuleStatus::Complete) => self.p.internal.ending = Some(Ending::Complete),
                Some(ModuleStatus::Blocked | ModuleStatus::Cancelled) => self.p.internal.ending = Some(Ending::Blocked),
                _ => {}
            }
        }
        if let Some(ending) = self.p.internal.ending {
            if !self.p.status.checks_to_approve.is_empty() {
                return;
            }
            if ending == Ending::Complete && !self.p.internal.verified {
                self.actions.push(Action::Verify);
                return;
            }
            self.end(ending);
            return;
        }
        self.plan_restart(exit);
    }

    /// The agent exited mid-loop: started again, after a backoff, within the budget; one that
    /// never got going gets a fresh session, and one that cannot start ends the loop `failed`.
    fn plan_restart(&mut self, exit: &Exit) {
        let s = self.p.internal.settings.clone();
        let quick = self.p.internal.launched_at.is_some_and(|t| self.since(t) < s.startup_grace_seconds);
        if !self.p.internal.session_started && quick {
            self.p.internal.failed_starts += 1;
            if self.p.internal.failed_starts >= FAILED_STARTS {
                let reason = format!(
                    "the agent exited during its startup {} times in a row (last: code {}): {}",
                    self.p.internal.failed_starts,
                    exit.code,
                    tail(&exit.screen, 4)
                );
                self.journal(AutoEvent::Failed { reason });
                self.end(Ending::Failed);
                return;
            }
        } else {
            self.p.internal.failed_starts = 0;
        }
        let window = s.restart_window_minutes * 60.0;
        let now = self.now;
        self.p.internal.restarts_at.retain(|t| seconds_between(*t, now) < window);
        let recent = u32::try_from(self.p.internal.restarts_at.len()).unwrap_or(u32::MAX);
        if recent >= s.restarts {
            self.journal(AutoEvent::Limit {
                what: format!("restarts ({} in {} min)", s.restarts, s.restart_window_minutes),
                recovery_count_step: None,
                recovery_count_total: None,
                restart_count: Some(self.p.status.restart_count),
            });
            self.request_stop(StopReason::StallLimit, None);
            self.end(Ending::Failed);
            return;
        }
        let wait =
            (s.restart_backoff_seconds * 2f64.powi(i32::try_from(recent).unwrap_or(16))).min(RESTART_BACKOFF_MAX_S);
        self.p.internal.restart_after = Some(now.checked_add(SignedDuration::from_secs_f64(wait)).unwrap_or(now));
        self.tick();
    }

    /// A timer: a restart whose backoff has passed.
    fn tick(&mut self) {
        let Some(after) = self.p.internal.restart_after else { return };
        if self.now < after {
            return;
        }
        let waited = self.p.internal.launched_at.map_or(0.0, |t| self.since(t));
        let fresh = !self.p.internal.session_started;
        let resume = if fresh { None } else { self.p.status.agent_session_id.clone() };
        self.p.status.restart_count += 1;
        self.p.internal.restarts_at.push(self.now);
        let why = if fresh {
            "its last session never started: a fresh one".to_owned()
        } else {
            "the agent exited mid-loop".to_owned()
        };
        self.journal(AutoEvent::Restart {
            restart_count: self.p.status.restart_count,
            resume: resume.clone(),
            why,
            waited_s: (waited * 10.0).round() / 10.0,
        });
        if fresh {
            self.p.status.agent_session_id = None;
        }
        let message = if resume.is_some() { FirstMessage::Resume } else { FirstMessage::Protocol };
        // Counted (and saved) before the agent starts: a supervisor that dies now is not
        // granted a restart more than the budget.
        self.actions.push(Action::Save);
        self.launch(message, resume);
    }

    // ---- the module's files ----------------------------------------------------------------

    fn files(&mut self, signal: Option<String>, stop: Option<String>) {
        // A stop asked for while reading these files is not yet in them.
        let asked_before = self.p.status.stop_reason.is_some();
        if let Some(text) = signal
            && screen::text_hash(&text) != self.p.internal.last_signal_hash
            && !text.trim().is_empty()
        {
            self.p.internal.last_signal_hash = screen::text_hash(&text);
            match signal::parse(&text) {
                Err(problems) => {
                    if let Some(unjournaled) = self.p.internal.signals.admit(self.now, false) {
                        let kept: String = text.chars().take(SIGNAL_TEXT_KEPT).collect();
                        self.journal(AutoEvent::SignalInvalid { text: kept, bytes: text.len(), problems, unjournaled });
                    }
                }
                Ok(sig) => self.on_signal(sig),
            }
        }
        match stop {
            Some(text) if self.p.status.stop_reason.is_none() => {
                // Anyone may write the file: only the four reasons are taken, anything else is
                // a person's stop.
                let asked: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                let reason = asked["reason"].as_str().and_then(StopReason::parse).unwrap_or(StopReason::UserStop);
                let by: String = asked["by"]
                    .as_str()
                    .filter(|b| !b.is_empty())
                    .unwrap_or("file")
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(100)
                    .collect();
                self.p.status.stop_reason = Some(reason);
                self.p.internal.stop_requested_at = Some(self.now);
                self.journal(AutoEvent::StopRequested { reason, by: Some(by) });
            }
            // The agent consumed the stop file: it left its loop.
            None if asked_before && self.p.internal.stop_requested_at.is_some() && self.p.internal.ending.is_none() => {
                self.p.internal.ending = Some(Ending::Stopped);
                self.p.internal.ended_at = Some(self.now);
                self.journal(AutoEvent::StopHonoured {});
            }
            _ => {}
        }
        if self.p.internal.ending == Some(Ending::Complete)
            && !self.p.internal.verified
            && self.p.status.checks_to_approve.is_empty()
        {
            // Verification runs once per claim, while the agent ends its turn.
            self.actions.push(Action::Verify);
        }
    }

    fn on_signal(&mut self, sig: Signal) {
        let s = &mut self.p.status;
        let advanced = sig.iteration.is_some_and(|i| i > s.iteration);
        s.step = sig.step.to_string();
        s.result = sig.result.to_string();
        s.next = sig.next.to_string();
        s.checkpoint = sig.checkpoint.to_string();
        if let Some(i) = sig.iteration {
            s.iteration = s.iteration.max(i);
        }
        s.last_signal_at = Some(self.now);
        if advanced {
            s.recovery_count_step = 0;
        }
        s.stall_count = 0;
        self.p.internal.session_started = true;
        self.p.internal.failed_starts = 0;
        if self.status() == LoopStatus::NeedsHuman && self.p.status.checks_to_approve.is_empty() {
            self.set_status(LoopStatus::Running);
            self.p.status.needs_human = None;
        }
        let routed = crate::signal::route(sig.step, sig.result, sig.checkpoint);
        let repeats = self.p.internal.signals.repeats(&sig);
        let important = advanced || sig.is_stop();
        let journaled = if important || !repeats {
            self.p.internal.signals.admit(self.now, important)
        } else {
            self.p.internal.signals.skip();
            None
        };
        // Progress: whatever the provider refused before is over.
        self.p.internal.provider_trouble_since = None;
        if let Some(unjournaled) = journaled {
            self.journal(AutoEvent::Signal {
                signal: sig.clone(),
                table_next: routed.map(|r| r.0.to_string()),
                unjournaled,
            });
        }
        if sig.is_stop() && self.p.internal.ending.is_none() {
            let ending = if self.p.status.stop_reason.is_some() {
                Ending::Stopped
            } else if sig.result.is_blocked() {
                Ending::Blocked
            } else {
                Ending::Complete
            };
            self.p.internal.ending = Some(ending);
            self.p.internal.ended_at = Some(self.now);
            self.journal(AutoEvent::LoopEnded { ending });
        } else if self.p.status.iteration >= self.p.status.max_iterations {
            self.request_stop(StopReason::MaxIterations, None);
        }
    }

    /// Asks the loop to stop (once): `.auto-stop` is written and the agent has the stop grace
    /// to honour it.
    fn request_stop(&mut self, reason: StopReason, by: Option<&str>) {
        if self.p.status.stop_reason.is_some() {
            return;
        }
        self.actions.push(Action::WriteStop(reason));
        self.p.status.stop_reason = Some(reason);
        self.p.internal.stop_requested_at = Some(self.now);
        self.journal(AutoEvent::StopRequested { reason, by: by.map(str::to_owned) });
    }

    // ---- verification ----------------------------------------------------------------------

    fn approved(&mut self, approved: Vec<String>) {
        self.p.internal.approved = approved;
        let waiting = &self.p.status.checks_to_approve;
        if waiting.is_empty() || !waiting.iter().all(|c| self.p.internal.approved.contains(c)) {
            return;
        }
        // All approved: the verification runs again with them.
        self.p.internal.verified = false;
        self.p.status.checks_to_approve.clear();
        self.p.status.checks.clear();
        self.p.status.needs_human = None;
        self.set_status(LoopStatus::Running);
        self.actions.push(Action::Verify);
    }

    fn verified(&mut self, runs: Vec<CheckRun>, waiting: Vec<String>) {
        for run in &runs {
            self.journal(AutoEvent::Check {
                command: run.command.clone(),
                exit_code: run.exit_code,
                passed: run.passed,
                output_tail: run.output_tail.clone(),
            });
        }
        self.p.status.checks.clone_from(&runs);
        let passed = runs.iter().all(|r| r.passed);
        if passed && !waiting.is_empty() {
            if self.p.status.checks_to_approve != waiting {
                self.journal(AutoEvent::ChecksNeedApproval { checks: waiting.clone() });
            }
            self.p.status.needs_human = Some(format!(
                "the agent added checks that were not declared when the loop started; they run only once a person approves them (loopwright auto approve-checks {}):\n{}",
                self.p.status.task_dir,
                waiting.iter().map(|c| format!("- {c}")).collect::<Vec<_>>().join("\n")
            ));
            self.p.status.checks_to_approve = waiting;
            self.set_status(LoopStatus::NeedsHuman);
            return;
        }
        self.p.status.checks_to_approve.clear();
        if passed {
            self.p.internal.verified = true;
            self.journal(AutoEvent::Verified { checks: runs.len() });
            // The agent's closing turn is let through: it is ended at the next look that finds
            // it idle, or right away if it already exited.
            if self.agent_gone() {
                self.end(Ending::Complete);
            }
            return;
        }
        let Some(failed) = runs.last().cloned() else { return };
        self.journal(AutoEvent::VerificationFailed { command: failed.command.clone() });
        self.actions.push(Action::SendBack { failed: failed.clone() });
        self.p.internal.ending = None;
        self.p.internal.ended_at = None;
        self.p.internal.verified = false;
        self.p.status.next = "check".into();
        if !self.spend_recovery("verification failed") {
            return;
        }
        self.p.status.checks.clear();
        let message = format!(
            "loopwright ran the module's checks and `{}` failed (its output is at the end of {}/.summary.md). The module is back in status executing: continue the loop with check (post-exec).{}\r",
            failed.command,
            self.p.status.task_dir,
            protocol_reminder(&self.task_dir())
        );
        if self.agent_gone() {
            // Sent back after the agent exited: started again to go on (not a restart).
            self.launch(FirstMessage::Resume, self.p.status.agent_session_id.clone());
        } else {
            self.type_keys(&message, "verification failed", "", 0, 0);
        }
    }

    /// The agent's process is gone (it exited; the loop waits to close or restart it).
    fn agent_gone(&self) -> bool {
        self.p.internal.agent_pid == 0
    }

    // ---- the screen ------------------------------------------------------------------------

    fn look(&mut self, screen: &Response, heartbeat: bool, cpu_ticks: Option<u64>) {
        // Exits are observed as `Exited` (with the module's status); a restart waits for its
        // backoff.
        if screen.exit.is_some() || self.p.internal.restart_after.is_some() {
            return;
        }
        let launched = self.p.internal.launched_at.map_or(f64::MAX, |t| self.since(t));
        let s = self.p.internal.settings.clone();
        if !self.p.internal.session_started && launched >= s.startup_grace_seconds {
            // Alive past its startup: its session exists.
            self.p.internal.session_started = true;
            self.p.internal.failed_starts = 0;
        }
        // The stop grace: end the process group of an agent that ignores `.auto-stop`.
        if let Some(at) = self.p.internal.stop_requested_at
            && self.since(at) > s.stop_grace_seconds
            && (self.p.internal.ending.is_none() || self.p.internal.ending == Some(Ending::Stopped))
        {
            self.journal(AutoEvent::StopIgnored { grace_s: s.stop_grace_seconds, excerpt: tail(&screen.screen, 6) });
            self.actions.push(Action::EndAgent);
            self.end(self.p.internal.ending.unwrap_or(Ending::Stopped));
            return;
        }
        let hash = screen::masked_hash(&screen.screen);
        let reading = screen::read_view(
            &screen.screen,
            &screen.screen,
            &screen.above,
            &screen.row_faces,
            self.now,
            self.rules.zone,
        );

        if self.p.internal.ending.is_some() {
            self.closing(screen, &reading);
            return;
        }
        // The first message is typed once the CLI drew its screen and paused (ready for
        // input), or after the startup grace if it draws nothing.
        if let Some(text) = self.p.internal.pending_typed.clone() {
            if (screen.output_bytes > 0 && screen.quiet_ms >= SETTLE_MS) || launched >= s.startup_grace_seconds {
                self.p.internal.pending_typed = None;
                self.p.internal.session_started = true;
                let paste = format!("\x1b[200~{text}\x1b[201~\r");
                self.type_keys(&paste, FIRST_MESSAGE, "", screen.output_bytes, hash);
            }
            return;
        }
        let settled = screen.quiet_ms >= SETTLE_MS;
        let after = self.p.internal.last_action_output;
        let output_since = screen.output_bytes > after;
        let row_new = |row: usize| screen.row_ages.get(row).is_none_or(|&age| age > after);

        if self.status() == LoopStatus::QuotaWait {
            self.in_wait(screen, &reading, hash);
            return;
        }
        match &reading {
            Reading::Prompt(prompt) if settled && output_since && self.prompt_is_new(prompt, screen, hash) => {
                self.on_prompt(prompt, screen, hash);
            }
            Reading::Quota { pattern, excerpt, resets_at, row } if output_since && row_new(*row) => {
                self.mark_seen(screen, hash);
                self.enter_wait(WaitKind::Quota, pattern, excerpt, *resets_at);
            }
            Reading::RateLimited { excerpt, retry_in_s, row } if output_since && row_new(*row) => {
                self.mark_seen(screen, hash);
                let until = retry_in_s
                    .map(|s| self.now.checked_add(SignedDuration::from_secs(i64::from(s))).unwrap_or(self.now));
                self.enter_wait(WaitKind::RateLimit, "rate_limit", excerpt, until);
            }
            // A person answered (the screen moved on): supervision resumes.
            _ if self.status() == LoopStatus::NeedsHuman
                && hash != self.p.internal.last_action_hash
                && output_since
                && self.p.status.checks_to_approve.is_empty() =>
            {
                self.set_status(LoopStatus::Running);
                self.p.status.needs_human = None;
                self.journal(verdict("screen changed", "resume supervision"));
            }
            _ => {}
        }
        if heartbeat && self.status() == LoopStatus::Running && self.p.status.stop_reason.is_none() {
            self.hung_call_check(screen, &reading, hash, cpu_ticks);
            self.stall_check(screen, &reading, hash, cpu_ticks);
        }
        if heartbeat {
            self.timeout_check();
        }
    }

    /// Whether a prompt on screen was drawn after the last keystroke: a row of its block is
    /// newer than the keystroke (two identical menus are told apart by what the prompt is
    /// about), or it is the latest thing on a screen that changed since — unless its block is
    /// the one just decided on, row for row: a CLI that redraws the rows above a dialog it is
    /// still taking down (Gemini CLI restarting after its trust answer) is not asking again.
    fn prompt_is_new(&self, prompt: &Prompt, screen: &Response, hash: u64) -> bool {
        let after = self.p.internal.last_action_output;
        let block_new = screen.row_ages.len() != screen.screen.split('\n').count()
            || prompt.rows.clone().any(|r| screen.row_ages.get(r).is_some_and(|&age| age > after));
        let context_changed = prompt_hash(&screen.screen, prompt) != self.p.internal.last_prompt_hash;
        let same_block = block_hash(&screen.screen, prompt) == self.p.internal.last_block_hash;
        block_new || (prompt.at_bottom && context_changed && !same_block && hash != self.p.internal.last_action_hash)
    }

    fn on_prompt(&mut self, prompt: &Prompt, screen: &Response, hash: u64) {
        self.p.status.stall_count = 0;
        self.p.internal.last_prompt_hash = prompt_hash(&screen.screen, prompt);
        self.p.internal.last_block_hash = block_hash(&screen.screen, prompt);
        self.p.internal.last_hash = hash;
        match self.rules.policy.decide(prompt, self.rules.root) {
            Decision::Answer(key) => {
                if prompt.class == PromptClass::Continuation && !self.spend_recovery("continuation") {
                    return;
                }
                self.p.status.needs_human = None;
                self.set_status(LoopStatus::Running);
                self.journal(AutoEvent::Verdict {
                    reading: "prompt".into(),
                    decision: "answer".into(),
                    class: Some(prompt.class),
                    pattern: Some(prompt.pattern.clone()),
                    cpu_ticks: None,
                });
                let why = format!("{} prompt", prompt.class.as_str());
                self.type_keys(&key, &why, &prompt.excerpt, screen.output_bytes, hash);
                if prompt.class == PromptClass::QuotaMenu {
                    // The menu is drawn under the limit line that says when it resets.
                    match screen::quota_of(&screen.screen, self.now, self.rules.zone) {
                        Some(Reading::Quota { pattern, excerpt, resets_at, .. }) => {
                            self.enter_wait(WaitKind::Quota, &pattern, &excerpt, resets_at);
                        }
                        _ => self.enter_wait(WaitKind::Quota, &prompt.pattern, &prompt.excerpt, None),
                    }
                }
            }
            Decision::Refuse(reason) => {
                self.set_status(LoopStatus::NeedsHuman);
                // The person sees the whole command, also when its start scrolled away.
                let about = match &prompt.subject {
                    Subject::Command(c) => format!("command:\n{c}\n\n"),
                    Subject::Files(f) => format!("files: {}\n\n", f.join(", ")),
                    Subject::Url(u) => format!("address: {u}\n\n"),
                    Subject::Unseen => String::new(),
                };
                self.p.status.needs_human = Some(format!("{reason}\n{about}{}", prompt.excerpt));
                // Seen: do not decide on this screen again.
                self.mark_seen(screen, hash);
                self.journal(AutoEvent::NeedsHuman {
                    class: prompt.class,
                    pattern: prompt.pattern.clone(),
                    reason,
                    subject: prompt.subject.clone(),
                    excerpt: prompt.excerpt.clone(),
                });
            }
        }
    }

    fn mark_seen(&mut self, screen: &Response, hash: u64) {
        self.p.internal.last_action_output = screen.output_bytes;
        self.p.internal.last_action_hash = hash;
    }

    /// Types `text`, at most once: the keystroke and the screen it answers are journaled and
    /// saved *before* they are sent (the driver saves before every `Type`), so a supervisor
    /// that dies at any point is followed by one that knows this screen was answered.
    /// `excerpt`: the screen rows it answers; `output` and `hash`: the screen it was decided on
    /// (0 and 0 for none).
    fn type_keys(&mut self, text: &str, why: &str, excerpt: &str, output: u64, hash: u64) {
        if output > 0 || hash != 0 {
            self.p.internal.last_action_output = output;
            self.p.internal.last_action_hash = hash;
        }
        // A stall is counted from the last thing typed: the agent needs time to react.
        self.p.status.stall_count = 0;
        let shown = if text.len() > 200 { format!("({} characters)", text.chars().count()) } else { text.to_owned() };
        self.journal(AutoEvent::Keys { keys: shown, why: why.to_owned(), excerpt: excerpt.to_owned() });
        self.actions.push(Action::Type { text: text.to_owned(), why: why.to_owned() });
    }

    /// The loop said it ended: once its checks passed (or it ended otherwise), the agent's
    /// closing turn is let through — it is ended when its screen is idle, or when the stop
    /// grace has passed.
    fn closing(&mut self, screen: &Response, reading: &Reading) {
        if !self.p.status.checks_to_approve.is_empty() {
            return;
        }
        if self.p.internal.ending == Some(Ending::Complete) && !self.p.internal.verified {
            // Not verified yet (a supervisor that died mid-verification): now.
            self.actions.push(Action::Verify);
            return;
        }
        let grace = self.p.internal.settings.stop_grace_seconds;
        let turning = matches!(reading, Reading::Busy { .. }) || screen.quiet_ms < 1000;
        let waited = self.p.internal.ended_at.map_or(f64::MAX, |t| self.since(t));
        if turning && waited < grace {
            return;
        }
        self.actions.push(Action::EndAgent);
        self.end(self.p.internal.ending.unwrap_or(Ending::Stopped));
    }

    /// Counts a recovery; false (and a `stall_limit` stop) when the limits are spent.
    fn spend_recovery(&mut self, what: &str) -> bool {
        let s = &self.p.status;
        let settings = &self.p.internal.settings;
        if s.recovery_count_step >= settings.recoveries_per_iteration
            || s.recovery_count_total >= settings.recoveries_total
        {
            self.journal(AutoEvent::Limit {
                what: what.to_owned(),
                recovery_count_step: Some(s.recovery_count_step),
                recovery_count_total: Some(s.recovery_count_total),
                restart_count: None,
            });
            self.request_stop(StopReason::StallLimit, None);
            return false;
        }
        self.p.status.recovery_count_step += 1;
        self.p.status.recovery_count_total += 1;
        true
    }

    fn stall_check(&mut self, screen: &Response, reading: &Reading, hash: u64, cpu_ticks: Option<u64>) {
        if hash != self.p.internal.last_hash || matches!(reading, Reading::Busy { .. } | Reading::Prompt(_)) {
            self.p.internal.last_hash = hash;
            self.p.status.stall_count = 0;
            if !matches!(reading, Reading::Prompt(_)) {
                self.p.internal.quota_retries = 0;
            }
            return;
        }
        self.p.status.stall_count += 1;
        let s = self.p.internal.settings.clone();
        if self.p.status.stall_count < s.stall_captures {
            return;
        }
        let cpu = cpu_ticks.unwrap_or(0);
        let working = cpu > self.p.internal.child_cpu;
        self.p.internal.child_cpu = cpu;
        if working {
            self.journal(AutoEvent::Verdict {
                reading: "unchanged screen".into(),
                decision: "working: a child process uses CPU".into(),
                class: None,
                pattern: None,
                cpu_ticks: Some(cpu),
            });
            self.p.status.stall_count = 0;
            return;
        }
        let window = s.heartbeat_seconds * f64::from(s.stall_captures);
        let signal_age = self.p.status.last_signal_at.map(|t| self.since(t));
        let launched = self.p.internal.launched_at.map_or(f64::MAX, |t| self.since(t));
        if signal_age.is_some_and(|a| a < window) || launched < s.startup_grace_seconds {
            // A signal came within the window, or the agent is still loading: not a stall.
            self.p.status.stall_count = 0;
            return;
        }
        let excerpt = tail(&screen.screen, 8);
        self.journal(AutoEvent::Stall { captures: self.p.status.stall_count, signal_age_s: signal_age, excerpt });
        self.p.status.stall_count = 0;
        if self.spend_recovery("stall") {
            let nudge = format!("{}\r", crate::protocol::nudge(&self.task_dir()));
            self.type_keys(&nudge, "stalled: nudge", "", screen.output_bytes, hash);
        }
    }

    /// A model call that shows nothing new for `hung_call_minutes` (its spinner aside, no
    /// child process working) is interrupted with Esc, a recovery; the stall rules take it
    /// from there.
    fn hung_call_check(&mut self, screen: &Response, reading: &Reading, hash: u64, cpu_ticks: Option<u64>) {
        let busy = matches!(reading, Reading::Busy { .. });
        let cpu = cpu_ticks.unwrap_or(0);
        if !busy || hash != self.p.internal.busy_hash || cpu > self.p.internal.busy_cpu {
            self.p.internal.busy_since = busy.then_some(self.now);
            self.p.internal.busy_hash = hash;
            self.p.internal.busy_cpu = cpu;
            return;
        }
        let Some(since) = self.p.internal.busy_since else {
            self.p.internal.busy_since = Some(self.now);
            return;
        };
        let busy_s = self.since(since);
        if busy_s < self.p.internal.settings.hung_call_minutes * 60.0 {
            return;
        }
        self.p.internal.busy_since = None;
        self.journal(AutoEvent::HungCall { busy_s: busy_s.round(), excerpt: tail(&screen.screen, 6) });
        if self.spend_recovery("hung model call") {
            self.type_keys("\x1b", "hung model call: interrupt", "", screen.output_bytes, hash);
        }
    }

    fn timeout_check(&mut self) {
        let s = &self.p.status;
        if s.elapsed_at(self.now) >= s.timeout_s && s.stop_reason.is_none() {
            self.request_stop(StopReason::Timeout, None);
        }
        let s = &self.p.status;
        if let (Some(limit), Some(began)) = (self.p.internal.settings.human_wait_minutes, s.human_wait_since)
            && self.since(began) >= limit * 60.0
            && s.stop_reason.is_none()
        {
            self.request_stop(StopReason::Timeout, Some("nobody answered within [auto] human_wait_minutes"));
        }
    }

    // ---- waits for the provider ------------------------------------------------------------

    fn enter_wait(&mut self, wait: WaitKind, pattern: &str, excerpt: &str, resets_at: Option<Timestamp>) {
        if wait == WaitKind::RateLimit {
            let since = *self.p.internal.provider_trouble_since.get_or_insert(self.now);
            let limit = self.p.internal.settings.provider_wait_minutes;
            if self.since(since) >= limit * 60.0 {
                // The provider has refused for longer than the night allows: the loop ends
                // blocked with the reason (the agent cannot reach its model to honour a stop).
                let reading =
                    format!("the provider refused requests for {limit} minutes ([auto] provider_wait_minutes)");
                self.journal(verdict(&reading, "end the loop: blocked"));
                self.p.status.needs_human = Some(format!("{reading}: {}", excerpt.trim()));
                self.actions.push(Action::EndAgent);
                self.end(Ending::Blocked);
                return;
            }
        }
        let s = &self.p.internal.settings;
        let backoff = (s.quota_jitter_seconds.max(0.1)
            * 2f64.powi(i32::try_from(self.p.internal.quota_retries).unwrap_or(16)))
        .min(RATE_BACKOFF_MAX_S);
        let fallback = match wait {
            WaitKind::Quota => s.quota_fallback_minutes * 60.0,
            WaitKind::RateLimit => backoff,
        };
        let secs = |x: f64| self.now.checked_add(SignedDuration::from_secs_f64(x)).unwrap_or(self.now);
        let until = match resets_at {
            // A reset just passed: the continue comes after the jitter.
            Some(t) if t <= self.now => self.now,
            Some(t) => t,
            None => secs(fallback),
        };
        self.p.internal.wait = wait;
        self.set_status(LoopStatus::QuotaWait);
        self.p.status.quota_wait_since = Some(self.now);
        self.p.status.quota_resets_at = Some(until);
        self.p.status.stall_count = 0;
        self.journal(AutoEvent::QuotaWait {
            pattern: pattern.to_owned(),
            excerpt: excerpt.to_owned(),
            resets_at: until,
            given: resets_at.is_some(),
            wait,
        });
    }

    fn in_wait(&mut self, screen: &Response, reading: &Reading, hash: u64) {
        let output_since = screen.output_bytes > self.p.internal.last_action_output;
        let retrying = matches!(reading, Reading::RateLimited { retry_in_s: Some(_), .. });
        // The agent went back to work by itself (a CLI that continues at the reset, or whose
        // own retry went through).
        let went_on = match self.p.internal.wait {
            WaitKind::Quota => matches!(reading, Reading::Busy { .. }),
            WaitKind::RateLimit => !matches!(reading, Reading::RateLimited { .. } | Reading::Quota { .. }),
        };
        if output_since && went_on {
            self.leave_wait("the agent resumed by itself");
            self.p.internal.quota_retries = 0;
            self.p.internal.provider_trouble_since = None;
            return;
        }
        let until = self.p.status.quota_resets_at.unwrap_or(self.now);
        let jitter = SignedDuration::from_secs_f64(self.p.internal.settings.quota_jitter_seconds);
        if self.now < until.checked_add(jitter).unwrap_or(until) {
            return;
        }
        if retrying {
            // The CLI is still retrying by itself: nothing is typed into a turn in progress.
            let again = self.now.checked_add(SignedDuration::from_secs(5)).unwrap_or(self.now);
            self.p.status.quota_resets_at = Some(again);
            return;
        }
        self.leave_wait("reset passed");
        self.p.internal.quota_retries += 1;
        self.type_keys("continue\r", "quota reset: one continue", &tail(&screen.screen, 4), screen.output_bytes, hash);
    }

    fn leave_wait(&mut self, why: &str) {
        self.p.status.end_quota_wait(self.now);
        self.p.status.quota_resets_at = None;
        self.set_status(LoopStatus::Running);
        self.journal(AutoEvent::QuotaResume { why: why.to_owned(), paused_s: self.p.status.quota_paused_s });
    }

    // ---- the end ---------------------------------------------------------------------------

    /// Seed 002's cleanup on every exit path, and the final status.
    fn end(&mut self, ending: Ending) {
        self.end_by(ending, None);
    }

    /// The same, saying who ended it when not the supervisor.
    fn end_by(&mut self, ending: Ending, by: Option<String>) {
        if self.status().is_final() {
            return;
        }
        self.p.internal.ending = Some(ending);
        let status = ending.status(self.p.status.stop_reason);
        self.p.status.end_quota_wait(self.now);
        self.p.status.end_human_wait(self.now);
        self.p.status.quota_resets_at = None;
        self.p.internal.pending_typed = None;
        self.p.internal.restart_after = None;
        self.actions.push(Action::Cleanup);
        self.p.status.status = status;
        self.journal(AutoEvent::Finished {
            status,
            stop_reason: self.p.status.stop_reason,
            iteration: self.p.status.iteration,
            by,
        });
    }
}

/// Rows of a prompt's context above it (what it is about, the work before it).
const PROMPT_CONTEXT_ROWS: usize = 12;

/// The masked hash of a prompt's block and the rows above it: the same for the same prompt
/// however the screen scrolled, different for an identical menu drawn after other work.
fn prompt_hash(screen: &str, prompt: &Prompt) -> u64 {
    let rows: Vec<&str> = screen.split('\n').collect();
    let end = prompt.rows.end.min(rows.len());
    let start = prompt.rows.start.saturating_sub(PROMPT_CONTEXT_ROWS).min(end);
    screen::masked_hash(&rows[start..end].join("\n"))
}

/// The masked hash of `prompt`'s own rows of `screen`.
fn block_hash(screen: &str, prompt: &Prompt) -> u64 {
    let rows: Vec<&str> = screen.split('\n').collect();
    let end = prompt.rows.end.min(rows.len());
    screen::masked_hash(&rows[prompt.rows.start.min(end)..end].join("\n"))
}

fn verdict(reading: &str, decision: &str) -> AutoEvent {
    AutoEvent::Verdict {
        reading: reading.into(),
        decision: decision.into(),
        class: None,
        pattern: None,
        cpu_ticks: None,
    }
}

/// The sentence that points the agent at the protocol on disk.
pub fn protocol_reminder(task_dir: &Path) -> String {
    format!(" The protocol is in {}/{} — re-read it if unsure.", task_dir.display(), module::PROTOCOL)
}

/// The last `n` non-empty lines.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
