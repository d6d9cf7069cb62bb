//! `.loopwright/config.toml`: optional workspace defaults.

use serde::Deserialize;

use crate::agent::RunnerKind;
use crate::diag::{Diagnostic, Diagnostics, SourceFile};
pub use crate::sandbox::SandboxMode;

/// Workspace defaults. Every field is optional; a missing file means all defaults.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Whether stage processes run in a sandbox (bubblewrap): `auto` (where this machine can
    /// make one; the default where this file does not say), `required` (refuse to run without
    /// one), `off`.
    pub sandbox: SandboxMode,
    /// `[sandbox_limits]`: what a sandboxed process may use.
    pub sandbox_limits: SandboxLimits,
    /// Defaults for pipelines and agents.
    pub defaults: Defaults,
    /// Where and how the journal is kept.
    #[serde(deserialize_with = "store_setting")]
    pub store: StoreConfig,
    /// Prices per model (for `budget.cost_usd` and the spend `status` shows).
    pub prices: std::collections::BTreeMap<String, Price>,
    /// Auto mode's supervision settings.
    pub auto: AutoConfig,
    /// The daemon's settings (`loopwright serve`).
    pub serve: ServeConfig,
    /// `[[notify]]`: where the daemon sends word of runs and auto loops that need a person or
    /// ended.
    pub notify: Vec<Notify>,
    /// `[[limits]]`: what a provider (a model, an account) allows, shared by every process
    /// using this journal.
    pub limits: Vec<Limit>,
    /// `[classify]`: how a failure that no pattern is sure of is labelled.
    pub classify: ClassifyConfig,
    /// `[worker]`: what `loopwright worker` started in this workspace may run.
    pub worker: WorkerConfig,
    /// `[github]`: the repository whose issues start runs and which receives their pull
    /// requests.
    pub github: Option<crate::github::GithubConfig>,
    /// `[report]`: reports every `run`, `resume` and `rerun` writes for CI.
    pub report: ReportConfig,
    /// `[[spend]]`: caps on what agents use per day, week or month, shared by every process
    /// using this journal.
    pub spend: Vec<crate::spend::Cap>,
    /// `[telemetry]`: where runs' traces are exported.
    pub telemetry: TelemetryConfig,
    /// `[retention]`: how long finished runs keep their snapshots and files.
    pub retention: RetentionConfig,
}

/// `[retention]`: what `loopwright gc` (and the daemon, daily) frees. A run that is queued,
/// running, waiting or interrupted is never touched: it may still roll back.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Days a finished run keeps its snapshots (0: none once it ends).
    pub snapshots_days: u32,
    /// Days a finished run is kept at all: then its files and its journal go. Default: kept.
    pub runs_days: Option<u32>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { snapshots_days: 14, runs_days: None }
    }
}

/// `[telemetry]`: where runs' traces go (`OTEL_EXPORTER_OTLP_ENDPOINT` and the other OTLP
/// variables of the environment are read too).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); traces go to `/v1/traces`.
    pub otlp_endpoint: Option<String>,
}

/// `[report]`: files a run's result is also written to when a command ends (paths relative to
/// the workspace); `--report FORMAT=FILE` replaces the one of its format.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// JUnit XML: a suite for the run, a case per stage and per check.
    pub junit: Option<std::path::PathBuf>,
    /// The run's "why" as Markdown.
    pub markdown: Option<std::path::PathBuf>,
}

/// `[worker]`: what a worker started here may run (its `--repo` flags say it instead).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// The repositories it may clone and run, as runs name them.
    pub repos: Vec<String>,
}

/// `[classify]`: asking the stage's own agent about a failure that neither a sure pattern nor
/// the built-in statistical classifier could label.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassifyConfig {
    /// Let the built-in statistical classifier propose a category when no pattern is sure
    /// (false: what no pattern is sure of is unclassified, and the agent may be asked).
    pub statistical: bool,
    /// Ask the stage's agent (a model or an agent CLI; never `runner: command` or `shell`) in
    /// one short request; its tokens count against the run's budget.
    pub ask_agent: bool,
    /// The longest that request may take (1 to 600 seconds).
    pub timeout_seconds: u64,
}

impl Default for ClassifyConfig {
    fn default() -> Self {
        Self { statistical: true, ask_agent: true, timeout_seconds: 60 }
    }
}

/// One `[[limits]]` entry: the stages whose agents call `provider` (and `model`, `account`,
/// when given) share these limits across every process of the store.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// `anthropic`, `openai`, `google`, … (an agent's provider: its CLI's, or its model's).
    pub provider: String,
    /// Only this model.
    #[serde(default)]
    pub model: Option<String>,
    /// Only agents whose API key comes from this environment variable (`api_key_env`).
    #[serde(default)]
    pub account: Option<String>,
    /// Stages calling it at once.
    #[serde(default)]
    pub concurrent: Option<u32>,
    /// Attempts started per minute (an agent CLI's attempt counts once, whatever it sends).
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tokens (in and out, as the attempts' usage says) per hour.
    #[serde(default)]
    pub tokens_per_hour: Option<u64>,
    /// The longest the provider's own answer (a 429 and when to come back) may pause it for
    /// every run, in minutes (60 unless said).
    #[serde(default)]
    pub max_pause_minutes: Option<u32>,
}

