//! Assembling what a run needs from the workspace: the store, the ports the engine drives
//! (processes, snapshots and commits, the failure patterns, the closed loop's settings), and
//! the redactor that keeps secrets out of all of them.

use std::path::{Path, PathBuf};

use loopwright_engine::patterns::Library;
use loopwright_engine::{Engine, Observer, Stopper, SystemClock};
use loopwright_runners::secrets::Redactor;
use loopwright_runners::{FsChanges, ProcessRunner};
use loopwright_spec::patterns::PatternFile;
use loopwright_spec::{Diagnostic, Diagnostics, Pipeline, SandboxPlan, SourceFile};
use loopwright_store::{Journal, SqliteStore};

use crate::error::Error;
use crate::workspace::Workspace;

/// Opens the journal: the PostgreSQL database the workspace names (`store` in config.toml,
/// `LOOPWRIGHT_STORE`, `--store`), else the workspace's SQLite file, created with the state
/// directory. A state directory that cannot be written is a usage error: nothing has been run.
pub fn open_store(ws: &Workspace) -> Result<Journal, Error> {
    match &ws.config.store.url {
        Some(url) => {
            let store = postgres(url)?;
            open_local_store(ws)?;
            Ok(store)
        }
        None => open_local_store(ws).map(Journal::Sqlite),
    }
}

/// Opens the journal for reading: no SQLite file means no runs.
pub fn open_existing_store(ws: &Workspace) -> Result<Journal, Error> {
    match &ws.config.store.url {
        Some(url) => postgres(url),
        None => open_existing_local_store(ws).map(Journal::Sqlite),
    }
}

/// Connects to the PostgreSQL journal at `url`; one that cannot be reached is a usage error
/// saying where and why.
fn postgres(url: &str) -> Result<Journal, Error> {
    Journal::connect_postgres(url).map_err(|e| Error::usage(e.to_string()))
}

/// Opens the workspace's SQLite file, creating the state directory: the journal when no
/// PostgreSQL database is named, and always what is this machine's own (its auto loops, the
/// notifications its daemon sent).
pub fn open_local_store(ws: &Workspace) -> Result<SqliteStore, Error> {
    let state = ws.state_dir();
    std::fs::create_dir_all(ws.runs_dir())
        .map_err(|e| Error::usage(format!("cannot create the state directory {}: {e}", state.display())))?;
    private_state(&state);
    let probe = state.join(".write-test");
    std::fs::write(&probe, b"")
        .map_err(|e| Error::usage(format!("the state directory {} is not writable: {e}", state.display())))?;
    let _ = std::fs::remove_file(&probe);
    if let Some(parent) = ws.db_path().parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::usage(format!("cannot create {}: {e}", parent.display())))?;
    }
    SqliteStore::open(&ws.db_path(), ws.config.store.synchronous).map_err(|e| Error::usage(e.to_string()))
}

/// Opens the workspace's existing SQLite file for reading; none means no runs (or auto loops).
pub fn open_existing_local_store(ws: &Workspace) -> Result<SqliteStore, Error> {
    if !ws.db_path().is_file() {
        return Err(Error::not_found(format!("no runs yet in {} (no {})", ws.root.display(), ws.shown(&ws.db_path()))));
    }
    private_state(&ws.state_dir());
    SqliteStore::open(&ws.db_path(), ws.config.store.synchronous).map_err(|e| Error::usage(e.to_string()))
}

/// The state directory holds the journal, the daemon's token, what agents printed and their
/// terminals' sockets: it is the owner's only (0700). One that an older version left open to
/// others is closed, and everything in it made the owner's only too (folders 0700, files 0600);
/// links are not followed.
pub fn private_state(state: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(state) else { return };
    if !meta.is_dir() || meta.permissions().mode() & 0o077 == 0 {
        return;
    }
    fn close(path: &Path, depth: usize) {
        let Ok(meta) = std::fs::symlink_metadata(path) else { return };
        let mode = if meta.is_dir() {
            0o700
        } else if meta.is_file() {
            0o600
        } else {
            return;
        };
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
        if meta.is_dir() && depth < 16 {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                close(&entry.path(), depth + 1);
            }
        }
    }
    close(state, 0);
}

