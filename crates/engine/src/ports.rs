//! The ports the engine drives: the journal ([`Store`]), stage execution ([`Runner`]), time
//! ([`Clock`]) and whoever watches the run ([`Observer`]). Implementations live in other crates.

use std::path::PathBuf;
use std::time::Duration;

use loopwright_spec::{Agent, Mode, StageId};
use tokio::sync::mpsc::UnboundedSender;

pub use loopwright_journal::event::ProcessGroup;
pub use loopwright_journal::store::{RunSummary, Store, StoreError};

use crate::event::EventRecord;
use crate::ids::{RunId, TaskId};

/// Everything a runner needs to run one attempt of a stage.
#[derive(Debug, Clone)]
pub struct StageRequest {
    /// The run.
    pub run_id: RunId,
    /// The task.
    pub task_id: TaskId,
    /// The stage.
    pub stage: StageId,
    /// 1-based attempt.
    pub attempt: u32,
    /// Plan or agent.
    pub mode: Mode,
    /// The agent, or `None` for a shell stage.
    pub agent: Option<Agent>,
    /// Shell commands (shell stages).
    pub commands: Vec<String>,
    /// The full prompt.
    pub prompt: String,
    /// Time limit.
    pub timeout: Duration,
    /// Working directory.
    pub workspace: PathBuf,
    /// How its processes are confined.
    pub confine: Confinement,
    /// An attempt, or a question about a failure.
    pub purpose: Purpose,
}

/// Why a [`StageRequest`] is made.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Purpose {
    /// An attempt of the stage.
    #[default]
    Attempt,
    /// A question to the stage's agent about a failure nothing sure classified (SPEC §6): one
    /// answer, in plan mode, as JSON of this schema (an HTTP model gets it as its structured
    /// output; an agent CLI reads it in the prompt). Its prompt and output files are the
    /// attempt's with `-classify` after the attempt's number.
    Classify {
        /// The answer's JSON Schema.
        schema: serde_json::Value,
    },
}

impl StageRequest {
    /// The name of its prompt and output files: `STAGE-ATTEMPT`, or `STAGE-ATTEMPT-classify`.
    pub fn file_stem(&self) -> String {
        match self.purpose {
            Purpose::Attempt => format!("{}-{}", self.stage, self.attempt),
            Purpose::Classify { .. } => format!("{}-{}-classify", self.stage, self.attempt),
        }
    }
}

/// How an attempt's processes are confined (SPEC §12), as the engine decided from the stage,
/// its agent and the workspace's `sandbox` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// The stage's processes run in a sandbox where the runner can make one (false:
    /// `sandbox: off`).
    pub sandbox: bool,
    /// What a sandboxed process may reach.
    pub network: loopwright_spec::sandbox::Network,
    /// The layer the attempt writes into ([`Changes::make_layer`]), for agent-mode attempts
    /// and their checks; `None`: the workspace itself.
    pub layer: Option<String>,
    /// Environment variables a sandboxed process gets besides the usual ones (the stage's
    /// `env:`).
    pub env: Vec<String>,
}

impl Default for Confinement {
    /// Unsandboxed.
    fn default() -> Self {
        Self { sandbox: false, network: loopwright_spec::sandbox::Network::None, layer: None, env: Vec::new() }
    }
}

/// How a failed process's error output says that the sandbox refused it a connection (the
/// target and why follow): a failure saying it is not retried unchanged.
pub const SANDBOX_REFUSED: &str = "loopwright: the sandbox refused a connection to ";

/// What a runner tells the engine while a stage runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A process was started in its own process group.
    ProcessStarted {
        /// The group.
        group: ProcessGroup,
        /// What was run.
        command: String,
    },
    /// The provider answered that it is rate limited (429, 503, 529) and said, or let the
    /// runner guess, when to try again: the runner waits that long; the engine tells the
    /// limits so every run of that provider waits too.
    RateLimited {
        /// What the provider said (`https://api… answered 429`).
        detail: String,
        /// When to try again.
        until: jiff::Timestamp,
    },
    /// A sandboxed process asked for a host it may not reach.
    NetworkRefused {
        /// What it asked for (`host:port`).
        target: String,
        /// Why it was refused.
        why: String,
    },
}

