//! Runners: how loopwright runs a stage.
//!
//! [`ProcessRunner`] runs `agent: shell` stages (`sh -c` per command) and agents with
//! `runner: command` (the prompt on stdin and in `LOOPWRIGHT_PROMPT_FILE`, SPEC §5), each
//! process in its own process group.

pub mod at;
pub mod edits;
pub mod git;
pub mod guard;
pub mod http;
mod kept;
pub mod live;
pub mod presets;
pub mod process;
pub mod proxy;
pub mod sandbox;
pub mod secrets;
pub mod snapshot;

use std::path::{Path, PathBuf};
use std::time::Duration;

use loopwright_engine::closed_loop::FileChanges;
use loopwright_engine::event::RestoreCounts;
use loopwright_engine::ports::{
    CommandRequest, CommitError, Commits, ExecOutcome, Execution, LayerError, Layers, Notice, ProcessGroup, Purpose,
    Runner, SnapshotError, Snapshots, StageRequest, Watch, Workspace,
};
use loopwright_engine::{RunId, TaskId};
use loopwright_spec::RunnerKind;
use loopwright_spec::StageId;
use loopwright_spec::sandbox::Network;
use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use crate::live::LiveSink;
use crate::process::{ProcessEnd, Spawn, group_alive, same_process_alive, signal_group};

/// Runs stages as local processes.
#[derive(Debug, Clone)]
pub struct ProcessRunner {
    /// Where run directories live (`.loopwright/state/runs`); prompts are written there.
    pub runs_dir: PathBuf,
    /// Time between TERM and KILL when a stage is ended.
    pub kill_grace: Duration,
    /// Bytes of each output stream kept.
    pub output_cap: usize,
    /// Secret values kept out of outputs and prompt files.
    pub redactor: secrets::Redactor,
    /// When set, every stage process and check runs in a sandbox (see [`sandbox`]) unless its
    /// stage says `sandbox: off`.
    pub sandbox: Option<Sandboxing>,
    /// Why stages that ask for a sandbox run without one (none could be made here).
    pub unsandboxed: Option<String>,
    /// The lease a worker drives the run under (`WORKER:EPOCH`), given to every process as
    /// `LOOPWRIGHT_LEASE`: what [`end_run_processes`] ends is what this lease started, not
    /// another worker's processes of the same run on this machine.
    pub lease: Option<String>,
}

/// How the runner makes sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandboxing {
    /// The `bwrap` program.
    pub bwrap: PathBuf,
    /// Where attempts' homes and layers live ([`sandbox::state_dir`]).
    pub state: PathBuf,
    /// The loopwright program: inside a sandbox that reaches hosts, `loopwright sandbox-exec`
    /// carries its connections to the proxy.
    pub helper: PathBuf,
    /// Kernel limits set on each sandboxed process.
    pub limits: Option<sandbox::Limits>,
    /// What mounts layers, where they can be made here.
    pub overlay: Option<sandbox::Overlay>,
}

/// Whose process a sandbox is made for.
#[derive(Clone, Copy)]
struct Whose<'a> {
    run: &'a RunId,
    /// The name of its home (`STAGE-ATTEMPT`, `STAGE-checks`).
    home: &'a str,
    workspace: &'a Path,
    mode: loopwright_spec::Mode,
    agent: Option<&'a loopwright_spec::Agent>,
    confine: &'a loopwright_engine::ports::Confinement,
}

/// A process's sandbox while it runs: its argv, and what lives as long as it does.
struct Confined {
    argv: Vec<String>,
    /// The allow-list proxy it reaches the network through.
    proxy: Option<proxy::Proxy>,
    /// The folder of the proxy's socket (short, private).
    _socket_dir: Option<tempfile::TempDir>,
    /// Its home, removed when it ends (copies of the agent's sign-in live there).
    home: Option<PathBuf>,
    /// What of loopwright's environment it is given (`None`: all of it, unsandboxed).
    inherited: Option<Vec<(String, String)>>,
}

impl Confined {
    /// Its whole environment with `own` (loopwright's variables for it) added, and whether it
    /// inherits the rest of loopwright's: a sandboxed process gets the allow list only.
    fn environment(&self, own: &[(String, String)]) -> (Vec<(String, String)>, bool) {
        match &self.inherited {
            Some(allowed) => (allowed.iter().chain(own).cloned().collect(), false),
            None => (own.to_vec(), true),
        }
    }

    /// Ends what the process needed; returns what the proxy refused it.
    fn finish(self) -> Vec<proxy::Refused> {
        let refused = self.proxy.as_ref().map(proxy::Proxy::refused).unwrap_or_default();
        if let Some(home) = &self.home {
            let _ = sandbox::remove_tree(home);
        }
        refused
    }
}

impl ProcessRunner {
    /// A runner writing prompt files under `runs_dir`.
    pub fn new(runs_dir: PathBuf) -> Self {
        Self {
            runs_dir,
            kill_grace: Duration::from_secs(2),
            output_cap: 8 * 1024 * 1024,
            redactor: secrets::Redactor::from_env(&[]),
            sandbox: None,
            unsandboxed: None,
            lease: None,
        }
    }

