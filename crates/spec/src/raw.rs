//! Raw types that mirror a pipeline file field for field (seed 004's schema plus SPEC §4).
//!
//! They only say what the YAML looks like; [`crate::compile`] checks every rule and turns
//! them into a [`crate::Pipeline`]. The JSON Schema for editors is generated from them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_saphyr::Spanned;

/// A pipeline file: `.loopwright/pipelines/NAME.yml`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "loopwright pipeline")]
pub struct RawPipeline {
    /// Unique pipeline identifier.
    #[schemars(with = "String")]
    pub name: Option<Spanned<String>>,
    /// What this pipeline does.
    #[schemars(with = "String")]
    pub description: Option<Spanned<String>>,
    /// Schema version of this file.
    #[schemars(with = "f64")]
    pub version: Option<Spanned<f64>>,
    /// Pipeline-level cap on retries across all stages (default 5).
    #[schemars(with = "Option<u32>")]
    pub max_retries: Option<Spanned<i64>>,
    /// Variables this pipeline's conditions may use, with their defaults; set with `--var KEY=VALUE`.
    #[schemars(with = "Option<BTreeMap<String, serde_json::Value>>")]
    pub vars: Option<Spanned<BTreeMap<String, Spanned<serde_json::Value>>>>,
    /// Names of inputs the caller provides with `--input KEY=VALUE` (besides the built-in
    /// `task_description` and `context`), usable in the `inputs` of any stage.
    #[schemars(with = "Option<Vec<String>>")]
    pub initial_inputs: Option<Vec<Spanned<String>>>,
    /// Limits of the whole run: tokens, cost, active time, agent invocations.
    #[schemars(with = "Option<RawBudget>")]
    pub budget: Option<Spanned<RawBudget>>,
    /// The stages, run in order.
    #[schemars(with = "Vec<RawStage>")]
    pub stages: Option<Spanned<Vec<Spanned<RawStage>>>>,
    /// The git repository a worker clones to run this pipeline (`run --submit`), when it is
    /// not the origin of the checkout it is submitted from.
    #[schemars(with = "Option<String>")]
    pub repo: Option<Spanned<String>>,
    /// The labels a worker must have to run this pipeline (`loopwright worker --labels k=v`).
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub runs_on: Option<Spanned<BTreeMap<String, Spanned<String>>>>,
    /// How many stages of a run may run at once, at most (default 4).
    #[schemars(with = "Option<u32>")]
    pub max_parallel: Option<Spanned<i64>>,
}

/// Spending limits; reaching one fails the run cleanly before the next attempt starts.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// Tokens in and out of agents (as the agent reports them, else counted with o200k).
    #[schemars(with = "Option<u64>")]
    pub tokens: Option<Spanned<i64>>,
    /// Cost in US dollars, from the `[prices]` table of config.toml.
    #[schemars(with = "Option<f64>")]
    pub cost_usd: Option<Spanned<f64>>,
    /// Time spent running attempts and checks, in minutes (fractions allowed).
    #[schemars(with = "Option<f64>")]
    pub wall_minutes: Option<Spanned<f64>>,
    /// Agent invocations (attempts of stages that run an agent).
    #[schemars(with = "Option<u32>")]
    pub invocations: Option<Spanned<i64>>,
}

