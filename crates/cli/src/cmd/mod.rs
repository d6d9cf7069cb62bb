//! One module per subcommand.

pub mod agents;
pub mod auto;
pub mod bench;
pub mod dead_letters;
pub mod demo;
pub mod doctor;
pub mod gc;
pub mod github;
pub mod init;
pub mod logs;
pub mod patterns;
pub mod resume;
pub mod run;
pub mod sandbox_exec;
pub mod serve;
pub mod spend;
pub mod stats;
pub mod status;
pub mod store;
pub mod validate;
pub mod worker;

use std::path::PathBuf;

/// Options every command takes.
#[derive(Debug, Clone)]
pub struct Global {
    /// `-C DIR`.
    pub dir: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
    /// `--store`.
    pub store: Option<String>,
    /// The reports the command writes when the run it drives stops (`--report`, `[report]`).
    pub reports: Vec<loopwright_app::report::Target>,
}

impl Global {
    /// The workspace `-C` names (or the one around the current directory), its journal where
    /// `--store` says.
    pub fn workspace(&self) -> Result<loopwright_app::workspace::Workspace, loopwright_app::error::Error> {
        loopwright_app::workspace::Workspace::locate(self.dir.as_deref())?.with_store(self.store.clone())
    }

    /// These options, writing the reports `flags` and the workspace's `[report]` name.
    pub fn reporting(
        &self,
        ws: &loopwright_app::workspace::Workspace,
        flags: &[loopwright_app::report::Target],
    ) -> Self {
        let reports = loopwright_app::report::targets(&ws.config.report, &ws.root, flags);
        Self { reports, ..self.clone() }
    }
}

/// `--report FORMAT=FILE`, as clap reads it.
pub fn report_flag(text: &str) -> Result<loopwright_app::report::Target, String> {
    loopwright_app::report::Target::parse(text)
}

pub use loopwright_app::assemble::{open_existing_local_store, open_existing_store, open_local_store, open_store};

/// Runs `work` (a daemon) on a multi-threaded runtime of its own: the API on two threads,
/// each run on a thread of its own. `serve` and `demo --serve` start here, not on the
/// one-thread runtime of the other commands.
pub fn on_daemon_runtime<T>(
    work: impl std::future::Future<Output = Result<T, crate::error::CliError>>,
) -> Result<T, crate::error::CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| crate::error::CliError::Internal(anyhow::anyhow!("cannot start the runtime: {e}")))?
        .block_on(work)
}
