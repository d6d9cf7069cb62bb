//! One module per operation a user can perform. Each returns a typed outcome or an
//! [`Error`](crate::Error); the CLI renders it for a terminal, the daemon as JSON.

pub mod agents;
pub mod answer;
pub mod auto;
pub mod cancel;
pub mod copy;
pub mod dead_letters;
pub mod fleet;
pub mod gc;
pub mod github;
pub mod output;
pub mod patterns;
pub mod people;
pub mod read;
pub mod resume;
pub mod start;
pub mod stats;
pub mod validate;
pub mod why;