/// One stage of a pipeline.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStage {
    /// Unique within the pipeline; matches `^[a-z][a-z0-9_]*$`.
    #[schemars(with = "String", pattern(r"^[a-z][a-z0-9_]*$"))]
    pub id: Option<Spanned<String>>,
    /// The agent that runs this stage (an agent file's name), or `shell` to run `run:`.
    #[schemars(with = "String")]
    pub agent: Option<Spanned<String>>,
    /// `plan` for read-only review, `agent` for implementation.
    #[schemars(with = "RawMode")]
    pub mode: Option<Spanned<String>>,
    /// Human-readable purpose; part of the agent's prompt.
    #[schemars(with = "String")]
    pub description: Option<Spanned<String>>,
    /// Artifact keys from prior stages (or initial inputs) to load into the prompt.
    #[schemars(with = "Option<Vec<String>>")]
    pub inputs: Option<Vec<Spanned<String>>>,
    /// Artifact keys this stage produces, read from `## key` sections of its output.
    #[schemars(with = "Option<Vec<String>>")]
    pub outputs: Option<Vec<Spanned<String>>>,
    /// Jinja expression that must be true for the stage to run, e.g. `complexity == 'high'`.
    #[schemars(with = "Option<String>")]
    pub condition: Option<Spanned<String>>,
    /// Pause for a human's confirmation before running (default false).
    #[schemars(with = "Option<bool>")]
    pub requires_approval: Option<Spanned<bool>>,
    /// With `requires_approval`: who may answer the gate — people by name, or everyone holding
    /// a role (`role:approver`, `role:admin`). Anyone who may answer when absent.
    #[schemars(with = "Option<Vec<String>>")]
    pub approvers: Option<Vec<Spanned<String>>>,
    /// With `requires_approval`: the person who started the run may not approve it (default:
    /// `[serve] prevent_self_approval`).
    #[schemars(with = "Option<bool>")]
    pub prevent_self_approval: Option<Spanned<bool>>,
    /// Maximum stage duration in minutes; fractions allowed (default 30).
    #[schemars(with = "Option<f64>")]
    pub timeout_minutes: Option<Spanned<f64>>,
    /// Stage-level retry configuration.
    #[schemars(with = "Option<RawRetry>")]
    pub retry: Option<Spanned<RawRetry>>,
    /// How to undo this stage when the pipeline fails.
    #[schemars(with = "Option<RawRollback>")]
    pub rollback: Option<Spanned<RawRollback>>,
    /// Skill to load for this stage; `closed-loop-execution` runs it through the closed loop.
    #[schemars(with = "Option<String>")]
    pub skill: Option<Spanned<String>>,
    /// For `agent: shell`: a command or list of commands, each run with `sh -c` in the workspace.
    #[schemars(with = "Option<RawRun>")]
    pub run: Option<Spanned<RawRun>>,
    /// Explicit success criteria for the closed loop.
    pub checks: Option<Vec<RawCheck>>,
    /// Options of the closed loop (with `skill: closed-loop-execution`).
    #[schemars(with = "Option<RawClosedLoop>")]
    pub closed_loop: Option<Spanned<RawClosedLoop>>,
    /// Send blocking review feedback back to an earlier implementation stage.
    #[schemars(with = "Option<RawFeedbackLoop>")]
    pub feedback_loop: Option<Spanned<RawFeedbackLoop>>,
    /// Limits of this stage: tokens, cost, active time, agent invocations.
    #[schemars(with = "Option<RawBudget>")]
    pub budget: Option<Spanned<RawBudget>>,
    /// Whether this stage's processes run in a sandbox: `auto`, `required` or `off` (default:
    /// `sandbox` in config.toml).
    #[schemars(with = "Option<RawSandbox>")]
    pub sandbox: Option<Spanned<String>>,
    /// What a sandboxed process of this stage may reach: `none`, `model` (its agent's API host)
    /// or a list of hosts (`host`, `host:port` or a URL). Default: `model` for an agent, `none`
    /// for shell commands and checks.
    #[schemars(with = "Option<RawNetwork>")]
    pub network: Option<Spanned<RawNetworkValue>>,
    /// Environment variables a sandboxed process of this stage is given besides the ones every
    /// sandboxed process gets (`PATH`, `HOME`, `LANG`, `LC_*`, `TERM`, `TZ`, loopwright's own):
    /// names only, their values taken from loopwright's environment.
    #[schemars(with = "Option<Vec<String>>")]
    pub env: Option<Spanned<Vec<String>>>,
    /// Agents that take an attempt over, in order, when this stage's agent fails in a way it
    /// cannot fix: a rate limit past its wait, a spent quota, refused credentials, a missing
    /// model or program, a prompt too long for its model (default: the agent's own `fallback:`).
    #[schemars(with = "Option<Vec<String>>")]
    pub fallback: Option<Vec<Spanned<String>>>,
    /// The stages that must finish (or be skipped) before this one starts; stages that need
    /// nothing of each other run at once. Default: the stage before it (`[]`: none).
    #[schemars(with = "Option<Vec<String>>")]
    pub needs: Option<Vec<Spanned<String>>>,
    /// Best of N: N attempts of this (agent-mode) stage at once, each in its own layer, each
    /// checked with `checks:`; the winner's changes are applied, the others' dropped.
    #[schemars(with = "Option<RawCandidates>")]
    pub candidates: Option<Spanned<RawCandidates>>,
}

