//! The supervisor: the driver of one loop. It gathers what it observes — the holder's screen
//! when it changes and settles and at each heartbeat, `.auto-signal` and `.auto-stop` when they
//! change (a file watcher), the agent's exit, the checks' results — hands each to
//! [`decide`](crate::decide::decide), and performs the actions it returns: typing, starting
//! the agent, running checks, journaling, saving. Every rule lives in `decide`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use loopwright_spec::Agent;
use loopwright_store::SqliteStore;
use tokio::sync::{mpsc, watch};

use crate::decide::{self, Action, Clock, FirstMessage, Observation, Rules, SETTLE_MS, SystemClock};
pub use crate::decide::{SIGNAL_ENTRIES_PER_SECOND, SIGNAL_TEXT_KEPT, SignalJournal, tail};
use crate::event::AutoEvent;
pub use crate::event::AutoEvent as Event;
use crate::holder::{self, Client, Request, Response};
use crate::module::{self, Index, ModuleStatus};
use crate::policy::Policy;
use crate::signal;
pub use crate::state::{AutoStatus, CheckRun, Ending, Internal, LoopStatus, Persisted, is_final};
use crate::{Settings, protocol};

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
    clock: Arc<dyn Clock>,
    zone: TimeZone,
    /// The state as last saved: unchanged state is not written again.
    saved: Option<Persisted>,
}

impl Supervisor {
    /// A supervisor for a claimed row (a new loop or one to take over after a crash).
    pub fn new(cx: Context, p: Persisted) -> Result<Self, String> {
        let settings = p.internal.settings.clone();
        let policy = settings.policy()?;
        let task_dir = PathBuf::from(&p.status.task_dir);
        let holder = Client::new(&cx.session_dir);
        Ok(Self {
            cx,
            p,
            policy,
            holder,
            task_dir,
            settings,
            clock: Arc::new(SystemClock),
            zone: TimeZone::system(),
            saved: None,
        })
    }

