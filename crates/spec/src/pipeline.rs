//! The validated pipeline: what the engine runs. Built only by [`crate::compile`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
pub use crate::agent::Mode;
use crate::condition::Condition;
use crate::diag::SourceFile;

/// A stage id: unique within its pipeline, `^[a-z][a-z0-9_]*$`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StageId(String);

impl StageId {
    /// A stage id, if `id` matches `^[a-z][a-z0-9_]*$`.
    pub fn parse(id: &str) -> Option<Self> {
        let mut chars = id.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        (first_ok && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .then(|| Self(id.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl std::borrow::Borrow<str> for StageId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// Unique pipeline identifier.
    pub name: String,
    /// What the pipeline does.
    pub description: String,
    /// Schema version.
    pub version: f64,
    /// Cap on retries across the whole run.
    pub max_retries: u32,
    /// Declared variables and their defaults.
    pub vars: BTreeMap<String, serde_json::Value>,
    /// Names of inputs the caller provides (always includes `task_description` and `context`).
    pub initial_inputs: Vec<String>,
    /// The stages, in order.
    pub stages: Vec<Stage>,
    /// Limits of a whole run.
    pub budget: Budget,
    /// The agents the stages name, by name.
    pub agents: BTreeMap<String, Agent>,
    /// The file the pipeline was read from.
    pub source: SourceFile,
    /// `repo:`, the repository a worker clones for it.
    pub repo: Option<String>,
    /// `runs_on:`, the labels a worker must have to run it.
    pub runs_on: BTreeMap<String, String>,
    /// `max_parallel:`, how many stages of a run may run at once.
    pub max_parallel: usize,
    /// Position of each stage by id.
    index: std::collections::HashMap<String, usize>,
    /// The positions of the stages each stage needs, directly or through others.
    ancestors: Vec<std::collections::BTreeSet<usize>>,
}

/// How many stages of a run may run at once when the pipeline does not say.
pub const DEFAULT_MAX_PARALLEL: usize = 4;

/// True when `text` may be a label's name or value (`runs_on:`, a worker's `--labels`): letters,
/// digits, `-`, `_`, `.` or `/`, at most 64.
pub fn is_label(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

/// Where a pipeline's stages run: each stage's sandbox mode, resolved once from the
/// workspace's `sandbox` and the stage's own `sandbox:` (the stage's word wins). The app
/// resolves it when it assembles a run; the runner's sandboxes and the engine's confinement
/// both read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    /// The workspace's mode, for the stages that say nothing.
    workspace: crate::sandbox::SandboxMode,
    /// The stages that say, and what.
    stages: BTreeMap<StageId, crate::sandbox::SandboxMode>,
}

/// No sandbox but where a stage asks for one (tests, and engines built without a workspace).
impl Default for SandboxPlan {
    fn default() -> Self {
        Self { workspace: crate::sandbox::SandboxMode::Off, stages: BTreeMap::new() }
    }
}

impl SandboxPlan {
    /// The plan of `pipeline` in a workspace whose `sandbox` is `workspace`.
    pub fn resolve(pipeline: &Pipeline, workspace: crate::sandbox::SandboxMode) -> Self {
        let stages = pipeline.stages.iter().filter_map(|s| Some((s.id.clone(), s.sandbox?))).collect();
        Self { workspace, stages }
    }

    /// A stage's mode.
    pub fn mode(&self, stage: &StageId) -> crate::sandbox::SandboxMode {
        self.stages.get(stage).copied().unwrap_or(self.workspace)
    }

    /// True when no stage of `pipeline` runs in a sandbox.
    pub fn all_off(&self, pipeline: &Pipeline) -> bool {
        pipeline.stages.iter().all(|s| self.mode(&s.id) == crate::sandbox::SandboxMode::Off)
    }

    /// Who requires a sandbox, if anyone does: the first stage of `pipeline` that says
    /// `required` (`Some(stage)`), else the workspace (`Some(None)`) when a stage takes its
    /// `required`.
    pub fn required_by<'p>(&self, pipeline: &'p Pipeline) -> Option<Option<&'p StageId>> {
        use crate::sandbox::SandboxMode::Required;
        pipeline
            .stages
            .iter()
            .find(|s| self.mode(&s.id) == Required)
            .map(|s| self.stages.contains_key(&s.id).then_some(&s.id))
    }
}

impl Pipeline {
    /// The index of a stage by id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// A stage by id.
    pub fn stage(&self, id: &str) -> Option<&Stage> {
        self.index_of(id).map(|i| &self.stages[i])
    }

    /// A pipeline from its parts (the stage index is built here).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: String,
        description: String,
        version: f64,
        max_retries: u32,
        vars: BTreeMap<String, serde_json::Value>,
        initial_inputs: Vec<String>,
        stages: Vec<Stage>,
        agents: BTreeMap<String, Agent>,
        source: SourceFile,
    ) -> Self {
        let index: std::collections::HashMap<String, usize> =
            stages.iter().enumerate().map(|(i, s)| (s.id.to_string(), i)).collect();
        let ancestors = ancestors(&stages, &index);
        Self {
            name,
            description,
            version,
            max_retries,
            vars,
            initial_inputs,
            stages,
            budget: Budget::default(),
            agents,
            source,
            repo: None,
            runs_on: BTreeMap::new(),
            max_parallel: DEFAULT_MAX_PARALLEL,
            index,
            ancestors,
        }
    }

    /// True when the stage at `index` needs the stage at `other`, directly or through others.
    pub fn depends_on(&self, index: usize, other: usize) -> bool {
        self.ancestors.get(index).is_some_and(|a| a.contains(&other))
    }

    /// True when some stage says what it needs (`needs:`): the stages form a graph rather than
    /// a line.
    pub fn is_graph(&self) -> bool {
        self.stages.iter().enumerate().any(|(i, s)| match i {
            0 => !s.needs.is_empty(),
            _ => s.needs.len() != 1 || s.needs[0] != self.stages[i - 1].id,
        })
    }

    /// The agent a stage runs with, unless it is a shell stage.
    pub fn agent_of(&self, stage: &Stage) -> Option<&Agent> {
        match &stage.agent {
            AgentRef::Shell => None,
            AgentRef::Named(name) => self.agents.get(name),
        }
    }

    /// The agent a stage's attempts run with in `state`: the agent it fell back to, else its
    /// own. `fell_back_to` is the stage state's `agent`.
    pub fn agent_now(&self, stage: &Stage, fell_back_to: Option<&str>) -> Option<&Agent> {
        match fell_back_to {
            Some(name) => self.agents.get(name).or_else(|| self.agent_of(stage)),
            None => self.agent_of(stage),
        }
    }

    /// The agent after `current` (the stage's own when `None`) in the stage's fallback order.
    pub fn next_fallback<'p>(&'p self, stage: &'p Stage, current: Option<&str>) -> Option<&'p str> {
        let position = match current {
            None => 0,
            Some(name) => stage.fallback.iter().position(|f| f == name)? + 1,
        };
        stage.fallback.get(position).map(String::as_str)
    }

    /// The stage `index` needs (directly or through others) that last declares output `key`, if
    /// any: in a line of stages, the last one before it.
    pub fn producer_of(&self, key: &str, index: usize) -> Option<&Stage> {
        self.stages
            .iter()
            .enumerate()
            .rev()
            .filter(|(i, _)| self.depends_on(index, *i))
            .map(|(_, s)| s)
            .find(|s| s.outputs.iter().any(|o| o == key))
    }
}

/// The stages each stage needs, directly or through others (a cycle, which validation
/// refuses, ends where it closes).
fn ancestors(
    stages: &[Stage],
    index: &std::collections::HashMap<String, usize>,
) -> Vec<std::collections::BTreeSet<usize>> {
    let direct: Vec<Vec<usize>> =
        stages.iter().map(|s| s.needs.iter().filter_map(|n| index.get(n.as_str()).copied()).collect()).collect();
    reachable(&direct)
}

/// What each position reaches through `direct` (its edges by position), itself left out; a
/// cycle ends where it closes.
pub(crate) fn reachable(direct: &[Vec<usize>]) -> Vec<std::collections::BTreeSet<usize>> {
    (0..direct.len())
        .map(|start| {
            let mut seen = std::collections::BTreeSet::new();
            let mut todo = direct[start].clone();
            while let Some(i) = todo.pop() {
                if seen.insert(i) {
                    todo.extend(direct[i].iter().copied());
                }
            }
            seen.remove(&start);
            seen
        })
        .collect()
}

/// Who runs a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentRef {
    /// The built-in `shell` agent: runs the stage's `run:` commands.
    Shell,
    /// An agent file, by name.
    Named(String),
}

