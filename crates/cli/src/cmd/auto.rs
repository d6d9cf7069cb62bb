//! `loopwright auto`: one long-lived agent session runs a task module's whole loop, supervised
//! (SPEC §10).

use std::path::PathBuf;
use std::sync::Arc;

use loopwright_app::ops::auto::{self, StartRequest};
use loopwright_auto::event::AutoEvent;
use loopwright_auto::state::LoopStatus;
use loopwright_auto::supervisor::AutoStatus;

use super::Global;
use crate::error::CliError;
use crate::workspace::Workspace;

/// Arguments of `auto`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `auto` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a task module in status draft: .target.md, .index.md, .summary.md.
    Init {
        /// The module's directory (created).
        #[arg(value_name = "DIR")]
        module: PathBuf,
        /// What the module must achieve (written to .target.md).
        #[arg(long, default_value = "")]
        target: String,
    },
    /// Start the loop: the agent gets the protocol as its first message and runs plan → check
    /// → exec → check → merge → report by itself; loopwright watches, answers prompts its
    /// policy allows, waits out quotas, restarts an agent that exited, verifies the claim of
    /// "done" with the module's checks, and stops it at the limits. In the foreground (Ctrl-C
    /// asks it to stop). Exit: 0 complete · 1 blocked or failed · 3 needs a human · 4 stopped.
    Start {
        /// The task module.
        #[arg(value_name = "DIR")]
        module: PathBuf,
        /// The agent: an agent file's name or a preset (claude, codex, gemini, aider, …).
        #[arg(long)]
        agent: Option<String>,
        /// Iterations before the loop is stopped.
        #[arg(long)]
        max_iterations: Option<u32>,
        /// Minutes before the loop is stopped (quota waits do not count).
        #[arg(long)]
        timeout_minutes: Option<f64>,
        /// The session's name (default: the directory's name).
        #[arg(long)]
        session: Option<String>,
        /// Seconds between two looks at the agent's screen (default [auto] heartbeat_seconds).
        #[arg(long)]
        heartbeat_seconds: Option<f64>,
    },
    /// Ask the loop to stop gracefully (.auto-stop, reason user_stop).
    Stop {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: String,
    },
    /// Type into the agent's terminal, as a person: the answer to a prompt the policy would not
    /// give (`auto status` shows it). Journaled with who typed.
    Send {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: String,
        /// What to type (`1`, `y`, a sentence). At a numbered menu, one of its choices' numbers:
        /// text is refused there, since the menu would take Enter for its highlighted choice.
        #[arg(default_value = "")]
        text: String,
        /// Press Enter after the text (not at a menu: the choice's number is typed alone).
        #[arg(long)]
        enter: bool,
        /// At a menu, approving a command or edit the policy refused: repeat that command (or
        /// those files) here, to say you read what you approve.
        #[arg(long, value_name = "COMMAND")]
        confirm: Option<String>,
    },
    /// Approve the checks the agent added to the module's .index.md after the loop started
    /// (`auto status` lists them): until a person does, they do not run and the loop waits.
    /// Journaled with who approved.
    ApproveChecks {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: String,
        /// A check you read (repeat for each): nothing is approved if the waiting list is not
        /// exactly these (the agent added another meanwhile).
        #[arg(long = "check", value_name = "COMMAND")]
        check: Vec<String>,
    },
    /// The loop's state, or every loop.
    Status {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: Option<String>,
    },
    /// The supervision journal: every signal, verdict, keystroke sent, wait, restart and stop.
    Log {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: String,
    },
    /// The loop's summary, for the morning after: each step the agent reported, the checks
    /// and their results, waits for usage and rate limits, stalls, recoveries and restarts
    /// with why, what a person was asked, the module's changes since the start, and the cost
    /// where the agent's CLI printed it. Markdown (also with --markdown), or --json.
    Report {
        /// The task module (or the session's name).
        #[arg(value_name = "DIR")]
        module: String,
        /// Markdown (the default; for a file or a chat message).
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the protocol the agent is given.
    Protocol {
        /// Fill in this module's path (default: a placeholder).
        #[arg(value_name = "DIR")]
        module: Option<PathBuf>,
    },
    /// (internal) Hold an agent's pseudo-terminal for a supervisor.
    #[command(hide = true)]
    Hold {
        /// The session's directory.
        #[arg(value_name = "DIR")]
        module: PathBuf,
    },
}

