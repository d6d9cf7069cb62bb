//! The network a sandboxed process gets (SPEC §12): none of its own, and an HTTP `CONNECT`
//! proxy on a Unix socket that loopwright runs for it, which opens a tunnel only to the hosts
//! the stage may reach (`network: model | [host, …]`) and refuses every other, keeping what it
//! refused for the run's journal. hyper does the HTTP; this module only decides and copies.
//!
//! A host allowed by name must resolve to public addresses only: a name pointing at loopback,
//! a private network or a link-local address is refused, or an allowed name could be made to
//! reach inside. An address allowed as written (`127.0.0.1:8080`) is reached as written: the
//! person who wrote it chose it.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixListener};

/// A host a sandboxed process may reach, with its port (443 unless written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The host name or address, lower case.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Allowed {
    /// Parses `host`, `host:port`, `[v6]:port` or `https://host[:port]/…`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().trim_start_matches("https://").trim_start_matches("http://");
        let authority = text.split('/').next()?.trim();
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        let uri: hyper::http::uri::Authority = authority.parse().ok()?;
        let host = uri.host().trim_matches(['[', ']']).to_ascii_lowercase();
        Some(Self { host, port: uri.port_u16().unwrap_or(443) })
    }
}

/// A tunnel the proxy refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What was asked for (`host:port`, or the request line of a request that was not a
    /// `CONNECT`).
    pub target: String,
    /// Why, in words.
    pub why: String,
}

/// A running proxy: its socket, and what it refused so far.
pub struct Proxy {
    /// The Unix socket it listens on.
    pub socket: PathBuf,
    refused: Arc<Mutex<Vec<Refused>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// What it refused so far, oldest first.
    pub fn refused(&self) -> Vec<Refused> {
        self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// True for addresses a name allowed by name may not lead to: loopback, private, link-local,
/// unspecified, and their IPv6 kin (IPv4-mapped ones included).
fn inside(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified() || v4.is_broadcast()
                // 100.64.0.0/10, carrier-grade NAT
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => inside(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                v6.is_loopback() || v6.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
            }
        },
    }
}

/// Why a tunnel is not opened.
#[derive(Debug, thiserror::Error)]
enum Unreachable {
    /// The stage does not name the host and port.
    #[error("not a host this stage may reach")]
    NotAllowed,
    /// The name has no address (and why, in parentheses, when the resolver said).
    #[error("the name does not resolve{0}")]
    Unresolved(String),
    /// The name resolves into this machine's own networks.
    #[error("the name resolves to {0}, an address inside this machine's networks")]
    Inside(IpAddr),
}

/// Where a tunnel to `host:port` goes, if it may: the addresses to connect to.
async fn resolve(allow: &[Allowed], host: &str, port: u16) -> Result<Vec<SocketAddr>, Unreachable> {
    let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    if !allow.iter().any(|a| a.host == host && a.port == port) {
        return Err(Unreachable::NotAllowed);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        // Allowed as written.
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| Unreachable::Unresolved(format!(" ({e})")))?
        .collect();
    if found.is_empty() {
        return Err(Unreachable::Unresolved(String::new()));
    }
    if let Some(bad) = found.iter().find(|a| inside(a.ip())) {
        return Err(Unreachable::Inside(bad.ip()));
    }
    Ok(found)
}