impl AgentRef {
    /// The agent's name as written in the pipeline.
    pub fn name(&self) -> &str {
        match self {
            AgentRef::Shell => "shell",
            AgentRef::Named(n) => n,
        }
    }
}

/// A validated stage.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Unique id.
    pub id: StageId,
    /// Who runs it.
    pub agent: AgentRef,
    /// Plan (read-only) or agent (implementation).
    pub mode: Mode,
    /// Human-readable purpose.
    pub description: String,
    /// Artifact keys loaded into the prompt.
    pub inputs: Vec<String>,
    /// Artifact keys produced.
    pub outputs: Vec<String>,
    /// Must be true for the stage to run.
    pub condition: Option<Condition>,
    /// Pause for a human before running.
    pub requires_approval: bool,
    /// Who may answer the gate (empty: anyone who may answer).
    pub approvers: Vec<Approver>,
    /// Whether the person who started the run may not approve it (`None`: the daemon's default).
    pub prevent_self_approval: Option<bool>,
    /// Maximum duration.
    pub timeout: Duration,
    /// Retry policy; `None` fails at the first error.
    pub retry: Option<RetryPolicy>,
    /// How to undo the stage.
    pub rollback: Option<Rollback>,
    /// Skill loaded for the stage.
    pub skill: Option<String>,
    /// Shell commands (`agent: shell` only).
    pub run: Vec<String>,
    /// Explicit success checks.
    pub checks: Vec<Check>,
    /// Closed-loop options.
    pub closed_loop: Option<ClosedLoop>,
    /// Feedback loop to an earlier stage.
    pub feedback_loop: Option<FeedbackLoop>,
    /// Limits of this stage.
    pub budget: Budget,
    /// `sandbox:` as written on the stage (`None`: config.toml's `sandbox` decides).
    pub sandbox: Option<crate::sandbox::SandboxMode>,
    /// `network:` as written on the stage (`None`: the agent's, else the default).
    pub network: Option<crate::sandbox::Network>,
    /// `env:`: the variables a sandboxed process of the stage gets besides the usual ones.
    pub env: Vec<String>,
    /// The agents that take its attempts over, in order, when its agent fails in a way it
    /// cannot fix: its `fallback:`, else its agent's (validated: each an agent that may run in
    /// its mode).
    pub fallback: Vec<String>,
    /// The stages that must have finished or been skipped before it starts: its `needs:`, else
    /// the stage before it.
    pub needs: Vec<StageId>,
    /// `candidates:`: best of N.
    pub candidates: Option<Candidates>,
    /// The stage whose candidates this one judges (`select: {judge: …}`): it runs only as
    /// their judge, and its own place in the order is skipped.
    pub judges: Option<StageId>,
}

