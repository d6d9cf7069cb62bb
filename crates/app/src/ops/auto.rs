//! Auto mode's operations (SPEC §10): create a task module, start a supervised loop, stop it,
//! read its status and its supervision journal, take over loops whose supervisor died.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopwright_auto::decide;
use loopwright_auto::event::AutoEvent;
use loopwright_auto::module::{self, Entry};
use loopwright_auto::signal::{self, StopReason};
use loopwright_auto::state::{ChecksApproved, LoopStatus};
use loopwright_auto::supervisor::{self, AutoStatus, Context, Internal, Persisted, Supervisor};
use loopwright_auto::{Settings, holder};
use loopwright_runners::secrets::Redactor;
use loopwright_spec::sandbox::SandboxMode;
use loopwright_spec::{Agent, SourceFile};
use loopwright_store::SqliteStore;
use loopwright_store::auto::{AutoLogEntry, ClaimError};
use serde::Serialize;

use crate::Error;
use crate::error::Result;
use crate::workspace::Workspace;

/// A request to start a loop (`auto start`, `POST /api/sessions/{id}/task-auto`).
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// The task module.
    pub task_dir: PathBuf,
    /// The session name (default: from the directory's name).
    pub session: Option<String>,
    /// The agent (an agent file's name or a preset: claude, codex, gemini, …; default: the
    /// workspace's default runner).
    pub agent: Option<String>,
    /// `maxIterations` (default `[auto] max_iterations`).
    pub max_iterations: Option<u32>,
    /// `timeoutMinutes` (default `[auto] timeout_minutes`).
    pub timeout_minutes: Option<f64>,
    /// Seconds between looks at the screen (default `[auto] heartbeat_seconds`).
    pub heartbeat_seconds: Option<f64>,
}

/// `auto init DIR --target TEXT`: a new task module in status `draft`.
pub fn init(ws: &Workspace, dir: &Path, target: &str) -> Result<PathBuf> {
    let dir = if dir.is_absolute() { dir.to_owned() } else { ws.root.join(dir) };
    module::init(&dir, target).map_err(|e| match e {
        module::ModuleError::Exists(m) => {
            Error::conflict(format!("{m} already holds a task module (.index.md exists)"))
        }
        other => Error::usage(other.to_string()),
    })?;
    Ok(dir)
}

/// The task module named by `dir`, absolute and inside the workspace.
pub fn task_dir(ws: &Workspace, dir: &Path) -> Result<PathBuf> {
    let joined = if dir.is_absolute() { dir.to_owned() } else { ws.root.join(dir) };
    let root = std::fs::canonicalize(&ws.root).unwrap_or_else(|_| ws.root.clone());
    let outside = |path: &Path| {
        Error::Forbidden(format!(
            "{} lies outside the workspace {}: a loop may only work inside it",
            path.display(),
            root.display()
        ))
    };
    // Outside as written (whether it exists or not), then outside once links are resolved.
    let mut lexical = PathBuf::new();
    for part in joined.components() {
        match part {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    if !lexical.starts_with(&root) && !lexical.starts_with(&ws.root) {
        return Err(outside(&lexical));
    }
    let canonical = std::fs::canonicalize(&joined)
        .map_err(|e| Error::not_found(format!("no task module at {}: {e}", joined.display())))?;
    if !canonical.starts_with(&root) {
        return Err(outside(&canonical));
    }
    if !canonical.join(module::INDEX).is_file() {
        return Err(Error::not_found(format!(
            "{} is not a task module (no {}; create one with `loopwright auto init`)",
            canonical.display(),
            module::INDEX
        )));
    }
    Ok(canonical)
}

/// The session name a loop on `dir` gets when none is given: the directory's name.
pub fn session_name(dir: &Path) -> String {
    let base = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "auto".into());
    let clean: String =
        base.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' }).collect();
    if clean.trim_matches('-').is_empty() { "auto".into() } else { clean }
}

/// Checks a session name: 1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`.
pub fn valid_session(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::usage(format!(
            "session name {name:?}: expected 1 to 64 letters, digits, `-`, `_` or `.`, not starting with `.`"
        )))
    }
}

