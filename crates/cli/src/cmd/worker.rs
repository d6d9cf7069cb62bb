//! `loopwright worker`: claims the runs submitted to a PostgreSQL store and drives them here,
//! until SIGINT/SIGTERM (the `loopwright-daemon` crate's `worker`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::{Global, on_daemon_runtime};
use crate::error::CliError;

/// Arguments of `worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What this worker offers, as `key=value` pairs separated by commas (`gpu=a100,os=linux`):
    /// it runs only pipelines whose `runs_on:` labels it has.
    #[arg(long, value_name = "K=V,…", default_value = "")]
    pub labels: String,
    /// How many runs and stages it drives at once: each run takes one slot, and a run whose
    /// stages can run at the same time (`needs:`) takes one more for each stage beyond its
    /// first while one is free.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub slots: u32,
    /// Where it keeps its clones of the runs' repositories and their worktrees (default:
    /// ~/.cache/loopwright/worker).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Seconds a run's lease lasts without a heartbeat (heartbeats come three times as
    /// often): after a crash of this worker, another continues its runs this long after.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease: u64,
    /// A repository this worker may run, as runs name it (a URL, or a path every worker
    /// sees); give it once per repository. A run of any other repository is left for another
    /// worker: nothing else is cloned or run here.
    /// (Default: `[worker] repos` in the workspace's config.toml.)
    #[arg(long = "repo", value_name = "URL")]
    pub repos: Vec<String>,
    /// The least confinement of every stage run here: `required` sandboxes every process
    /// (or runs nothing), whatever a repository's config.toml or a stage's `sandbox:` says;
    /// `auto` sandboxes where this machine can. Default: what each repository says.
    #[arg(long, value_name = "MODE", value_parser = sandbox_mode)]
    pub sandbox: Option<loopwright_spec::sandbox::SandboxMode>,
}

/// The repositories a worker may run: its `--repo` flags, else `[worker] repos` in the
/// config.toml of the workspace it is started in; an allow list, so none at all is refused.
fn repos(given: Vec<String>) -> Result<Vec<String>, CliError> {
    let repos = if given.is_empty() {
        match loopwright_app::workspace::Workspace::locate(None) {
            Ok(ws) => ws.config.worker.repos,
            Err(_) => Vec::new(),
        }
    } else {
        given
    };
    if repos.is_empty() {
        return Err(CliError::usage(
            "a worker runs only the repositories it is told it may: --repo URL (once per repository), or `[worker] repos = [\"URL\", …]` in .loopwright/config.toml",
        ));
    }
    if let Some(bad) = repos.iter().find(|r| r.is_empty() || r.starts_with('-')) {
        return Err(CliError::usage(format!("--repo `{bad}`: expected a git repository's URL or path")));
    }
    Ok(repos)
}

/// `--sandbox MODE`.
fn sandbox_mode(text: &str) -> Result<loopwright_spec::sandbox::SandboxMode, String> {
    loopwright_spec::sandbox::SandboxMode::parse(text)
        .ok_or_else(|| format!("`{text}` is not a sandbox mode: expected auto, required or off"))
}

/// `key=value,…` as labels; every problem says which pair.
fn labels(text: &str) -> Result<BTreeMap<String, String>, CliError> {
    let fine = loopwright_spec::pipeline::is_label;
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if fine(k.trim()) && fine(v.trim()) => {
                labels.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            _ => {
                return Err(CliError::usage(format!(
                    "--labels: `{pair}` is not a label, expected key=value of letters, digits, `-`, `_`, `.` or `/` (at most 64 each)"
                )));
            }
        }
    }
    Ok(labels)
}

/// `loopwright worker`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let store = match global.store.clone().or_else(|| std::env::var("LOOPWRIGHT_STORE").ok().filter(|s| !s.is_empty()))
    {
        Some(url) if loopwright_spec::config::is_postgres_url(&url) => url,
        Some(url) => {
            return Err(CliError::usage(format!(
                "--store: `{}` is not a PostgreSQL URL: expected postgres://user@host[:port]/database",
                loopwright_store::pg::shown_url(&url)
            )));
        }
        None => {
            return Err(CliError::usage(
                "a worker needs the PostgreSQL store runs are submitted to: --store postgres://user@host/db (or LOOPWRIGHT_STORE)",
            ));
        }
    };
    let cache = match args.cache {
        // Made absolute now: git runs in other folders, where a relative path means another.
        Some(dir) => {
            std::path::absolute(&dir).map_err(|e| CliError::usage(format!("--cache {}: {e}", dir.display())))?
        }
        None => {
            let home = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .ok_or_else(|| CliError::usage("--cache DIR: no home folder to keep clones in"))?;
            home.join("loopwright").join("worker")
        }
    };
    let options = loopwright_daemon::worker::Options {
        store,
        labels: labels(&args.labels)?,
        slots: args.slots,
        cache,
        lease: Duration::from_secs(args.lease),
        repos: repos(args.repos)?,
        sandbox: args.sandbox,
    };
    on_daemon_runtime(loopwright_daemon::worker::run(options))?;
    Ok(0)
}
