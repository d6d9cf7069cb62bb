//! The binary's errors and how they map to exit codes (SPEC §1).

use loopwright_spec::Diagnostics;

/// Why a command could not do its work.
#[derive(Debug)]
pub enum CliError {
    /// Bad arguments or input: exit 2, nothing was run.
    Usage(String),
    /// Invalid files: exit 2, every problem listed.
    Invalid(Diagnostics),
    /// Something failed while working (the store, the file system): exit 1.
    Internal(anyhow::Error),
}

impl CliError {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Usage(message.into())
    }

    /// The exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Invalid(_) => 2,
            CliError::Internal(_) => 1,
        }
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Internal(e)
    }
}

impl From<loopwright_engine::StoreError> for CliError {
    fn from(e: loopwright_engine::StoreError) -> Self {
        match e {
            loopwright_engine::StoreError::RunNotFound(id) => {
                CliError::Usage(format!("no run `{id}` in this workspace (see `loopwright status` for recent runs)"))
            }
            other => CliError::Internal(other.into()),
        }
    }
}