    /// `argv` as it runs: in a sandbox when the runner makes them and `confine` asks for one
    /// (the workspace read-only in plan mode, the attempt's layer over it, or writable but
    /// for `.git/` and `.loopwright/`; a home of its own holding only its agent's
    /// configuration; the hosts `confine` allows through a proxy, else no network), else as
    /// it is.
    fn confined(&self, argv: &[String], whose: &Whose<'_>) -> Result<Confined, SetupError> {
        let Whose { run, home, workspace, mode, agent, confine } = *whose;
        let unconfined =
            || Confined { argv: argv.to_vec(), proxy: None, _socket_dir: None, home: None, inherited: None };
        let Some(s) = self.sandbox.as_ref().filter(|_| confine.sandbox) else { return Ok(unconfined()) };
        let home = s.state.join(run.as_str()).join("homes").join(home);
        let _ = sandbox::remove_tree(&home);
        std::fs::create_dir_all(&home).map_err(|source| SetupError::Create { path: home.clone(), source })?;
        let mut config = Vec::new();
        let user_home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
        let program: Vec<&str> = argv.first().map(String::as_str).into_iter().collect();
        let seen_home =
            user_home.as_ref().map(|h| sandbox::user_home(h, std::env::var_os("PATH").as_deref(), &program));
        if let Some(user_home) = &user_home {
            // Git as the user has it (their name for commits, their aliases), read-only.
            for shared in [".gitconfig", ".config/git"] {
                config.push((user_home.join(shared), shared.to_owned()));
            }
        }
        if let (Some(agent), Some(user_home)) = (agent, user_home) {
            let wanted = presets::agent_config(agent.runner);
            for file in wanted.copies {
                let from = user_home.join(file);
                if from.is_file() {
                    let to = home.join(file);
                    let copied =
                        to.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::copy(&from, &to));
                    copied.map_err(|source| SetupError::CopyHome { path: from.clone(), source })?;
                }
            }
            config.extend(wanted.shared.iter().map(|dir| (user_home.join(dir), (*dir).to_owned())));
        }
        let hosts: Vec<loopwright_spec::sandbox::Host> = match &confine.network {
            Network::None => Vec::new(),
            Network::Model => agent.map(presets::model_hosts).unwrap_or_default(),
            Network::Hosts(hosts) => hosts.clone(),
        };
        let (sockets, hosts): (Vec<_>, Vec<_>) = hosts.into_iter().partition(|h| h.unix_socket().is_some());
        let sockets = sockets.iter().filter_map(|h| h.unix_socket().map(Path::to_path_buf)).collect();
        let (proxy, socket_dir, plan_proxy) = if hosts.is_empty() {
            (None, None, None)
        } else {
            let dir = tempfile::Builder::new().prefix("lw-net-").tempdir().map_err(SetupError::ProxyFolder)?;
            let socket = dir.path().join("proxy.sock");
            let allowed = hosts.iter().map(|h| proxy::Allowed { host: h.host.clone(), port: h.port }).collect();
            let running = proxy::start(&socket, allowed).map_err(SetupError::Proxy)?;
            let tunnels = hosts
                .iter()
                .filter(|h| h.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()))
                .map(|h| (h.host.clone(), h.port))
                .collect();
            let plan = sandbox::ProxyPlan { socket, helper: s.helper.clone(), tunnels };
            (Some(running), Some(dir), Some(plan))
        };
        let write = match (&confine.layer, mode, &s.overlay) {
            (_, loopwright_spec::Mode::Plan, _) => sandbox::Write::ReadOnly,
            (Some(layer), _, Some(overlay)) => {
                let layer = sandbox::Layer::of(&s.state, run.as_str(), layer);
                sandbox::Write::Layer { upper: layer.upper(), work: layer.work(), overlay: overlay.clone() }
            }
            _ => sandbox::Write::Direct,
        };
        let plan = sandbox::Plan {
            workspace: workspace.to_path_buf(),
            write,
            home: home.clone(),
            config,
            network: false,
            proxy: plan_proxy,
            user_home: seen_home,
            limits: s.limits.clone(),
            read_only: [
                Some(self.runs_dir.join(run.as_str()).join("prompts")),
                sandbox::worktree_repository(workspace),
            ]
            .into_iter()
            .flatten()
            .chain(sandbox::exposed(Path::new("/tmp"), std::env::var_os("PATH").as_deref(), &program))
            .collect(),
            hidden: self.state_folders(workspace),
            sockets,
        };
        // The agent's own process alone is given its key; its checks and shell stages are not.
        let also: Vec<String> =
            confine.env.iter().cloned().chain(agent.map(presets::agent_environment).unwrap_or_default()).collect();
        Ok(Confined {
            argv: sandbox::command(&s.bwrap, &plan, argv),
            proxy,
            _socket_dir: socket_dir,
            home: Some(home),
            inherited: Some(sandbox::environment(std::env::vars_os(), &also)),
        })
    }

    /// loopwright's state folders a sandbox hides: the runs' (the journal, the daemon's token,
    /// auto mode's sockets) and the workspace's own.
    fn state_folders(&self, workspace: &Path) -> Vec<PathBuf> {
        let mut hidden: Vec<PathBuf> = self.runs_dir.parent().map(Path::to_path_buf).into_iter().collect();
        let own = workspace.join(".loopwright").join("state");
        if !hidden.contains(&own) {
            hidden.push(own);
        }
        hidden
    }

    fn env(&self, request: &StageRequest, prompt_file: &std::path::Path) -> Vec<(String, String)> {
        let lease = self.lease.iter().map(|l| ("LOOPWRIGHT_LEASE".to_owned(), l.clone()));
        // An agent that exports its own telemetry (Claude Code's OpenTelemetry) joins the attempt.
        let trace = request.traceparent.iter().map(|t| ("TRACEPARENT".to_owned(), t.clone()));
        lease
            .chain(trace)
            .chain([
                ("LOOPWRIGHT_RUN_ID".into(), request.run_id.to_string()),
                ("LOOPWRIGHT_TASK_ID".into(), request.task_id.to_string()),
                ("LOOPWRIGHT_STAGE_ID".into(), request.stage.to_string()),
                ("LOOPWRIGHT_ATTEMPT".into(), request.attempt.to_string()),
                ("LOOPWRIGHT_MODE".into(), request.mode.to_string()),
                ("LOOPWRIGHT_PROMPT_FILE".into(), prompt_file.display().to_string()),
                ("LOOPWRIGHT_WORKSPACE".into(), request.workspace.display().to_string()),
                // What git does for the stage says so in the reflog (a person's commit made
                // meanwhile does not).
                ("GIT_REFLOG_ACTION".into(), format!("{} {}", snapshot::STAGE_REFLOG_ACTION, request.stage)),
            ])
            .collect()
    }

    /// Keeps what an attempt printed, as `outputs/STAGE-ATTEMPT.out` and `.err` in the run's
    /// folder (nothing is written for an empty stream), for `loopwright logs RUN --stage S`.
    /// While the attempt runs, the same files grow as the output comes (see [`live`]).
    fn keep_output(&self, request: &StageRequest, stdout: &str, stderr: &str) {
        let (out, err) = self.output_paths(request);
        for (path, text) in [(out, stdout), (err, stderr)] {
            if text.is_empty() {
                continue;
            }
            // Best effort: the journal holds the outputs that matter and the error's tail.
            if overwrite(&path, text.as_bytes()).is_err() {
                let _ =
                    path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&path, text));
            }
        }
    }

    /// Where an attempt's stdout and stderr are kept.
    fn output_paths(&self, request: &StageRequest) -> (PathBuf, PathBuf) {
        let dir = self.runs_dir.join(request.run_id.as_str()).join("outputs");
        let stem = request.file_stem();
        (dir.join(format!("{stem}.out")), dir.join(format!("{stem}.err")))
    }

    /// Writes the attempt's prompt where `LOOPWRIGHT_PROMPT_FILE` points: for an agent, its own
    /// file per attempt (`prompts/STAGE-ATTEMPT.md`, kept as the record of what it was told);
    /// for a shell stage, the run's `prompts/shell.md`, rewritten for each (stages run one at a
    /// time), which spares a new file per stage.
    fn write_prompt(&self, request: &StageRequest, prompt: &str) -> Result<PathBuf, SetupError> {
        let dir = self.runs_dir.join(request.run_id.as_str()).join("prompts");
        let path = match request.agent {
            Some(_) => dir.join(format!("{}.md", request.file_stem())),
            None => dir.join("shell.md"),
        };
        if overwrite(&path, prompt.as_bytes()).is_err() {
            std::fs::create_dir_all(&dir).map_err(|source| SetupError::Create { path: dir.clone(), source })?;
            overwrite(&path, prompt.as_bytes()).map_err(|source| SetupError::Write { path: path.clone(), source })?;
        }
        Ok(path)
    }

    /// An execution with every text it carries redacted (what the process printed, and the
    /// reason it could not start, which for an HTTP runner quotes the server's answer): the
    /// one way out of the runner, so no secret reaches the journal, a file or the terminal.
    fn scrubbed(&self, mut execution: Execution) -> Execution {
        self.redactor.scrub(&mut execution.stdout);
        self.redactor.scrub(&mut execution.stderr);
        if let ExecOutcome::SpawnFailed(why) = &mut execution.outcome {
            self.redactor.scrub(why);
        }
        execution
    }
}

