//! loopwright's application layer: every operation a user can perform — validate, start,
//! resume, approve, reject, respond, cancel, status, list, events, attempts, dead letters,
//! stats, agents, patterns — as one function returning a typed outcome or a typed [`Error`].
//! The CLI (`crates/cli`) and the daemon (`crates/daemon`) are thin front-ends over it: the
//! first maps outcomes to terminal output and exit codes, the second to JSON and HTTP statuses.
//!
//! Modules, in the order they depend on each other: [`error`]; [`workspace`] (the layout,
//! config, agents and pipelines of a workspace); [`lock`] (one live run per working tree);
//! [`assemble`] (the store, the engine's ports, the redactor); [`ownership`]; [`files`] (the
//! markdown files and dead letters a run writes); [`worktree`]; [`forge`] (a run's work delivered to the GitHub issue it came from); [`session`] (a run being
//! driven here); [`stop`] (cancel requests through the journal); [`ops`] (the operations).

pub mod assemble;
pub mod error;
pub mod files;
pub mod forge;
pub mod learned;
pub mod lock;
pub mod metrics;
pub mod ops;
pub mod ownership;
pub mod record;
pub mod report;
pub mod session;
pub mod spend;
pub mod stop;
pub mod telemetry;
pub mod workspace;
pub mod worktree;

pub use error::Error;
