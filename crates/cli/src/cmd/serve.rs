//! `loopwright serve`: the daemon of SPEC §9 for this workspace (the `loopwright-daemon`
//! crate), until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Global, on_daemon_runtime};
use crate::error::CliError;
use crate::workspace::Workspace;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to listen; port 0 picks a free port (printed at start).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub addr: SocketAddr,
    /// At most this many runs execute at once; others wait with status `queued`.
    #[arg(long = "max-runs", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_runs: u16,
    /// Allow an address other than loopback (the API can start and stop agents: put it behind
    /// something that authenticates).
    #[arg(long = "allow-remote")]
    pub allow_remote: bool,
    /// Milliseconds between heartbeat comments on idle event streams.
    #[arg(long = "heartbeat-ms", default_value_t = 15_000, hide = true)]
    pub heartbeat_ms: u64,
}

/// `loopwright serve`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let options = loopwright_daemon::Options {
        addr: args.addr,
        max_runs: usize::from(args.max_runs),
        allow_remote: args.allow_remote,
        heartbeat: Duration::from_millis(args.heartbeat_ms.max(10)),
    };
    let json = global.json;
    on_daemon_runtime(loopwright_daemon::serve(ws.clone(), options, |started| {
        if json {
            println!("{}", serde_json::json!({"addr": started.addr.to_string(), "url": started.url}));
        } else {
            println!("loopwright serve: {} on http://{}", ws.root.display(), started.addr);
            println!("dashboard: {}", started.url);
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }))?;
    Ok(0)
}