/// Writes `bytes` as the whole content of `path`, over what it held. Unlike `fs::write` it does
/// not truncate the file to nothing first: on ext4 that frees the file's block (a synchronous
/// discard on a disk mounted with `discard`) and makes `close` flush the data, which together
/// cost more than a shell stage's whole process.
fn overwrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    file.write_all(bytes)?;
    if file.metadata()?.len() != bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

/// What a failed process's error output is given for each connection the sandbox refused it:
/// the failure patterns read it (`permission-error`), and the engine does not retry such an
/// attempt unchanged.
fn refusal_line(refused: &proxy::Refused) -> String {
    format!("{}{}: {}\n", loopwright_engine::ports::SANDBOX_REFUSED, refused.target, refused.why)
}

/// Words that only a shell understands: a command starting with one runs through `sh`.
const SHELL_ONLY: &[&str] = &[
    "cd", "exit", "export", ".", ":", "eval", "exec", "set", "unset", "shift", "trap", "return", "break", "continue",
    "readonly", "times", "umask", "wait", "alias", "unalias", "read", "getopts", "command", "type", "hash", "ulimit",
    "local", "jobs", "fg", "bg", "source", "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done",
    "case", "esac", "function", "select", "time", "!", "{", "}",
];

/// How a shell stage's command is run: `sh -c COMMAND`, except that a plain command (words of
/// ordinary characters, no quoting, expansion, redirection or operators, and a first word that
/// is a program on PATH) is run directly, as `sh` itself would, without paying for a shell.
pub fn shell_argv(command: &str) -> Vec<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || " _./,:+-=@%".contains(c);
    let words: Vec<&str> = command.split(' ').filter(|w| !w.is_empty()).collect();
    let direct = !words.is_empty()
        && command.chars().all(plain)
        && !words[0].contains('=')
        && !SHELL_ONLY.contains(&words[0])
        && process::resolve(words[0]).is_absolute();
    if direct {
        words.into_iter().map(str::to_owned).collect()
    } else {
        vec!["sh".to_owned(), "-c".to_owned(), command.to_owned()]
    }
}

fn exec_outcome(end: ProcessEnd) -> ExecOutcome {
    match end {
        ProcessEnd::Exited(code) => ExecOutcome::Exited(code),
        ProcessEnd::Signaled(sig) => ExecOutcome::Signaled(sig),
        ProcessEnd::TimedOut => ExecOutcome::TimedOut,
        ProcessEnd::SpawnFailed(why) => ExecOutcome::SpawnFailed(why),
    }
}

