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
    /// How many runs it drives at once.
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
        Some(dir) => dir,
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
    };
    on_daemon_runtime(loopwright_daemon::worker::run(options))?;
    Ok(0)
}
