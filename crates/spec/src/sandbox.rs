//! How a stage's processes are confined (SPEC §12): whether they run in a sandbox, and what
//! network a sandboxed process reaches.

use std::fmt;

use serde::{Deserialize, Serialize};

/// `sandbox = …` in config.toml, or `sandbox:` on a stage. Ordered from the least confinement
/// to the most (`off` < `auto` < `required`), so a floor is a `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Unsandboxed, as the user (plan-mode stages watched for changes instead).
    Off,
    /// Sandboxed where this machine can make one; otherwise unsandboxed, said once. The
    /// default where config.toml does not say: nothing a person does in the workspace while a
    /// stage runs is taken for the stage's change where a sandbox can be made.
    #[default]
    Auto,
    /// Sandboxed, or nothing runs.
    Required,
}

impl SandboxMode {
    /// Every mode with its name.
    pub const ALL: [(&'static str, SandboxMode); 3] =
        [("off", SandboxMode::Off), ("auto", SandboxMode::Auto), ("required", SandboxMode::Required)];

    /// Parses `off`, `auto` or `required`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, m)| *m)
    }

    /// The mode's name as written.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, m)| *m == self).map_or("off", |(n, _)| n)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a sandboxed process may reach (`network:` on a stage or an agent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Nothing: loopback of its own only.
    None,
    /// The agent's API host: its `base_url`, or the host its CLI talks to.
    Model,
    /// These hosts (HTTPS through loopwright's proxy; an address written as one is reached
    /// as written, loopback included).
    Hosts(Vec<Host>),
}

impl Network {
    /// Parses `none` or `model`; a list of hosts is parsed with [`Host::parse`].
    pub fn word(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Network::None),
            "model" => Some(Network::Model),
            _ => None,
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::None => f.write_str("none"),
            Network::Model => f.write_str("model"),
            Network::Hosts(hosts) => {
                let shown: Vec<String> = hosts.iter().map(Host::to_string).collect();
                write!(f, "[{}]", shown.join(", "))
            }
        }
    }
}

/// A host a sandboxed process may reach, with its port; or a host Unix socket it may connect
/// to (`unix:/path`, port 0: see [`Host::unix_socket`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    /// The name or address, lower case, without brackets; `unix:` and an absolute path for a
    /// Unix socket.
    pub host: String,
    /// The port (443 unless written; 80 for an `http://` URL; 0 for a Unix socket).
    pub port: u16,
}

/// How a Unix socket is written in `network:`.
const UNIX: &str = "unix:";

impl Host {
    /// Parses `host`, `host:port`, `[v6]:port`, a URL (`https://host[:port]/…`), or
    /// `unix:/absolute/path` for a host Unix socket.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix(UNIX) {
            let clean = std::path::Path::new(path)
                .components()
                .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
            if !path.starts_with('/') || !clean || path.len() < 2 {
                return Err(format!("`{text}`: a Unix socket is written `unix:/absolute/path` (no `..`)"));
            }
            return Ok(Self { host: format!("{UNIX}{path}"), port: 0 });
        }
        let url = if text.contains("://") { text.to_owned() } else { format!("https://{text}") };
        let parsed = url::Url::parse(&url).map_err(|e| format!("`{text}` is not a host, host:port or URL ({e})"))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!("`{text}` carries a user name; write the host alone"));
        }
        if !matches!(parsed.scheme(), "https" | "http") {
            return Err(format!("`{text}`: only https:// and http:// hosts can be reached"));
        }
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(format!("`{text}` names no host")),
        };
        let port = parsed.port_or_known_default().unwrap_or(443);
        Ok(Self { host, port })
    }
}

impl Host {
    /// The host Unix socket this names, if it names one.
    pub fn unix_socket(&self) -> Option<&std::path::Path> {
        self.host.strip_prefix(UNIX).filter(|_| self.port == 0).map(std::path::Path::new)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unix_socket().is_some() {
            f.write_str(&self.host)
        } else if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_with_their_ports() {
        let parsed: Vec<Result<String, ()>> = [
            "api.anthropic.com",
            "https://API.openai.com/v1",
            "http://127.0.0.1:8080/v1",
            "127.0.0.1:9",
            "[::1]:9",
            "user@host",
            "",
            "ftp://x",
            "unix:/run/postgresql/.s.PGSQL.5432",
            "unix:run/x",
            "unix:/run/../etc/x",
        ]
        .iter()
        .map(|t| Host::parse(t).map(|h| h.to_string()).map_err(|_| ()))
        .collect();
        assert_eq!(
            parsed,
            [
                Ok("api.anthropic.com:443".into()),
                Ok("api.openai.com:443".into()),
                Ok("127.0.0.1:8080".into()),
                Ok("127.0.0.1:9".into()),
                Ok("[::1]:9".into()),
                Err(()),
                Err(()),
                Err(()),
                Ok("unix:/run/postgresql/.s.PGSQL.5432".into()),
                Err(()),
                Err(()),
            ]
        );
    }
}