/// The agent named `name`: an agent file of the workspace, else a preset runner.
pub fn agent(ws: &Workspace, name: Option<&str>) -> Result<Agent> {
    let name = name.map_or_else(|| ws.config.defaults.runner.clone(), str::to_owned);
    let (agents, _) = ws.agents();
    if let Some(a) = agents.get(&name) {
        return Ok(a.clone());
    }
    if loopwright_spec::RunnerKind::parse(&name).is_some() {
        let source = SourceFile::new(format!("(preset {name})"), format!("---\nrunner: {name}\n---\n"));
        return loopwright_spec::parse_agent(&source, &name, ws.config.default_runner()).map_err(Error::Invalid);
    }
    Err(Error::not_found(format!(
        "no agent `{name}`: not an agent file under .loopwright/agents/ nor a preset (claude, codex, gemini, aider, opencode, goose)"
    )))
}

/// Where a session's holder files live.
pub fn session_dir(ws: &Workspace, session: &str) -> PathBuf {
    ws.state_dir().join("auto").join(session)
}

/// The secrets auto mode may see on an agent's screen: the values of secret-looking
/// environment variables and of every agent's `api_key_env`.
fn secrets(ws: &Workspace) -> Redactor {
    let (agents, _) = ws.agents();
    let keys: Vec<String> = agents.values().filter_map(|a| a.api_key_env.clone()).collect();
    Redactor::from_env(&keys)
}

/// Keeps those secrets out of everything auto mode stores through `store` (the supervision
/// journal, the status object), whoever writes it: the supervisor, a person's keys, approvals.
pub fn keep_secrets_out(ws: &Workspace, store: &SqliteStore) {
    let redactor = secrets(ws);
    if redactor.is_empty() {
        return;
    }
    store.set_scrubber(Box::new(move |text| match redactor.redact(text) {
        std::borrow::Cow::Owned(clean) => Some(clean),
        std::borrow::Cow::Borrowed(_) => None,
    }));
}

fn context(ws: &Workspace, store: &Arc<SqliteStore>, p: &Persisted) -> Result<Context> {
    keep_secrets_out(ws, store);
    let agent = agent(ws, Some(&p.status.agent))?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::Internal(anyhow::anyhow!("cannot find the loopwright binary: {e}")))?;
    Ok(Context {
        store: Arc::clone(store),
        exe,
        root: ws.root.clone(),
        session_dir: session_dir(ws, &p.status.session_name),
        agent,
    })
}

/// Why an auto loop's agent runs without a sandbox where config.toml asks for one where it can.
const UNSANDBOXED: &str = "an auto loop's agent runs in a terminal of its own that loopwright does not sandbox (sandbox = \"auto\" sandboxes pipeline stages only); it runs with your rights, its commands answered by the allow list";