/// Why the engine was asked to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A signal: the run is interrupted and `resume` continues it.
    Interrupt {
        /// The signal's name.
        signal: String,
    },
    /// A cancel request: the run is cancelled.
    Cancel {
        /// Who asked.
        by: String,
        /// Roll back completed stages.
        rollback: bool,
    },
}

/// Tells the engine to stop. `stopped` resolves when a stop is asked for; a request that came
/// while nobody was waiting must still be returned by the next call.
#[allow(async_fn_in_trait)]
pub trait Stopper {
    /// Waits for a stop request.
    async fn stopped(&self) -> Stop;
}

/// What providers allow (`[[limits]]`, SPEC §13), shared by every process of the journal: an
/// agent's attempt takes what it needs before it starts, or waits (the run `queued`, the reason
/// journaled), and gives it back when it ends.
#[allow(async_fn_in_trait)]
pub trait Limits {
    /// Takes what an attempt of `agent` needs (`holder` names the attempt), or says why it waits.
    async fn take(&self, agent: &Agent, holder: &str) -> Result<Allowed, StoreError>;
    /// The attempt still runs: keeps what it took.
    async fn renew(&self, holder: &str);
    /// The attempt ended, having used `tokens`: gives back what it took.
    async fn give(&self, holder: &str, tokens: u64);
    /// The provider itself rate-limited an attempt (its answer, `source`, named when it may be
    /// called again): pauses it for every run until `until`, capped by the limits' longest
    /// pause.
    async fn exhausted(&self, agent: &Agent, source: &str, until: jiff::Timestamp);
}

/// What [`Limits::take`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// The attempt may start.
    Yes,
    /// It waits: why, and until when at the latest when that is known.
    Wait {
        /// In words.
        reason: String,
        /// The latest it lasts, when known.
        until: Option<jiff::Timestamp>,
    },
}

/// No limits: every attempt starts at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLimits;

impl Limits for NoLimits {
    async fn take(&self, _: &Agent, _: &str) -> Result<Allowed, StoreError> {
        Ok(Allowed::Yes)
    }
    async fn renew(&self, _: &str) {}
    async fn give(&self, _: &str, _: u64) {}
    async fn exhausted(&self, _: &Agent, _: &str, _: jiff::Timestamp) {}
}

/// A stopper that never stops.
#[derive(Debug, Default, Clone, Copy)]
pub struct NeverStop;

impl Stopper for NeverStop {
    async fn stopped(&self) -> Stop {
        std::future::pending().await
    }
}

/// How an attempt's execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutcome {
    /// The (last) process exited with this code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
    /// It ran past the timeout; its process group was ended.
    TimedOut,
    /// It could not be started (program not found, runner unavailable).
    SpawnFailed(String),
}

impl ExecOutcome {
    /// What the classifier may know of a command that ended this way (SPEC §6): a program
    /// that could not be found is exit 127 as a shell says it, one that may not be run 126.
    pub fn context(&self, command: Option<&str>, check_type: Option<&str>) -> crate::patterns::Context {
        let mut context = crate::patterns::Context {
            command: command.map(str::to_owned),
            check_type: check_type.map(str::to_owned),
            ..Default::default()
        };
        match self {
            ExecOutcome::Exited(code) => context.exit_code = Some(*code),
            ExecOutcome::Signaled(n) => context.signal = crate::patterns::signal_of(*n).map(str::to_owned),
            ExecOutcome::TimedOut => context.timed_out = true,
            ExecOutcome::SpawnFailed(why) => {
                if why.contains("program not found") || why.contains("os error 2)") {
                    context.exit_code = Some(127);
                } else if why.contains("os error 13)") {
                    context.exit_code = Some(126);
                }
            }
        }
        context
    }
}

/// What one attempt's execution gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// How it ended.
    pub outcome: ExecOutcome,
    /// Standard output (the stage's output), capped.
    pub stdout: String,
    /// Standard error, capped.
    pub stderr: String,
    /// Wall time.
    pub duration: Duration,
    /// Tokens the agent reported using (presets with machine-readable output, HTTP runners).
    pub usage: Option<crate::event::Usage>,
}

impl Execution {
    /// The end of standard output (what a failing tool printed last), at most 8 KiB.
    pub fn stdout_tail(&self) -> &str {
        let s = self.stdout.as_str();
        let mut start = s.len().saturating_sub(8192);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        &s[start..]
    }
}