impl Limit {
    /// The entry's identity in the store: provider, model and account.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.provider, self.model.as_deref().unwrap_or("*"), self.account.as_deref().unwrap_or("*"))
    }

    /// True when the entry governs an agent of `provider`, `model` and key variable `account`.
    pub fn applies_to(&self, provider: &str, model: Option<&str>, account: Option<&str>) -> bool {
        self.provider.eq_ignore_ascii_case(provider)
            && self.model.as_deref().is_none_or(|m| Some(m) == model)
            && self.account.as_deref().is_none_or(|a| Some(a) == account)
    }

    /// Said to people: `anthropic` (model claude-sonnet-4, account TEAM_KEY).
    pub fn shown(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model {m}"));
        }
        if let Some(a) = &self.account {
            parts.push(format!("account {a}"));
        }
        if parts.is_empty() { self.provider.clone() } else { format!("{} ({})", self.provider, parts.join(", ")) }
    }
}

/// One `[[notify]]` target.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// What the dashboard calls this target in a run's "Notified" (`team channel`): default
    /// its kind and host.
    #[serde(default)]
    pub name: Option<String>,
    /// Where to send: an `http://` or `https://` URL.
    pub url: String,
    /// The body's format.
    #[serde(default)]
    pub kind: NotifyKind,
    /// Which happenings are sent (default: every one).
    #[serde(default = "NotifyEvent::all")]
    pub events: Vec<NotifyEvent>,
    /// Only runs of these pipelines (default: all); auto loops are not filtered.
    #[serde(default)]
    pub pipelines: Vec<String>,
    /// The person the one-tap links answer as (default `notification`).
    #[serde(default, rename = "as")]
    pub answer_as: Option<String>,
    /// Hours a one-tap link stays valid.
    #[serde(default = "Notify::default_link_hours")]
    pub link_hours: u32,
    /// Whom a one-tap link answers as: `as` for whoever opens it (`open`, the default), or the
    /// person signed in to the dashboard who opens it, and nobody else (`sign-in`).
    #[serde(default)]
    pub links: LinkMode,
    /// People each sent a message of their own, whose links answer as them: `url` holds
    /// `{person}` where each one's name goes (a webhook may leave it out: its body names the
    /// `recipient`).
    #[serde(default)]
    pub recipients: Vec<String>,
    /// Which runs' ends are sent: each one (`every`, the default), or a pipeline's first
    /// failure and its first success after failures (`change`).
    #[serde(default)]
    pub on: NotifyOn,
    /// Gathers the runs' ends not sent on their own into one message every this many minutes
    /// (1 to 1440).
    #[serde(default)]
    pub digest_minutes: Option<u32>,
}

/// Which runs' ends a target is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NotifyOn {
    /// Every run's end it subscribes to.
    #[default]
    Every,
    /// A pipeline's first failure, and its first success after failures.
    Change,
}

/// How a notification's one-tap links answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum LinkMode {
    /// As the target's `as`, for whoever opens the link.
    #[default]
    #[serde(rename = "open")]
    Open,
    /// Only for a person signed in to the dashboard, as themselves.
    #[serde(rename = "sign-in")]
    SignIn,
}

impl Notify {
    fn default_link_hours() -> u32 {
        24
    }

    /// What is wrong with the target's `recipients` (and the fields that go with them), by the
    /// key to point at.
    fn recipient_problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let placeholder = self.url.contains("{person}");
        if self.recipients.is_empty() {
            if placeholder {
                problems.push(("url", "[[notify]] url holds `{person}` but the target names no `recipients`".into()));
            }
            return problems;
        }
        for (i, person) in self.recipients.iter().enumerate() {
            match crate::pipeline::Approver::parse(person) {
                Ok(crate::pipeline::Approver::Person(name)) if self.recipients[..i].contains(&name) => {
                    problems.push(("recipients", format!("[[notify]] recipient `{name}` is named twice")));
                }
                Ok(crate::pipeline::Approver::Person(_)) => {}
                _ => problems.push((
                    "recipients",
                    format!(
                        "[[notify]] recipient `{person}` is not a person's name (letters, digits, `.`, `_`, `@`, `-`)"
                    ),
                )),
            }
        }
        if !placeholder && self.kind != NotifyKind::Webhook {
            problems.push((
                "url",
                "[[notify]] url has no `{person}`: with `recipients`, each person's messages must go to their own \
                 address (only a webhook may route them by its body's `recipient`)"
                    .into(),
            ));
        }
        if self.answer_as.is_some() {
            problems.push(("as", "[[notify]] `as` and `recipients` both say whom links answer as: keep one".into()));
        }
        if self.links == LinkMode::SignIn {
            problems.push((
                "links",
                "[[notify]] `links = \"sign-in\"` answers as whoever signs in: it does not go with `recipients`".into(),
            ));
        }
        problems
    }
}