/// Best of N (`candidates:`): N attempts of a stage at once, each in its own layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidates {
    /// The agent of each candidate, in order (as many as candidates).
    pub agents: Vec<String>,
    /// How the winner is chosen among those whose checks passed.
    pub select: Select,
}

/// How the winner of a round of candidates is chosen, among those whose checks passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Select {
    /// By these selectors, first decides (never empty).
    By(Vec<Selector>),
    /// By this plan-mode stage, which reads the candidates' diffs and check results.
    Judge(StageId),
}

impl Select {
    /// The selectors that decide without a judge, and when a judge's answer cannot be used.
    pub fn selectors(&self) -> &[Selector] {
        match self {
            Select::By(selectors) => selectors,
            Select::Judge(_) => &DEFAULT_SELECTORS,
        }
    }
}

/// The selectors when none are named: most checks passed, then the smallest change.
pub const DEFAULT_SELECTORS: [Selector; 2] = [Selector::Checks, Selector::SmallestDiff];

/// How a winner among candidates is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// Most checks passed.
    Checks,
    /// Fewest changed lines.
    SmallestDiff,
    /// Fewest tokens, then dollars.
    Cheapest,
}

impl Selector {
    /// Every selector, with its name in pipelines.
    pub const ALL: [(&'static str, Selector); 3] =
        [("checks", Selector::Checks), ("smallest_diff", Selector::SmallestDiff), ("cheapest", Selector::Cheapest)];

    /// Its name in pipelines and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Selector::Checks => "checks",
            Selector::SmallestDiff => "smallest_diff",
            Selector::Cheapest => "cheapest",
        }
    }
}

/// Backoff between retries (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// `initial * 2^(n-1)`.
    Exponential,
    /// `initial * n`.
    Linear,
    /// `initial`.
    Fixed,
}

/// Stage retry policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, counting the first.
    pub max_attempts: u32,
    /// Backoff kind.
    pub backoff: Backoff,
    /// First delay.
    pub initial_delay: Duration,
}

impl RetryPolicy {
    /// The longest delay ever waited between attempts.
    pub const MAX_DELAY: Duration = Duration::from_secs(300);

    /// The delay before retry `n` (1-based), capped at five minutes.
    pub fn delay(&self, n: u32) -> Duration {
        let n = n.max(1);
        let delay = match self.backoff {
            Backoff::Exponential => self.initial_delay.saturating_mul(2u32.saturating_pow(n - 1)),
            Backoff::Linear => self.initial_delay.saturating_mul(n),
            Backoff::Fixed => self.initial_delay,
        };
        delay.min(Self::MAX_DELAY)
    }
}