/// `candidates:` of a stage.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCandidates {
    /// How many attempts at once (2 to 8).
    #[schemars(with = "u32")]
    pub count: Option<Spanned<i64>>,
    /// The agents of the candidates, in turn (default: the stage's agent for each).
    #[schemars(with = "Option<Vec<String>>")]
    pub agents: Option<Vec<Spanned<String>>>,
    /// How the winner is chosen among the candidates whose checks passed: a list of selectors,
    /// first decides — `checks` (most checks passed), `smallest_diff` (fewest changed files),
    /// `cheapest` (fewest tokens, then dollars) — or `{judge: STAGE}`, a plan-mode stage of the
    /// pipeline that reads the candidates' diffs and check results and names the winner.
    /// Default `[checks, smallest_diff]`.
    #[schemars(with = "Option<RawSelect>")]
    pub select: Option<Spanned<RawSelectValue>>,
}

/// `select:` of `candidates:`: the schema's view (the file is read as [`RawSelectValue`]).
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
pub enum RawSelect {
    /// Selectors, first decides.
    By(Vec<RawSelector>),
    /// A judge stage.
    Judge(RawJudge),
}

/// `select: {judge: STAGE}`.
#[derive(Debug, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJudge {
    /// The id of a plan-mode stage of this pipeline that chooses the winner; it runs only as
    /// the judge (its place in the order is skipped).
    pub judge: String,
}

/// `select:` as read: selectors or a judge.
#[derive(Debug)]
pub enum RawSelectValue {
    /// Selectors, each with where it is written.
    By(Vec<Spanned<String>>),
    /// The judge stage's id, with where it is written.
    Judge(Spanned<String>),
}

/// By hand, so that each selector and the judge keep where they are written, and a wrong value
/// is told what was expected.
impl<'de> Deserialize<'de> for RawSelectValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SelectVisitor;
        impl<'de> serde::de::Visitor<'de> for SelectVisitor {
            type Value = RawSelectValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of selectors (`[checks, smallest_diff]`) or `{judge: STAGE}`")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawSelectValue, A::Error> {
                let mut all = Vec::new();
                while let Some(selector) = seq.next_element::<Spanned<String>>()? {
                    all.push(selector);
                }
                Ok(RawSelectValue::By(all))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawSelectValue, A::Error> {
                let mut judge = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "judge" || judge.is_some() {
                        return Err(serde::de::Error::custom(format!(
                            "unexpected `{key}` in `select`, expected only `judge: STAGE`"
                        )));
                    }
                    judge = Some(map.next_value::<Spanned<String>>()?);
                }
                judge.map(RawSelectValue::Judge).ok_or_else(|| serde::de::Error::missing_field("judge"))
            }
        }
        deserializer.deserialize_any(SelectVisitor)
    }
}

/// How a winner among candidates is chosen.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawSelector {
    /// Most checks passed.
    Checks,
    /// Fewest changed lines.
    SmallestDiff,
    /// Fewest tokens, then dollars.
    Cheapest,
}

/// Execution mode of a stage.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawMode {
    /// Read-only review and analysis.
    Plan,
    /// Full implementation capabilities.
    Agent,
}

/// Whether a stage's processes run in a sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawSandbox {
    /// Sandboxed where this machine can make one.
    Auto,
    /// Sandboxed, or the run does not start.
    Required,
    /// Not sandboxed.
    Off,
}

/// `none`, `model`, or a list of hosts: the schema's view (the file is read as
/// [`RawNetworkValue`]).
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
pub enum RawNetwork {
    /// `none` or `model`.
    Word(RawNetworkWord),
    /// Hosts: `host`, `host:port` or a URL.
    Hosts(Vec<String>),
}

/// The network words.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawNetworkWord {
    /// No network.
    None,
    /// The agent's API host.
    Model,
}

/// The word as written (checked by [`crate::compile`]), or the hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawNetworkValue {
    /// A word.
    Word(String),
    /// Hosts.
    Hosts(Vec<String>),
}

impl<'de> Deserialize<'de> for RawNetworkValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NetworkVisitor;
        impl<'de> serde::de::Visitor<'de> for NetworkVisitor {
            type Value = RawNetworkValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`none`, `model`, or a list of hosts")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawNetworkValue, E> {
                Ok(RawNetworkValue::Word(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawNetworkValue, A::Error> {
                let mut all = Vec::new();
                while let Some(host) = seq.next_element::<String>()? {
                    all.push(host);
                }
                Ok(RawNetworkValue::Hosts(all))
            }
        }
        deserializer.deserialize_any(NetworkVisitor)
    }
}

