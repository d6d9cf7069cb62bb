//! The HTTP side of the GitHub adapter: reqwest with GitHub's headers, the sign-in (a token,
//! or a GitHub App's installation token renewed before it expires), the primary and secondary
//! rate limits (`X-RateLimit-*`, `Retry-After`: waited out when short, else a typed
//! [`ForgeError::RateLimited`] and the pause shared through a [`RateGate`]), server errors
//! tried again, and conditional requests (ETags) for what is polled.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use super::app::AppKey;
use crate::port::ForgeError;

/// A future a gate answers with.
pub type GateFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What GitHub's requests wait on: the pauses GitHub asked for and what `[[limits]]` allow for
/// the provider `github`, kept where every process sharing it sees them (the journal's store),
/// or in this process only ([`LocalGate`]).
pub trait RateGate: Send + Sync {
    /// Waits until a request may go; `Err(until)` when that is later than `max` from now.
    fn ready(&self, max: Duration) -> GateFuture<'_, Result<(), jiff::Timestamp>>;
    /// GitHub asked for requests to wait until `until`, saying `why`.
    fn pause<'a>(&'a self, until: jiff::Timestamp, why: &'a str) -> GateFuture<'a, ()>;
}

/// A gate kept in this process only.
#[derive(Debug, Default)]
pub struct LocalGate(Mutex<Option<jiff::Timestamp>>);

impl RateGate for LocalGate {
    fn ready(&self, max: Duration) -> GateFuture<'_, Result<(), jiff::Timestamp>> {
        let paused = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        Box::pin(async move { wait_until(paused, max).await })
    }
    fn pause<'a>(&'a self, until: jiff::Timestamp, _: &'a str) -> GateFuture<'a, ()> {
        let mut at = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_none_or(|t| t < until) {
            *at = Some(until);
        }
        Box::pin(async {})
    }
}

/// Sleeps until `until` when it is at most `max` away; else `Err(until)`.
pub async fn wait_until(until: Option<jiff::Timestamp>, max: Duration) -> Result<(), jiff::Timestamp> {
    let Some(until) = until else { return Ok(()) };
    let now = jiff::Timestamp::now();
    if until <= now {
        return Ok(());
    }
    let wait = Duration::try_from(until.duration_since(now)).unwrap_or_default();
    if wait > max {
        return Err(until);
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

/// How requests are signed.
pub enum Auth {
    /// A personal or fine-grained token.
    Token(String),
    /// A GitHub App's installation.
    App {
        /// The App's key.
        key: Box<AppKey>,
        /// The installation.
        installation_id: u64,
        /// The installation token and when it expires.
        token: Mutex<Option<(String, jiff::Timestamp)>>,
    },
}

/// Counts of what was sent (for the polling benchmark).
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests sent.
    pub requests: AtomicU64,
    /// Of them, answered `304 Not Modified`.
    pub not_modified: AtomicU64,
}

/// The client.
pub struct Client {
    http: reqwest::Client,
    api: String,
    auth: Auth,
    gate: std::sync::Arc<dyn RateGate>,
    /// The longest wait a rate limit is waited out in place (longer: `RateLimited`).
    max_wait: Duration,
    etags: Mutex<HashMap<String, (String, bytes::Bytes)>>,
    /// What was sent.
    pub counters: Counters,
}

/// An answer read: its status, headers and body.
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The body.
    pub body: bytes::Bytes,
    /// The `Link` header (pagination).
    pub link: Option<String>,
}

