//! HTTP runners: `runner: openai` (Chat Completions, any OpenAI-compatible server) and
//! `runner: anthropic` (the Messages API), streaming.
//!
//! The API key comes from the environment only (the variable named by `api_key_env`, else
//! `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`); it goes into a request header and nowhere else.
//! A 429, 503 or 529 is a wait, not a failed attempt: `Retry-After` is honoured (capped), and
//! the time spent waiting is recorded as the usage's `quota_wait_ms`. A 401 or 403 is a
//! configuration error (not retried). In agent mode the answer's edits (see [`edits`]) are
//! applied to the workspace.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use loopwright_engine::event::{Unfixable, Usage};
use loopwright_engine::ports::ExecOutcome;
use loopwright_spec::{Agent, Mode, RunnerKind};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::edits;
use crate::live::LiveSink;

/// Longest wait for a rate limit before trying again.
pub const MAX_QUOTA_WAIT: Duration = Duration::from_secs(60);
/// Rate-limited tries before the attempt fails.
pub const MAX_QUOTA_TRIES: u32 = 6;
/// Model of `runner: openai` agents that name none.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o";
/// Model of `runner: anthropic` agents that name none.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";
/// Answer length when the agent sets no `max_tokens` (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// What an HTTP attempt gave.
#[derive(Debug)]
pub struct Answer {
    /// How it ended.
    pub outcome: ExecOutcome,
    /// The model's answer.
    pub text: String,
    /// What went wrong, for humans.
    pub error: String,
    /// Tokens used and time waited for quota.
    pub usage: Option<Usage>,
    /// Why another agent should take over, when the provider's answer says this agent cannot
    /// go on (SPEC §16 "Fallback").
    pub unfixable: Option<Unfixable>,
}

/// How a request failed: its outcome, what to tell people, and whether the agent cannot fix
/// it.
type Failed = (ExecOutcome, String, Option<Unfixable>);

/// What a provider's refusal means for the agent: status `status` with body `body`, after the
/// rate-limit waits were spent (a 429 here is one past its wait). `None`: another try, or the
/// agent itself, may fix it.
pub fn unfixable(status: u16, body: &str) -> Option<Unfixable> {
    let lower = body.to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    let quota = says(&["insufficient_quota", "credit balance is too low", "exceeded your current quota", "billing"]);
    let context = says(&[
        "context_length_exceeded",
        "prompt is too long",
        "maximum context length",
        "context window",
        "too many tokens",
    ]);
    match status {
        402 => Some(Unfixable::Quota),
        401 | 403 => Some(Unfixable::Authentication),
        413 => Some(Unfixable::ContextLength),
        400 if context => Some(Unfixable::ContextLength),
        400 | 429 if quota => Some(Unfixable::Quota),
        404 if says(&["model"]) => Some(Unfixable::ModelMissing),
        400 if says(&["model_not_found", "does not exist", "unknown model", "invalid model"]) => {
            Some(Unfixable::ModelMissing)
        }
        429 | 503 | 529 => Some(Unfixable::RateLimit),
        _ => None,
    }
}

/// Makes ring rustls's crypto for this process, once. Every HTTP client of the binary (and of
/// its tests) is built after this: reqwest is built without a provider of its own.
pub fn tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Fails only when another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder with TLS ready ([`tls`]).
pub fn client() -> reqwest::ClientBuilder {
    tls();
    reqwest::Client::builder()
}

/// The environment variable holding an agent's key.
pub fn key_var(agent: &Agent) -> String {
    agent.api_key_env.clone().unwrap_or_else(|| {
        if agent.runner == RunnerKind::Anthropic { "ANTHROPIC_API_KEY" } else { "OPENAI_API_KEY" }.to_owned()
    })
}

/// The URL requests go to.
pub fn url(agent: &Agent) -> String {
    let base = agent.base_url.as_deref().map(|b| b.trim_end_matches('/').to_owned());
    match agent.runner {
        RunnerKind::Anthropic => {
            let base = base.unwrap_or_else(|| "https://api.anthropic.com".to_owned());
            if base.ends_with("/v1") { format!("{base}/messages") } else { format!("{base}/v1/messages") }
        }
        _ => format!("{}/chat/completions", base.unwrap_or_else(|| "https://api.openai.com/v1".to_owned())),
    }
}