/// Starts a proxy on `socket` (a path loopwright owns; an old socket there is replaced) that
/// tunnels only to `allow`.
pub fn start(socket: &Path, allow: Vec<Allowed>) -> std::io::Result<Proxy> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    let refused: Arc<Mutex<Vec<Refused>>> = Arc::default();
    let allow = Arc::new(allow);
    let noted = Arc::clone(&refused);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (allow, noted) = (Arc::clone(&allow), Arc::clone(&noted));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let (allow, noted) = (Arc::clone(&allow), Arc::clone(&noted));
                    async move { Ok::<_, std::convert::Infallible>(answer(req, &allow, &noted).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok(Proxy { socket: socket.to_path_buf(), refused, task })
}

fn reply(status: StatusCode, text: &str) -> Response<String> {
    let mut r = Response::new(format!("{text}\n"));
    *r.status_mut() = status;
    r
}

async fn answer(req: Request<Incoming>, allow: &[Allowed], noted: &Mutex<Vec<Refused>>) -> Response<String> {
    let refuse = |target: String, why: String, status: StatusCode| {
        let text = format!("loopwright: {target} refused: {why}");
        noted.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Refused { target, why });
        reply(status, &text)
    };
    if req.method() != Method::CONNECT {
        let target = format!("{} {}", req.method(), req.uri());
        return refuse(target, "only HTTPS tunnels (CONNECT) go through".into(), StatusCode::METHOD_NOT_ALLOWED);
    }
    let Some(authority) = req.uri().authority().cloned() else {
        return refuse(req.uri().to_string(), "no host:port".into(), StatusCode::BAD_REQUEST);
    };
    let (host, port) = (authority.host().to_owned(), authority.port_u16().unwrap_or(443));
    let target = format!("{host}:{port}");
    let addresses = match resolve(allow, &host, port).await {
        Ok(a) => a,
        Err(why) => return refuse(target, why.to_string(), StatusCode::FORBIDDEN),
    };
    let upstream = match TcpStream::connect(&addresses[..]).await {
        Ok(s) => s,
        Err(e) => return reply(StatusCode::BAD_GATEWAY, &format!("loopwright: {target}: {e}")),
    };
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            let mut client = TokioIo::new(upgraded);
            let mut upstream = upstream;
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
    });
    Response::new(String::new())
}

/// Inside a sandbox with no network of its own: takes the connections of `listener` (on
/// loopback) and carries each to the proxy's Unix socket, since most tools take `HTTPS_PROXY` only as a
/// TCP address. Runs until the task is dropped.
pub async fn forward(listener: tokio::net::TcpListener, socket: PathBuf) -> std::io::Result<()> {
    loop {
        let (mut client, _) = listener.accept().await?;
        let socket = socket.clone();
        tokio::spawn(async move {
            if let Ok(mut proxy) = tokio::net::UnixStream::connect(&socket).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut proxy).await;
            }
        });
    }
}

/// Inside a sandbox with no network of its own: takes the connections of `listener` (on
/// loopback, at the address `target` names) and carries each through the proxy's Unix socket as
/// a `CONNECT target` tunnel, so that a program reaching an address allowed as written
/// (`127.0.0.1:8080`, a local model server) connects as it would outside, proxy settings or
/// not; the proxy still decides. Runs until the task is dropped.
pub async fn tunnel(listener: tokio::net::TcpListener, socket: PathBuf, target: String) -> std::io::Result<()> {
    loop {
        let (mut client, _) = listener.accept().await?;
        let (socket, target) = (socket.clone(), target.clone());
        tokio::spawn(async move {
            let Ok(stream) = tokio::net::UnixStream::connect(&socket).await else { return };
            let Ok((mut sender, connection)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await else {
                return;
            };
            tokio::spawn(connection.with_upgrades());
            let Ok(request) = Request::connect(target.as_str())
                .header(hyper::header::HOST, target.as_str())
                .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            else {
                return;
            };
            let Ok(response) = sender.send_request(request).await else { return };
            if response.status() != StatusCode::OK {
                return;
            }
            if let Ok(upgraded) = hyper::upgrade::on(response).await {
                let mut upstream = TokioIo::new(upgraded);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_hosts_parse_with_their_ports() {
        let parsed: Vec<Option<Allowed>> =
            ["api.anthropic.com", "https://API.openai.com/v1", "127.0.0.1:8080", "[::1]:9", "user@host", ""]
                .iter()
                .map(|t| Allowed::parse(t))
                .collect();
        let a = |host: &str, port| Some(Allowed { host: host.into(), port });
        assert_eq!(
            parsed,
            [a("api.anthropic.com", 443), a("api.openai.com", 443), a("127.0.0.1", 8080), a("::1", 9), None, None]
        );
    }

    #[test]
    fn addresses_inside_are_told_apart() {
        let inside_ones = [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.5.4",
            "169.254.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ];
        for ip in inside_ones {
            assert!(inside(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["1.1.1.1", "140.82.112.3", "2606:4700::1111"] {
            assert!(!inside(ip.parse().expect("ip")), "{ip}");
        }
    }
}