/// Runs stages.
#[allow(async_fn_in_trait)]
pub trait Runner {
    /// Runs one attempt; reports started processes through `notices` as soon as they exist.
    async fn run(&self, request: &StageRequest, notices: UnboundedSender<Notice>) -> Execution;
    /// Ends process groups left by an attempt that was interrupted or stopped: TERM, a grace
    /// period, then KILL. A group whose leader's start time does not match is left alone.
    fn end_leftovers(&self, process_groups: &[ProcessGroup]);
    /// Ends processes of a stage of a run that the journal may not name (started just before a
    /// crash, before their group was journaled), found by their `LOOPWRIGHT_*` environment.
    fn end_strays(&self, _run: &RunId, _stage: &StageId) {}
    /// Runs a closed-loop check or fixer command through `sh -c` in the workspace, in its own
    /// process group (marked with the run and stage, so `end_strays` finds it after a crash),
    /// ended at the timeout; stdout and stderr are captured.
    async fn command(&self, request: &CommandRequest<'_>) -> Execution;
    /// Why stages that ask for a sandbox run without one (`sandbox = "auto"` on a machine that
    /// cannot make one), if they do.
    fn unsandboxed(&self) -> Option<String> {
        None
    }
}

/// A check or fixer command of the closed loop.
#[derive(Debug, Clone, Copy)]
pub struct CommandRequest<'a> {
    /// The run.
    pub run: &'a RunId,
    /// The stage.
    pub stage: &'a StageId,
    /// The shell command.
    pub command: &'a str,
    /// Working directory.
    pub workspace: &'a std::path::Path,
    /// Time limit.
    pub timeout: Duration,
    /// How it is confined: like its stage, over the same layer, with no network unless the
    /// stage names hosts.
    pub confine: &'a Confinement,
}

/// The workspace's files as stages change them: snapshots before attempts (to undo a stage's
/// changes), commits after agent-mode stages, and the undoing of both.
pub trait Changes {
    /// False when changes are not tracked at all (no snapshots are attempted).
    fn enabled(&self) -> bool {
        true
    }
    /// Records the workspace under `name`, as much of it as `watch` says; returns the name the
    /// snapshot has (the previous snapshot's when nothing changed since) and how many files it
    /// holds.
    fn snapshot(&self, run: &RunId, name: &str, watch: Watch) -> Result<(String, usize), String>;
    /// Puts the files back as snapshot `name` found them.
    fn restore(&self, run: &RunId, name: &str) -> Result<crate::event::RestoreCounts, String>;
    /// Commits what changed since snapshot `name` (git workspaces) with the trailers
    /// `Loopwright-Task` and `Loopwright-Stage`; returns the commit and its file count.
    fn commit(
        &self,
        run: &RunId,
        name: &str,
        task: &TaskId,
        stage: &StageId,
    ) -> Result<Option<(String, usize)>, String>;
    /// Reverts the commits of a stage of a task, newest first; returns how many. Commits a
    /// revert made before (a crash after its commit, before its journal entry) are not
    /// reverted again: the count is the same and nothing new is committed.
    fn revert(&self, task: &TaskId, stage: &StageId) -> Result<usize, String>;
    /// The repository's commit of a stage of this run that a crash left unjournaled: the
    /// current commit, when its trailers name the run and the stage, and how many files it
    /// changed.
    fn committed(&self, _run: &RunId, _stage: &StageId) -> Option<(String, usize)> {
        None
    }
    /// Repairs what a crash left in the repository (a stale `index.lock` no live process
    /// holds) before a commit or a revert; says what was done.
    fn repair(&self) -> Vec<String> {
        Vec::new()
    }
    /// The files that differ now from snapshot `name`.
    fn changed(&self, _run: &RunId, _name: &str) -> Result<loopwright_journal::closed_loop::FileChanges, String> {
        Ok(loopwright_journal::closed_loop::FileChanges::default())
    }
    /// A workspace file's text (path relative to the workspace), if it is one.
    fn read(&self, _path: &str) -> Option<String> {
        None
    }
    /// The workspace's files (relative paths, sorted), without `.git` and loopwright's state.
    fn files(&self) -> Vec<String> {
        Vec::new()
    }
    /// True when a workspace path leads outside the workspace (a symlink out of it).
    fn escapes(&self, _path: &str) -> bool {
        false
    }
    /// True when a program is on PATH.
    fn has_program(&self, _name: &str) -> bool {
        false
    }
    /// True when stages run in sandboxes that keep the workspace apart (SPEC §12): plan mode
    /// mounted read-only (nothing to snapshot), agent-mode attempts writing into layers.
    fn confined(&self) -> bool {
        false
    }
    /// Makes an empty layer `name` for an attempt of `run` (an old one of that name is
    /// dropped first); says how it is mounted.
    fn make_layer(&self, _run: &RunId, _name: &str) -> Result<String, String> {
        Err("layers are not made here".into())
    }
    /// Discards layer `name` (undoing a copy into the workspace that a crash cut short);
    /// returns how many files and folders it held.
    fn drop_layer(&self, _run: &RunId, _name: &str) -> Result<usize, String> {
        Ok(0)
    }
    /// The files layer `name` changes.
    fn layer_changed(&self, _run: &RunId, _name: &str) -> Result<loopwright_journal::closed_loop::FileChanges, String> {
        Ok(loopwright_journal::closed_loop::FileChanges::default())
    }
    /// The run has ended: what was kept for its attempts (layers, homes) can go.
    fn ended(&self, _run: &RunId) {}
    /// The working tree these changes are tracked in, when it is fixed here (a worker works
    /// in its own worktree, wherever the run was started): stages run there.
    fn root(&self) -> Option<&std::path::Path> {
        None
    }
    /// Copies layer `name` into the workspace (through the path guard), commits what it
    /// changed like [`Changes::commit`], and removes the layer.
    fn commit_layer(
        &self,
        _run: &RunId,
        _name: &str,
        _task: &TaskId,
        _stage: &StageId,
    ) -> Result<Option<(String, usize)>, String> {
        Err("layers are not made here".into())
    }
}