impl Runner for ProcessRunner {
    async fn run(&self, request: &StageRequest, notices: UnboundedSender<Notice>) -> Execution {
        let started = Instant::now();
        let deadline = started + request.timeout;
        let done = |outcome, stdout, stderr| Execution {
            outcome,
            stdout,
            stderr,
            duration: started.elapsed(),
            usage: None,
            unfixable: None,
        };
        let prompt_text = self.redactor.redact(&request.prompt);
        let http_agent =
            request.agent.as_ref().filter(|a| matches!(a.runner, RunnerKind::Openai | RunnerKind::Anthropic));
        // The prompt file holds exactly what the agent is told (for a model, with the edit rules).
        let full = http_agent.map(|_| http::full_prompt(&prompt_text, request.mode));
        let prompt_file = match self.write_prompt(request, full.as_deref().unwrap_or(&prompt_text)) {
            Ok(p) => p,
            Err(why) => return done(ExecOutcome::SpawnFailed(why.to_string()), String::new(), String::new()),
        };
        if let (Some(agent), Some(full)) = (http_agent, &full) {
            let mut live = LiveSink::new(self.output_paths(request).0, self.output_cap, &self.redactor);
            let structured = match &request.purpose {
                Purpose::Attempt | Purpose::Candidate { .. } => None,
                Purpose::Classify { schema } | Purpose::Judge { schema } => Some(schema),
            };
            let call = http::Call { agent, prompt: full, mode: request.mode, structured };
            let answer = http::run(&call, &request.workspace, deadline, &mut live, &notices).await;
            live.finish();
            let execution = self.scrubbed(Execution {
                usage: answer.usage,
                unfixable: answer.unfixable,
                ..done(answer.outcome, answer.text, answer.error)
            });
            self.keep_output(request, &execution.stdout, &execution.stderr);
            return execution;
        }
        let mut env = self.env(request, &prompt_file);
        let sandboxed = self.sandbox.is_some() && request.confine.sandbox;
        let preset = request.agent.as_ref().and_then(|a| {
            let invocation = presets::invocation(a, request.mode)?;
            Some(if sandboxed { presets::inside_sandbox(a.runner, invocation) } else { invocation })
        });
        // Each command of the stage, with what it gets on stdin.
        let commands: Vec<(Vec<String>, Option<&str>)> = match &request.agent {
            None => request.commands.iter().map(|c| (shell_argv(c), None)).collect(),
            Some(agent) => match agent.runner {
                RunnerKind::Command | RunnerKind::Shell => vec![(agent.command.clone(), Some(prompt_text.as_ref()))],
                _ if preset.is_some() => {
                    let p = preset.clone().expect("checked");
                    env.extend(p.env);
                    let file = prompt_file.display().to_string();
                    let argv =
                        p.argv.into_iter().map(|a| if a == presets::PROMPT_FILE { file.clone() } else { a }).collect();
                    vec![(argv, p.stdin.then_some(prompt_text.as_ref()))]
                }
                other => {
                    let why = format!(
                        "agent `{}` uses `runner: {other}`, which this build cannot run yet; use `runner: command` with `command: [...]`",
                        agent.name
                    );
                    return done(ExecOutcome::SpawnFailed(why), String::new(), String::new());
                }
            },
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut outcome = ExecOutcome::Exited(0);
        let (out_path, err_path) = self.output_paths(request);
        let mut live_out = LiveSink::new(out_path, self.output_cap, &self.redactor);
        let mut live_err = LiveSink::new(err_path, self.output_cap, &self.redactor);
        for (argv, stdin) in &commands {
            let spawn = Spawn {
                argv,
                stdin: *stdin,
                env: &env,
                inherit: true,
                cwd: &request.workspace,
                deadline,
                grace: self.kill_grace,
                output_cap: self.output_cap,
            };
            let shown = argv.join(" ");
            let shown = shown.strip_prefix("sh -c ").map_or(shown.clone(), str::to_owned);
            // A home of its own per attempt (and per candidate of one: they run at once).
            let home = request.file_stem();
            let whose = Whose {
                run: &request.run_id,
                home: &home,
                workspace: &request.workspace,
                mode: request.mode,
                agent: request.agent.as_ref(),
                confine: &request.confine,
            };
            let confined = match self.confined(argv, &whose) {
                Ok(c) => c,
                Err(why) => return done(ExecOutcome::SpawnFailed(why.to_string()), stdout, stderr),
            };
            let (environment, inherit) = confined.environment(&env);
            let spawn = Spawn { argv: &confined.argv, env: &environment, inherit, ..spawn };
            let on_start = |pgid, start_time| {
                let group = ProcessGroup { pgid, start_time, host: Some(process::machine().to_owned()) };
                let _ = notices.send(Notice::ProcessStarted { group, command: shown.clone() });
            };
            let result = process::run_live(spawn, on_start, Some((&mut live_out, &mut live_err))).await;
            let mut said = std::collections::BTreeSet::new();
            let mut refusals = String::new();
            for refused in confined.finish() {
                if said.insert(refused.target.clone()) {
                    refusals.push_str(&refusal_line(&refused));
                    let _ = notices.send(Notice::NetworkRefused { target: refused.target, why: refused.why });
                }
            }
            stdout.push_str(&result.stdout);
            stderr.push_str(&result.stderr);
            outcome = exec_outcome(result.end);
            // bubblewrap could not make the sandbox (it says so first): the machine changed
            // since the kept probe, so the next run probes again.
            if let Some(s) = self.sandbox.as_ref().filter(|_| request.confine.sandbox)
                && outcome == ExecOutcome::Exited(1)
                && result.stderr.starts_with("bwrap: ")
            {
                sandbox::forget_probe(&s.state);
            }
            // A failure is read with what the sandbox refused it, which is often why.
            if outcome != ExecOutcome::Exited(0) {
                stderr.push_str(&refusals);
            }
            if outcome != ExecOutcome::Exited(0) {
                break;
            }
        }
        // An agent that cannot go on says so in its own words (read before its output is parsed).
        let unfixable = match (&request.agent, &request.purpose) {
            (Some(agent), Purpose::Attempt | Purpose::Candidate { .. }) => {
                presets::unfixable(agent, &outcome, &stdout, &stderr)
            }
            _ => None,
        };
        // Secrets a process printed go no further.
        let Execution { outcome, mut stdout, stderr, .. } = self.scrubbed(done(outcome, stdout, stderr));
        self.keep_output(request, &stdout, &stderr);
        // A preset's machine-readable output gives the answer (the stage's output) and usage.
        let mut usage = None;
        if let (Some(agent), Some(_)) = (&request.agent, &preset) {
            let parsed = presets::parse(agent.runner, agent.model.as_deref(), &stdout);
            stdout = parsed.text;
            usage = parsed.usage;
        }
        Execution { usage, unfixable, ..done(outcome, stdout, stderr) }
    }

    fn end_strays(&self, run: &RunId, stage: &StageId) {
        let groups =
            process::groups_with_env(&[("LOOPWRIGHT_RUN_ID", run.as_str()), ("LOOPWRIGHT_STAGE_ID", stage.as_str())]);
        let groups: Vec<ProcessGroup> =
            groups.into_iter().map(|pgid| ProcessGroup { pgid, start_time: None, host: None }).collect();
        if !groups.is_empty() {
            self.end_leftovers(&groups);
        }
    }

    async fn command(&self, request: &CommandRequest<'_>) -> Execution {
        let started = Instant::now();
        let argv = vec!["sh".to_owned(), "-c".to_owned(), request.command.to_owned()];
        let done = |outcome, stderr: String| Execution {
            outcome,
            stdout: String::new(),
            stderr,
            usage: None,
            duration: started.elapsed(),
            unfixable: None,
        };
        let home = format!("{}-checks", request.stage);
        let whose = Whose {
            run: request.run,
            home: &home,
            workspace: request.workspace,
            mode: loopwright_spec::Mode::Agent,
            agent: None,
            confine: request.confine,
        };
        let confined = match self.confined(&argv, &whose) {
            Ok(c) => c,
            Err(why) => return self.scrubbed(done(ExecOutcome::SpawnFailed(why.to_string()), String::new())),
        };
        let lease = self.lease.iter().map(|l| ("LOOPWRIGHT_LEASE".to_owned(), l.clone()));
        let env: Vec<(String, String)> = lease
            .chain([
                ("LOOPWRIGHT_RUN_ID".to_owned(), request.run.to_string()),
                ("LOOPWRIGHT_STAGE_ID".to_owned(), request.stage.to_string()),
                ("LOOPWRIGHT_CHECK".to_owned(), "1".to_owned()),
            ])
            .collect();
        let (env, inherit) = confined.environment(&env);
        let spawn = Spawn {
            argv: &confined.argv,
            stdin: None,
            env: &env,
            inherit,
            cwd: request.workspace,
            deadline: started + request.timeout,
            grace: self.kill_grace,
            output_cap: self.output_cap,
        };
        let result = process::run(spawn, |_, _| {}).await;
        let mut stderr = result.stderr;
        for refused in confined.finish() {
            stderr.push_str(&refusal_line(&refused));
        }
        self.scrubbed(Execution {
            outcome: exec_outcome(result.end),
            stdout: result.stdout,
            stderr,
            usage: None,
            duration: started.elapsed(),
            unfixable: None,
        })
    }

    fn unsandboxed(&self) -> Option<String> {
        self.unsandboxed.clone()
    }

    fn end_leftovers(&self, process_groups: &[ProcessGroup]) {
        // A group is ours while its leader is the process we started, or while the leader is
        // gone but members remain (the group id cannot be reused while any member lives).
        // Groups another machine started (a run a worker took over) are not this machine's to
        // signal: their pids mean nothing here.
        let ours = |g: &ProcessGroup| {
            if !process::is_this_machine(g.host.as_deref()) {
                return false;
            }
            let leader = u32::try_from(g.pgid).unwrap_or(0);
            same_process_alive(leader, g.start_time) || (!same_process_alive(leader, None) && group_alive(g.pgid))
        };
        let alive: Vec<i32> = process_groups.iter().filter(|g| ours(g)).map(|g| g.pgid).collect();
        for g in &alive {
            signal_group(*g, Signal::SIGTERM);
        }
        let until = std::time::Instant::now() + self.kill_grace;
        while alive.iter().any(|g| group_alive(*g)) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        for g in &alive {
            signal_group(*g, Signal::SIGKILL);
        }
    }
}

/// How much a layer may hold unless `[sandbox_limits] max_layer_mb` says (SPEC §12).
pub const DEFAULT_MAX_LAYER_MB: u64 = 2048;

/// Snapshots in the run's folder and commits with git, for a workspace on this machine.
pub struct FsChanges {
    workspace: PathBuf,
    runs_dir: PathBuf,
    /// Whether the workspace is the top of a git work tree, and where git locks its index (a
    /// stat per commit after): asked of git once, when first needed.
    repo: std::cell::OnceCell<Option<git::Repo>>,
    /// The last snapshot taken: (run, name, manifest).
    last: std::cell::RefCell<Option<(RunId, String, snapshot::Manifest)>>,
    /// Secrets kept out of the file texts the closed loop's strategies read.
    redactor: secrets::Redactor,
    /// Where layers are made and what mounts them, when stages run in sandboxes that keep the
    /// workspace apart ([`sandbox::state_dir`]).
    layers: Option<(PathBuf, sandbox::Overlay)>,
    /// Where every commit is pushed before it is reported (a worker's run).
    publish: Option<Publish>,
    /// The most a layer may hold on disk, in bytes, for its copy into the workspace.
    max_layer: u64,
}

/// Ends every process of `run` that `lease` started and that still runs on this machine (found
/// by the `LOOPWRIGHT_RUN_ID` and `LOOPWRIGHT_LEASE` they carry): TERM to their groups, then
/// KILL after a grace.
pub fn end_run_processes(run: &RunId, lease: &str) {
    let wanted = [("LOOPWRIGHT_RUN_ID", run.as_str()), ("LOOPWRIGHT_LEASE", lease)];
    let groups: Vec<ProcessGroup> = process::groups_with_env(&wanted)
        .into_iter()
        .map(|pgid| ProcessGroup { pgid, start_time: None, host: None })
        .collect();
    if !groups.is_empty() {
        ProcessRunner::new(std::env::temp_dir()).end_leftovers(&groups);
    }
}

/// Why an attempt could not be set up to run: its home, its prompt file, its network proxy.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    /// A folder could not be made.
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: std::io::Error },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    /// An agent's configuration could not be copied into the sandbox's home.
    #[error("cannot copy {} into the sandbox's home: {source}", path.display())]
    CopyHome { path: PathBuf, source: std::io::Error },
    /// The proxy's socket folder could not be made.
    #[error("cannot make a folder for the network proxy: {0}")]
    ProxyFolder(std::io::Error),
    /// The proxy could not start.
    #[error("cannot start the network proxy: {0}")]
    Proxy(std::io::Error),
}