/// How a notification's body is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NotifyKind {
    /// JSON: event, run, pipeline, task, stage, headline, url, actions.
    #[default]
    Webhook,
    /// A Slack incoming-webhook message with the headline and buttons.
    Slack,
    /// An ntfy message, its links in `Actions` headers.
    Ntfy,
}

/// What a notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A run waits at a gate or an escalation.
    NeedsHuman,
    /// A run failed.
    Failed,
    /// A task went to the dead letters.
    DeadLetter,
    /// A run succeeded or was cancelled.
    Finished,
    /// An auto loop waits for a person.
    AutoNeedsHuman,
    /// An auto loop ended.
    AutoFinished,
    /// A `[[spend]]` cap's period reached 50, 80 or 100 % of it (once each).
    Spend,
    /// The runs' ends a target with `digest_minutes` gathered (not subscribed to: it comes
    /// with `digest_minutes`).
    Digest,
}

impl NotifyEvent {
    /// Every event, in the order they are documented.
    pub fn all() -> Vec<NotifyEvent> {
        use NotifyEvent::*;
        vec![NeedsHuman, Failed, DeadLetter, Finished, AutoNeedsHuman, AutoFinished, Spend]
    }

    /// As written in config.toml and in a webhook's body.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::NeedsHuman => "needs_human",
            NotifyEvent::Failed => "failed",
            NotifyEvent::DeadLetter => "dead_letter",
            NotifyEvent::Finished => "finished",
            NotifyEvent::AutoNeedsHuman => "auto_needs_human",
            NotifyEvent::AutoFinished => "auto_finished",
            NotifyEvent::Spend => "spend",
            NotifyEvent::Digest => "digest",
        }
    }
}

/// `[serve]`: the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Days a dashboard stays signed in (its cookie persists across browser restarts).
    pub session_days: u32,
    /// The person who started a run may not approve its gates, unless a gate says otherwise
    /// (`prevent_self_approval: false`).
    pub prevent_self_approval: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self { session_days: 7, prevent_self_approval: false }
    }
}

/// A kind of prompt auto mode may answer without a person (`[auto] answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerClass {
    /// Create or edit a file.
    Edit,
    /// Run a command or call a tool.
    Command,
    /// Fetch a web page.
    Fetch,
    /// Trust the workspace folder.
    Trust,
    /// A generic yes/no question.
    YesNo,
    /// "Continue?" / "Press Enter to continue".
    Continuation,
    /// A quota menu (answered with its "wait" choice).
    QuotaMenu,
}

impl AnswerClass {
    /// Every class, as `[auto] answer` lists them by default.
    pub const ALL: [Self; 7] =
        [Self::Edit, Self::Command, Self::Fetch, Self::Trust, Self::YesNo, Self::Continuation, Self::QuotaMenu];
}

/// `[auto]`: how auto mode supervises an agent session (SPEC §10). Durations accept fractions
/// so tests run fast.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutoConfig {
    /// Seconds between two looks at the agent's screen.
    pub heartbeat_seconds: f64,
    /// Unchanged looks in a row before the supervisor decides whether the agent is stalled.
    pub stall_captures: u32,
    /// Recoveries (continues, nudges, failed checks) allowed in one iteration.
    pub recoveries_per_iteration: u32,
    /// Recoveries allowed in the whole loop.
    pub recoveries_total: u32,
    /// Restarts of an agent that exited allowed in any `restart_window_minutes`.
    pub restarts: u32,
    /// The window the restart budget counts in, in minutes.
    pub restart_window_minutes: f64,
    /// Seconds before the first restart in a window; each further one waits twice as long
    /// (at most five minutes).
    pub restart_backoff_seconds: f64,
    /// Seconds a (re)started agent is given to load before it is typed to anyway or nudged.
    pub startup_grace_seconds: f64,
    /// Minutes a model call may show nothing new (spinner aside, no child working) before it
    /// is interrupted and retried.
    pub hung_call_minutes: f64,
    /// Iterations before the loop is stopped (`maxIterations`).
    pub max_iterations: u32,
    /// Minutes before the loop is stopped, quota waits and waits for a person excluded
    /// (`timeoutMinutes`).
    pub timeout_minutes: f64,
    /// Minutes one wait for a person (`needs_human`) may last before the loop is stopped
    /// (`timeout`); none by default: a loop that needs someone at 1 a.m. waits for the morning.
    pub human_wait_minutes: Option<f64>,
    /// Seconds the agent has to honour `.auto-stop` before its process group is ended.
    pub stop_grace_seconds: f64,
    /// Seconds to wait after a quota's reset time before the one continue.
    pub quota_jitter_seconds: f64,
    /// Minutes to wait on a quota message that gives no reset time.
    pub quota_fallback_minutes: f64,
    /// Minutes the provider may keep refusing (429, 529, overloaded) with backoff before the
    /// loop ends `blocked`, saying so: provider trouble is a wait, never a stall.
    pub provider_wait_minutes: f64,
    /// Prompt classes answered: edit, command, fetch, trust, yes_no, continuation, quota_menu.
    pub answer: Vec<AnswerClass>,
    /// More regular expressions of commands never approved (added to the built-in list).
    pub deny: Vec<String>,
    /// `[auto.policy]`: which commands are answered without a person.
    pub policy: AutoPolicy,
    /// Terminal size of the agent's pseudo-terminal.
    pub rows: u16,
    /// Terminal columns.
    pub cols: u16,
}

