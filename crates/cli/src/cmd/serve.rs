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
    /// The URL people reach the daemon at through a reverse proxy (TLS there), such as
    /// `https://loops.example.com`: its origin may change things, its host is accepted, and the
    /// dashboard's link is printed with it. Needs --allow-remote.
    #[arg(long = "public-url", value_name = "URL")]
    pub public_url: Option<String>,
    /// At most this many connections at once; more wait to be accepted. Connections that send
    /// no request within 10 s, or stay idle for 60 s, are closed.
    #[arg(long = "max-connections", default_value_t = 512, value_parser = clap::value_parser!(u32).range(4..=100_000))]
    pub max_connections: u32,
    /// Print the dashboard's sign-in link of the daemon serving this workspace, and exit.
    #[arg(long)]
    pub url: bool,
    /// Milliseconds between heartbeat comments on idle event streams.
    #[arg(long = "heartbeat-ms", default_value_t = 15_000, hide = true)]
    pub heartbeat_ms: u64,
}

/// `loopwright serve`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    if args.url {
        let served = loopwright_daemon::serving(&ws)
            .ok_or_else(|| CliError::usage("no daemon serves this workspace: start one with `loopwright serve`"))?;
        if global.json {
            println!("{}", serde_json::json!({"addr": served.addr.to_string(), "url": served.url}));
        } else {
            println!("{}", served.url);
        }
        return Ok(0);
    }
    let options = loopwright_daemon::Options {
        addr: args.addr,
        max_runs: usize::from(args.max_runs),
        allow_remote: args.allow_remote,
        heartbeat: Duration::from_millis(args.heartbeat_ms.max(10)),
        public_url: args.public_url,
        max_connections: usize::try_from(args.max_connections).unwrap_or(512),
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
