//! `loopwright serve`: the daemon of SPEC §9 for this workspace (the `loopwright-daemon`
//! crate), until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use loopwright_app::ops::people::{self, Role};

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
    /// Believe this header (such as X-Forwarded-User) to name the person, when the request
    /// comes from an address --trust-proxy-from names: for a reverse proxy that signs people
    /// in. A name with a token has that token's role; anyone else is a viewer.
    #[arg(long = "trust-proxy-header", value_name = "HEADER", requires = "trust_proxy_from")]
    pub trust_proxy_header: Option<String>,
    /// The addresses the trusted proxy connects from: addresses or networks (10.0.0.0/8),
    /// comma-separated or repeated.
    #[arg(long = "trust-proxy-from", value_name = "CIDR", value_delimiter = ',', requires = "trust_proxy_header")]
    pub trust_proxy_from: Vec<String>,
    /// Also serve /metrics (Prometheus' text format) without a token on this loopback address,
    /// for a scraper on this machine; /metrics on --addr always needs a token.
    #[arg(long = "metrics-addr", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Milliseconds between heartbeat comments on idle event streams.
    #[arg(long = "heartbeat-ms", default_value_t = 15_000, hide = true)]
    pub heartbeat_ms: u64,
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
}

/// What `serve` does instead of serving.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// The people who may use the dashboard and the API, each with a token and a role.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `serve token …`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Give NAME a token of their own (printed once: only its hash is kept) and a role:
    /// viewer (reads), approver (also answers gates and escalations, starts, re-runs and
    /// cancels runs), admin (also starts auto loops).
    Create {
        /// The person's name, as their answers are journaled.
        name: String,
        /// What they may do.
        #[arg(long, value_enum, default_value = "approver")]
        role: RoleArg,
    },
    /// The people with tokens, their roles and when each token was made.
    List,
    /// Take NAME's token away: it signs in as nobody from the next request on.
    Revoke {
        /// The person's name.
        name: String,
    },
}

/// A role on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum RoleArg {
    /// Reads everything, changes nothing.
    Viewer,
    /// Also answers, starts, re-runs, resumes and cancels runs.
    Approver,
    /// Also starts auto loops.
    Admin,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Approver => Role::Approver,
            RoleArg::Admin => Role::Admin,
        }
    }
}

/// `serve token …`.
fn token(global: &Global, ws: &Workspace, command: TokenCommand) -> Result<u8, CliError> {
    match command {
        TokenCommand::Create { name, role } => {
            let (person, token) = people::create(ws, &name, role.into())?;
            let link = loopwright_daemon::serving(ws).map(|s| s.sign_in_url(&token));
            if global.json {
                let mut out = serde_json::json!({"name": person.name, "role": person.role, "token": token});
                if let Some(link) = &link {
                    out["url"] = serde_json::Value::String(link.clone());
                }
                println!("{out}");
            } else {
                println!("{} ({}): {token}", person.name, person.role.as_str());
                match link {
                    Some(link) => println!("sign-in link: {link}"),
                    None => println!("sign in at the daemon's address with ?token={token} (shown once)"),
                }
            }
        }
        TokenCommand::List => {
            let all = people::list(ws)?;
            if global.json {
                let rows: Vec<_> = all
                    .iter()
                    .map(
                        |p| serde_json::json!({"name": p.name, "role": p.role, "created_at": p.created_at.to_string()}),
                    )
                    .collect();
                println!("{}", serde_json::Value::Array(rows));
            } else if all.is_empty() {
                println!("nobody has a token of their own (`loopwright serve token create NAME`)");
            } else {
                let width = all.iter().map(|p| p.name.chars().count()).max().unwrap_or(4).max(4);
                println!("{:width$}  {:8}  created", "name", "role");
                for p in &all {
                    println!(
                        "{:width$}  {:8}  {}",
                        p.name,
                        p.role.as_str(),
                        p.created_at.strftime("%Y-%m-%d %H:%M UTC")
                    );
                }
            }
        }
        TokenCommand::Revoke { name } => {
            let person = people::revoke(ws, &name)?;
            if global.json {
                println!("{}", serde_json::json!({"name": person.name, "revoked": true}));
            } else {
                println!("{}'s token is revoked", person.name);
            }
        }
    }
    Ok(0)
}

/// `loopwright serve`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    if let Some(ServeCommand::Token(command)) = args.command {
        return token(global, &ws, command);
    }
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
        trust_proxy_header: args.trust_proxy_header,
        trust_proxy_from: args.trust_proxy_from,
        metrics_addr: args.metrics_addr,
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