/// Rollback strategies (seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackStrategy {
    /// Revert the stage's commits.
    GitRevert,
    /// Restore files from the stage's backup.
    FileRestore,
    /// Remove the stage's artifacts and state entries.
    MemoryCleanup,
    /// Show steps to the user.
    Manual,
}

impl RollbackStrategy {
    /// All strategies with their names.
    pub const ALL: [(&'static str, RollbackStrategy); 4] = [
        ("git_revert", RollbackStrategy::GitRevert),
        ("file_restore", RollbackStrategy::FileRestore),
        ("memory_cleanup", RollbackStrategy::MemoryCleanup),
        ("manual", RollbackStrategy::Manual),
    ];
}

/// How to undo a stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollback {
    /// Strategy.
    pub strategy: RollbackStrategy,
    /// What it does / steps for `manual`.
    pub description: Option<String>,
}

/// Kinds of success checks (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// A linter.
    Lint,
    /// A formatter's check (`cargo fmt --check`, `prettier --check`).
    Format,
    /// A type checker.
    Type,
    /// A test suite.
    Test,
    /// A build.
    Build,
    /// Anything else.
    Custom,
    /// A syntax check.
    Syntax,
    /// A plain command.
    Command,
}

impl CheckKind {
    /// All kinds with their names.
    pub const ALL: [(&'static str, CheckKind); 8] = [
        ("lint", CheckKind::Lint),
        ("format", CheckKind::Format),
        ("type", CheckKind::Type),
        ("test", CheckKind::Test),
        ("build", CheckKind::Build),
        ("custom", CheckKind::Custom),
        ("syntax", CheckKind::Syntax),
        ("command", CheckKind::Command),
    ];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, k)| *k == self).map_or("custom", |(n, _)| n)
    }
}

/// One explicit success check.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Name shown in reports.
    pub name: String,
    /// Kind.
    pub kind: CheckKind,
    /// Shell command; exit 0 passes.
    pub command: String,
    /// Text the output must contain.
    pub expected: Option<String>,
}

/// Task complexity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Complexity {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

impl Complexity {
    /// Its name in pipelines, variables and the journal (`medium`).
    pub fn as_str(self) -> &'static str {
        match self {
            Complexity::Low => "low",
            Complexity::Medium => "medium",
            Complexity::High => "high",
        }
    }
}

/// Closed-loop options.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoop {
    /// Retry budget.
    pub max_retries: Option<u32>,
    /// Complexity override.
    pub complexity: Option<Complexity>,
    /// Regression detection on or off (default by complexity).
    pub regression: Option<bool>,
}

/// Spending limits (of a run or of a stage); `None` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    /// Tokens in and out of agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Active time (attempts and checks), in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// Agent invocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocations: Option<u32>,
}

impl Budget {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Budget::default()
    }
}

/// Feedback loop from a review stage to an earlier implementation stage.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedbackLoop {
    /// The stage re-run with feedback.
    pub target_stage: StageId,
    /// Iterations before escalation.
    pub max_iterations: u32,
}

/// Who may answer a gate: a person by name, or everyone holding a role.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    /// This person (as their token names them).
    Person(String),
    /// Everyone holding this role or a higher one.
    Role(ApproverRole),
}

/// A role that may answer gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApproverRole {
    /// `role:approver`: approvers and admins.
    Approver,
    /// `role:admin`: admins.
    Admin,
}

impl Approver {
    /// Parses `NAME` or `role:ROLE`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        match text.strip_prefix("role:") {
            Some("approver") => Ok(Approver::Role(ApproverRole::Approver)),
            Some("admin") => Ok(Approver::Role(ApproverRole::Admin)),
            Some(other) => {
                Err(format!("`role:{other}` is not a role that may answer: use role:approver or role:admin"))
            }
            None if !text.is_empty()
                && text.len() <= 100
                && text.chars().all(|c| c.is_alphanumeric() || "._@-".contains(c)) =>
            {
                Ok(Approver::Person(text.to_owned()))
            }
            None => Err(format!("`{text}` is not a person's name (letters, digits, `.`, `_`, `@`, `-`) or role:ROLE")),
        }
    }
}

impl std::fmt::Display for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approver::Person(name) => f.write_str(name),
            Approver::Role(ApproverRole::Approver) => f.write_str("role:approver"),
            Approver::Role(ApproverRole::Admin) => f.write_str("role:admin"),
        }
    }
}