/// The prompt an HTTP agent is sent: in agent mode, with how to write file edits.
pub fn full_prompt(prompt: &str, mode: Mode) -> String {
    match mode {
        Mode::Agent => format!("{prompt}\n\n{}", edits::INSTRUCTIONS),
        Mode::Plan => prompt.to_owned(),
    }
}

/// One request to a model.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The agent.
    pub agent: &'a Agent,
    /// The full prompt ([`full_prompt`]).
    pub prompt: &'a str,
    /// Plan, or agent (the answer's edits are applied).
    pub mode: Mode,
    /// The JSON Schema the answer must match, when one is asked for: sent as the OpenAI API's
    /// `response_format` (`json_schema`, strict) or as the Anthropic API's one tool, which the
    /// model must call; the answer's text is then that JSON. Such a request is not streamed.
    pub structured: Option<&'a Value>,
}

/// The name of the tool an Anthropic model answers a structured request with.
pub const ANSWER_TOOL: &str = "answer";

/// Runs one request against the agent's API until `deadline`. The answer's text goes to
/// `live` as it streams in.
pub async fn run(
    call: &Call<'_>,
    workspace: &std::path::Path,
    deadline: Instant,
    live: &mut LiveSink<'_>,
    notices: &tokio::sync::mpsc::UnboundedSender<loopwright_engine::ports::Notice>,
) -> Answer {
    let (agent, mode) = (call.agent, call.mode);
    let fail =
        |outcome, error: String, unfixable| Answer { outcome, text: String::new(), error, usage: None, unfixable };
    let answer = match tokio::time::timeout_at(deadline, ask(call, deadline, live, notices)).await {
        Ok(answer) => answer,
        Err(_) => {
            let said = format!("no complete answer from {} before the timeout", url(agent));
            return fail(ExecOutcome::TimedOut, said, None);
        }
    };
    let mut answer = match answer {
        Ok(a) => a,
        Err((outcome, error, unfixable)) => return fail(outcome, error, unfixable),
    };
    if mode == Mode::Agent {
        match edits::apply(&answer.text, workspace) {
            Ok(report) if !report.is_empty() => answer.error = report.join("\n"),
            Ok(_) => {}
            Err(why) => {
                answer.outcome = ExecOutcome::Exited(1);
                answer.error = format!("the answer's edits could not be applied: {why}");
            }
        }
    }
    answer
}

