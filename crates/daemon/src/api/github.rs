//! `POST /api/github/webhook`: GitHub's deliveries. No bearer token: the body must be signed
//! with the webhook's secret (`X-Hub-Signature-256`), checked before anything is read; an
//! unsigned or wrongly signed delivery is 401 and starts nothing, a delivery id seen before is
//! ignored.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorBody};
use crate::Shared;
use crate::github::{Outcome, act, woken};

type ApiResult<T> = Result<T, ApiError>;

/// Receives a GitHub webhook delivery (JSON, signed with the webhook's secret) and does what
/// it asks for: a labelled issue or a `/loopwright run …` comment starts a run, a
/// `/loopwright retry|skip|abort|fix …` comment answers one, someone without the permission is
/// told so once. Events and repositories loopwright does not act on are acknowledged.
#[utoipa::path(post, path = "/api/github/webhook", tag = "github",
    request_body(content = Object, description = "A GitHub webhook payload", content_type = "application/json"),
    params(
        ("X-GitHub-Event" = String, Header, description = "The event's name (`issues`, `issue_comment`, …)"),
        ("X-GitHub-Delivery" = String, Header, description = "The delivery's id"),
        ("X-Hub-Signature-256" = String, Header, description = "`sha256=` and the HMAC SHA-256 of the body with the webhook's secret"),
    ),
    security(()),
    responses((status = 202, body = Outcome), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn webhook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let unsigned = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the delivery is not signed with this webhook's secret (X-Hub-Signature-256)",
        )
    };
    let Some(signature) = header("x-hub-signature-256") else { return Err(unsigned()) };
    let (Some(event), Some(delivery)) = (header("x-github-event"), header("x-github-delivery")) else {
        return Err(ApiError::invalid("a delivery names its event (X-GitHub-Event) and its id (X-GitHub-Delivery)"));
    };
    let Some(config) = &shared.ws.config.github else {
        return Err(ApiError::not_found("this workspace has no [github] section: it takes no webhooks"));
    };
    let secret = std::env::var(&config.webhook_secret_env).ok().filter(|s| !s.is_empty());
    let signed = secret
        .as_deref()
        .is_some_and(|s| loopwright_forge::github::webhook::verify(s.as_bytes(), &body, Some(signature)));
    if !signed {
        return Err(unsigned());
    }
    if !shared.github_seen.first(delivery) {
        let outcome = Outcome::Ignored { reason: format!("delivery {delivery} was received before") };
        return Ok((StatusCode::ACCEPTED, axum::Json(outcome)).into_response());
    }
    let happening =
        loopwright_forge::github::webhook::parse(event, &body).map_err(|e| ApiError::invalid(e.to_string()))?;
    let github = shared
        .github
        .get_or_try_init(|| async { loopwright_app::ops::github::adapter(&shared.ws).map(|(github, _)| github) })
        .await?;
    let outcome = act(&shared.ws, &shared.store, github, &happening).await?;
    if woken(&outcome).is_some() {
        shared.runs.wake.notify_one();
    }
    Ok((StatusCode::ACCEPTED, axum::Json(outcome)).into_response())
}
