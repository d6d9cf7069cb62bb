//! A run whose work came from a forge (SPEC §14): where it came from, and what happened to
//! what it delivered there — the change request opened (or updated) for each round, the CI
//! results reported on its head, the rounds sent back to the delivering stage, and the report
//! of its failure. The journal names no forge's API: "github" is a name here, not a type.

use loopwright_spec::StageId;
use serde::{Deserialize, Serialize};

use crate::closed_loop::Failure;

/// Where a run's work came from and where it goes (`RunStarted::forge`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeLink {
    /// The forge (`github`).
    pub forge: String,
    /// `OWNER/NAME`.
    pub repo: String,
    /// The issue (or pull request) the trigger was on.
    pub issue: u64,
    /// Where a person reads it.
    pub issue_url: String,
    /// Its title as the trigger carried it.
    pub title: String,
    /// What started the run (`comment/123`, `label/7/loopwright/…`): one run per trigger.
    pub trigger: String,
    /// Who labelled or commanded.
    pub actor: String,
    /// The branch pushed (`loopwright/RUN`).
    pub branch: String,
    /// The branch the change request merges into.
    pub base: String,
    /// Whether the run waits for the change request's CI (false: it succeeds when opened).
    pub watch: bool,
    /// How many failed CI rounds go back to `stage` before the run escalates.
    pub ci_retries: u32,
    /// Whether the change request is opened as a draft until its CI passes.
    #[serde(default)]
    pub draft_until_green: bool,
    /// The stage a failed CI round goes back to (the last that changes the workspace).
    pub stage: StageId,
    /// How the change request is merged once its required checks pass and a person approved
    /// its tested head (`merge = "auto"`); none: a person merges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<loopwright_spec::github::MergeMethod>,
    /// The command came on a pull request from a fork (`[github] forks = true`): the run is
    /// sandboxed as `required` whatever `[github] sandbox` says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_fork: bool,
}

/// How CI ended on a delivered head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CiOutcome {
    /// Every required check passed.
    Passed {
        /// The checks that passed.
        checks: Vec<String>,
    },
    /// A check failed.
    Failed {
        /// The check (a job's or status's name).
        check: String,
        /// Where a person reads it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Its log classified (§6).
        failure: Box<Failure>,
        /// The failed step's command, when the log says it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// The lines of its output that matter, for the next attempt and for people.
        excerpt: String,
    },
}

/// One round's change request as delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The round (0 the first delivery, then one more per CI retry).
    pub round: u32,
    /// The change request's number.
    pub number: u64,
    /// Where a person opens it.
    pub url: String,
    /// The head commit pushed.
    pub head: String,
    /// Whether the run waits for its CI.
    pub watching: bool,
}
