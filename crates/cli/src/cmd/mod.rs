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
pub mod stats;
pub mod status;
pub mod validate;

use std::path::PathBuf;

use loopwright_store::SqliteStore;

use crate::error::CliError;
use crate::workspace::Workspace;

/// Options every command takes.
#[derive(Debug, Clone)]
pub struct Global {
    /// `-C DIR`.
    pub dir: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
}

/// Opens the workspace's store, creating the state directory. A state directory that cannot
/// be written is a usage error: nothing has been run.
pub fn open_store(ws: &Workspace) -> Result<SqliteStore, CliError> {
    let state = ws.state_dir();
    std::fs::create_dir_all(ws.runs_dir())
        .map_err(|e| CliError::usage(format!("cannot create the state directory {}: {e}", state.display())))?;
    let probe = state.join(".write-test");
    std::fs::write(&probe, b"")
        .map_err(|e| CliError::usage(format!("the state directory {} is not writable: {e}", state.display())))?;
    let _ = std::fs::remove_file(&probe);
    if let Some(parent) = ws.db_path().parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| CliError::usage(format!("cannot create {}: {e}", parent.display())))?;
    }
    SqliteStore::open(&ws.db_path(), ws.config.store.synchronous).map_err(|e| CliError::usage(e.to_string()))
}

/// Opens an existing store for reading; no store means no runs.
pub fn open_existing_store(ws: &Workspace) -> Result<SqliteStore, CliError> {
    if !ws.db_path().is_file() {
        return Err(CliError::usage(format!("no runs yet in {} (no {})", ws.root.display(), ws.shown(&ws.db_path()))));
    }
    SqliteStore::open(&ws.db_path(), ws.config.store.synchronous).map_err(|e| CliError::usage(e.to_string()))
}