    /// The status object now.
    pub fn status(&self) -> &AutoStatus {
        &self.p.status
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn save(&mut self) {
        // What is not stored (the signal counts) or follows from the time (elapsed) aside.
        let mut probe = self.p.clone();
        probe.status.elapsed_s = 0.0;
        probe.internal.signals = SignalJournal::default();
        if self.saved.as_ref() == Some(&probe) {
            return;
        }
        self.saved = Some(probe);
        self.p.status.elapsed_s = self.p.status.elapsed_at(self.now());
        if let Err(e) = self.cx.store.auto_save(&self.p.to_row()) {
            eprintln!("loopwright auto: cannot save the state of {}: {e}", self.p.status.session_name);
        }
    }

    fn journal(&self, event: &AutoEvent) {
        let s = &self.p.status;
        let (kind, data) = event.to_entry();
        if let Err(e) = self.cx.store.auto_log(&s.loop_id, &s.session_name, &self.now().to_string(), &kind, &data) {
            eprintln!("loopwright auto: cannot journal {kind} of {}: {e}", s.session_name);
        }
    }

    /// Decides on `obs` and performs what was decided, and what that leads to, then saves.
    async fn observe(&mut self, obs: Observation) {
        let mut queue = std::collections::VecDeque::from([obs]);
        while let Some(obs) = queue.pop_front() {
            let rules = Rules { policy: &self.policy, root: &self.cx.root, zone: &self.zone };
            let (next, actions) = decide::decide(&self.p, obs, &rules, self.now());
            self.p = next;
            for action in actions {
                if let Some(follow) = self.perform(action).await {
                    queue.push_back(follow);
                }
            }
        }
        self.save();
    }

    /// Performs one action; what it leads to is observed next.
    async fn perform(&mut self, action: Action) -> Option<Observation> {
        match action {
            Action::Journal(e) => self.journal(&e),
            Action::Save => self.save(),
            Action::Type { text, why } => {
                // Saved before it is sent: a supervisor that dies now does not type it again.
                self.save();
                // Text that ends with Enter is typed, then submitted with an Enter of its own; a
                // lone key (`1`, `y`, Enter) is sent as it is.
                let request = match text.strip_suffix('\r') {
                    Some(body) => Request::keys(body, true),
                    None => Request::keys(&text, false),
                };
                if let Err(e) = self.ask(&request) {
                    return Some(Observation::TypingFailed { why, error: e.to_string(), text });
                }
            }
            Action::Launch { message, resume } => {
                self.save();
                return Some(self.launch(message, resume.as_deref()));
            }
            Action::Verify => return Some(self.verify().await),
            Action::SendBack { failed } => self.send_back(&failed),
            Action::WriteStop(reason) => {
                if let Err(e) = signal::request_stop(&self.task_dir, reason, self.now(), "supervisor") {
                    self.journal(&AutoEvent::Error { doing: Some("writing .auto-stop".into()), error: e.to_string() });
                }
            }
            Action::EndAgent => self.end_agent(),
            Action::QuitHolder => {
                let _ = self.ask(&Request::Quit);
            }
            Action::Cleanup => {
                signal::remove(&self.task_dir, module::SIGNAL);
                signal::remove(&self.task_dir, module::STOP);
            }
        }
        None
    }

    /// Starts the agent (fresh, or resuming `resume`), the protocol written beside the module.
    fn launch(&mut self, message: FirstMessage, resume: Option<&str>) -> Observation {
        let protocol_file = self.task_dir.join(module::PROTOCOL);
        if let Err(e) = module::write(&protocol_file, &protocol::render(&self.task_dir)) {
            self.journal(&AutoEvent::Error {
                doing: Some(format!("writing {}", module::PROTOCOL)),
                error: e.to_string(),
            });
        }
        let text = match message {
            FirstMessage::Protocol => protocol::first_message(&self.task_dir),
            FirstMessage::Resume => protocol::resume_message(&self.task_dir),
        };
        let new_id = new_uuid();
        let inv = loopwright_runners::presets::interactive(&self.cx.agent, &text, resume, &new_id);
        let spawn = holder::Spawn {
            argv: inv.argv.clone(),
            env: inv.env.clone(),
            cwd: self.cx.root.clone(),
            rows: self.settings.rows,
            cols: self.settings.cols,
            linger_seconds: (self.settings.heartbeat_seconds * 3.0).clamp(2.0, 120.0),
        };
        match holder::start(&self.cx.exe, &self.cx.session_dir, &spawn) {
            Err(e) => Observation::LaunchFailed(e),
            Ok(client) => {
                self.holder = client;
                let pids: serde_json::Value = std::fs::read(self.cx.session_dir.join(holder::PIDS))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
                let pid = pids["agent"].as_u64().and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
                Observation::Launched {
                    argv: shorten_argv(&inv.argv),
                    resume: resume.map(str::to_owned),
                    session_id: inv.session_id,
                    typed: inv.typed,
                    pid,
                }
            }
        }
    }

    /// Starts a new loop: the agent with the protocol as its first message.
    /// What a past loop left in the module (`.auto-stop`, `.auto-signal`) was removed when
    /// this one was claimed.
    pub async fn start(&mut self) -> Result<(), String> {
        self.p.internal.supervisor_pid = std::process::id();
        self.p.internal.supervisor_start = loopwright_runners::process::start_time(std::process::id());
        let declared = module::read_index(&self.task_dir).map(|(i, _)| i.checks).unwrap_or_default();
        self.p.internal.checks = if declared.is_empty() { default_checks(&self.cx.root) } else { declared };
        self.p.internal.start_commit = head_commit(&self.cx.root);
        self.journal(&AutoEvent::Started {
            task_dir: self.p.status.task_dir.clone(),
            agent: self.p.status.agent.clone(),
            settings: serde_json::to_value(&self.settings).unwrap_or_default(),
            checks: self.p.internal.checks.clone(),
        });
        self.p.internal.launched_at = Some(self.now());
        self.save();
        let launched = self.launch(FirstMessage::Protocol, None);
        let failed = match &launched {
            Observation::LaunchFailed(e) => Some(e.clone()),
            _ => None,
        };
        self.observe(launched).await;
        failed.map_or(Ok(()), Err)
    }

    /// Takes over a loop whose supervisor died: a stale `.auto-stop` is removed unless this
    /// loop asked for it, the stall baseline reset, and the agent found again (or restarted
    /// with its session id if it exited meanwhile — a machine's reboot: the next look sees
    /// the exit, counted as a restart).
    pub fn reattach(&mut self) {
        self.p.internal.supervisor_pid = std::process::id();
        self.p.internal.supervisor_start = loopwright_runners::process::start_time(std::process::id());
        if self.p.status.stop_reason.is_none() {
            signal::remove(&self.task_dir, module::STOP);
        }
        self.p.status.stall_count = 0;
        self.p.internal.last_hash = 0;
        let alive = self.ask(&Request::Screen).map(|r| r.exit.is_none()).unwrap_or(false);
        self.journal(&AutoEvent::Reattached { agent_alive: alive, pid: self.p.internal.agent_pid });
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
            self.journal(&AutoEvent::WatchUnavailable {
                error: e.clone(),
                fallback: "reading the files every heartbeat".into(),
            });
        }
        let (settled_tx, mut settled) = mpsc::unbounded_channel::<()>();
        watch_screen(self.cx.session_dir.clone(), settled_tx);
        let heartbeat = Duration::from_secs_f64(self.settings.heartbeat_seconds.max(0.01));
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A signal written while no one watched (a restart of the supervisor) is read now.
        self.on_files().await;
        loop {
            if self.p.status.status.is_final() {
                break;
            }
            let wake = decide::wake_at(&self.p, self.now()).map_or(Duration::from_secs(3600), |t| {
                Duration::from_secs_f64(t.duration_since(self.now()).as_secs_f64().clamp(0.01, 3600.0))
            });
            tokio::select! {
                _ = tick.tick() => {
                    if polling {
                        self.on_files().await;
                    }
                    self.look(true).await;
                }
                Some(()) = settled.recv() => {
                    while settled.try_recv().is_ok() {}
                    self.look(false).await;
                }
                Some(()) = files.recv() => {
                    while files.try_recv().is_ok() {}
                    self.on_files().await;
                }
                () = tokio::time::sleep(wake) => self.look(false).await,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        self.observe(Observation::StopAsked).await;
                        // Keep watching until the agent honours it or the grace ends.
                        stop = watch::channel(false).1;
                    }
                }
            }
            if self.p.status.status == LoopStatus::NeedsHuman && self.settings.exit_on_needs_human {
                break;
            }
        }
        self.p.status.clone()
    }

    /// `.auto-signal` or `.auto-stop` changed.
    async fn on_files(&mut self) {
        let signal = read_capped(&self.task_dir.join(module::SIGNAL), SIGNAL_BYTES);
        let stop = read_capped(&self.task_dir.join(module::STOP), SIGNAL_BYTES);
        self.observe(Observation::Files { signal, stop }).await;
    }

    /// A look at the agent's terminal (`heartbeat`: the timer's).
    async fn look(&mut self, heartbeat: bool) {
        if self.p.status.status.is_final() {
            return;
        }
        if self.p.internal.restart_after.is_some() {
            self.observe(Observation::Tick).await;
            return;
        }
        let screen = match self.ask(&Request::Screen) {
            Ok(r) => r,
            Err(_) => match self.holder.recorded_exit() {
                Some(exit) => Response { exit: Some(exit), ..Response::default() },
                None => {
                    // The holder and the agent are gone without a word: a machine that
                    // rebooted, a `kill -9` of the whole group.
                    Response {
                        exit: Some(holder::Exit {
                            code: u32::MAX,
                            signal: Some("lost".into()),
                            screen: String::new(),
                            at: self.now().to_string(),
                        }),
                        ..Response::default()
                    }
                }
            },
        };
        if let Some(exit) = screen.exit {
            // The agent may have finished its loop and cleaned up before the signal was read.
            if self.p.internal.ending.is_none() {
                self.on_files().await;
            }
            let module = module::read_index(&self.task_dir).ok().map(|(i, _)| i.status);
            self.observe(Observation::Exited { exit, module }).await;
            return;
        }
        if heartbeat && !self.p.status.checks_to_approve.is_empty() {
            let approved = self.approved_checks();
            self.observe(Observation::Approved(approved)).await;
        }
        let cpu_ticks =
            heartbeat.then(|| loopwright_runners::process::descendants_cpu_ticks(self.p.internal.agent_pid));
        self.observe(Observation::Look { screen, heartbeat, cpu_ticks }).await;
    }

    /// Runs the module's checks: the fixed ones and the added ones a person approved, stopping
    /// at the first failure.
    async fn verify(&mut self) -> Observation {
        let declared = module::read_index(&self.task_dir).map(|(i, _)| i.checks).unwrap_or_default();
        let approved = self.approved_checks();
        let (checks, waiting) = decide::plan_checks(&self.p.internal.checks, &approved, &declared);
        let mut runs = Vec::new();
        for command in &checks {
            let run = run_check(command, &self.cx.root).await;
            let failed = !run.passed;
            runs.push(run);
            if failed {
                break;
            }
        }
        Observation::Verified { runs, waiting }
    }

    /// A failed check sends the module back: its output at the end of `.summary.md`, the
    /// module's status `executing`.
    fn send_back(&self, failed: &CheckRun) {
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
    }

    /// The checks a person approved for this loop (`checks_approved` in its journal).
    fn approved_checks(&self) -> Vec<String> {
        let entries = self.cx.store.auto_log_since(&self.p.status.loop_id, 0).unwrap_or_default();
        entries
            .iter()
            .filter_map(|e| match AutoEvent::from_entry(&e.kind, &e.data) {
                Some(AutoEvent::ChecksApproved(a)) => Some(a.checks),
                _ => None,
            })
            .flatten()
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
}