/// Claims a loop and starts its agent: the supervisor, ready to [`Supervisor::run`].
/// `needs_human_exits`: the supervisor returns when a person is needed (foreground). Refused
/// under `sandbox = "required"`: the agent's terminal is not sandboxed.
pub async fn start(
    ws: &Workspace,
    store: &Arc<SqliteStore>,
    req: &StartRequest,
    needs_human_exits: bool,
) -> Result<Supervisor> {
    let dir = task_dir(ws, &req.task_dir)?;
    let session = req.session.clone().unwrap_or_else(|| session_name(&dir));
    valid_session(&session)?;
    // A busy session or directory is the answer before anything about the module.
    if let Some(busy) = store.auto_active(&session, &dir.display().to_string())? {
        return Err(Error::conflict(busy));
    }
    match module::entry(&dir).map_err(|e| Error::usage(e.to_string()))? {
        Entry::Stop(why) => return Err(Error::usage(format!("{}: {why}", dir.display()))),
        Entry::Step { .. } | Entry::ReportThenStop => {}
    }
    let agent = agent(ws, req.agent.as_deref())?;
    if ws.config.sandbox == SandboxMode::Required {
        return Err(Error::usage(
            "sandbox = \"required\" in .loopwright/config.toml: an auto loop's agent runs in a terminal of its own that loopwright does not sandbox, so it would run with all of your rights; run the work as a pipeline, or set sandbox = \"auto\" to run loops unsandboxed",
        ));
    }
    let mut config = ws.config.auto.clone();
    if let Some(m) = req.max_iterations {
        config.max_iterations = m;
    }
    if let Some(t) = req.timeout_minutes {
        config.timeout_minutes = t;
    }
    if let Some(h) = req.heartbeat_seconds {
        config.heartbeat_seconds = h;
    }
    // The config file was checked when it was read; what a request overrides is checked here.
    if let Some((key, problem)) = config.problems().first() {
        let named = match *key {
            "max_iterations" => "maxIterations (--max-iterations)",
            "timeout_minutes" => "timeoutMinutes (--timeout-minutes)",
            "heartbeat_seconds" => "heartbeatSeconds (--heartbeat-seconds)",
            other => other,
        };
        return Err(Error::usage(format!("{named} {problem}")));
    }
    let settings = Settings { config, exit_on_needs_human: needs_human_exits };
    settings.policy().map_err(|e| Error::usage(format!(".loopwright/config.toml: {e}")))?;
    let started = jiff::Timestamp::now();
    let status = AutoStatus {
        session_name: session.clone(),
        task_dir: dir.display().to_string(),
        status: LoopStatus::Running,
        agent: agent.name.clone(),
        max_iterations: settings.max_iterations.into(),
        timeout_s: settings.timeout_minutes * 60.0,
        started_at: started,
        loop_id: format!("{session}-{}", started.as_millisecond()),
        ..AutoStatus::default()
    };
    // Supervised by this process from the claim on: an `auto stop` right after it writes
    // `.auto-stop` for this process to honour, instead of ending a loop it thinks orphaned.
    let internal = Internal {
        settings,
        supervisor_pid: std::process::id(),
        supervisor_start: loopwright_runners::process::start_time(std::process::id()),
        ..Internal::default()
    };
    let p = Persisted { status, internal };
    // A past loop's `.auto-stop` and `.auto-signal` are removed inside the claim: a stop asked
    // for the new loop (possible once the row is visible) is never removed.
    let stale = || {
        signal::remove(&dir, module::STOP);
        signal::remove(&dir, module::SIGNAL);
    };
    let tree = working_tree(&dir);
    let shares_tree = |other: &str| working_tree(Path::new(other)) == tree;
    store.auto_claim(&p.to_row(), shares_tree, stale).map_err(|e| match e {
        ClaimError::Busy(m) => Error::conflict(m),
        ClaimError::Store(e) => Error::from(e),
    })?;
    if ws.config.sandbox == SandboxMode::Auto {
        let why = UNSANDBOXED.to_owned();
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| eprintln!("loopwright: {why}"));
        journal(store, &p.status, &AutoEvent::Unsandboxed { why })?;
    }
    let mut sup = Supervisor::new(context(ws, store, &p)?, p).map_err(Error::usage)?;
    sup.start().await.map_err(|e| Error::Internal(anyhow::anyhow!("cannot start the agent: {e}")))?;
    Ok(sup)
}

/// Loops recorded as active whose supervisor is gone, taken over by this process (daemon start).
pub fn take_over(ws: &Workspace, store: &Arc<SqliteStore>) -> Result<Vec<Supervisor>> {
    let mut taken = Vec::new();
    for row in store.auto_list()? {
        if supervisor::is_final(&row.status) {
            continue;
        }
        let Ok(p) = Persisted::from_row(&row) else { continue };
        if p.supervised_elsewhere() || p.supervised_here() {
            continue;
        }
        let mut p = p;
        p.internal.settings.exit_on_needs_human = false;
        let mut sup = Supervisor::new(context(ws, store, &p)?, p).map_err(Error::usage)?;
        sup.reattach();
        taken.push(sup);
    }
    Ok(taken)
}

/// The loop of a task directory or session (`auto status DIR`, `GET …/task-auto`).
pub fn status_of(ws: &Workspace, store: &SqliteStore, dir_or_session: &str) -> Result<AutoStatus> {
    Ok(shown(loop_of(ws, store, dir_or_session)?))
}

