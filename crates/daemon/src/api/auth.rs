//! Who may talk to the daemon (SPEC §9 "Access", "Origins and cookies"):
//!
//! - the `Host` a request names must be an address (an IP literal cannot be rebound),
//!   `localhost`, or the host of `--public-url`: a DNS name an attacker controls that
//!   resolves to this machine gets 403 (DNS rebinding);
//! - a state-changing request that carries an `Origin` must come from the very origin it is
//!   addressed to — scheme, host **and port** (`http://` + its `Host`) — or from the public
//!   URL's origin: a page on another local port is foreign;
//! - a state-changing request must say `Content-Type: application/json` (415): no HTML form
//!   and no `text/plain` body can act. Only a request with the bearer token (which no page of
//!   another origin can add without the browser asking first) may omit it when it has no body;
//! - `/api/` needs a token — the workspace's (`serve.token`, an admin) or a person's
//!   (`loopwright serve token create`, kept hashed) — as a bearer token or the dashboard's
//!   cookie, except `GET /api/health`; or, from an address `--trust-proxy-from` names, the
//!   person a reverse proxy vouches for in the `--trust-proxy-header` header;
//! - the [`Caller`] found is handed to the handlers: answers are journaled under a person's
//!   name (their `by` is ignored), and a viewer may change nothing (403).
//!
//! The cookie's name is unique to the daemon's token, so two workspaces' dashboards on one
//! machine (cookies are shared by every port of a host) never sign each other out.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use loopwright_app::ops::answer::Answerer;
use loopwright_app::ops::people::{self, Person, Role};
use loopwright_engine::event::Via;
use loopwright_spec::pipeline::ApproverRole;

use super::error::ApiError;
use crate::Shared;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The person, when known (a person's token, or a trusted proxy's header); `None` for the
    /// workspace's token, whose holder says who they are with `by`.
    pub person: Option<String>,
    /// What they may do.
    pub role: Role,
    /// How the request came: the dashboard (its cookie, or a trusted proxy's browser) or the
    /// API (a bearer token).
    pub via: Via,
}

impl Caller {
    /// Who answers a gate or an escalation: the name journaled (as [`Caller::by`]), the role
    /// that answers they hold, whether a token proves the name, and the channel.
    pub fn answerer(&self, given: Option<String>) -> Result<Answerer, ApiError> {
        Ok(Answerer {
            name: self.by(given)?,
            role: approver_role(self.role),
            verified: self.person.is_some(),
            via: self.via,
        })
    }

    /// The name an answer is journaled under: the person's, else the `by` given (checked).
    pub fn by(&self, given: Option<String>) -> Result<String, ApiError> {
        match &self.person {
            Some(name) => Ok(name.clone()),
            None => super::dto::who(given),
        }
    }

    /// Refuses unless the caller may do what `role` may.
    pub fn needs(&self, role: Role) -> Result<(), ApiError> {
        if self.role >= role {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "{} is a {}: this needs the {} role (`loopwright serve token create NAME --role {}`)",
            self.person.as_deref().unwrap_or("this token"),
            self.role.as_str(),
            role.as_str(),
            role.as_str()
        )))
    }
}

/// The people of the workspace, read again whenever `people.json` changes (a token created
/// or revoked from the command line counts from the next request).
pub struct People {
    file: PathBuf,
    read: Mutex<(Option<Stamp>, Vec<Person>)>,
}

type Stamp = (std::time::SystemTime, u64, u64);

impl People {
    /// The people kept at `file`.
    pub fn new(file: PathBuf) -> Self {
        Self { file, read: Mutex::new((None, Vec::new())) }
    }

    fn stamp(&self) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.file).ok()?;
        Some((m.modified().ok()?, m.len(), m.ino()))
    }

    /// The people as the file says now (none when it cannot be read: nobody signs in by it).
    fn current<T>(&self, look: impl FnOnce(&[Person]) -> T) -> T {
        let stamp = self.stamp();
        let mut read = self.read.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if read.0 != stamp || stamp.is_none() {
            *read = (stamp, people::load(&self.file).unwrap_or_default());
        }
        look(&read.1)
    }

    /// The person whose token is `token`.
    pub fn by_token(&self, token: &str) -> Option<Person> {
        self.current(|all| people::find(all, token).cloned())
    }

    /// The names of those who may answer gates and escalations, sorted.
    pub fn answerers(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.current(|all| all.iter().filter(|p| p.role.may_answer()).map(|p| p.name.clone()).collect());
        names.sort();
        names
    }

    /// The role given to `name`, if they have a token.
    pub fn role_of(&self, name: &str) -> Option<Role> {
        self.current(|all| all.iter().find(|p| p.name == name).map(|p| p.role))
    }
}

/// A reverse proxy trusted to say who its users are.
#[derive(Debug, Clone)]
pub struct TrustedProxy {
    /// The header naming the user (`X-Forwarded-User`).
    pub header: axum::http::HeaderName,
    /// The addresses the proxy connects from.
    pub from: Vec<ipnet::IpNet>,
}

