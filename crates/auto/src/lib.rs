//! Auto mode (SPEC §10, seed 002): one long-lived agent session runs a task module's whole
//! loop (plan → check → exec → check → merge → report) following the protocol loopwright
//! ships; a supervisor observes it from outside and only stops it.
//!
//! - [`module`]: the task module's files and seed 002's entry and routing tables.
//! - [`signal`]: `.auto-signal` (validated against the whitelists) and `.auto-stop`.
//! - [`protocol`]: the text the agent follows, sent as its first message.
//! - [`holder`]: the process that owns the agent's pseudo-terminal and outlives supervisors.
//! - [`screen`]: what the screen shows (prompts, quota messages, busy markers, exit banners).
//! - [`quota`]: reset times in quota messages.
//! - [`policy`]: which prompts may be answered; never a destructive one.
//! - [`state`]: a loop's typed state (the status object and what the supervisor keeps).
//! - [`event`]: the supervision journal, one typed entry per kind.
//! - [`decide`]: every rule, as a pure function of the state, an observation and the time.
//! - [`report`]: the night's summary of a loop, from its journal.
//! - [`supervisor`]: the driver that gathers observations and performs `decide`'s actions.

pub mod decide;
pub mod event;
pub mod holder;
pub mod module;
pub mod policy;
pub mod protocol;
pub mod quota;
pub mod report;
pub mod screen;
pub mod signal;
pub mod state;
pub mod supervisor;

use std::collections::BTreeSet;

use loopwright_spec::config::AutoConfig;
use serde::{Deserialize, Serialize};

/// The settings of one loop: `[auto]` from config.toml with the start's overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// `[auto]` as configured.
    #[serde(flatten)]
    pub config: AutoConfig,
    /// A foreground supervisor returns when a person is needed (exit 3) instead of waiting.
    #[serde(default)]
    pub exit_on_needs_human: bool,
}

impl std::ops::Deref for Settings {
    type Target = AutoConfig;
    fn deref(&self) -> &AutoConfig {
        &self.config
    }
}

impl Settings {
    /// The answer policy these settings describe.
    pub fn policy(&self) -> Result<policy::Policy, String> {
        let classes: BTreeSet<screen::PromptClass> =
            self.config.answer.iter().map(|c| screen::PromptClass::from(*c)).collect();
        policy::Policy::new(classes, &self.config.deny, &self.config.policy.allow)?
            .with_fetch(&self.config.policy.fetch)
    }
}
