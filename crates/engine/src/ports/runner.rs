//! Running a stage: what the engine asks of a runner, and what comes back.

use std::path::PathBuf;
use std::time::Duration;

use loopwright_spec::{Agent, Mode, StageId};
use tokio::sync::mpsc::UnboundedSender;

use super::ProcessGroup;
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
    /// The W3C `traceparent` of the attempt's agent invocation, given to the agent's process
    /// as `TRACEPARENT` (an agent exporting its own telemetry joins the attempt's span).
    pub traceparent: Option<String>,
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
    /// One of the candidates of an attempt (best of N): its prompt and output files are the
    /// attempt's with `-cN` after the attempt's number.
    Candidate {
        /// Which candidate (0-based).
        index: u32,
    },
    /// The judge of a round of candidates (`select: {judge: STAGE}`): one answer naming the
    /// winner, in plan mode, as JSON of this schema (like [`Purpose::Classify`]). Its prompt and
    /// output files are the attempt's with `-judge` after the attempt's number.
    Judge {
        /// The answer's JSON Schema.
        schema: serde_json::Value,
    },
}

impl StageRequest {
    /// The name of its prompt and output files: `STAGE-ATTEMPT`, `STAGE-ATTEMPT-classify`,
    /// `STAGE-ATTEMPT-cN` or `STAGE-ATTEMPT-judge`.
    pub fn file_stem(&self) -> String {
        match self.purpose {
            Purpose::Attempt => format!("{}-{}", self.stage, self.attempt),
            Purpose::Classify { .. } => format!("{}-{}-classify", self.stage, self.attempt),
            Purpose::Candidate { index } => format!("{}-{}-c{index}", self.stage, self.attempt),
            Purpose::Judge { .. } => format!("{}-{}-judge", self.stage, self.attempt),
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
    /// The layer the attempt writes into ([`super::Layers::make_layer`]), for agent-mode attempts
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
    /// Why the agent cannot fix this failure, when its runner knows it is such a failure (its
    /// provider's answer, its CLI's own words, its program not found): another agent may.
    pub unfixable: Option<crate::event::Unfixable>,
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