/// Where a worker pushes each commit of a run — to its branch on the run's repository —
/// before the engine journals the stage that made it, so that another worker continuing the
/// run starts from the last journaled stage's commit.
pub struct Publish {
    /// The repository.
    pub repo: String,
    /// The run's branch there (`loopwright/RUN`).
    pub branch: String,
    /// The commit the branch is known to hold, empty while the branch is not on the repository
    /// (the push expects it: a push by a worker whose lease was taken over, over the new
    /// holder's, is refused; a first push, over a branch another made meanwhile).
    pub pushed: std::sync::Mutex<String>,
    /// The commit the run's history starts from (its base): what the first push must descend
    /// from.
    pub from: String,
    /// Whether this process may still push: false once its lease on the run is lost.
    pub lease_held: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Publish {
    /// Pushes `commit` of the work tree at `root` to the run's branch.
    fn push(&self, root: &Path, commit: &str) -> Result<(), CommitError> {
        if !(self.lease_held)() {
            return Err(CommitError::NotPushed(format!(
                "commit {commit} not pushed: this worker's lease on the run was lost"
            )));
        }
        let mut pushed = self.pushed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The run's history only grows: a commit that does not descend from the last one pushed
        // would replace the stages before it.
        let since = if pushed.is_empty() { self.from.as_str() } else { pushed.as_str() };
        if !since.is_empty() && git::git(root, &["merge-base", "--is-ancestor", since, commit]).is_err() {
            return Err(CommitError::NotPushed(format!(
                "commit {commit} not pushed: it does not descend from {since}, the last commit of {} (its base or the last pushed)",
                self.branch
            )));
        }
        let lease = format!("--force-with-lease=refs/heads/{}:{}", self.branch, *pushed);
        let target = format!("{commit}:refs/heads/{}", self.branch);
        git::git(root, &["push", "--quiet", "--no-verify", &lease, &self.repo, &target]).map_err(|e| {
            CommitError::NotPushed(format!("cannot push commit {commit} to {} of {}: {e}", self.branch, self.repo))
        })?;
        *pushed = commit.to_owned();
        Ok(())
    }

    /// Pushes `commit` to `reference` (a candidate's kept layer), over what it held: a
    /// candidate run again after a crash keeps its new layer under the same name.
    fn keep(&self, root: &Path, reference: &str, commit: &str) -> Result<(), CommitError> {
        if !(self.lease_held)() {
            return Err(CommitError::NotPushed(format!(
                "commit {commit} not pushed: this worker's lease on the run was lost"
            )));
        }
        let target = format!("+{commit}:{reference}");
        git::git(root, &["push", "--quiet", "--no-verify", &self.repo, &target]).map(drop).map_err(|e| {
            CommitError::NotPushed(format!("cannot push commit {commit} to {reference} of {}: {e}", self.repo))
        })
    }

    /// Fetches `reference` into the repository of `root` (its objects only: no ref is made).
    fn fetch(&self, root: &Path, reference: &str) -> Result<(), git::GitError> {
        git::git(root, &["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", &self.repo, reference]).map(drop)
    }

    /// Removes every reference under `prefix` from the repository.
    fn forget(&self, root: &Path, prefix: &str) {
        let pattern = format!("{prefix}*");
        let Ok(listed) = git::git(root, &["ls-remote", "--refs", &self.repo, &pattern]) else { return };
        let refs: Vec<String> = listed.lines().filter_map(|l| l.split('\t').nth(1)).map(|r| format!(":{r}")).collect();
        if !refs.is_empty() {
            let mut args = vec!["push", "--quiet", "--no-verify", self.repo.as_str()];
            args.extend(refs.iter().map(String::as_str));
            let _ = git::git(root, &args);
        }
    }
}

/// Where a candidate's layer is kept on a fleet's repository (see [`Layers::keep_layer`]).
fn kept_ref(run: &RunId, layer: &str) -> String {
    format!("{}{layer}", kept_prefix(run))
}

/// Where the kept layers of `run` are.
fn kept_prefix(run: &RunId) -> String {
    format!("refs/loopwright/candidates/{}/", run.as_str())
}

impl FsChanges {
    /// Tracks changes of `workspace`, keeping snapshots under `runs_dir/RUN/snapshots/`.
    pub fn new(workspace: PathBuf, runs_dir: PathBuf) -> Self {
        Self {
            workspace,
            runs_dir,
            repo: std::cell::OnceCell::new(),
            last: std::cell::RefCell::new(None),
            redactor: secrets::Redactor::default(),
            layers: None,
            max_layer: DEFAULT_MAX_LAYER_MB * 1024 * 1024,
            publish: None,
        }
    }