impl Client {
    /// A client of the API at `api` (no trailing slash needed).
    pub fn new(api: &str, auth: Auth, gate: std::sync::Arc<dyn RateGate>) -> Result<Client, ForgeError> {
        crate::tls();
        let http = reqwest::Client::builder()
            .user_agent(concat!("loopwright/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| ForgeError::Setup(format!("an HTTP client for GitHub: {e}")))?;
        Ok(Client {
            http,
            api: api.trim_end_matches('/').to_owned(),
            auth,
            gate,
            max_wait: Duration::from_secs(120),
            etags: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        })
    }

    /// Waits out rate limits of at most `wait` in place.
    pub fn with_max_wait(mut self, wait: Duration) -> Client {
        self.max_wait = wait;
        self
    }

    /// The API's root.
    pub fn api(&self) -> &str {
        &self.api
    }

    /// A request's JSON answer, read as `T`; `what` names it in errors.
    pub async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
        what: &str,
    ) -> Result<T, ForgeError> {
        let answer = self.send(method, path, body, what, false).await?;
        read(&answer.body, what)
    }

    /// A GET whose answer is kept with its ETag and asked again conditionally: a `304` is
    /// read from what was kept (and costs no rate limit).
    pub async fn json_cached<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T, ForgeError> {
        let answer = self.send(Method::GET, path, None::<&()>, what, true).await?;
        read(&answer.body, what)
    }

    /// Sends one request, waiting out rate limits and trying server errors again.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl serde::Serialize>,
        what: &str,
        conditional: bool,
    ) -> Result<Answer, ForgeError> {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{path}", self.api)
        };
        let mut server_errors = 0;
        loop {
            self.wait_for_gate().await?;
            let mut request = self
                .http
                .request(method.clone(), &url)
                .header("Accept", "application/vnd.github+json")
                .header("X-GitHub-Api-Version", "2022-11-28")
                .header("Authorization", format!("Bearer {}", self.token().await?));
            let kept = if conditional { self.kept(&url) } else { None };
            if let Some((etag, _)) = &kept {
                request = request.header("If-None-Match", etag);
            }
            if let Some(body) = body {
                let bytes = serde_json::to_vec(body)
                    .map_err(|e| ForgeError::Setup(format!("the request for {what} could not be written: {e}")))?;
                request = request.header("Content-Type", "application/json").body(bytes);
            }
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) if server_errors < 2 => {
                    server_errors += 1;
                    tokio::time::sleep(Duration::from_millis(500 << server_errors)).await;
                    let _ = e;
                    continue;
                }
                Err(e) => return Err(ForgeError::Unreachable(format!("{what}: {e}"))),
            };
            let status = response.status();
            let headers = response.headers().clone();
            if let Some(until) = rate_limited(status, &headers, jiff::Timestamp::now()) {
                self.gate.pause(until, &format!("GitHub answered {} to {what}", status.as_u16())).await;
                continue;
            }
            if status.is_server_error() && server_errors < 2 {
                server_errors += 1;
                tokio::time::sleep(Duration::from_millis(500 << server_errors)).await;
                continue;
            }
            let body = response
                .bytes()
                .await
                .map_err(|e| ForgeError::Unreachable(format!("{what}: reading the answer: {e}")))?;
            if status == StatusCode::NOT_MODIFIED
                && let Some((_, kept_body)) = kept
            {
                self.counters.not_modified.fetch_add(1, Ordering::Relaxed);
                return Ok(Answer { status: StatusCode::OK, body: kept_body, link: header(&headers, "link") });
            }
            if !status.is_success() {
                return Err(failure(status, &body, what));
            }
            if conditional && let Some(etag) = header(&headers, "etag") {
                self.etags.lock().unwrap_or_else(|e| e.into_inner()).insert(url.clone(), (etag, body.clone()));
            }
            return Ok(Answer { status, body, link: header(&headers, "link") });
        }
    }

    fn kept(&self, url: &str) -> Option<(String, bytes::Bytes)> {
        self.etags.lock().unwrap_or_else(|e| e.into_inner()).get(url).cloned()
    }

    /// Waits while the gate says to; fails when the wait is longer than allowed in place.
    async fn wait_for_gate(&self) -> Result<(), ForgeError> {
        self.gate.ready(self.max_wait).await.map_err(|until| ForgeError::RateLimited { until })
    }

    /// The token requests are signed with: the App's installation token is asked for when
    /// there is none or it has less than five minutes left.
    pub async fn token(&self) -> Result<String, ForgeError> {
        let (key, installation_id, kept) = match &self.auth {
            Auth::Token(token) => return Ok(token.clone()),
            Auth::App { key, installation_id, token } => (key, *installation_id, token),
        };
        let now = jiff::Timestamp::now();
        if let Some((token, expires)) = kept.lock().unwrap_or_else(|e| e.into_inner()).clone()
            && expires.duration_since(now) > jiff::SignedDuration::from_mins(5)
        {
            return Ok(token);
        }
        #[derive(serde::Deserialize)]
        struct InstallationToken {
            token: String,
            expires_at: jiff::Timestamp,
        }
        let what = "an installation token for the GitHub App";
        let url = format!("{}/app/installations/{installation_id}/access_tokens", self.api);
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let response = self
            .http
            .post(&url)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("Authorization", format!("Bearer {}", key.jwt(now)?))
            .send()
            .await
            .map_err(|e| ForgeError::Unreachable(format!("{what}: {e}")))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| ForgeError::Unreachable(format!("{what}: {e}")))?;
        if !status.is_success() {
            return Err(failure(status, &body, what));
        }
        let fresh: InstallationToken = read(&body, what)?;
        *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some((fresh.token.clone(), fresh.expires_at));
        Ok(fresh.token)
    }

    /// The App's own JWT (for `GET /app`), when signed in as an App.
    pub fn app_jwt(&self) -> Option<Result<String, ForgeError>> {
        match &self.auth {
            Auth::App { key, .. } => Some(key.jwt(jiff::Timestamp::now())),
            Auth::Token(_) => None,
        }
    }

    /// The raw HTTP client (for the App's own requests signed with its JWT).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}