/// `loopwright auto` (on a runtime of its own: the supervisor runs checks on blocking threads).
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    match args.command {
        Command::Hold { module } => match loopwright_auto::holder::run(&module) {
            Ok(()) => Ok(0),
            Err(e) => Err(CliError::usage(format!("auto hold: {e}"))),
        },
        Command::Protocol { module } => {
            let dir = module.unwrap_or_else(|| PathBuf::from("{task_dir}"));
            print!("{}", loopwright_auto::protocol::render(&dir));
            Ok(0)
        }
        Command::Init { module: dir, target } => {
            let ws = global.workspace()?;
            let dir = auto::init(&ws, &dir, &target)?;
            if global.json {
                println!("{}", serde_json::json!({ "task_dir": dir.display().to_string(), "status": "draft" }));
            } else {
                println!("created task module {} (status draft)", ws.shown(&dir));
                if target.trim().is_empty() {
                    println!(
                        "next: write what it must achieve in {}/.target.md, then `loopwright auto start {}`",
                        ws.shown(&dir),
                        ws.shown(&dir)
                    );
                }
            }
            Ok(0)
        }
        Command::Start { module: dir, agent, max_iterations, timeout_minutes, session, heartbeat_seconds } => {
            let req =
                StartRequest { task_dir: dir, session, agent, max_iterations, timeout_minutes, heartbeat_seconds };
            super::on_daemon_runtime(start(global, req))
        }
        Command::Stop { module: dir } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            let status = auto::stop(&ws, &store, &dir, &crate::drive::os_user())?;
            print_status(global, &status);
            Ok(0)
        }
        Command::Send { module: dir, text, enter, confirm } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            let session = auto::status_of(&ws, &store, &dir)?.session_name;
            let by = std::env::var("USER").unwrap_or_else(|_| "cli".into());
            let status = auto::send_keys(&ws, &store, &session, &text, enter, confirm.as_deref(), &by)?;
            print_status(global, &status);
            Ok(0)
        }
        Command::ApproveChecks { module: dir, check } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            let by = std::env::var("USER").unwrap_or_else(|_| "cli".into());
            let seen = (!check.is_empty()).then_some(check.as_slice());
            let status = auto::approve_checks(&ws, &store, &dir, seen, &by)?;
            print_status(global, &status);
            Ok(0)
        }
        Command::Status { module: dir } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            match dir {
                Some(dir) => print_status(global, &auto::status_of(&ws, &store, &dir)?),
                None => {
                    let all = auto::list(&store)?;
                    if global.json {
                        println!("{}", serde_json::to_string_pretty(&all)?);
                    } else if all.is_empty() {
                        println!("no auto loops yet (start one with `loopwright auto start DIR`)");
                    } else {
                        println!(
                            "{:<20} {:<12} {:<10} {:>9} {:>11} {:<8} DIR",
                            "SESSION", "STATUS", "AGENT", "ITERATION", "ELAPSED", "STEP"
                        );
                        for s in &all {
                            println!(
                                "{:<20} {:<12} {:<10} {:>9} {:>11} {:<8} {}",
                                s.session_name,
                                s.status,
                                s.agent,
                                format!("{}/{}", s.iteration, s.max_iterations),
                                format!("{:.0}s/{:.0}s", s.elapsed_s, s.timeout_s),
                                s.step,
                                ws.shown(std::path::Path::new(&s.task_dir))
                            );
                        }
                    }
                }
            }
            Ok(0)
        }
        Command::Report { module: dir, markdown: _, json } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            let report = auto::report(&ws, &store, &dir)?;
            if json || global.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", crate::terminal::safe(&report.to_markdown()));
            }
            Ok(0)
        }
        Command::Log { module: dir } => {
            let ws = global.workspace()?;
            let store = super::open_existing_local_store(&ws)?;
            let (status, entries) = auto::log(&ws, &store, &dir)?;
            if global.json {
                let list: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|e| {
                        serde_json::json!({ "id": e.id, "at": e.at, "kind": e.kind,
                            "data": serde_json::from_str::<serde_json::Value>(&e.data).unwrap_or_default() })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "session_name": status.session_name, "loop_id": status.loop_id, "entries": list })
                    )?
                );
            } else {
                for e in &entries {
                    println!("{}", crate::terminal::safe(&log_line(&e.at, &e.kind, &e.data)));
                }
            }
            Ok(0)
        }
    }
}