/// The loop of a task directory or session, as stored.
fn loop_of(ws: &Workspace, store: &SqliteStore, dir_or_session: &str) -> Result<Persisted> {
    let row = match store.auto_get(dir_or_session)? {
        Some(r) => Some(r),
        None => match task_dir(ws, Path::new(dir_or_session)) {
            Ok(dir) => store.auto_by_dir(&dir.display().to_string())?,
            Err(_) => None,
        },
    };
    let row = row.ok_or_else(|| Error::not_found(format!("no auto loop for {dir_or_session}")))?;
    Persisted::from_row(&row).map_err(|e| Error::Internal(anyhow::anyhow!(e)))
}

/// The loop of session `session` (`GET /api/sessions/{id}/task-auto`): by name only.
pub fn session_status(store: &SqliteStore, session: &str) -> Result<AutoStatus> {
    let row = store.auto_get(session)?.ok_or_else(|| Error::not_found(format!("no auto loop in session {session}")))?;
    Ok(shown(Persisted::from_row(&row).map_err(|e| Error::Internal(anyhow::anyhow!(e)))?))
}

/// What the agent's terminal shows now (the dashboard's live screen, read-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Screen {
    /// The session.
    pub session_name: String,
    /// The visible rows, one line each; the last screen when the agent exited.
    pub screen: String,
    /// True while the agent runs.
    pub alive: bool,
    /// The choices of the numbered menu the agent shows, as its CLI labels them (empty when
    /// no menu is shown): how a person answers it.
    pub choices: Vec<loopwright_auto::screen::Choice>,
}

/// The top of the git working tree `dir` is in (each worktree its own), or `dir` itself
/// outside git.
fn working_tree(dir: &Path) -> PathBuf {
    loopwright_runners::git::toplevel(dir).unwrap_or_else(|| dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf()))
}

/// The live screen of session `session`'s agent, from its holder.
pub fn screen(ws: &Workspace, store: &SqliteStore, session: &str) -> Result<Screen> {
    let status = session_status(store, session)?;
    let client = holder::Client::new(&session_dir(ws, &status.session_name));
    let (screen, alive, choices) = match client.request(&holder::Request::Screen) {
        Ok(r) => match r.exit {
            Some(exit) => (exit.screen, false, Vec::new()),
            None => {
                let choices = at_menu(&r).map(|(_, menu)| menu).unwrap_or_default();
                (r.screen, true, choices)
            }
        },
        Err(_) => (client.recorded_exit().map(|e| e.screen).unwrap_or_default(), false, Vec::new()),
    };
    let screen = secrets(ws).redact(&screen).into_owned();
    Ok(Screen { session_name: status.session_name, screen, alive, choices })
}

/// Types `text` into the terminal of session `session`'s agent for a person (`auto send`,
/// `POST …/task-auto/keys`), then Enter when `enter`: how a prompt the policy would not
/// answer gets its answer. Journaled as `keys` with who typed and the screen it answered.
///
/// At a numbered menu a person answers with one of its choices, never with text: a menu takes
/// Enter for its highlighted choice (a typed "no, do not push" then Enter once ran the push).
/// The choice's key is typed alone (an Enter after it would land on whatever comes next), and a
/// choice that says yes to a command or edit the policy refused is typed only when `confirm`
/// repeats that command (or those files) — the person names what they approve.
pub fn send_keys(
    ws: &Workspace,
    store: &SqliteStore,
    session: &str,
    text: &str,
    enter: bool,
    confirm: Option<&str>,
    by: &str,
) -> Result<AutoStatus> {
    keep_secrets_out(ws, store);
    let p = loop_of(ws, store, session)?;
    let status = p.status.clone();
    if status.status.is_final() {
        return Err(Error::conflict(format!(
            "the auto loop of session {} already ended ({}): there is no agent to type to",
            status.session_name, status.status
        )));
    }
    if text.is_empty() && !enter {
        return Err(Error::usage("nothing to type: give the text, or ask for Enter"));
    }
    if text.chars().count() > 4096 {
        return Err(Error::usage("at most 4096 characters at once"));
    }
    let client = holder::Client::new(&session_dir(ws, &status.session_name));
    let shown_screen = client
        .request(&holder::Request::Screen)
        .map_err(|e| Error::conflict(format!("the agent of session {} cannot be reached: {e}", status.session_name)))?;
    let excerpt = supervisor::tail(&shown_screen.screen, 8);
    let (keys, enter, answered) = match at_menu(&shown_screen) {
        Some((prompt, menu)) => {
            let choice = pick(&menu, text)?;
            confirm_yes(ws, &p, &prompt, &choice, confirm)?;
            (choice.key.clone(), false, format!(": choice {} ({})", choice.key, choice.label))
        }
        None => (text.to_owned(), enter, String::new()),
    };
    client.request(&holder::Request::keys(&keys, enter)).map_err(|e| Error::conflict(format!("typing failed: {e}")))?;
    let shown = format!("{keys}{}", if enter { "⏎" } else { "" });
    let why = format!("typed by {by}{answered}");
    let _ = journal(store, &status, &AutoEvent::Keys { keys: shown, why, excerpt });
    session_status(store, session)
}