/// Sends the request (waiting out rate limits) and reads the streamed answer.
async fn ask(
    call: &Call<'_>,
    deadline: Instant,
    live: &mut LiveSink<'_>,
    notices: &tokio::sync::mpsc::UnboundedSender<loopwright_engine::ports::Notice>,
) -> Result<Answer, Failed> {
    let (agent, prompt) = (call.agent, call.prompt);
    let url = url(agent);
    let var = key_var(agent);
    let key = std::env::var(&var).ok().filter(|k| !k.is_empty());
    let model = agent.model.clone().unwrap_or_else(|| {
        if agent.runner == RunnerKind::Anthropic { DEFAULT_ANTHROPIC_MODEL } else { DEFAULT_OPENAI_MODEL }.to_owned()
    });
    let body = match agent.runner {
        RunnerKind::Anthropic => {
            let mut b = json!({
                "model": model,
                "max_tokens": agent.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
                "messages": [{"role": "user", "content": prompt}],
                "stream": true,
            });
            if let Some(t) = agent.temperature {
                b["temperature"] = json!(t);
            }
            b
        }
        _ => {
            let mut b = json!({
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "stream": true,
                "stream_options": {"include_usage": true},
            });
            if let Some(m) = agent.max_tokens {
                b["max_tokens"] = json!(m);
            }
            if let Some(t) = agent.temperature {
                b["temperature"] = json!(t);
            }
            b
        }
    };
    let mut body = body;
    if let Some(schema) = call.structured {
        body["stream"] = json!(false);
        if let Some(o) = body.as_object_mut() {
            o.remove("stream_options");
        }
        match agent.runner {
            RunnerKind::Anthropic => {
                body["tools"] = json!([{
                    "name": ANSWER_TOOL,
                    "description": "Give the answer asked for.",
                    "input_schema": schema,
                }]);
                body["tool_choice"] = json!({"type": "tool", "name": ANSWER_TOOL});
            }
            _ => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": {"name": ANSWER_TOOL, "strict": true, "schema": schema},
                });
            }
        }
    }
    let client = client()
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| (ExecOutcome::SpawnFailed(format!("cannot make an HTTP client: {e}")), String::new(), None))?;
    let mut quota_wait = Duration::ZERO;
    let mut tries = 0;
    let response = loop {
        let mut req = client.post(&url).header("content-type", "application/json").body(body.to_string());
        req = match (agent.runner, &key) {
            (RunnerKind::Anthropic, Some(k)) => req.header("x-api-key", k).header("anthropic-version", "2023-06-01"),
            (RunnerKind::Anthropic, None) => req.header("anthropic-version", "2023-06-01"),
            (_, Some(k)) => req.bearer_auth(k),
            (_, None) => req,
        };
        let response = req.send().await.map_err(|e| {
            let said = format!("cannot reach {url}: {}", without_url_secrets(&with_causes(&e)));
            (ExecOutcome::Exited(1), said, None)
        })?;
        let status = response.status().as_u16();
        match status {
            200..=299 => break response,
            401 | 403 => {
                let detail = response.text().await.unwrap_or_default();
                let hint = if key.is_some() {
                    format!("the key in ${var} was refused")
                } else {
                    format!("${var} is not set (the API key is read from the environment only)")
                };
                return Err((
                    ExecOutcome::SpawnFailed(format!(
                        "{url} answered {status}: {hint}; fix the agent's configuration ({})",
                        first_line(&detail)
                    )),
                    detail,
                    Some(Unfixable::Authentication),
                ));
            }
            429 | 503 | 529 if tries + 1 < MAX_QUOTA_TRIES => {
                let wait = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map_or_else(|| Duration::from_secs(1 << tries.min(5)), Duration::from_secs_f64)
                    .min(MAX_QUOTA_WAIT);
                // A spent quota does not come back by waiting (OpenAI answers it with a 429).
                let detail = response.text().await.unwrap_or_default();
                if unfixable(status, &detail) == Some(Unfixable::Quota) {
                    let said = format!("{url} answered {status}: {}", first_line(&detail));
                    return Err((ExecOutcome::Exited(1), said, Some(Unfixable::Quota)));
                }
                if Instant::now() + wait >= deadline {
                    return Err((
                        ExecOutcome::TimedOut,
                        format!("{url} kept answering {status} (rate limited) until the timeout"),
                        Some(Unfixable::RateLimit),
                    ));
                }
                // Every run of this provider waits as long (the limits pause it).
                let until = jiff::Timestamp::now() + jiff::SignedDuration::try_from(wait).unwrap_or_default();
                let detail = format!("{url} answered {status}");
                let _ = notices.send(loopwright_engine::ports::Notice::RateLimited { detail, until });
                tokio::time::sleep(wait).await;
                quota_wait += wait;
                tries += 1;
            }
            _ => {
                let detail = response.text().await.unwrap_or_default();
                let said = format!("{url} answered {status}: {}", first_line(&detail));
                return Err((ExecOutcome::Exited(1), said, unfixable(status, &detail)));
            }
        }
    };
    let _ = deadline;
    let streamed = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let (text, mut usage) = if streamed {
        read_stream(agent.runner, response, live)
            .await
            .map_err(|e| (ExecOutcome::Exited(1), format!("malformed stream from {url}: {e}"), None))?
    } else {
        let body = response
            .text()
            .await
            .map_err(|e| (ExecOutcome::Exited(1), format!("cannot read the answer of {url}: {e}"), None))?;
        read_whole(agent.runner, &body).ok_or_else(|| {
            (ExecOutcome::Exited(1), format!("malformed response from {url}: {}", first_line(&body)), None)
        })?
    };
    if let Some(u) = usage.as_mut() {
        u.model = agent.model.clone();
        u.quota_wait_ms = u64::try_from(quota_wait.as_millis()).unwrap_or(u64::MAX);
    } else if !quota_wait.is_zero() {
        usage = Some(Usage {
            quota_wait_ms: u64::try_from(quota_wait.as_millis()).unwrap_or(u64::MAX),
            estimated: true,
            ..Usage::default()
        });
    }
    Ok(Answer { outcome: ExecOutcome::Exited(0), text, error: String::new(), usage, unfixable: None })
}

