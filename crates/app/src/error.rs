//! What an operation can fail with. Front-ends map it in one place each: the CLI to exit codes
//! (`crates/cli/src/error.rs`), the daemon to HTTP statuses (`crates/daemon/src/api/error.rs`).

use loopwright_spec::Diagnostics;

/// Why an operation could not do its work. Nothing was changed unless the message says so.
#[derive(Debug)]
pub enum Error {
    /// Bad arguments or a bad request (a malformed value, a file that cannot be read): CLI exit
    /// 2, HTTP 422.
    Usage(String),
    /// Invalid files (a pipeline, an agent, the config), every problem listed: exit 2, 422.
    Invalid(Diagnostics),
    /// What was asked for does not exist (a run, a pipeline, a dead letter): exit 2, 404.
    NotFound(String),
    /// The run is not in a state that allows it (not waiting at a gate, already ended, driven by
    /// a live process), or another process changed it first: exit 2, 409.
    Conflict(String),
    /// Outside what the workspace may touch (a task directory outside it): exit 2, 403.
    Forbidden(String),
    /// Something failed while working (the store, the file system): exit 1, 500.
    Internal(anyhow::Error),
}

/// The result of an operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage(message.into())
    }

    /// A not-found error.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::NotFound(message.into())
    }

    /// The error for a run id that names no run of the workspace.
    pub fn no_run(run: impl std::fmt::Display) -> Self {
        Error::NotFound(format!("no run `{run}` in this workspace (see `loopwright status` for recent runs)"))
    }

    /// A conflict.
    pub fn conflict(message: impl Into<String>) -> Self {
        Error::Conflict(message.into())
    }

    /// The message, for one line of text (diagnostics counted, not listed).
    pub fn message(&self) -> String {
        match self {
            Error::Usage(m) | Error::NotFound(m) | Error::Conflict(m) | Error::Forbidden(m) => m.clone(),
            Error::Invalid(d) => match d.items.first() {
                Some(first) => format!(
                    "{}{}: {} ({} problem(s))",
                    first.file,
                    first.position.map(|p| format!(":{p}")).unwrap_or_default(),
                    first.message,
                    d.items.len()
                ),
                None => "invalid".to_owned(),
            },
            Error::Internal(e) => format!("{e:#}"),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Self {
        Error::Internal(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Internal(e.into())
    }
}

impl From<loopwright_engine::StoreError> for Error {
    fn from(e: loopwright_engine::StoreError) -> Self {
        use loopwright_engine::StoreError;
        match e {
            StoreError::RunNotFound(id) => Error::no_run(id),
            StoreError::Conflict { run, .. } => {
                Error::Conflict(format!("run {run}: its journal moved on meanwhile; nothing was done"))
            }
            fenced @ StoreError::Fenced { .. } => Error::Conflict(fenced.to_string()),
            StoreError::Exists(run) => Error::Conflict(format!("run {run} exists already")),
            other => Error::Internal(other.into()),
        }
    }
}