/// What a loop that needs a person asks of them, for a one-tap answer from a notification:
/// the question's place in the journal (a link answers that question only), the menu's
/// choices, and what a "yes" would approve when the policy refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The journal entry (`needs_human`) that asked it.
    pub asked: i64,
    /// The menu's choices, as the CLI labels them.
    pub choices: Vec<loopwright_auto::screen::Choice>,
    /// The command (or files, or address) a "yes" approves, which the policy refused.
    pub approves: Option<String>,
    /// Why the policy did not answer, and the screen it read (the loop's `needs_human`).
    pub why: String,
}

/// The question session `session`'s loop waits on, when it waits at a menu; `None` when it
/// does not need a person or shows no menu.
pub fn question(ws: &Workspace, store: &SqliteStore, session: &str) -> Result<Option<Question>> {
    let p = loop_of(ws, store, session)?;
    if p.status.status != LoopStatus::NeedsHuman || !p.status.checks_to_approve.is_empty() {
        return Ok(None);
    }
    let entries = store.auto_log_since(&p.status.loop_id, 0)?;
    let Some(asked) = entries.iter().rev().find(|e| e.kind == "needs_human").map(|e| e.id) else { return Ok(None) };
    let client = holder::Client::new(&session_dir(ws, &p.status.session_name));
    let Ok(screen) = client.request(&holder::Request::Screen) else { return Ok(None) };
    if screen.exit.is_some() {
        return Ok(None);
    }
    let Some((prompt, choices)) = at_menu(&screen) else { return Ok(None) };
    let approves = refused(ws, &p, &prompt)?.map(|(_, what)| what).filter(|what| !what.is_empty());
    let why = secrets(ws).redact(p.status.needs_human.as_deref().unwrap_or_default()).into_owned();
    Ok(Some(Question { asked, choices, approves, why }))
}

/// Answers the question journaled at `asked` with `choice`, for a one-tap link: refused when
/// the loop has moved on (another question, or none) or the menu no longer offers that choice.
/// The link's confirmation page named what a "yes" approves: that is its confirmation.
pub fn answer_question(
    ws: &Workspace,
    store: &SqliteStore,
    session: &str,
    asked: i64,
    choice: &loopwright_auto::screen::Choice,
    by: &str,
) -> Result<AutoStatus> {
    let q = question(ws, store, session)?.filter(|q| q.asked == asked).ok_or_else(|| {
        Error::conflict("the loop no longer waits on the question this link was made for: nothing was typed")
    })?;
    if !q.choices.contains(choice) {
        return Err(Error::conflict(format!(
            "the agent's menu no longer offers \"{}. {}\": nothing was typed",
            choice.key, choice.label
        )));
    }
    let confirm = if choice.is_yes() { q.approves.as_deref() } else { None };
    send_keys(ws, store, session, &choice.key, false, confirm, by)
}

/// The prompt with a numbered menu the screen shows, and its choices.
fn at_menu(
    screen: &holder::Response,
) -> Option<(loopwright_auto::screen::Prompt, Vec<loopwright_auto::screen::Choice>)> {
    use loopwright_auto::screen::{self, Reading};
    let now = jiff::Timestamp::now();
    let zone = jiff::tz::TimeZone::system();
    let Reading::Prompt(prompt) =
        screen::read_view(&screen.screen, &screen.screen, &screen.above, &screen.row_faces, now, &zone)
    else {
        return None;
    };
    let menu = screen::choices(&screen.screen, &prompt);
    (!menu.is_empty()).then_some((prompt, menu))
}

