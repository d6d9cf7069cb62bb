//! The binary's errors are the application layer's; here is how they map to exit codes
//! (SPEC §1).

pub use loopwright_app::Error as CliError;

/// The exit code of a command that failed: 2 when nothing was done (bad arguments or input,
/// invalid files, something not found, a conflict with the run's state), 1 when something
/// failed while working.
pub fn exit_code(error: &CliError) -> u8 {
    match error {
        CliError::Usage(_)
        | CliError::Invalid(_)
        | CliError::NotFound(_)
        | CliError::Conflict(_)
        | CliError::Forbidden(_) => 2,
        CliError::Internal(_) => 1,
    }
}