/// `[auto.policy]`: the commands a permission prompt is answered for without a person.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AutoPolicy {
    /// More commands allowed, as argv prefixes written as shell words (`"cargo xtask lint"`),
    /// added to the built-in ones (tests, builds, linters, read-only git).
    pub allow: Vec<String>,
    /// Hosts whose pages an agent may fetch without a person (`"docs.rs"`; each allows its
    /// subdomains). None by default.
    pub fetch: Vec<String>,
}

impl AutoConfig {
    /// Each setting out of range, with what it must be: durations above 0 (the waits may be
    /// 0), at least one capture and iteration, a terminal of at least 2 × 20.
    pub fn problems(&self) -> Vec<(&'static str, &'static str)> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let not_negative = |x: f64| x.is_finite() && x >= 0.0;
        let checks = [
            ("heartbeat_seconds", positive(self.heartbeat_seconds), "must be above 0"),
            ("timeout_minutes", positive(self.timeout_minutes), "must be above 0"),
            ("human_wait_minutes", self.human_wait_minutes.is_none_or(positive), "must be above 0"),
            ("stop_grace_seconds", not_negative(self.stop_grace_seconds), "must be 0 or more"),
            ("restart_window_minutes", positive(self.restart_window_minutes), "must be above 0"),
            ("restart_backoff_seconds", not_negative(self.restart_backoff_seconds), "must be 0 or more"),
            ("startup_grace_seconds", not_negative(self.startup_grace_seconds), "must be 0 or more"),
            ("hung_call_minutes", positive(self.hung_call_minutes), "must be above 0"),
            ("quota_jitter_seconds", not_negative(self.quota_jitter_seconds), "must be 0 or more"),
            ("quota_fallback_minutes", positive(self.quota_fallback_minutes), "must be above 0"),
            ("provider_wait_minutes", positive(self.provider_wait_minutes), "must be above 0"),
            ("stall_captures", self.stall_captures >= 1, "must be at least 1"),
            ("max_iterations", self.max_iterations >= 1, "must be at least 1"),
            ("rows", self.rows >= 2, "must be at least 2"),
            ("cols", self.cols >= 20, "must be at least 20"),
        ];
        checks.into_iter().filter(|(_, ok, _)| !ok).map(|(key, _, problem)| (key, problem)).collect()
    }
}

/// Where the value of `key` in `[section]` is written (for a diagnostic about its value).
fn value_position(text: &str, section: &str, key: &str) -> Option<crate::diag::Position> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let table = doc.get_ref().iter().find(|(k, _)| k.get_ref().as_ref() == section)?.1.get_ref().as_table()?;
    let span = table.iter().find(|(k, _)| k.get_ref().as_ref() == key)?.1.span();
    Some(position_of(text, span))
}

/// Where `key` of the `index`-th `[[section]]` table is written in `text`.
fn array_value_position(text: &str, section: &str, index: usize, key: &str) -> Option<crate::diag::Position> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let array = doc.get_ref().iter().find(|(k, _)| k.get_ref().as_ref() == section)?.1.get_ref().as_array()?;
    let table = array.get(index)?.get_ref().as_table()?;
    let span = table.iter().find(|(k, _)| k.get_ref().as_ref() == key)?.1.span();
    Some(position_of(text, span))
}

/// Where `key` of the `index`-th `[[section.array]]` table is written in `text`.
fn nested_array_value_position(
    text: &str,
    section: &str,
    array: &str,
    index: usize,
    key: &str,
) -> Option<crate::diag::Position> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let outer = doc.get_ref().iter().find(|(k, _)| k.get_ref().as_ref() == section)?.1.get_ref().as_table()?;
    let list = outer.iter().find(|(k, _)| k.get_ref().as_ref() == array)?.1.get_ref().as_array()?;
    let table = list.get(index)?.get_ref().as_table()?;
    let span = table.iter().find(|(k, _)| k.get_ref().as_ref() == key)?.1.span();
    Some(position_of(text, span))
}