    /// Every commit is pushed as `publish` says before it is reported.
    pub fn with_publish(self, publish: Publish) -> Self {
        Self { publish: Some(publish), ..self }
    }

    /// `commit`, pushed first when this run's commits are published.
    fn published(&self, commit: Option<(String, usize)>) -> Result<Option<(String, usize)>, CommitError> {
        if let (Some(publish), Some((sha, _))) = (&self.publish, &commit) {
            publish.push(&self.workspace, sha)?;
        }
        Ok(commit)
    }

    /// Agent-mode attempts write into layers under `state` (see [`sandbox::state_dir`]) that
    /// `overlay` mounts, and plan mode is mounted read-only: the runner sandboxes the stages.
    pub fn with_layers(self, state: PathBuf, overlay: sandbox::Overlay) -> Self {
        Self { layers: Some((state, overlay)), ..self }
    }

    /// A layer holding more than `mb` MiB is not copied into the workspace: its attempt fails.
    pub fn with_max_layer_mb(self, mb: u64) -> Self {
        Self { max_layer: mb.saturating_mul(1024 * 1024), ..self }
    }

    fn layer(&self, run: &RunId, name: &str) -> Result<sandbox::Layer, LayerError> {
        let (state, _) = self.layers.as_ref().ok_or(LayerError::NotHere)?;
        Ok(sandbox::Layer::of(state, run.as_str(), name))
    }

    /// The workspace's repository, when it is the top of a git work tree.
    fn repo(&self) -> Option<&git::Repo> {
        self.repo.get_or_init(|| git::Repo::at(&self.workspace)).as_ref()
    }

    /// Whether the workspace is the top of a git work tree.
    fn git(&self) -> bool {
        self.repo().is_some()
    }

    /// The repository's commit now, if the workspace is one.
    fn head(&self) -> Option<String> {
        self.git().then(|| git::git(&self.workspace, &["rev-parse", "--verify", "-q", "HEAD"]).ok()).flatten()
    }

    /// Redacts the secrets `redactor` knows from the files it reads for the closed loop.
    pub fn with_redactor(self, redactor: secrets::Redactor) -> Self {
        Self { redactor, ..self }
    }

    fn store(&self, run: &RunId) -> PathBuf {
        self.runs_dir.join(run.as_str()).join("snapshots")
    }

    /// The workspace's object store, beside the runs' folders (`state/objects/`).
    fn objects(&self) -> PathBuf {
        objects_dir(&self.runs_dir)
    }

    /// Snapshot `name` of `run`, read back.
    fn manifest(&self, run: &RunId, name: &str) -> Result<snapshot::Manifest, SnapshotError> {
        snapshot::load(&self.store(run), name)
            .map_err(|e| SnapshotError::Read { name: name.to_owned(), reason: e.to_string() })
    }
}

impl Workspace for FsChanges {
    fn read(&self, path: &str) -> Option<String> {
        // The same guard as for writes: a link cannot carry a read outside the workspace.
        let full = guard::writable(&self.workspace, path).ok()?;
        let bytes = std::fs::read(full).ok()?;
        // Text files only, and not huge ones.
        let text = (bytes.len() <= 4 * 1024 * 1024).then(|| String::from_utf8(bytes).ok()).flatten()?;
        Some(self.redactor.redact(&text).into_owned())
    }

    fn files(&self) -> Vec<String> {
        snapshot::walk(&self.workspace)
            .map(|f| f.into_iter().filter(|(_, found)| found.link.is_none()).map(|(p, _)| p).collect())
            .unwrap_or_default()
    }

    fn escapes(&self, path: &str) -> bool {
        let (Ok(root), Ok(full)) = (self.workspace.canonicalize(), self.workspace.join(path).canonicalize()) else {
            return false;
        };
        !full.starts_with(root)
    }

    fn has_program(&self, name: &str) -> bool {
        process::resolve(name).is_absolute()
    }