/// Follows the holder of the session directory `dir` on a thread of its own: each time the
/// agent's output changes and then pauses for [`SETTLE_MS`], or the agent exits, `tx` is told.
/// It follows restarted holders (a new process: its offsets start again) and ends when the
/// supervisor is gone.
fn watch_screen(dir: PathBuf, tx: mpsc::UnboundedSender<()>) {
    std::thread::spawn(move || {
        let client = Client::new(&dir);
        let (mut pid, mut after) = (0u32, 0u64);
        while !tx.is_closed() {
            let request = Request::Settled { after, quiet_ms: SETTLE_MS, timeout_ms: 2000 };
            match client.request(&request) {
                Ok(r) => {
                    if r.pid != pid {
                        (pid, after) = (r.pid, 0);
                    }
                    let look;
                    (after, look) = watch_step(after, &r);
                    if look {
                        let _ = tx.send(());
                    }
                    if r.exit.is_some() {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    });
}

/// After the holder answered a `Settled` wait from `after` with `r`: where the next wait starts,
/// and whether the supervisor looks now. Only output that has settled moves the start on: a
/// wait that ended on its timeout while the agent still drew (a spinner, then the prompt in the
/// same breath) is asked again from the same place, so the quiet that follows is seen at once —
/// not at the next heartbeat.
fn watch_step(after: u64, r: &Response) -> (u64, bool) {
    if r.exit.is_some() {
        return (after, true);
    }
    if r.output_bytes <= after {
        return (after, false);
    }
    (if r.quiet_ms >= SETTLE_MS { r.output_bytes } else { after }, true)
}

/// The workspace's commit now (the report's diff starts there).
fn head_commit(root: &Path) -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
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
        inherit: true,
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

    fn sig(step: &str, at: &str) -> signal::Signal {
        signal::Signal {
            step: signal::Step::parse(step).expect("a step"),
            result: signal::Outcome::Said(signal::Word::Done),
            next: signal::Next::Check,
            checkpoint: signal::Checkpoint::None,
            iteration: Some(1),
            timestamp: at.into(),
        }
    }

    #[test]
    fn the_screen_watcher_moves_on_only_past_output_that_settled() {
        let answer = |output_bytes: u64, quiet_ms: u64| Response { output_bytes, quiet_ms, ..Response::default() };
        let exit = holder::Exit { code: 0, signal: None, screen: String::new(), at: String::new() };
        let exited = Response { exit: Some(exit), ..answer(500, 0) };
        let cases = [
            // (from, the holder's answer, where the next wait starts, a look now)
            (100, answer(500, 300), (500, true)),
            // The wait's 2 s ran out mid-drawing (Claude Code's spinner, then its prompt): a
            // look, and the next wait from the same place returns once the prompt is quiet.
            (100, answer(500, 28), (100, true)),
            (100, answer(100, 2000), (100, false)),
            (100, exited, (100, true)),
        ];
        for (from, r, expected) in cases {
            assert_eq!(watch_step(from, &r), expected, "{r:?}");
        }
    }

    #[test]
    fn signals_are_journaled_when_new_at_most_a_few_a_second_and_the_rest_counted() {
        let mut j = SignalJournal::default();
        let t0: Timestamp = "2026-11-25T07:00:00Z".parse().expect("time");
        let admitted: Vec<Option<u64>> = (0..6).map(|_| j.admit(t0, false)).collect();
        assert_eq!(admitted, [Some(0), Some(0), Some(0), Some(0), None, None]);
        // An important one goes through anyway, and says nothing of the two left out...
        assert_eq!(j.admit(t0, true), Some(2));
        // ...which the next second's first entry does not count again.
        assert_eq!(j.admit(t0 + jiff::SignedDuration::from_secs(1), false), Some(0));
        assert!(!j.repeats(&sig("exec", "t1")));
        assert!(j.repeats(&sig("exec", "t2")), "the same signal at another time");
        assert!(!j.repeats(&sig("check", "t3")));
    }
}