/// Who `token` signs in as: the workspace's token is an admin without a name; a person's
/// token is that person.
pub fn caller_of_token(shared: &Shared, token: &str) -> Option<Caller> {
    if people::same(token, &shared.token) {
        return Some(Caller { person: None, role: Role::Admin, via: Via::Api });
    }
    shared.people.by_token(token).map(|p| Caller { person: Some(p.name), role: p.role, via: Via::Api })
}

/// The person a trusted proxy names, when the request came from it. A name the people file
/// knows has that person's role; anyone else is a viewer.
fn caller_from_proxy(shared: &Shared, request: &Request) -> Option<Caller> {
    let proxy = shared.proxy.as_ref()?;
    let ConnectInfo(peer) = request.extensions().get::<ConnectInfo<SocketAddr>>()?;
    let ip = peer.ip().to_canonical();
    if !proxy.from.iter().any(|net| net.contains(&ip)) {
        return None;
    }
    let name = request.headers().get(&proxy.header)?.to_str().ok()?.trim();
    people::check_name(name).ok()?;
    let role = shared.people.role_of(name).unwrap_or(Role::Viewer);
    Some(Caller { person: Some(name.to_owned()), role, via: Via::Dashboard })
}

/// The name of the cookie the dashboard keeps `token` in: `loopwright_` and 16 hex digits of
/// a hash of the token (one name per daemon; the hash says nothing useful about the token).
pub fn cookie_name(token: &str) -> String {
    // FNV-1a: stable across builds, unlike the standard library's hasher.
    let hash = loopwright_engine::hash::fnv1a(token.as_bytes());
    format!("loopwright_{hash:016x}")
}

/// The host part of a `Host` header or an origin's authority, without the port.
fn host_only(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { authority })
}

/// True when a request may name `authority` (`host[:port]`) as its `Host`: an IP address, a
/// loopback name, or the public URL's host.
fn allowed_host(shared: &Shared, authority: &str) -> bool {
    let host = host_only(authority).to_ascii_lowercase();
    host.parse::<std::net::IpAddr>().is_ok()
        || host == "localhost"
        || shared.public.as_ref().is_some_and(|p| p.host.eq_ignore_ascii_case(&host))
}

/// True when `origin` is the origin the request was sent to (`http://` and its `Host`), or
/// the public URL's.
fn same_origin(shared: &Shared, origin: &str, host: &str) -> bool {
    origin.eq_ignore_ascii_case(&format!("http://{host}"))
        || shared.public.as_ref().is_some_and(|p| origin.eq_ignore_ascii_case(&p.origin))
}

/// The token the request carries: `Authorization: Bearer`, else the dashboard's cookie.
fn token_of(shared: &Shared, headers: &HeaderMap) -> Option<String> {
    bearer(headers).or_else(|| cookie_token(headers, &shared.cookie))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(|t| t.trim().to_owned())
}

/// The value of the cookie named `name`, if the request carries it.
pub fn cookie_token(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (n, value) = c.trim().split_once('=')?;
        (n == name).then(|| value.to_owned())
    })
}

/// True when the request's body is declared JSON (`application/json`, parameters allowed).
fn declares_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")))
}

/// The access check, as middleware around every route.
pub async fn check(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !allowed_host(&shared, host) {
        return ApiError::forbidden(format!("the Host `{host}` is not this daemon's address")).into_response();
    }
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes && let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !same_origin(&shared, origin, host) {
            return ApiError::forbidden(format!("requests from the origin `{origin}` may not change anything here"))
                .into_response();
        }
    }
    let path = request.uri().path();
    // GitHub's deliveries carry no token: their signature is checked by their handler.
    let open = (path == "/api/health" && request.method() == Method::GET)
        || (path == "/api/github/webhook" && request.method() == Method::POST);
    let caller = caller_from_proxy(&shared, &request).or_else(|| {
        let mut caller = token_of(&shared, headers).and_then(|t| caller_of_token(&shared, &t))?;
        // Signed in by the dashboard's cookie, not a bearer token: the dashboard.
        if bearer(headers).is_none() {
            caller.via = Via::Dashboard;
        }
        Some(caller)
    });
    if (path.starts_with("/api/") || path == "/metrics") && !open && caller.is_none() {
        return ApiError::unauthorized().into_response();
    }
    if changes
        && path.starts_with("/api/")
        && let Some(c) = &caller
        && let Err(refused) = c.needs(Role::Approver)
    {
        return refused.into_response();
    }
    let token_without_body_type = bearer(headers).is_some() && headers.get(header::CONTENT_TYPE).is_none();
    if changes && !declares_json(headers) && !token_without_body_type {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid",
            "a request that changes something must send `Content-Type: application/json`",
        )
        .into_response();
    }
    let mut request = request;
    if let Some(caller) = caller {
        request.extensions_mut().insert(caller);
    }
    next.run(request).await
}

/// A handler that takes a [`Caller`] gets the one the access check found (every `/api/`
/// route but the health check has one).
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(ApiError::unauthorized)
    }
}

/// The role that answers gates `role` amounts to.
pub fn approver_role(role: Role) -> Option<ApproverRole> {
    match role {
        Role::Admin => Some(ApproverRole::Admin),
        r if r.may_answer() => Some(ApproverRole::Approver),
        _ => None,
    }
}