/// The workspace's `failure-patterns.yml` as read, if it has one.
fn pattern_source(ws: &Workspace) -> Result<Option<SourceFile>, Error> {
    let path = ws.root.join(".loopwright/failure-patterns.yml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(SourceFile::new(ws.shown(&path), text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::usage(format!("cannot read {}: {e}", path.display()))),
    }
}

/// The workspace's `failure-patterns.yml`, if it has one.
fn project_patterns(ws: &Workspace) -> Result<Option<PatternFile>, Error> {
    pattern_source(ws)?.map(|source| PatternFile::parse(&source).map_err(Error::Invalid)).transpose()
}

/// The workspace's effective failure-pattern library: the built-ins with the project's file
/// merged over them.
pub fn library(ws: &Workspace) -> Result<Library, Error> {
    let path = ws.root.join(".loopwright/failure-patterns.yml");
    let library = Library::new(project_patterns(ws)?).map_err(|e| Error::usage(format!("{}: {e}", ws.shown(&path))))?;
    // `[classify] statistical = false`: a sure pattern, else unclassified.
    Ok(if ws.config.classify.statistical { library } else { library.without_statistical() })
}

/// Every problem of the workspace's `failure-patterns.yml` (none when it has none): an entry
/// that does not parse at its line, a pattern that does not compile (a bad regex) by its name.
pub fn library_problems(ws: &Workspace) -> Result<Diagnostics, Error> {
    let Some(source) = pattern_source(ws)? else { return Ok(Diagnostics::default()) };
    let file = match PatternFile::parse(&source) {
        Ok(file) => file,
        Err(problems) => return Ok(problems),
    };
    let mut problems = Diagnostics::default();
    if let Err(e) = Library::new(Some(file)) {
        problems.add_source(&source);
        problems.push(Diagnostic::new(&source, e.to_string()));
    }
    Ok(problems)
}

/// The closed loop's settings: `verification-gates.yml` and the `strategies` section of
/// `failure-patterns.yml`.
pub fn closed_loop_settings(ws: &Workspace) -> Result<loopwright_engine::closed_loop::Settings, Error> {
    let path = ws.root.join(".loopwright/verification-gates.yml");
    let regression = match std::fs::read_to_string(&path) {
        Ok(text) => loopwright_engine::closed_loop::regression::Settings::parse(&text)
            .map_err(|e| Error::usage(format!("{}: {e}", ws.shown(&path))))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
        Err(e) => return Err(Error::usage(format!("cannot read {}: {e}", path.display()))),
    };
    let strategies = project_patterns(ws)?.and_then(|f| f.strategy_settings());
    Ok(loopwright_engine::closed_loop::Settings {
        regression,
        classify: ws.config.classify.clone(),
        ..Default::default()
    }
    .with_strategies(strategies.as_ref()))
}

/// The secrets of a run: secret-looking environment variables, and the variables the
/// pipeline's agents take their API keys from (`api_key_env`), whatever their names.
pub fn redactor(pipeline: &Pipeline) -> Redactor {
    let keys: Vec<String> = pipeline.agents.values().filter_map(|a| a.api_key_env.clone()).collect();
    Redactor::from_env(&keys)
}

/// Whether this machine can make sandboxes, found out once per process, and kept in `state`
/// for later processes while the machine is the same (a probe runs bwrap and mounts an
/// overlay in a scratch folder under `state`, where layers will be made).
fn probe(state: &Path) -> &'static loopwright_runners::sandbox::Probe {
    static PROBE: std::sync::OnceLock<loopwright_runners::sandbox::Probe> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| loopwright_runners::sandbox::probe_kept(state))
}

/// How a run's stages are sandboxed: what the runner makes sandboxes with, where layers are
/// made (when overlays work here), and why stages that ask for one go without.
#[derive(Debug, Default)]
pub struct Sandboxes {
    /// What the runner makes sandboxes with.
    pub sandbox: Option<loopwright_runners::Sandboxing>,
    /// Where agent-mode attempts' layers are made, and what mounts them.
    pub layers: Option<(PathBuf, loopwright_runners::sandbox::Overlay)>,
    /// Why the stages that ask for a sandbox run without one.
    pub unsandboxed: Option<String>,
}

