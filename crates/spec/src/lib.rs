//! File formats of loopwright: pipelines, agents and the workspace config.
//!
//! Everything here is pure: callers read files and pass their text in. [`compile`] turns a
//! pipeline file into a validated [`Pipeline`] or a list of [`Diagnostics`] naming every
//! problem with its file, line, column, stage and field.

pub mod agent;
pub mod compile;
pub mod condition;
pub mod config;
pub mod diag;
pub mod github;
pub mod outputs;
pub mod patterns;
pub mod pipeline;
pub mod raw;
pub mod sandbox;
pub mod schema;
pub mod spend;

pub use agent::{Agent, RunnerKind, parse_agent};
pub use compile::{CompileContext, compile};
pub use condition::Condition;
pub use config::Config;
pub use diag::{Diagnostic, Diagnostics, Position, SourceFile};
pub use pipeline::{AgentRef, Mode, Pipeline, RetryPolicy, SandboxPlan, Stage, StageId};
