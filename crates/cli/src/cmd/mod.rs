//! One module per subcommand.

pub mod agents;
pub mod bench;
pub mod dead_letters;
pub mod demo;
pub mod init;
pub mod logs;
pub mod patterns;
pub mod resume;
pub mod run;
pub mod serve;
pub mod stats;
pub mod status;
pub mod validate;

use std::path::PathBuf;

/// Options every command takes.
#[derive(Debug, Clone)]
pub struct Global {
    /// `-C DIR`.
    pub dir: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
}

pub use loopwright_app::assemble::{open_existing_store, open_store};