    fn root(&self) -> Option<&Path> {
        Some(&self.workspace)
    }
}

impl Snapshots for FsChanges {
    fn snapshot(&self, run: &RunId, name: &str, watch: Watch) -> Result<(String, usize), SnapshotError> {
        let store = self.store(run);
        let mut last = self.last.borrow_mut();
        let previous = last.as_ref().filter(|(r, _, _)| r == run);
        let scope = match watch {
            Watch::Files => snapshot::Scope::Files,
            Watch::ReadOnly => snapshot::Scope::PlanMode,
        };
        // Nothing changed since the previous snapshot, which watched as much: it serves again,
        // and nothing is written.
        if let Some((_, prev_name, prev)) = previous
            && (scope == snapshot::Scope::Files || !prev.control_dirs.is_empty())
            && snapshot::changes(&self.workspace, prev).is_ok_and(|d| d.is_empty())
        {
            return Ok((prev_name.clone(), prev.files.len()));
        }
        let base = if self.git() { snapshot::git_base(&self.workspace) } else { None };
        let objects = self.objects();
        let previous = previous.map(|(_, _, m)| m);
        let manifest = snapshot::take(&self.workspace, &store, &objects, name, previous, base.as_ref(), scope)
            .map_err(|e| SnapshotError::Take(e.to_string()))?;
        let files = manifest.files.len();
        *last = Some((run.clone(), name.to_owned(), manifest));
        Ok((name.to_owned(), files))
    }

    fn restore(&self, run: &RunId, name: &str) -> Result<RestoreCounts, SnapshotError> {
        let store = self.store(run);
        let manifest = self.manifest(run, name)?;
        let report = snapshot::restore(&self.workspace, &store, &self.objects(), &manifest)
            .map_err(|e| SnapshotError::Restore { name: name.to_owned(), reason: e.to_string() })?;
        // The workspace is now as the snapshot was.
        self.last.replace(None);
        Ok(RestoreCounts {
            restored: report.restored,
            recreated: report.recreated,
            removed: report.removed,
            unrestorable: report.unrestorable,
            kept: report.kept,
        })
    }

    fn changed(&self, run: &RunId, name: &str) -> Result<FileChanges, SnapshotError> {
        let manifest = self.manifest(run, name)?;
        let diff = snapshot::changes(&self.workspace, &manifest).map_err(|e| SnapshotError::Compare(e.to_string()))?;
        // Git's and loopwright's files are named as a person sees them: inside the workspace,
        // relative to it.
        let root = self.workspace.canonicalize().unwrap_or_else(|_| self.workspace.clone());
        let shown = |paths: Vec<String>| -> Vec<String> {
            paths
                .into_iter()
                .map(|p| {
                    Path::new(&p)
                        .strip_prefix(&root)
                        .or_else(|_| Path::new(&p).strip_prefix(&self.workspace))
                        .map_or(p.clone(), |r| r.display().to_string())
                })
                .collect()
        };
        let mut modified = diff.modified;
        modified.extend(shown(diff.control_modified));
        modified.extend(diff.dirs);
        if diff.index {
            modified.push("the git index (staged content)".to_owned());
        }
        let mut created = diff.created;
        created.extend(shown(diff.control_created));
        let mut deleted = diff.deleted;
        deleted.extend(shown(diff.control_deleted));
        Ok(FileChanges { modified, created, deleted, commits_kept: diff.outside })
    }
}

impl Layers for FsChanges {
    fn confined(&self) -> bool {
        self.layers.is_some()
    }

    fn make_layer(&self, run: &RunId, name: &str) -> Result<String, LayerError> {
        let layer = self.layer(run, name)?;
        let (_, overlay) = self.layers.as_ref().ok_or(LayerError::NotHere)?;
        layer.make(overlay).map_err(|e| LayerError::Make { dir: layer.shown(), reason: e.to_string() })?;
        Ok(overlay.describe().to_owned())
    }

    fn drop_layer(&self, run: &RunId, name: &str) -> Result<usize, LayerError> {
        let layer = self.layer(run, name)?;
        let head = self.head();
        layer
            .discard(&self.workspace, head.as_deref())
            .map_err(|e| LayerError::Remove { dir: layer.shown(), reason: e.to_string() })
    }

    fn layer_changed(&self, run: &RunId, name: &str) -> Result<FileChanges, LayerError> {
        let layer = self.layer(run, name)?;
        let (modified, created, deleted) = layer
            .changes(&self.workspace)
            .map_err(|e| LayerError::Read { dir: layer.shown(), reason: e.to_string() })?;
        Ok(FileChanges { modified, created, deleted, commits_kept: Vec::new() })
    }

    fn layer_here(&self, run: &RunId, name: &str) -> bool {
        self.layer(run, name).is_ok_and(|l| l.exists())
    }

    fn run_layers_here(&self, run: &RunId) -> bool {
        self.layers.as_ref().is_some_and(|(state, _)| state.join(run.as_str()).join("layers").is_dir())
    }

    fn layer_base(&self) -> Option<String> {
        self.head().map(|h| h.trim().to_owned())
    }

    fn merge_into_layer(&self, run: &RunId, name: &str, path: &str, base: &str) -> Result<bool, LayerError> {
        if !self.git() {
            return Ok(false);
        }
        let layer = self.layer(run, name)?;
        // The file as the layer's attempt first saw it (none when it did not exist then).
        let before = git::git_bytes(&self.workspace, &["show", &format!("{base}:{path}")]).ok();
        layer
            .merge(&self.workspace, path, before.as_deref())
            .map_err(|e| LayerError::Read { dir: layer.shown(), reason: e.to_string() })
    }

    fn layer_diff(&self, run: &RunId, name: &str, max_bytes: usize) -> Result<String, LayerError> {
        let layer = self.layer(run, name)?;
        layer
            .diff(&self.workspace, max_bytes)
            .map_err(|e| LayerError::Read { dir: layer.shown(), reason: e.to_string() })
    }