/// When a response is a rate limit: until when to wait. A primary limit is a 403/429 with
/// `X-RateLimit-Remaining: 0` (wait until `X-RateLimit-Reset`); a secondary one carries
/// `Retry-After` (seconds), or says so in a 403 with neither (a minute, as GitHub advises).
pub fn rate_limited(
    status: StatusCode,
    headers: &reqwest::header::HeaderMap,
    now: jiff::Timestamp,
) -> Option<jiff::Timestamp> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    if let Some(seconds) = header(headers, "retry-after").and_then(|s| s.trim().parse::<i64>().ok()) {
        return Some(now + jiff::SignedDuration::from_secs(seconds.clamp(1, 3600)));
    }
    if header(headers, "x-ratelimit-remaining").as_deref() == Some("0") {
        let reset = header(headers, "x-ratelimit-reset").and_then(|s| s.parse::<i64>().ok());
        let until = reset
            .and_then(|r| jiff::Timestamp::from_second(r).ok())
            .unwrap_or(now + jiff::SignedDuration::from_secs(60));
        return Some(until.max(now + jiff::SignedDuration::from_secs(1)));
    }
    (status == StatusCode::TOO_MANY_REQUESTS).then(|| now + jiff::SignedDuration::from_secs(60))
}

fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

fn read<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ForgeError> {
    serde_json::from_slice(body).map_err(|e| ForgeError::Answer { what: what.to_owned(), message: e.to_string() })
}

/// The typed error of a failed request, with GitHub's `message`.
fn failure(status: StatusCode, body: &[u8], what: &str) -> ForgeError {
    #[derive(serde::Deserialize)]
    struct Message {
        message: String,
    }
    let message = serde_json::from_slice::<Message>(body)
        .map(|m| m.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    let code = status.as_u16();
    match status {
        StatusCode::UNAUTHORIZED => ForgeError::Unauthorized(format!("{what}: {message}")),
        StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
            ForgeError::Denied { what: what.to_owned(), status: code, message }
        }
        s if s.is_server_error() => ForgeError::Unreachable(format!("{what}: {code} {message}")),
        _ => ForgeError::Refused { what: what.to_owned(), status: code, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    #[test]
    fn primary_and_secondary_limits_say_how_long_to_wait() {
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("t");
        let mut retry = HeaderMap::new();
        retry.insert("retry-after", HeaderValue::from_static("30"));
        assert_eq!(rate_limited(StatusCode::FORBIDDEN, &retry, now), Some(now + jiff::SignedDuration::from_secs(30)));
        let mut primary = HeaderMap::new();
        primary.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        primary.insert("x-ratelimit-reset", HeaderValue::from_static("1800000100"));
        assert_eq!(
            rate_limited(StatusCode::FORBIDDEN, &primary, now),
            Some(jiff::Timestamp::from_second(1_800_000_100).expect("t"))
        );
        assert_eq!(
            rate_limited(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), now),
            Some(now + jiff::SignedDuration::from_secs(60))
        );
        // A 403 that is no rate limit (no permission) is not waited on.
        let mut plenty = HeaderMap::new();
        plenty.insert("x-ratelimit-remaining", HeaderValue::from_static("4999"));
        assert_eq!(rate_limited(StatusCode::FORBIDDEN, &plenty, now), None);
        assert_eq!(rate_limited(StatusCode::OK, &retry, now), None);
    }
}