/// How a pipeline's stages are sandboxed (config.toml `sandbox`, a stage's `sandbox:`): not at
/// all when none asks; where this machine can (`auto`: if it cannot, said once on stderr and
/// in the run's journal); or always (`required`: without a sandbox nothing runs, and the
/// error says what is missing and where it was required).
pub fn sandboxing(ws: &Workspace, pipeline: &Pipeline, plan: &SandboxPlan) -> Result<Sandboxes, Error> {
    if plan.all_off(pipeline) {
        return Ok(Sandboxes::default());
    }
    use loopwright_runners::sandbox::Unavailable;
    let made = loopwright_runners::sandbox::state_dir().and_then(|state| {
        let probe = probe(&state);
        let bwrap = probe.usable()?.to_path_buf();
        let helper = std::env::current_exe()
            .map_err(|e| Unavailable::Scratch(format!("cannot find the loopwright program: {e}")))?;
        let prlimit = loopwright_runners::process::resolve("prlimit");
        let limits = prlimit.is_absolute().then(|| loopwright_runners::sandbox::Limits {
            prlimit,
            file_size: ws.config.sandbox_limits.file_size_mb.saturating_mul(1024 * 1024),
            processes: ws.config.sandbox_limits.processes,
        });
        let overlay = probe.overlay.clone().ok();
        let layers = overlay.clone().map(|o| (state.clone(), o));
        let sandbox = loopwright_runners::Sandboxing { bwrap, state, helper, limits, overlay };
        Ok((sandbox, layers))
    });
    match made {
        Ok((sandbox, layers)) => Ok(Sandboxes { sandbox: Some(sandbox), layers, unsandboxed: None }),
        Err(why) => {
            if let Some(stage) = plan.required_by(pipeline) {
                let asked = match stage {
                    Some(id) => format!("stage `{id}` of pipeline `{}` says `sandbox: required`", pipeline.name),
                    None => "sandbox = \"required\" in config.toml".to_owned(),
                };
                return Err(Error::usage(format!(
                    "{asked}, but no sandbox can be made here: {why} (`loopwright doctor` says what this machine has)"
                )));
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("loopwright: no sandbox here ({why}); stages run unsandboxed"));
            Ok(Sandboxes { sandbox: None, layers: None, unsandboxed: Some(why.to_string()) })
        }
    }
}

/// What a run's stages are run with, besides the store: processes, snapshots and commits,
/// and the workspace's failure patterns.
pub struct Ports {
    runner: ProcessRunner,
    changes: FsChanges,
    patterns: Library,
    settings: loopwright_engine::closed_loop::Settings,
    limits: Vec<loopwright_spec::config::Limit>,
    github: Option<loopwright_spec::github::GithubConfig>,
    config_dir: std::path::PathBuf,
    dashboard: Option<String>,
    ws: Workspace,
    /// A worker's slots (none elsewhere).
    slots: loopwright_engine::ports::Slots,
}

/// The longest a provider's answer pauses it for every run unless `[[limits]]` entries say
/// (`max_pause_minutes`).
pub const DEFAULT_MAX_PAUSE_MINUTES: u32 = 60;

/// How long a provider slot an attempt holds lasts without being renewed (attempts renew it
/// every 20 s): a holder that died frees it this long after.
const SLOT_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// Provider limits as the engine asks for them: the workspace's `[[limits]]`, held in the
/// journal's store so that every process sharing it — runs, a daemon, workers on other
/// machines — keeps to them together.
pub struct StoreLimits<'a> {
    store: &'a Journal,
    rules: &'a [loopwright_spec::config::Limit],
    /// `[[spend]]` caps.
    caps: &'a [loopwright_spec::spend::Cap],
    /// What each attempt holding spend holds is counted by, for when it gives them back.
    spenders: std::sync::Mutex<std::collections::HashMap<String, loopwright_store::spend::Spender>>,
}

impl StoreLimits<'_> {
    /// The limits that govern `agent`: its `[[limits]]` entries, and its provider as a whole
    /// (where a rate limit's pause is kept, even with no entry). None for an agent whose
    /// provider is not known.
    fn rules_for(&self, agent: &loopwright_spec::Agent) -> Vec<loopwright_store::limits::Rule> {
        let Some(provider) = loopwright_runners::presets::provider(agent) else { return Vec::new() };
        provider_rules(self.rules, provider, agent.model.as_deref(), agent.api_key_env.as_deref())
    }
}