    fn commit_layer(
        &self,
        run: &RunId,
        name: &str,
        task: &TaskId,
        stage: &StageId,
    ) -> Result<Option<(String, usize)>, LayerError> {
        let layer = self.layer(run, name)?;
        if !layer.exists() {
            // Copied and committed before a crash, whose commit `committed` adopts.
            return Ok(None);
        }
        if layer.is_empty() && !layer.copying() {
            // Nothing written: nothing to copy or commit, and no git process to ask.
            let _ = sandbox::remove_tree(&layer.dir);
            return Ok(None);
        }
        let head = self.head();
        let copied = layer
            .copy_into(&self.workspace, head.as_deref(), self.max_layer)
            .map_err(|e| LayerError::Copy { dir: layer.shown(), reason: e.to_string() })?;
        let paths: Vec<String> = copied.written.into_iter().chain(copied.deleted).collect();
        let n = paths.len();
        let commit = if self.git() && !paths.is_empty() {
            git::commit(&self.workspace, &paths, run.as_str(), task.as_str(), stage.as_str())
                .map_err(|e| CommitError::Git(e.to_string()))?
                .map(|sha| (sha, n))
        } else {
            None
        };
        // Copied (and committed): the layer is of no more use, and dropping it later must not
        // undo the copy.
        let _ = sandbox::remove_tree(&layer.dir);
        Ok(self.published(commit)?)
    }

    fn keep_layer(&self, run: &RunId, name: &str) -> Result<Option<String>, LayerError> {
        let (Some(publish), Some(head)) = (&self.publish, self.head()) else {
            return Ok(None);
        };
        let layer = self.layer(run, name)?;
        let message = format!("loopwright: layer {name} of run {}", run.as_str());
        let commit = layer
            .to_commit(&self.workspace, head.trim(), &message)
            .map_err(|e| LayerError::Read { dir: layer.shown(), reason: e.to_string() })?;
        publish.keep(&self.workspace, &kept_ref(run, name), &commit)?;
        Ok(Some(commit))
    }

    fn bring_layer(&self, run: &RunId, name: &str, kept: &str) -> Result<(), LayerError> {
        let layer = self.layer(run, name)?;
        let (Some(publish), Some((_, overlay))) = (&self.publish, &self.layers) else {
            return Err(LayerError::NotHere);
        };
        let fail = |reason: String| LayerError::Make { dir: layer.shown(), reason };
        let present = |c: &str| git::git(&self.workspace, &["cat-file", "-e", &format!("{c}^{{commit}}")]).is_ok();
        if !present(kept) {
            publish.fetch(&self.workspace, &kept_ref(run, name)).map_err(|e| fail(e.to_string()))?;
            if !present(kept) {
                return Err(fail(format!("commit {kept}, which kept it, is not on {}", publish.repo)));
            }
        }
        layer.make(overlay).map_err(|e| fail(e.to_string()))?;
        let made = layer.from_commit(&self.workspace, kept).map_err(|e| fail(e.to_string()));
        if made.is_err() {
            let _ = sandbox::remove_tree(&layer.dir);
        }
        made
    }

    fn ended(&self, run: &RunId) {
        if let Some((state, _)) = &self.layers {
            let _ = sandbox::remove_tree(&state.join(run.as_str()));
        }
        if let Some(publish) = &self.publish {
            publish.forget(&self.workspace, &kept_prefix(run));
        }
    }
}

impl Commits for FsChanges {
    fn commit(
        &self,
        run: &RunId,
        name: &str,
        task: &TaskId,
        stage: &StageId,
    ) -> Result<Option<(String, usize)>, CommitError> {
        if !self.git() {
            return Ok(None);
        }
        let manifest = self.manifest(run, name)?;
        let diff = snapshot::changes(&self.workspace, &manifest).map_err(|e| SnapshotError::Compare(e.to_string()))?;
        let paths: Vec<String> = diff.modified.into_iter().chain(diff.deleted).chain(diff.created).collect();
        let n = paths.len();
        self.published(
            git::commit(&self.workspace, &paths, run.as_str(), task.as_str(), stage.as_str())
                .map_err(|e| CommitError::Git(e.to_string()))?
                .map(|sha| (sha, n)),
        )
    }

    fn revert(&self, task: &TaskId, stage: &StageId) -> Result<usize, CommitError> {
        if !self.git() {
            return Err(CommitError::NotRepository);
        }
        let reverted = git::revert_stage(&self.workspace, task.as_str(), stage.as_str())
            .map_err(|e| CommitError::Git(e.to_string()))?;
        if reverted > 0
            && let Some(head) = self.head()
        {
            self.published(Some((head, reverted)))?;
        }
        Ok(reverted)
    }

    fn committed(&self, run: &RunId, stage: &StageId) -> Option<(String, usize)> {
        if !self.git() {
            return None;
        }
        git::head_commit_of(&self.workspace, run.as_str(), stage.as_str())
    }

    fn repair(&self) -> Vec<String> {
        self.repo()
            .and_then(|repo| git::clear_stale_lock(&repo.index_lock))
            .map(|lock| vec![format!("removed {lock}, left by a git process that no longer runs")])
            .unwrap_or_default()
    }
}

/// The object store snapshots keep their copies in, beside the runs' folders `runs_dir`.
pub fn objects_dir(runs_dir: &Path) -> PathBuf {
    runs_dir.parent().map_or_else(|| runs_dir.join("objects"), |state| state.join("objects"))
}

#[cfg(test)]
mod tests {
    use super::overwrite;

    /// A process group of its own running `sleep`, and its leader's start time.
    fn sleeper() -> (std::process::Child, i32, Option<u64>) {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = child.id();
        (child, i32::try_from(pid).unwrap(), crate::process::start_time(pid))
    }

    #[test]
    fn leftovers_journaled_on_another_machine_are_left_alone_and_this_machines_are_ended() {
        use loopwright_engine::ports::Runner;
        let dir = tempfile::tempdir().unwrap();
        let runner = super::ProcessRunner::new(dir.path().to_path_buf());
        let (mut elsewhere, pgid, start_time) = sleeper();
        // The same pid and start time, journaled by another machine: not this machine's process.
        let group = super::ProcessGroup { pgid, start_time, host: Some("other-host/0123456789ab".into()) };
        runner.end_leftovers(&[group]);
        assert_eq!(elsewhere.try_wait().unwrap(), None, "a process of this machine was signalled for another's");
        let here = super::ProcessGroup { pgid, start_time, host: Some(crate::process::machine().to_owned()) };
        runner.end_leftovers(&[here]);
        let status = elsewhere.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15));
        // A journal older than workers names no machine: its groups are this machine's.
        let (mut old, pgid, start_time) = sleeper();
        runner.end_leftovers(&[super::ProcessGroup { pgid, start_time, host: None }]);
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&old.wait().unwrap()), Some(15));
    }

    #[test]
    fn overwrite_leaves_exactly_the_new_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shell.md");
        for text in ["a longer first prompt\n", "short\n", "", "grown again, longer than the first one\n", "x"] {
            overwrite(&path, text.as_bytes()).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
    }
}
