//! The dashboard at `/`: opened through the URL the daemon prints, which carries the token
//! once; the token is then kept in an `HttpOnly`, `SameSite=Strict` cookie.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use crate::Shared;
use crate::api::auth::{COOKIE, cookie_token, same_token};

/// `/?token=…`.
#[derive(Debug, Deserialize)]
struct Open {
    token: Option<String>,
}

/// The dashboard's routes.
pub fn router() -> Router<Arc<Shared>> {
    Router::new().route("/", axum::routing::get(index))
}

async fn index(State(shared): State<Arc<Shared>>, Query(open): Query<Open>, headers: HeaderMap) -> Response {
    if let Some(token) = open.token {
        if !same_token(&token, &shared.token) {
            return (
                StatusCode::UNAUTHORIZED,
                Html("<h1>Wrong token</h1><p>Open the URL <code>loopwright serve</code> printed.</p>"),
            )
                .into_response();
        }
        let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
        return (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_owned())])
            .into_response();
    }
    if !cookie_token(&headers).is_some_and(|t| same_token(&t, &shared.token)) {
        return (StatusCode::UNAUTHORIZED, Html("<h1>loopwright</h1><p>Open the URL <code>loopwright serve</code> printed (it carries the access token once).</p>")).into_response();
    }
    Html("<!doctype html><title>loopwright</title><h1>loopwright</h1><p>The API is at <a href=\"/openapi.json\">/openapi.json</a>.</p>").into_response()
}