/// The limits that govern calls to `provider` (with `model`, through `account`): the
/// `[[limits]]` entries that apply, and the provider as a whole (where a rate limit's pause is
/// kept, even with no entry).
pub fn provider_rules(
    limits: &[loopwright_spec::config::Limit],
    provider: &str,
    model: Option<&str>,
    account: Option<&str>,
) -> Vec<loopwright_store::limits::Rule> {
    use loopwright_store::limits::Rule;
    let mut rules: Vec<Rule> = limits
        .iter()
        .filter(|l| l.applies_to(provider, model, account))
        .map(|l| Rule {
            key: l.key(),
            shown: l.shown(),
            concurrent: l.concurrent,
            requests_per_minute: l.requests_per_minute,
            tokens_per_hour: l.tokens_per_hour,
        })
        .collect();
    let whole = format!("{provider}/*/*");
    if !rules.iter().any(|r| r.key == whole) {
        rules.push(Rule {
            key: whole,
            shown: provider.to_owned(),
            concurrent: None,
            requests_per_minute: None,
            tokens_per_hour: None,
        });
    }
    rules
}

impl StoreLimits<'_> {
    /// Takes a hold under every `[[spend]]` cap that counts the attempt (remembering what it
    /// is counted by), or says why it may not start.
    async fn take_spend(
        &self,
        agent: &loopwright_spec::Agent,
        holder: &str,
        payer: &loopwright_engine::ports::Payer<'_>,
    ) -> Result<Option<loopwright_engine::ports::Allowed>, loopwright_engine::StoreError> {
        use loopwright_engine::ports::Allowed;
        use loopwright_store::spend::Answer;
        let provider = loopwright_runners::presets::provider(agent);
        let spender = loopwright_store::spend::Spender {
            pipeline: payer.pipeline.to_owned(),
            provider: provider.unwrap_or_default().to_owned(),
            person: payer.person.unwrap_or_default().to_owned(),
        };
        self.spenders.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(holder.to_owned(), spender);
        let caps = crate::spend::rules_for(self.caps, jiff::Timestamp::now(), payer.pipeline, provider, payer.person);
        if caps.is_empty() {
            return Ok(None);
        }
        let rules: Vec<loopwright_store::spend::CapRule> = caps.iter().map(|(r, _)| r.clone()).collect();
        Ok(match self.store.take_spend(holder, &rules, SLOT_LEASE).await? {
            Answer::Go => None,
            Answer::Wait { reason } => Some(Allowed::Wait { reason, until: None }),
            Answer::Over { key, reason, until } => {
                let fail = caps.iter().any(|(r, on)| r.key == key && *on == loopwright_spec::spend::OnExceed::Fail);
                Some(if fail { Allowed::Refused { reason } } else { Allowed::Wait { reason, until: Some(until) } })
            }
        })
    }
}