/// Why a model's event stream could not be read.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    /// The stream broke.
    #[error("{0}")]
    Read(String),
    /// An event's data is not JSON.
    #[error("an event is not JSON ({reason}): {line}")]
    NotJson { reason: String, line: String },
    /// The server sent an error event: its message.
    #[error("{0}")]
    Server(String),
    /// The stream ended without its last event.
    #[error("the stream ended before the answer was complete")]
    Incomplete,
}

/// Reads a server-sent-event stream: the answer's text and the usage.
async fn read_stream(
    runner: RunnerKind,
    response: reqwest::Response,
    live: &mut LiveSink<'_>,
) -> Result<(String, Option<Usage>), StreamError> {
    let mut events = response.bytes_stream().eventsource();
    let mut text = String::new();
    let (mut input, mut output) = (None::<u64>, None::<u64>);
    let mut complete = false;
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| StreamError::Read(e.to_string()))?;
        if event.data.trim() == "[DONE]" {
            complete = true;
            break;
        }
        let v: Value = serde_json::from_str(&event.data)
            .map_err(|e| StreamError::NotJson { reason: e.to_string(), line: first_line(&event.data).to_owned() })?;
        match runner {
            RunnerKind::Anthropic => match v.get("type").and_then(Value::as_str).unwrap_or(&event.event) {
                "message_start" => input = v.pointer("/message/usage/input_tokens").and_then(Value::as_u64).or(input),
                "content_block_delta" => {
                    let delta = v.pointer("/delta/text").and_then(Value::as_str).unwrap_or_default();
                    live.feed(delta.as_bytes());
                    text.push_str(delta);
                }
                "message_delta" => output = v.pointer("/usage/output_tokens").and_then(Value::as_u64).or(output),
                "message_stop" => {
                    complete = true;
                    break;
                }
                "error" => {
                    let said = v.pointer("/error/message").and_then(Value::as_str).unwrap_or("error event");
                    return Err(StreamError::Server(said.to_owned()));
                }
                _ => {}
            },
            _ => {
                if let Some(delta) = v.pointer("/choices/0/delta/content").and_then(Value::as_str) {
                    live.feed(delta.as_bytes());
                    text.push_str(delta);
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    input = u.get("prompt_tokens").and_then(Value::as_u64).or(input);
                    output = u.get("completion_tokens").and_then(Value::as_u64).or(output);
                }
            }
        }
    }
    if !complete {
        return Err(StreamError::Incomplete);
    }
    let usage = (input.is_some() || output.is_some()).then(|| Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        ..Usage::default()
    });
    Ok((text, usage))
}

/// Reads a non-streamed answer (a server that ignored `stream: true`).
fn read_whole(runner: RunnerKind, body: &str) -> Option<(String, Option<Usage>)> {
    let v: Value = serde_json::from_str(body).ok()?;
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64);
    let (text, input, output) = match runner {
        RunnerKind::Anthropic => (
            // Text blocks, and a tool's input (a structured answer) as its JSON.
            v.get("content")?
                .as_array()?
                .iter()
                .filter_map(|c| match c.get("type").and_then(Value::as_str) {
                    Some("tool_use") => c.get("input").map(Value::to_string),
                    _ => c.get("text").and_then(Value::as_str).map(str::to_owned),
                })
                .collect::<String>(),
            n("/usage/input_tokens"),
            n("/usage/output_tokens"),
        ),
        _ => (
            v.pointer("/choices/0/message/content")?.as_str()?.to_owned(),
            n("/usage/prompt_tokens"),
            n("/usage/completion_tokens"),
        ),
    };
    let usage = (input.is_some() || output.is_some()).then(|| Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        ..Usage::default()
    });
    Some((text, usage))
}

/// An error with the errors that caused it (`error sending request …: client error (Connect):
/// tcp connect error: Connection refused (os error 111)`): the client's own message names none.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

fn first_line(text: &str) -> String {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("(empty body)").chars().take(300).collect()
}

/// Error texts of the HTTP client name the URL; a URL never carries the key here, but user
/// info in a base URL would: drop it.
fn without_url_secrets(text: &str) -> String {
    regex::Regex::new(r"//[^/@\s]+@").map_or_else(|_| text.to_owned(), |re| re.replace_all(text, "//").into_owned())
}
