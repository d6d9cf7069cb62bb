//! Who may talk to the daemon (SPEC §9 "Access"): the `Host` a request names must be the
//! served address, `localhost` or `127.0.0.1` (DNS rebinding); a state-changing request with
//! a foreign `Origin` is refused (cross-site forms); `/api/` needs the bearer token (or the
//! dashboard's cookie), except `GET /api/health`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::Shared;

/// The cookie the dashboard keeps the token in.
pub const COOKIE: &str = "loopwright_token";

/// The host part of a `Host` header or an origin's authority, without the port.
fn host_only(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { authority })
}

/// True when `authority` (`host[:port]`) names this daemon.
fn allowed_authority(shared: &Shared, authority: &str) -> bool {
    let host = host_only(authority).to_ascii_lowercase();
    authority == shared.addr.to_string()
        || host == "localhost"
        || host == "127.0.0.1"
        || host == "::1"
        || host == shared.addr.ip().to_string()
}

/// The token the request carries: `Authorization: Bearer`, else the dashboard's cookie.
fn token_of(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        return value.strip_prefix("Bearer ").map(|t| t.trim().to_owned());
    }
    cookie_token(headers)
}

/// The token in the dashboard's cookie, if the request carries it.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_owned())
    })
}

/// Compares without stopping at the first difference (the token is a secret).
pub fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The access check, as middleware around every route.
pub async fn check(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !allowed_authority(&shared, host) {
        return ApiError::forbidden(format!("the Host `{host}` is not this daemon's address")).into_response();
    }
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if changes && let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if !authority.is_some_and(|a| allowed_authority(&shared, a)) {
            return ApiError::forbidden(format!("requests from the origin `{origin}` may not change anything here"))
                .into_response();
        }
    }
    let path = request.uri().path();
    let open = path == "/api/health" && request.method() == Method::GET;
    if path.starts_with("/api/") && !open && !token_of(headers).is_some_and(|t| same_token(&t, &shared.token)) {
        return ApiError::unauthorized().into_response();
    }
    next.run(request).await
}