impl loopwright_engine::ports::Limits for StoreLimits<'_> {
    async fn take(
        &self,
        agent: &loopwright_spec::Agent,
        holder: &str,
        payer: &loopwright_engine::ports::Payer<'_>,
    ) -> Result<loopwright_engine::ports::Allowed, loopwright_engine::StoreError> {
        use loopwright_engine::ports::Allowed;
        use loopwright_store::limits::Answer;
        if let Some(no) = self.take_spend(agent, holder, payer).await? {
            return Ok(no);
        }
        let rules = self.rules_for(agent);
        if rules.is_empty() {
            return Ok(Allowed::Yes);
        }
        Ok(match self.store.take_slot(holder, &rules, SLOT_LEASE).await? {
            Answer::Taken => Allowed::Yes,
            Answer::Wait { reason, until } => {
                // Its spend holds go back with it: another attempt may go meanwhile.
                if !self.caps.is_empty() {
                    let spender = loopwright_store::spend::Spender::default();
                    let _ = self.store.give_spend(holder, &spender, 0, 0.0).await;
                }
                Allowed::Wait { reason, until }
            }
        })
    }

    async fn renew(&self, holder: &str) {
        let _ = self.store.renew_slot(holder, SLOT_LEASE).await;
        if !self.caps.is_empty() {
            let _ = self.store.renew_spend(holder, SLOT_LEASE).await;
        }
    }

    async fn give(&self, holder: &str, used: &loopwright_engine::ports::Used) {
        let _ = self.store.give_slot(holder, used.tokens).await;
        let spender = self.spenders.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(holder);
        // Every agent attempt's use is kept, so that a cap added later counts its period whole.
        if let Some(spender) = spender
            && (used.tokens > 0 || used.cost_usd > 0.0 || !self.caps.is_empty())
        {
            let _ = self.store.give_spend(holder, &spender, used.tokens, used.cost_usd).await;
        }
    }

    async fn exhausted(&self, agent: &loopwright_spec::Agent, source: &str, until: jiff::Timestamp) {
        let now = jiff::Timestamp::now();
        if until <= now {
            return;
        }
        // However long a provider's answer asks for, a pause lasts at most the shortest
        // `max_pause_minutes` of the entries that govern the agent (60 by default).
        let minutes = self.rules.iter().filter_map(|l| l.max_pause_minutes).min().unwrap_or(DEFAULT_MAX_PAUSE_MINUTES);
        let cap = now + jiff::SignedDuration::from_secs(i64::from(minutes) * 60);
        let until = until.min(cap);
        let why: String =
            source.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("rate limited").chars().take(200).collect();
        for rule in self.rules_for(agent) {
            let _ = self.store.pause_limit(&rule.key, until, &why).await;
        }
    }
}

/// The engine as loopwright assembles it, with the stopper of its front-end.
pub type RunEngine<'a, X> =
    Engine<'a, Journal, ProcessRunner, SystemClock, X, FsChanges, StoreLimits<'a>, crate::forge::ForgeDelivery<'a>>;

impl Ports {
    /// The ports for a workspace whose stages work in `root` (the workspace, or the run's
    /// worktree), keeping the secrets `redactor` knows out of what they record and out of
    /// `store`'s journal.
    pub fn new(
        ws: &Workspace,
        root: &Path,
        pipeline: &Pipeline,
        redactor: Redactor,
        store: &Journal,
    ) -> Result<Self, Error> {
        if !redactor.is_empty() {
            let journal = redactor.clone();
            store.set_scrubber(Box::new(move |text| match journal.redact(text) {
                std::borrow::Cow::Owned(clean) => Some(clean),
                std::borrow::Cow::Borrowed(_) => None,
            }));
        }
        let plan = SandboxPlan::resolve(pipeline, ws.config.sandbox);
        let sandboxes = sandboxing(ws, pipeline, &plan)?;
        let mut changes = FsChanges::new(root.to_path_buf(), ws.runs_dir()).with_redactor(redactor.clone());
        if let Some((state, overlay)) = sandboxes.layers {
            changes = changes.with_layers(state, overlay).with_max_layer_mb(ws.config.sandbox_limits.max_layer_mb);
        }
        let settings = loopwright_engine::closed_loop::Settings { sandbox: plan, ..closed_loop_settings(ws)? };
        Ok(Self {
            changes,
            runner: ProcessRunner {
                redactor,
                sandbox: sandboxes.sandbox,
                unsandboxed: sandboxes.unsandboxed,
                ..ProcessRunner::new(ws.runs_dir())
            },
            patterns: library(ws)?,
            settings,
            limits: ws.config.limits.clone(),
            github: ws.config.github.clone(),
            config_dir: ws.root.join(".loopwright"),
            dashboard: None,
            ws: ws.clone(),
            slots: Default::default(),
        })
    }

    /// Links to runs in what is delivered to a forge point at this dashboard.
    pub fn with_dashboard(self, url: Option<String>) -> Self {
        Self { dashboard: url, ..self }
    }

    /// These ports for a worker's run under `lease` (`WORKER:EPOCH`, given to every process it
    /// starts): every commit pushed as `publish` says before the engine journals it; the
    /// worker's `slots` shared with its other runs' stages at once.
    pub fn for_worker(
        self,
        publish: loopwright_runners::Publish,
        lease: String,
        slots: loopwright_engine::ports::Slots,
    ) -> Self {
        Self {
            changes: self.changes.with_publish(publish),
            runner: ProcessRunner { lease: Some(lease), ..self.runner },
            slots,
            ..self
        }
    }