/// The choice of `menu` that `text` names (its number), or why text is not sent at a menu.
fn pick(menu: &[loopwright_auto::screen::Choice], text: &str) -> Result<loopwright_auto::screen::Choice> {
    menu.iter().find(|c| c.key == text.trim()).cloned().ok_or_else(|| {
        let listed: Vec<String> = menu.iter().map(|c| format!("{}. {}", c.key, c.label)).collect();
        Error::conflict(format!(
            "the agent shows a menu: answer with one of its choices ({}), not with text — at a menu, Enter takes the highlighted choice",
            listed.join(" · ")
        ))
    })
}

/// A yes to a prompt the loop's policy refused is typed only when the person repeated what it
/// approves.
/// Why the loop's policy refused `prompt` and what a "yes" to it approves (the command, the
/// files or the address; empty when the screen did not show it whole), or `None` when the
/// policy would answer it.
fn refused(
    ws: &Workspace,
    p: &Persisted,
    prompt: &loopwright_auto::screen::Prompt,
) -> Result<Option<(String, String)>> {
    use loopwright_auto::policy::Decision;
    use loopwright_auto::screen::Subject;
    let policy = p.internal.settings.policy().map_err(Error::usage)?;
    let Decision::Refuse(why) = policy.decide(prompt, &ws.root) else { return Ok(None) };
    let what = match &prompt.subject {
        Subject::Command(c) => c.clone(),
        Subject::Files(f) => f.join(" "),
        Subject::Url(u) => u.clone(),
        Subject::Unseen => String::new(),
    };
    Ok(Some((why, what)))
}

fn confirm_yes(
    ws: &Workspace,
    p: &Persisted,
    prompt: &loopwright_auto::screen::Prompt,
    choice: &loopwright_auto::screen::Choice,
    confirm: Option<&str>,
) -> Result<()> {
    if !choice.is_yes() {
        return Ok(());
    }
    let Some((why, what)) = refused(ws, p, prompt)? else { return Ok(()) };
    let named = |c: &str| c.split_whitespace().eq(what.split_whitespace());
    match confirm {
        Some(c) if !what.is_empty() && named(c) => Ok(()),
        _ if what.is_empty() => Err(Error::conflict(format!(
            "choice {} ({}) approves what the policy refused ({why}), and what it approves could not be read off the screen: answer it in the agent's terminal",
            choice.key, choice.label
        ))),
        _ => Err(Error::conflict(format!(
            "choice {} ({}) approves `{what}`, which the policy refused ({why}): confirm by repeating it (--confirm / \"confirm\")",
            choice.key, choice.label
        ))),
    }
}