/// The line and column of a byte span of `text`.
fn position_of(text: &str, span: std::ops::Range<usize>) -> crate::diag::Position {
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    crate::diag::Position { line, column, offset: span.start, len: span.len() }
}

impl Default for AutoConfig {
    fn default() -> Self {
        Self {
            heartbeat_seconds: 60.0,
            stall_captures: 3,
            recoveries_per_iteration: 3,
            recoveries_total: 10,
            restarts: 3,
            restart_window_minutes: 60.0,
            restart_backoff_seconds: 5.0,
            startup_grace_seconds: 10.0,
            hung_call_minutes: 15.0,
            max_iterations: 20,
            timeout_minutes: 30.0,
            human_wait_minutes: None,
            stop_grace_seconds: 120.0,
            quota_jitter_seconds: 30.0,
            quota_fallback_minutes: 60.0,
            provider_wait_minutes: 60.0,
            answer: AnswerClass::ALL.to_vec(),
            deny: vec![],
            policy: AutoPolicy::default(),
            rows: 40,
            cols: 120,
        }
    }
}

/// `[prices."MODEL"]`: US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input_per_mtok: f64,
    /// Per million output tokens.
    pub output_per_mtok: f64,
}

/// `[defaults]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// Runner of agent files that name neither `runner` nor `command`.
    pub runner: String,
    /// Stage timeout when a stage sets none.
    pub timeout_minutes: f64,
    /// Run every task in a git worktree of its own (as `run --worktree`).
    pub worktree: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Self { runner: "claude".to_owned(), timeout_minutes: crate::compile::DEFAULT_TIMEOUT_MINUTES, worktree: false }
    }
}

/// `[sandbox_limits]`: limits the kernel enforces on each sandboxed process without
/// privileges (`setrlimit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxLimits {
    /// The largest file a process may write, in MiB (a write past it ends the process with
    /// `SIGXFSZ`).
    pub file_size_mb: u64,
    /// Processes this user may have at once while it runs (the kernel counts every process
    /// of the user, not only the sandbox's): a fork bomb stops there.
    pub processes: u64,
    /// The most an agent-mode attempt's layer may hold on disk, in MiB: a larger one is not
    /// copied into the workspace and the attempt fails, saying so.
    pub max_layer_mb: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self { file_size_mb: 8192, processes: 8192, max_layer_mb: 2048 }
    }
}

/// Where the journal is kept: `[store]` (the SQLite file of this workspace, its `path` and
/// `synchronous`; `url` for PostgreSQL), or `store = "postgres://…"` for short.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// The SQLite file, relative to `.loopwright/`.
    pub path: String,
    /// `normal` (survives a crash of loopwright) or `full` (survives power loss; slower).
    pub synchronous: Synchronous,
    /// The PostgreSQL database the journal is kept in instead (`postgres://user@host/db`), shared
    /// by every machine that names it. The workspace's SQLite file still keeps what is this
    /// machine's own: its auto loops and the notifications its daemon sent.
    #[serde(deserialize_with = "postgres_url")]
    pub url: Option<String>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { path: "state/state.db".to_owned(), synchronous: Synchronous::Normal, url: None }
    }
}

/// True when `url` names a PostgreSQL database (the only store besides the SQLite file).
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn postgres_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let url = String::deserialize(d)?;
    if is_postgres_url(&url) {
        Ok(Some(url))
    } else {
        Err(serde::de::Error::custom(format!(
            "`{url}` is not a PostgreSQL URL: expected postgres://user@host[:port]/database (the SQLite file is `path`)"
        )))
    }
}