/// How much of the workspace a snapshot watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The workspace's files: what an agent-mode stage changes is committed, or undone.
    Files,
    /// Everything a plan-mode (read-only) stage must leave alone: the files, and git's and
    /// loopwright's own (config, hooks, refs, the index; pipelines, agents), and the build and
    /// dependency folders by fingerprint. A plan-mode stage that cannot be watched so does not
    /// run.
    ReadOnly,
}

/// No snapshots and no commits (tests, and workspaces where changes are not tracked).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoChanges;

impl Changes for NoChanges {
    fn enabled(&self) -> bool {
        false
    }
    fn snapshot(&self, _: &RunId, _: &str, _: Watch) -> Result<(String, usize), String> {
        Err("snapshots are off".into())
    }
    fn restore(&self, _: &RunId, _: &str) -> Result<crate::event::RestoreCounts, String> {
        Err("snapshots are off".into())
    }
    fn commit(&self, _: &RunId, _: &str, _: &TaskId, _: &StageId) -> Result<Option<(String, usize)>, String> {
        Ok(None)
    }
    fn revert(&self, _: &TaskId, _: &StageId) -> Result<usize, String> {
        Ok(0)
    }
}

/// Time, so tests can control it.
#[allow(async_fn_in_trait)]
pub trait Clock {
    /// Now.
    fn now(&self) -> jiff::Timestamp;
    /// Sleeps until `t`.
    async fn sleep_until(&self, t: jiff::Timestamp);
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    async fn sleep_until(&self, t: jiff::Timestamp) {
        let wait = t.duration_since(jiff::Timestamp::now());
        if let Ok(d) = Duration::try_from(wait) {
            tokio::time::sleep(d).await;
        }
    }
}

/// Watches a run: called after each event is durably recorded.
pub trait Observer {
    /// An event was recorded; `state` includes it.
    fn on_event(&mut self, record: &EventRecord, state: &crate::state::RunState, pipeline: &loopwright_spec::Pipeline);
}

/// Borrowing any observer as `&mut dyn Observer`.
pub trait NoObserverExt {
    /// The observer as a trait object.
    fn as_dyn(&mut self) -> &mut dyn Observer;
}

impl<T: Observer> NoObserverExt for T {
    fn as_dyn(&mut self) -> &mut dyn Observer {
        self
    }
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&mut self, _: &EventRecord, _: &crate::state::RunState, _: &loopwright_spec::Pipeline) {}
}