/// A command (string) or a list of commands.
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
pub enum RawRun {
    /// One command.
    One(String),
    /// Several commands, run in order; the first failure fails the stage.
    Many(Vec<String>),
}

/// By hand rather than `untagged`, so that a wrong value (`run: true`) is told what was
/// expected instead of "did not match any variant".
impl<'de> Deserialize<'de> for RawRun {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RunVisitor;
        impl<'de> serde::de::Visitor<'de> for RunVisitor {
            type Value = RawRun;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a shell command (a string) or a list of shell commands")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawRun, E> {
                Ok(RawRun::One(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<RawRun, E> {
                Ok(RawRun::One(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawRun, A::Error> {
                let mut all = Vec::new();
                while let Some(command) = seq.next_element::<String>()? {
                    all.push(command);
                }
                Ok(RawRun::Many(all))
            }
        }
        deserializer.deserialize_any(RunVisitor)
    }
}

/// Stage-level retry configuration.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    /// Attempts in all, counting the first (1-10, default 3).
    #[schemars(with = "Option<u32>", range(min = 1, max = 10))]
    pub max_attempts: Option<Spanned<i64>>,
    /// `exponential`, `linear` or `fixed`.
    #[schemars(with = "Option<RawBackoff>")]
    pub backoff: Option<Spanned<String>>,
    /// First delay in seconds (1-300).
    #[schemars(with = "Option<f64>", range(min = 1, max = 300))]
    pub initial_delay_seconds: Option<Spanned<f64>>,
}

/// Backoff between retries.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawBackoff {
    /// `initial * 2^(n-1)`.
    Exponential,
    /// `initial * n`.
    Linear,
    /// `initial`.
    Fixed,
}

/// How to undo a stage.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRollback {
    /// `git_revert`, `file_restore`, `memory_cleanup` or `manual`.
    #[schemars(with = "RawRollbackStrategy")]
    pub strategy: Option<Spanned<String>>,
    /// What the rollback does (shown to the user for `manual`).
    #[schemars(with = "Option<String>")]
    pub description: Option<Spanned<String>>,
}

/// Rollback strategies.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawRollbackStrategy {
    /// Revert the commits made during the stage.
    GitRevert,
    /// Restore the files the stage touched from a backup.
    FileRestore,
    /// Remove the stage's artifacts and state entries.
    MemoryCleanup,
    /// Show `description` to the user.
    Manual,
}

/// One explicit success check.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCheck {
    /// Name shown in reports.
    #[schemars(with = "String")]
    pub name: Option<Spanned<String>>,
    /// `lint`, `type`, `test`, `build`, `custom`, `syntax` or `command`.
    #[serde(rename = "type")]
    #[schemars(with = "RawCheckType")]
    pub kind: Option<Spanned<String>>,
    /// Shell command; exit 0 passes.
    #[schemars(with = "String")]
    pub command: Option<Spanned<String>>,
    /// Text the output must contain, when given.
    #[schemars(with = "Option<String>")]
    pub expected: Option<Spanned<String>>,
}

/// Kinds of checks.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawCheckType {
    /// A linter.
    Lint,
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

/// Options of the closed loop.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawClosedLoop {
    /// Retry budget of the loop (default: the pattern's, else 3).
    #[schemars(with = "Option<u32>")]
    pub max_retries: Option<Spanned<i64>>,
    /// `low`, `medium` or `high`; gates regression detection.
    #[schemars(with = "Option<String>")]
    pub complexity: Option<Spanned<String>>,
    /// Run regression detection after the checks pass.
    #[schemars(with = "Option<bool>")]
    pub regression: Option<Spanned<bool>>,
}

/// Cross-stage feedback from a review stage to an implementation stage.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFeedbackLoop {
    /// The earlier `mode: agent` stage to re-run with the feedback.
    #[schemars(with = "String")]
    pub target_stage: Option<Spanned<String>>,
    /// Hard cap on iterations before escalation (default 2).
    #[schemars(with = "Option<u32>")]
    pub max_iterations: Option<Spanned<i64>>,
    /// How feedback is passed (`structured`).
    #[schemars(with = "Option<String>")]
    pub feedback_format: Option<Spanned<String>>,
}