/// `store = "postgres://…"` or a `[store]` table.
fn store_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<StoreConfig, D::Error> {
    struct Setting;
    impl<'de> serde::de::Visitor<'de> for Setting {
        type Value = StoreConfig;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a PostgreSQL URL (\"postgres://user@host/db\") or a [store] table")
        }
        fn visit_str<E: serde::de::Error>(self, url: &str) -> Result<StoreConfig, E> {
            let url = postgres_url(serde::de::value::StrDeserializer::<E>::new(url))?;
            Ok(StoreConfig { url, ..StoreConfig::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<StoreConfig, A::Error> {
            StoreConfig::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(Setting)
}

/// SQLite `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Synchronous {
    /// Durable across process crashes.
    Normal,
    /// Durable across power loss.
    Full,
}

impl Config {
    /// Parses a config file.
    pub fn parse(source: &SourceFile) -> Result<Self, Diagnostics> {
        let mut diags = Diagnostics::default();
        diags.add_source(source);
        let config: Config = match toml::from_str(&source.text) {
            Ok(c) => c,
            Err(e) => {
                let mut d = Diagnostic::new(source, e.message().to_owned());
                if let Some(span) = e.span() {
                    d = d.at(position_of(&source.text, span));
                }
                diags.push(d);
                return Err(diags);
            }
        };
        if RunnerKind::parse(&config.defaults.runner).is_none() {
            diags.push(
                Diagnostic::new(source, format!("unknown runner `{}` in [defaults]", config.defaults.runner))
                    .field("defaults.runner"),
            );
        }
        if !(config.defaults.timeout_minutes.is_finite() && config.defaults.timeout_minutes > 0.0) {
            diags.push(Diagnostic::new(source, "`timeout_minutes` must be above 0").field("defaults.timeout_minutes"));
        }
        if !(1..=600).contains(&config.classify.timeout_seconds) {
            let mut d = Diagnostic::new(source, "[classify] `timeout_seconds` must be 1 to 600")
                .field("classify.timeout_seconds");
            if let Some(position) = value_position(&source.text, "classify", "timeout_seconds") {
                d = d.at(position);
            }
            diags.push(d);
        }
        for (key, problem) in config.auto.problems() {
            let mut d = Diagnostic::new(source, format!("[auto] `{key}` {problem}")).field(format!("auto.{key}"));
            if let Some(position) = value_position(&source.text, "auto", key) {
                d = d.at(position);
            }
            diags.push(d);
        }
        for (i, target) in config.notify.iter().enumerate() {
            let at = |key: &str, d: Diagnostic| match array_value_position(&source.text, "notify", i, key) {
                Some(position) => d.at(position),
                None => d,
            };
            let url = target.url.to_ascii_lowercase();
            if !(url.starts_with("http://") || url.starts_with("https://")) || target.url.contains(char::is_whitespace)
            {
                let message = format!("[[notify]] url `{}`: expected an http:// or https:// URL", target.url);
                diags.push(at("url", Diagnostic::new(source, message).field(format!("notify[{i}].url"))));
            }
            if let Some(name) = &target.name {
                let taken = config.notify[..i].iter().any(|t| t.name.as_deref() == Some(name.as_str()));
                let bad = name.trim().is_empty() || name.chars().count() > 60 || name.chars().any(char::is_control);
                if bad || taken {
                    let why =
                        if taken { "is the name of an earlier target" } else { "must be 1 to 60 printable characters" };
                    let d = Diagnostic::new(source, format!("[[notify]] name `{name}` {why}"))
                        .field(format!("notify[{i}].name"));
                    diags.push(at("name", d));
                }
            }
            for (key, problem) in target.recipient_problems() {
                diags.push(at(key, Diagnostic::new(source, problem).field(format!("notify[{i}].{key}"))));
            }
            if let Some(minutes) = target.digest_minutes.filter(|m| !(1..=1440).contains(m)) {
                let d =
                    Diagnostic::new(source, format!("[[notify]] `digest_minutes` is {minutes}: expected 1 to 1440"))
                        .field(format!("notify[{i}].digest_minutes"));
                diags.push(at("digest_minutes", d));
            }
            if !(1..=24 * 30).contains(&target.link_hours) {
                let d = Diagnostic::new(source, "[[notify]] `link_hours` must be 1 to 720")
                    .field(format!("notify[{i}].link_hours"));
                diags.push(at("link_hours", d));
            }
        }
        for (i, limit) in config.limits.iter().enumerate() {
            let at = |key: &str, d: Diagnostic| match array_value_position(&source.text, "limits", i, key) {
                Some(position) => d.at(position),
                None => d,
            };
            if limit.provider.trim().is_empty() {
                let d =
                    Diagnostic::new(source, "[[limits]] `provider` is empty: name one (anthropic, openai, google, …)");
                diags.push(at("provider", d.field(format!("limits[{i}].provider"))));
            }
            for (key, value) in [
                ("concurrent", limit.concurrent.map(u64::from)),
                ("requests_per_minute", limit.requests_per_minute.map(u64::from)),
                ("tokens_per_hour", limit.tokens_per_hour),
                ("max_pause_minutes", limit.max_pause_minutes.map(u64::from)),
            ] {
                if value == Some(0) {
                    let d = Diagnostic::new(source, format!("[[limits]] `{key}` must be 1 or more"));
                    diags.push(at(key, d.field(format!("limits[{i}].{key}"))));
                }
            }
            if limit.concurrent.is_none() && limit.requests_per_minute.is_none() && limit.tokens_per_hour.is_none() {
                let d = Diagnostic::new(
                    source,
                    format!(
                        "[[limits]] for {} sets no limit: expected concurrent, requests_per_minute or tokens_per_hour",
                        limit.shown()
                    ),
                );
                diags.push(at("provider", d.field(format!("limits[{i}]"))));
            }
        }
        if let Some(github) = &config.github {
            for (key, problem) in github.problems() {
                let d = Diagnostic::new(source, format!("[github] {problem}")).field(format!("github.{key}"));
                diags.push(match value_position(&source.text, "github", key) {
                    Some(position) => d.at(position),
                    None => d,
                });
            }
            for (i, trigger) in github.trigger.iter().enumerate() {
                for (key, problem) in trigger.problems() {
                    let d = Diagnostic::new(source, format!("[[github.trigger]] {problem}"))
                        .field(format!("github.trigger[{i}].{key}"));
                    diags.push(match nested_array_value_position(&source.text, "github", "trigger", i, key) {
                        Some(position) => d.at(position),
                        None => d,
                    });
                }
            }
        }
        let mut keys = std::collections::BTreeSet::new();
        for (i, limit) in config.limits.iter().enumerate() {
            if !keys.insert(limit.key()) {
                let d = Diagnostic::new(source, format!("[[limits]] for {} is given twice", limit.shown()));
                let d = match array_value_position(&source.text, "limits", i, "provider") {
                    Some(position) => d.at(position),
                    None => d,
                };
                diags.push(d.field(format!("limits[{i}]")));
            }
        }
        if diags.is_empty() { Ok(config) } else { Err(diags) }
    }

    /// The runner for agents that name none.
    pub fn default_runner(&self) -> RunnerKind {
        RunnerKind::parse(&self.defaults.runner).unwrap_or(RunnerKind::Claude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_is_defaults() {
        assert_eq!(Config::parse(&SourceFile::new("c", "")).expect("ok"), Config::default());
    }

    #[test]
    fn auto_settings_out_of_range_are_each_reported_where_they_are_written() {
        let text = "[auto]\nstall_captures = 0\nheartbeat_seconds = -1\nrows = 40\n";
        let diags = Config::parse(&SourceFile::new("config.toml", text)).expect_err("bad");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "3:21: auto.heartbeat_seconds: [auto] `heartbeat_seconds` must be above 0",
                "2:18: auto.stall_captures: [auto] `stall_captures` must be at least 1",
            ]
        );
    }

    #[test]
    fn the_prompt_classes_auto_mode_answers_are_read_where_they_are_written() {
        let text = "[auto]\nanswer = [\"edit\", \"yes_no\"]\n";
        let config = Config::parse(&SourceFile::new("config.toml", text)).expect("ok");
        assert_eq!(config.auto.answer, [AnswerClass::Edit, AnswerClass::YesNo]);
        assert_eq!(Config::default().auto.answer, AnswerClass::ALL);
        let diags = Config::parse(&SourceFile::new("config.toml", "[auto]\nanswer = [\"edits\"]\n")).expect_err("bad");
        let located = crate::diag::located(&diags);
        assert_eq!(located.len(), 1, "{located:?}");
        assert!(
            located[0].starts_with("2:") && located[0].contains("edits") && located[0].contains("yes_no"),
            "{located:?}"
        );
    }

    #[test]
    fn notify_targets_are_typed_and_checked() {
        let text = "[[notify]]\nname = \"team channel\"\nurl = \"http://127.0.0.1:9/hook\"\nkind = \"slack\"\nevents = [\"needs_human\", \"failed\"]\nas = \"carol\"\nlinks = \"sign-in\"\non = \"change\"\ndigest_minutes = 30\n\n[[notify]]\nurl = \"https://ntfy.sh/loops\"\nkind = \"ntfy\"\n";
        let config = Config::parse(&SourceFile::new("config.toml", text)).expect("ok");
        assert_eq!(
            config.notify,
            vec![
                Notify {
                    name: Some("team channel".into()),
                    url: "http://127.0.0.1:9/hook".into(),
                    kind: NotifyKind::Slack,
                    events: vec![NotifyEvent::NeedsHuman, NotifyEvent::Failed],
                    pipelines: vec![],
                    answer_as: Some("carol".into()),
                    link_hours: 24,
                    links: LinkMode::SignIn,
                    recipients: vec![],
                    on: NotifyOn::Change,
                    digest_minutes: Some(30),
                },
                Notify {
                    name: None,
                    url: "https://ntfy.sh/loops".into(),
                    kind: NotifyKind::Ntfy,
                    events: NotifyEvent::all(),
                    pipelines: vec![],
                    answer_as: None,
                    link_hours: 24,
                    links: LinkMode::Open,
                    recipients: vec![],
                    on: NotifyOn::Every,
                    digest_minutes: None,
                },
            ]
        );
        let bad = "[[notify]]\nurl = \"file:///etc/passwd\"\nevents = [\"needs_humans\"]\n";
        let diags = Config::parse(&SourceFile::new("config.toml", bad)).expect_err("bad");
        assert!(diags.items[0].message.contains("unknown variant `needs_humans`"), "{}", diags.items[0].message);
        let diags = Config::parse(&SourceFile::new("config.toml", "[[notify]]\nurl = \"file:///etc/passwd\"\n"))
            .expect_err("bad");
        assert_eq!(diags.items[0].message, "[[notify]] url `file:///etc/passwd`: expected an http:// or https:// URL");
        // Each problem is shown where it is written, in the table it belongs to.
        let text = "[[notify]]\nname = \"ops\"\nurl = \"https://ok\"\n\n[[notify]]\nname = \"ops\"\nurl = \"file:///etc/passwd\"\nlink_hours = 0\n";
        let diags = Config::parse(&SourceFile::new("config.toml", text)).expect_err("bad");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "7:7: notify[1].url: [[notify]] url `file:///etc/passwd`: expected an http:// or https:// URL",
                "6:8: notify[1].name: [[notify]] name `ops` is the name of an earlier target",
                "8:14: notify[1].link_hours: [[notify]] `link_hours` must be 1 to 720",
            ]
        );
    }

    #[test]
    fn recipients_each_get_their_own_address_and_nothing_else_says_whom_links_answer_as() {
        let good = "[[notify]]\nurl = \"https://ntfy.sh/acme-{person}\"\nkind = \"ntfy\"\nrecipients = [\"alice\", \"bob.k@acme\"]\n\n[[notify]]\nurl = \"https://hooks.acme/notify\"\nrecipients = [\"carol\"]\n";
        let config = Config::parse(&SourceFile::new("config.toml", good)).expect("valid");
        assert_eq!(config.notify[0].recipients, ["alice", "bob.k@acme"]);
        assert_eq!(config.notify[1].recipients, ["carol"]);
        let bad = "[[notify]]\nurl = \"https://hooks.slack.com/T/B/x\"\nkind = \"slack\"\nas = \"carol\"\nlinks = \"sign-in\"\nrecipients = [\"alice\", \"role:admin\", \"alice\"]\n\n[[notify]]\nurl = \"https://ntfy.sh/{person}\"\n";
        let diags = Config::parse(&SourceFile::new("config.toml", bad)).expect_err("bad");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "6:14: notify[0].recipients: [[notify]] recipient `role:admin` is not a person's name (letters, digits, `.`, `_`, `@`, `-`)",
                "6:14: notify[0].recipients: [[notify]] recipient `alice` is named twice",
                "2:7: notify[0].url: [[notify]] url has no `{person}`: with `recipients`, each person's messages must go to their own address (only a webhook may route them by its body's `recipient`)",
                "4:6: notify[0].as: [[notify]] `as` and `recipients` both say whom links answer as: keep one",
                "5:9: notify[0].links: [[notify]] `links = \"sign-in\"` answers as whoever signs in: it does not go with `recipients`",
                "9:7: notify[1].url: [[notify]] url holds `{person}` but the target names no `recipients`",
            ]
        );
    }

    #[test]
    fn provider_limits_are_typed_and_each_problem_said_where_it_is_written() {
        let text = "[[limits]]\nprovider = \"anthropic\"\nconcurrent = 2\nrequests_per_minute = 50\n\n[[limits]]\nprovider = \"openai\"\nmodel = \"gpt-5\"\naccount = \"TEAM_KEY\"\ntokens_per_hour = 1000000\n";
        let config = Config::parse(&SourceFile::new("config.toml", text)).expect("valid");
        assert_eq!(
            config.limits.iter().map(Limit::key).collect::<Vec<_>>(),
            ["anthropic/*/*", "openai/gpt-5/TEAM_KEY"]
        );
        assert!(config.limits[0].applies_to("Anthropic", Some("claude-sonnet-4"), None));
        assert!(config.limits[1].applies_to("openai", Some("gpt-5"), Some("TEAM_KEY")));
        assert!(!config.limits[1].applies_to("openai", Some("gpt-5"), Some("OPENAI_API_KEY")));
        assert!(!config.limits[1].applies_to("openai", Some("o3"), Some("TEAM_KEY")));
        let bad = "[[limits]]\nprovider = \"anthropic\"\nconcurrent = 0\n\n[[limits]]\nprovider = \"openai\"\n\n[[limits]]\nprovider = \"anthropic\"\nconcurrent = 3\n";
        let diags = Config::parse(&SourceFile::new("config.toml", bad)).expect_err("bad");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "3:14: limits[0].concurrent: [[limits]] `concurrent` must be 1 or more",
                "6:12: limits[1]: [[limits]] for openai sets no limit: expected concurrent, requests_per_minute or tokens_per_hour",
                "9:12: limits[2]: [[limits]] for anthropic is given twice",
            ]
        );
        let diags = Config::parse(&SourceFile::new("config.toml", "[[limits]]\nprovider = \"x\"\nconcurent = 1\n"))
            .expect_err("unknown key");
        assert!(diags.items[0].message.contains("unknown field `concurent`"), "{}", diags.items[0].message);
    }

    #[test]
    fn unknown_key_reports_line() {
        let diags =
            Config::parse(&SourceFile::new("config.toml", "[defaults]\nrunnr = \"command\"\n")).expect_err("bad");
        let p = diags.items[0].position.expect("position");
        assert_eq!((p.line, p.column), (2, 1));
        assert!(diags.items[0].message.contains("unknown field `runnr`"), "{}", diags.items[0].message);
    }
}
