//! `loopwright sandbox-exec` (internal): the first program inside a sandbox whose process has
//! no network of its own. It forwards a loopback port to the allow-list proxy's socket (most
//! tools take `HTTPS_PROXY` only as a TCP address), runs the stage's program with the same
//! stdin, stdout and stderr, and exits as it exits.

use super::Global;
use crate::error::CliError;

/// Arguments of `sandbox-exec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// ADDRESS=SOCKET: listen on ADDRESS (loopback) and carry each connection to SOCKET.
    #[arg(long, value_name = "ADDRESS=SOCKET")]
    pub forward: Option<String>,
    /// ADDRESS (loopback, repeatable): listen on it and carry each connection through the
    /// proxy as a tunnel to the same address outside.
    #[arg(long, value_name = "ADDRESS")]
    pub tunnel: Vec<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

/// `loopwright sandbox-exec`.
pub async fn run(_global: &Global, args: Args) -> Result<u8, CliError> {
    if let Some(forward) = &args.forward {
        let (listen, socket) = forward
            .split_once('=')
            .ok_or_else(|| CliError::usage(format!("--forward {forward}: expected ADDRESS=SOCKET")))?;
        let listen: std::net::SocketAddr = listen
            .parse()
            .map_err(|_| CliError::usage(format!("--forward {forward}: `{listen}` is not an address")))?;
        // Bound before the program starts: its first connection finds the port open.
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| CliError::usage(format!("--forward {forward}: cannot listen on {listen}: {e}")))?;
        tokio::spawn(loopwright_runners::proxy::forward(listener, socket.into()));
    }
    for at in &args.tunnel {
        let Some((_, socket)) = args.forward.as_deref().and_then(|f| f.split_once('=')) else {
            return Err(CliError::usage("--tunnel needs --forward ADDRESS=SOCKET (the proxy's socket)"));
        };
        let listen: std::net::SocketAddr =
            at.parse().map_err(|_| CliError::usage(format!("--tunnel {at}: not an address")))?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| CliError::usage(format!("--tunnel {at}: cannot listen on {listen}: {e}")))?;
        tokio::spawn(loopwright_runners::proxy::tunnel(listener, socket.into(), at.clone()));
    }
    let (program, rest) = args.argv.split_first().ok_or_else(|| CliError::usage("no program to run"))?;
    let status = tokio::process::Command::new(program)
        .args(rest)
        .status()
        .await
        .map_err(|e| CliError::usage(format!("cannot run {program}: {e}")))?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        _ => 1,
    })
}