/// A person approves the checks the agent added to the module of `dir_or_session` after its
/// loop started (`auto approve-checks`, `POST …/task-auto/checks`): journaled as
/// `checks_approved` with who approved; the supervisor runs them at its next look. `seen`, when
/// given, is the list the person was shown: if the agent added another meanwhile, nothing is
/// approved (a conflict) — a person approves only what they read. A conflict when no check
/// waits.
pub fn approve_checks(
    ws: &Workspace,
    store: &SqliteStore,
    dir_or_session: &str,
    seen: Option<&[String]>,
    by: &str,
) -> Result<AutoStatus> {
    keep_secrets_out(ws, store);
    let p = loop_of(ws, store, dir_or_session)?;
    let status = &p.status;
    if status.status.is_final() || status.checks_to_approve.is_empty() {
        return Err(Error::conflict(format!(
            "no added check of the auto loop of session {} waits for approval ({})",
            status.session_name, status.status
        )));
    }
    if let Some(seen) = seen
        && seen != status.checks_to_approve.as_slice()
    {
        return Err(Error::conflict(format!(
            "the checks waiting for approval changed: now {}; look again before approving",
            status.checks_to_approve.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    let approval = ChecksApproved { checks: status.checks_to_approve.clone(), by: by.to_owned() };
    journal(store, status, &AutoEvent::ChecksApproved(approval))?;
    Ok(shown(p))
}

/// Writes `event` into the supervision journal of `status`'s loop.
fn journal(store: &SqliteStore, status: &AutoStatus, event: &AutoEvent) -> Result<()> {
    let (kind, data) = event.to_entry();
    store.auto_log(&status.loop_id, &status.session_name, &jiff::Timestamp::now().to_string(), &kind, &data)?;
    Ok(())
}

/// A loop as shown: a loop recorded as active whose supervisor died reads `running` still
/// (the daemon takes it over), with its elapsed time brought up to now.
fn shown(p: Persisted) -> AutoStatus {
    let mut s = p.status;
    if !s.status.is_final() {
        s.elapsed_s = s.elapsed_at(jiff::Timestamp::now());
    }
    s
}

/// Every loop, newest first.
pub fn list(store: &SqliteStore) -> Result<Vec<AutoStatus>> {
    Ok(list_with_settings(store)?.into_iter().map(|(s, _)| s).collect())
}

/// Every loop with the settings it runs with (its limits), newest first.
pub fn list_with_settings(store: &SqliteStore) -> Result<Vec<(AutoStatus, Settings)>> {
    Ok(store
        .auto_list()?
        .iter()
        .filter_map(|r| Persisted::from_row(r).ok())
        .map(|p| {
            let settings = p.internal.settings.clone();
            (shown(p), settings)
        })
        .collect())
}

/// The task modules of the workspace (directories holding `.index.md`, at most four levels
/// down, outside `.git`, `.loopwright`, `target` and `node_modules`), relative to its root.
pub fn modules(ws: &Workspace) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, depth: usize, seen: &mut usize, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            *seen += 1;
            if *seen > 20_000 || out.len() >= 200 {
                return;
            }
            let path = entry.path();
            let name = entry.file_name();
            let skip = matches!(name.to_str(), Some(".git" | ".loopwright" | "target" | "node_modules"));
            if skip || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if path.join(module::INDEX).is_file()
                && let Ok(rel) = path.strip_prefix(root)
            {
                out.push(rel.display().to_string());
            }
            if depth > 1 {
                walk(&path, root, depth - 1, seen, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&ws.root, &ws.root, 4, &mut 0, &mut out);
    out.sort();
    out
}

/// `GET /api/task-auto/lookup?taskDir=PATH`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lookup {
    /// The session running it.
    pub session_name: String,
    /// Its status.
    pub status: String,
}

/// Which session runs a loop on `dir`.
pub fn lookup(ws: &Workspace, store: &SqliteStore, dir: &Path) -> Result<Lookup> {
    let dir = task_dir(ws, dir)?;
    let row = store
        .auto_by_dir(&dir.display().to_string())?
        .ok_or_else(|| Error::not_found(format!("no auto loop for {}", dir.display())))?;
    Ok(Lookup { session_name: row.session_name, status: row.status })
}

/// `auto stop`: writes `.auto-stop` (reason `user_stop`). A loop no process supervises any
/// more is ended here: its agent's process group ended, the transient files removed.
///
/// `by` is who asks (journaled with the stop).
pub fn stop(ws: &Workspace, store: &SqliteStore, dir_or_session: &str, by: &str) -> Result<AutoStatus> {
    let p = loop_of(ws, store, dir_or_session)?;
    if p.status.status.is_final() {
        return Err(Error::conflict(format!(
            "the auto loop of session {} already ended ({})",
            p.status.session_name, p.status.status
        )));
    }
    let dir = PathBuf::from(&p.status.task_dir);
    let now = jiff::Timestamp::now();
    let supervised = p.supervised_elsewhere() || p.supervised_here();
    if supervised {
        // The supervisor journals the stop when it reads the file.
        if p.status.stop_reason.is_none() {
            signal::request_stop(&dir, StopReason::UserStop, now, by).map_err(|e| Error::Internal(e.into()))?;
        }
    } else {
        // Ended here, through the loop's own rules: the holder ended, the transient files
        // removed, the wait and the pending first message cleared, journaled with who.
        let policy = p.internal.settings.policy().map_err(Error::usage)?;
        let zone = jiff::tz::TimeZone::system();
        let rules = decide::Rules { policy: &policy, root: &ws.root, zone: &zone };
        let by = format!("{by} (no supervisor alive)");
        let (next, actions) = decide::decide(&p, decide::Observation::Abandoned { by }, &rules, now);
        for action in actions {
            match action {
                decide::Action::Journal(e) => {
                    let _ = journal(store, &next.status, &e);
                }
                decide::Action::QuitHolder | decide::Action::EndAgent => {
                    let client = holder::Client::new(&session_dir(ws, &p.status.session_name));
                    let _ = client.request(&holder::Request::Quit);
                }
                decide::Action::Cleanup => {
                    signal::remove(&dir, module::SIGNAL);
                    signal::remove(&dir, module::STOP);
                }
                _ => {}
            }
        }
        store.auto_save(&next.to_row())?;
        return Ok(next.status);
    }
    status_of(ws, store, &p.status.session_name)
}

/// `auto log`: the supervision journal of a loop.
pub fn log(ws: &Workspace, store: &SqliteStore, dir_or_session: &str) -> Result<(AutoStatus, Vec<AutoLogEntry>)> {
    let status = status_of(ws, store, dir_or_session)?;
    let entries = store.auto_log_since(&status.loop_id, 0)?;
    Ok((status, entries))
}

/// `auto report`: the night's summary of the loop of `dir_or_session`, from its journal.
pub fn report(ws: &Workspace, store: &SqliteStore, dir_or_session: &str) -> Result<loopwright_auto::report::Report> {
    let p = loop_of(ws, store, dir_or_session)?;
    let entries: Vec<(jiff::Timestamp, AutoEvent)> = store
        .auto_log_since(&p.status.loop_id, 0)?
        .iter()
        .filter_map(|e| Some((e.at.parse().ok()?, AutoEvent::from_entry(&e.kind, &e.data)?)))
        .collect();
    let changes = module_changes(Path::new(&p.status.task_dir), p.internal.start_commit.as_deref());
    let status = shown(p);
    Ok(loopwright_auto::report::Report::build(&status, &entries, changes, jiff::Timestamp::now()))
}

/// What changed in the working tree of the module `dir` since `start` (the commit the loop
/// started at): the commits since, the diff's stat and the untracked files — the whole tree,
/// not only the module, since the agent works on the project.
fn module_changes(dir: &Path, start: Option<&str>) -> loopwright_auto::report::Changes {
    use loopwright_auto::report::Changes;
    let Some(start) = start else {
        return Changes {
            unavailable: Some("the loop did not start in a git repository with a commit".into()),
            ..Changes::default()
        };
    };
    let root = working_tree(dir);
    let git = |args: &[&str]| loopwright_runners::git::git(&root, args).ok();
    let Some(stat) = git(&["diff", "--stat", start]) else {
        return Changes { unavailable: Some(format!("git could not compare with {start}")), ..Changes::default() };
    };
    let lines = |s: Option<String>| s.map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default();
    let commits = lines(git(&["log", "--oneline", "--no-decorate", &format!("{start}..HEAD")]));
    // loopwright's own state (the journal, the holder's files) is not the agent's work.
    let mine = |f: &String| f.starts_with(".loopwright/state/") || f.contains("/.loopwright/state/");
    let mut untracked: Vec<String> = lines(git(&["ls-files", "--others", "--exclude-standard"]));
    untracked.retain(|f| !mine(f));
    Changes { commits, stat, untracked, unavailable: None }
}

/// Something a person should know about a loop: it needs them, or it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notice {
    /// Its position in the supervision journals (resume after it).
    pub id: i64,
    /// The loop's session.
    pub session_name: String,
    /// When.
    pub at: jiff::Timestamp,
    /// What.
    pub kind: loopwright_auto::event::NoticeKind,
    /// In words.
    pub text: String,
}

/// The notices after position `after` in every loop's journal, oldest first, at most `limit`.
pub fn notices(store: &SqliteStore, after: i64, limit: usize) -> Result<Vec<Notice>> {
    use loopwright_auto::event::NoticeKind;
    Ok(store
        .auto_log_of_kinds(&NoticeKind::JOURNAL_KINDS, after, limit)?
        .into_iter()
        .filter_map(|(session_name, e)| {
            let event = AutoEvent::from_entry(&e.kind, &e.data)?;
            Some(Notice {
                id: e.id,
                session_name,
                at: e.at.parse().ok()?,
                kind: event.notice()?,
                text: event.describe(),
            })
        })
        .collect())
}
