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
//! - `/api/` needs the bearer token, or the dashboard's cookie, except `GET /api/health`.
//!
//! The cookie's name is unique to the daemon's token, so two workspaces' dashboards on one
//! machine (cookies are shared by every port of a host) never sign each other out.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::Shared;

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

/// Compares without stopping at the first difference (the token is a secret).
pub fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
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
    let open = path == "/api/health" && request.method() == Method::GET;
    if path.starts_with("/api/") && !open && !token_of(&shared, headers).is_some_and(|t| same_token(&t, &shared.token))
    {
        return ApiError::unauthorized().into_response();
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
    next.run(request).await
}