/// One journal entry as a line: its time, its kind and what it says in words (an entry of a
/// kind this version does not know: its fields).
fn log_line(at: &str, kind: &str, data: &str) -> String {
    let time = at.parse::<jiff::Timestamp>().map_or_else(|_| at.to_owned(), |t| t.strftime("%H:%M:%S").to_string());
    let said = AutoEvent::from_entry(kind, data).map_or_else(|| data.to_owned(), |e| e.describe());
    format!("{time} {kind:<20} {said}")
}

async fn start(global: &Global, req: StartRequest) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    if let Some(daemon) = loopwright_daemon::serving(&ws) {
        return start_in_daemon(global, &ws, &daemon, req).await;
    }
    let store = Arc::new(super::open_local_store(&ws)?);
    let sup = auto::start(&ws, &store, &req, true).await?;
    let (session, loop_id) = (sup.status().session_name.clone(), sup.status().loop_id.clone());
    if !global.json {
        eprintln!(
            "auto loop {session}: {} on {} (max {} iterations, {:.0} min); Ctrl-C asks it to stop",
            sup.status().agent,
            ws.shown(std::path::Path::new(&sup.status().task_dir)),
            sup.status().max_iterations,
            sup.status().timeout_s / 60.0
        );
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = stop.send(true);
        }
    });
    // Progress: the journal as it grows.
    let printer = (!global.json).then(|| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut after = 0;
            loop {
                if let Ok(entries) = store.auto_log_since(&loop_id, after) {
                    for e in entries {
                        after = e.id;
                        eprintln!("  {}", crate::terminal::safe(&log_line(&e.at, &e.kind, &e.data)));
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    });
    let status = sup.run(stopped).await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    if let Some(p) = printer {
        p.abort();
    }
    print_status(global, &status);
    Ok(match status.status {
        LoopStatus::Complete => 0,
        LoopStatus::NeedsHuman => 3,
        LoopStatus::Stopped => 4,
        LoopStatus::Running | LoopStatus::QuotaWait | LoopStatus::Blocked | LoopStatus::Failed => 1,
    })
}

/// `auto start` when a daemon serves the workspace: the daemon supervises the loop (so it
/// outlives this command); the status object is printed at once.
async fn start_in_daemon(
    global: &Global,
    ws: &Workspace,
    daemon: &loopwright_daemon::Served,
    req: StartRequest,
) -> Result<u8, CliError> {
    // Checked here first, for an error that names this command's arguments.
    let dir = auto::task_dir(ws, &req.task_dir)?;
    let session = req.session.clone().unwrap_or_else(|| auto::session_name(&dir));
    auto::valid_session(&session)?;
    let body = loopwright_daemon::api::dto::StartAuto {
        task_dir: dir.display().to_string(),
        max_iterations: req.max_iterations,
        timeout_minutes: req.timeout_minutes,
        agent: req.agent.clone(),
        heartbeat_seconds: req.heartbeat_seconds,
    };
    // Over the daemon's Unix socket when it has one: no other local user can crowd it.
    let host = if daemon.socket.is_some() { "localhost".to_owned() } else { daemon.addr.to_string() };
    let url = format!("http://{host}/api/sessions/{session}/task-auto");
    let unreachable = |e: reqwest::Error| {
        CliError::Internal(anyhow::anyhow!(
            "the daemon serving this workspace (process {}, http://{}) did not answer: {e}; stop it, or remove .loopwright/state/serve.json if it is gone",
            daemon.pid,
            daemon.addr
        ))
    };
    let mut client = loopwright_runners::http::client();
    if let Some(socket) = &daemon.socket {
        client = client.unix_socket(socket.as_path());
    }
    let client = client.build().map_err(|e| CliError::Internal(anyhow::anyhow!("cannot make an HTTP client: {e}")))?;
    let answer = client
        .post(&url)
        .bearer_auth(&daemon.token)
        .json(&body)
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await
        .map_err(unreachable)?;
    let code = answer.status().as_u16();
    let value: serde_json::Value = answer.json().await.map_err(unreachable)?;
    if code != 201 {
        let message = value["error"]["message"].as_str().unwrap_or("the daemon refused the loop").to_owned();
        return Err(match code {
            403 => CliError::Forbidden(message),
            404 => CliError::NotFound(message),
            409 => CliError::Conflict(message),
            400..=499 => CliError::Usage(message),
            _ => CliError::Internal(anyhow::anyhow!("the daemon failed to start the loop: {message}")),
        });
    }
    let status: AutoStatus = serde_json::from_value(value)?;
    if !global.json {
        eprintln!(
            "auto loop {session} started by the daemon (process {}, http://{}): it supervises the loop from now on; follow it with `loopwright auto status {}` or the dashboard, stop it with `loopwright auto stop {}`",
            daemon.pid,
            daemon.addr,
            ws.shown(&dir),
            ws.shown(&dir)
        );
    }
    print_status(global, &status);
    Ok(0)
}

fn print_status(global: &Global, s: &AutoStatus) {
    if global.json {
        println!("{}", serde_json::to_string_pretty(s).unwrap_or_default());
        return;
    }
    // What the agent showed (the prompt a person must answer, a check's command) is in it.
    let mut out = String::new();
    macro_rules! println {
        ($($arg:tt)*) => {{
            out.push_str(&format!($($arg)*));
            out.push('\n');
        }};
    }
    println!("session    {}  ({})", s.session_name, s.status);
    println!("task       {}", s.task_dir);
    println!(
        "agent      {}{}",
        s.agent,
        s.agent_session_id.as_ref().map(|i| format!("  (session {i})")).unwrap_or_default()
    );
    println!("iteration  {}/{}", s.iteration, s.max_iterations);
    println!(
        "elapsed    {:.0}s / {:.0}s{}",
        s.elapsed_s,
        s.timeout_s,
        if s.quota_paused_s > 0.0 {
            format!("  ({:.0}s of quota waits not counted)", s.quota_paused_s)
        } else {
            String::new()
        }
    );
    if !s.step.is_empty() {
        println!(
            "signal     step {} → {} → next {}{}",
            s.step,
            s.result,
            s.next,
            if s.checkpoint.is_empty() { String::new() } else { format!(" ({})", s.checkpoint) }
        );
    }
    println!(
        "recoveries {} this iteration, {} in all; restarts {}",
        s.recovery_count_step, s.recovery_count_total, s.restart_count
    );
    if let Some(until) = &s.quota_resets_at {
        println!("quota      waiting until {until}");
    }
    if let Some(reason) = &s.stop_reason {
        println!("stopped    {reason}");
    }
    if let Some(why) = &s.needs_human {
        println!("needs you  {}", why.lines().next().unwrap_or_default());
        for l in why.lines().skip(1) {
            println!("           | {l}");
        }
    }
    for c in &s.checks {
        println!("check      {} {}", if c.passed { "passed" } else { "FAILED" }, c.command);
    }
    print!("{}", crate::terminal::safe(&out));
}