    /// An engine for a pipeline over these ports.
    pub fn engine<'a, X: Stopper>(
        &'a self,
        pipeline: &'a Pipeline,
        store: &'a Journal,
        stopper: &'a X,
        observer: &'a mut dyn Observer,
    ) -> RunEngine<'a, X> {
        Engine {
            pipeline,
            store,
            runner: &self.runner,
            clock: &SystemClock,
            observer,
            stopper,
            changes: &self.changes,
            patterns: &self.patterns,
            settings: &self.settings,
            limits: StoreLimits {
                store,
                rules: &self.limits,
                caps: &self.ws.config.spend,
                spenders: std::sync::Mutex::default(),
            },
            delivery: crate::forge::ForgeDelivery {
                config: self.github.as_ref(),
                base: self.config_dir.clone(),
                dashboard: self.dashboard.clone(),
                store_ws: &self.ws,
                gate: github_gate,
            },
            slots: self.slots.clone(),
        }
    }
}

/// GitHub's rate limits kept in the journal's store (SPEC §14): a pause GitHub asked for holds
/// every process that shares the store — a daemon, a CLI, workers on other machines — and the
/// `[[limits]]` entries for the provider `github` apply to its requests as to agents' attempts.
pub struct StoreGate {
    store: loopwright_store::Journal,
    rules: Vec<loopwright_store::limits::Rule>,
}

impl StoreGate {
    /// The gate of the workspace's store, with its `[[limits]]` for `github`.
    pub fn new(ws: &crate::workspace::Workspace) -> Result<StoreGate, crate::Error> {
        let store = open_store(ws)?;
        let rules = provider_rules(&ws.config.limits, "github", None, None);
        Ok(StoreGate { store, rules })
    }
}

impl loopwright_forge::github::client::RateGate for StoreGate {
    fn ready(
        &self,
        max: std::time::Duration,
    ) -> loopwright_forge::github::client::GateFuture<'_, Result<(), jiff::Timestamp>> {
        Box::pin(async move {
            // Nothing to count (no `[[limits]]` entry rates GitHub): only a pause can hold a
            // request up, and reading it writes nothing.
            let counted = self
                .rules
                .iter()
                .any(|r| r.concurrent.is_some() || r.requests_per_minute.is_some() || r.tokens_per_hour.is_some());
            if !counted {
                let keys: Vec<String> = self.rules.iter().map(|r| r.key.clone()).collect();
                return match self.store.paused_until(&keys).await {
                    Ok(Some(until)) => loopwright_forge::github::client::wait_until(Some(until), max).await,
                    // A store that cannot say holds nothing up.
                    Ok(None) | Err(_) => Ok(()),
                };
            }
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let holder = format!("github-{}-{}-{n}", loopwright_runners::process::machine(), std::process::id());
            loop {
                match self.store.take_slot(&holder, &self.rules, std::time::Duration::from_secs(60)).await {
                    Ok(loopwright_store::limits::Answer::Taken) => {
                        let _ = self.store.give_slot(&holder, 0).await;
                        return Ok(());
                    }
                    Ok(loopwright_store::limits::Answer::Wait { until, .. }) => {
                        let until =
                            until.unwrap_or_else(|| jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1));
                        loopwright_forge::github::client::wait_until(Some(until), max).await?;
                    }
                    // A store that cannot say holds nothing up.
                    Err(_) => return Ok(()),
                }
            }
        })
    }

    fn pause<'a>(
        &'a self,
        until: jiff::Timestamp,
        why: &'a str,
    ) -> loopwright_forge::github::client::GateFuture<'a, ()> {
        Box::pin(async move {
            for rule in &self.rules {
                let _ = self.store.pause_limit(&rule.key, until, why).await;
            }
        })
    }
}

/// The gate GitHub's requests wait on: the workspace's store.
pub fn github_gate(ws: &Workspace) -> Result<std::sync::Arc<dyn loopwright_forge::github::client::RateGate>, Error> {
    Ok(std::sync::Arc::new(StoreGate::new(ws)?))
}
