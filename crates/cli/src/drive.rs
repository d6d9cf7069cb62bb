//! Driving a run in the foreground, as `run`, `resume`, `approve`, `reject` and `demo` do:
//! the engine as the binary assembles it, and what happens when it stops — ask at an approval
//! gate or an escalation when a person is at the terminal, else report the result and return
//! the exit code.

use std::io::{BufRead, IsTerminal, Write};

use loopwright_app::assemble::RunEngine;
use loopwright_app::ops::start::{StartRequest, prepare};
use loopwright_app::ops::{answer, read};
use loopwright_app::ownership::this_process;
use loopwright_app::session::Session;
use loopwright_engine::event::Via;
use loopwright_engine::result::PipelineResult;
use loopwright_engine::{Event, RunState, Store};
use loopwright_spec::{Pipeline, StageId};

use crate::cmd::{Global, open_store};
use crate::error::CliError;
use crate::observe::Observers;
use crate::render;
use crate::stop::CliStopper;
use crate::workspace::Workspace;

/// Starts a run in this process and drives it until it ends or waits; `quiet` prints no
/// progress.
pub async fn start(global: &Global, ws: &Workspace, request: StartRequest, quiet: bool) -> Result<u8, CliError> {
    let prepared = prepare(ws, request, this_process(false)).await?;
    let store = open_store(ws)?;
    if !quiet {
        for note in &prepared.notes {
            eprintln!("loopwright: {note}");
        }
    }
    let pipeline = prepared.pipeline;
    let session = Session::start(ws, &store, &pipeline, &prepared.root, &prepared.run_id)?;
    let stopper = CliStopper::new(&store, prepared.run_id.clone(), 0).map_err(|e| CliError::Internal(e.into()))?;
    let mut observers = Observers::new(ws, quiet);
    let mut engine = session.engine(&pipeline, &store, &stopper, &mut observers);
    let state = engine.start(prepared.run_id, prepared.started).await?;
    finish(global, &mut engine, state).await
}

/// The engine as the binary drives it.
pub type CliEngine<'a> = RunEngine<'a, CliStopper<'a>>;

/// After the engine stops: ask at an approval gate when a person is at the terminal,
/// otherwise report the result and return the exit code.
pub async fn finish(global: &Global, engine: &mut CliEngine<'_>, mut state: RunState) -> Result<u8, CliError> {
    loop {
        while let Some(stage) = state.waiting_for_approval().map(|s| s.id.clone()) {
            let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
            if !interactive {
                break;
            }
            // A gate that names who may approve it, or refuses its starter, is not asked here.
            let prevent_self = global.workspace().is_ok_and(|ws| ws.config.serve.prevent_self_approval);
            let policy = answer::GatePolicy { pipeline: engine.pipeline, prevent_self };
            if let Err(refused) = policy.allows(&state, true, &cli_answerer(None)) {
                eprintln!("loopwright: {}", refused.message());
                break;
            }
            let prompt = approval_prompt(engine.pipeline, &stage, &state);
            let answer = tokio::task::spawn_blocking(move || ask_approval(&prompt));
            let granted = tokio::select! {
                answer = answer => answer.unwrap_or(false),
                _ = loopwright_engine::Stopper::stopped(engine.stopper) => {
                    eprintln!("\nloopwright: run {} still waits for approval of `{stage}`", state.run_id);
                    report(global, &state, Some(engine.pipeline))?;
                    return Ok(130);
                }
            };
            let event = if granted {
                answer::approval(policy, &state, true, &cli_answerer(None), None, false)?
            } else {
                // Seed 004's cancellation flow: offer to roll back what earlier stages changed.
                // The stages the state machine would roll back, in pipeline order.
                let undoable: Vec<String> =
                    loopwright_engine::decide::rollback_candidates(engine.pipeline, &state, None)
                        .iter()
                        .rev()
                        .map(ToString::to_string)
                        .collect();
                let rollback = !undoable.is_empty()
                    && ask_yes_no(&format!(
                        "Roll back the completed stage(s) {} as the pipeline says? [y/N] ",
                        undoable.join(", ")
                    ));
                answer::approval(policy, &state, false, &cli_answerer(None), None, rollback)?
            };
            // Someone may have answered or cancelled from another terminal meanwhile: then
            // this answer is not recorded, and the run is looked at again.
            if !answered(engine, &mut state, event).await? {
                continue;
            }
            state = engine.drive(state).await?;
        }
        // A closed-loop escalation, with a person at the terminal: ask (seed 001's options).
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
        let Some((stage, message)) = read::escalation_report(&state).filter(|_| interactive) else {
            break;
        };
        let answer = tokio::task::spawn_blocking(move || ask_escalation(&message));
        let answer = tokio::select! {
            answer = answer => answer.ok().flatten(),
            _ = loopwright_engine::Stopper::stopped(engine.stopper) => None,
        };
        let Some(answer) = answer else {
            eprintln!("\nloopwright: run {} still waits on the escalation of `{stage}`", state.run_id);
            break;
        };
        if answer == loopwright_engine::event::Answer::Skip {
            eprint!("{}", answer::skip_impact(engine.pipeline, &state, &stage));
        }
        if !answered(
            engine,
            &mut state,
            Event::EscalationAnswered { stage, answer, by: os_user(), via: Some(Via::Cli) },
        )
        .await?
        {
            continue;
        }
        state = engine.drive(state).await?;
    }
    for note in loopwright_app::worktree::merge_back(engine, &mut state).await? {
        eprintln!("loopwright: {note}");
    }
    // Manual rollback steps: on a terminal, wait for the person to confirm they are done.
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
    if interactive {
        for (stage, steps) in state.pending_manual_rollbacks() {
            eprintln!("Manual rollback of stage `{stage}`:\n    {}", steps.replace('\n', "\n    "));
            if ask_yes_no("Type `y` once these steps are done (or `n` to leave them pending): ") {
                let detail = format!("{steps} (confirmed by {})", os_user());
                let strategy = loopwright_spec::pipeline::RollbackStrategy::Manual;
                let status = loopwright_engine::event::RollbackStatus::Success;
                engine.record(&mut state, Event::StageRolledBack { stage, strategy, status, detail }).await?;
                let overall = state.rollback_overall();
                engine.record(&mut state, Event::RollbackFinished { overall }).await?;
            }
        }
    }
    report(global, &state, Some(engine.pipeline))
}

/// Records an answer given at this terminal, unless another process changed the run since it
/// was read (then the state is read again and `false` returned, nothing recorded).
async fn answered(engine: &mut CliEngine<'_>, state: &mut RunState, event: Event) -> Result<bool, CliError> {
    match engine.record_after(state, vec![event]).await {
        Ok(()) => Ok(true),
        Err(loopwright_engine::StoreError::Conflict { .. }) => {
            eprintln!("loopwright: the run changed in another process meanwhile; looking at it again");
            *state = RunState::replay(state.run_id.clone(), &engine.store.events(&state.run_id).await?);
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Asks a yes/no question on the terminal; anything but `y`/`yes` is no.
fn ask_yes_no(question: &str) -> bool {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).is_ok() && matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
}

/// Prints a run's result (JSON on stdout with `--json`), writes the reports the command
/// names (with the run's `pipeline`), and under GitHub Actions its annotations, summary and
/// outputs; returns its exit code.
pub fn report(global: &Global, state: &RunState, pipeline: Option<&Pipeline>) -> Result<u8, CliError> {
    use loopwright_app::report::{self, actions};
    let result = PipelineResult::from_state(state);
    if let Some(pipeline) = pipeline {
        report::write(&global.reports, state, pipeline)?;
        if actions::enabled() {
            let root = state
                .started
                .as_ref()
                .map(|s| s.worktree.as_ref().map_or_else(|| s.workspace.clone(), |w| w.path.clone()));
            let files: Vec<String> = root
                .and_then(|r| loopwright_runners::git::git(std::path::Path::new(&r), &["ls-files", "-z"]).ok())
                .map(|out| out.split('\0').filter(|f| !f.is_empty()).map(str::to_owned).collect())
                .unwrap_or_default();
            let mut lines = String::new();
            for line in actions::annotations(state, pipeline, &files) {
                lines.push_str(&line);
                lines.push('\n');
            }
            let _ = std::io::stderr().write_all(lines.as_bytes());
            actions::write_files(state, pipeline)?;
        }
    }
    if global.json {
        let json = serde_json::to_string_pretty(&result).map_err(|e| CliError::Internal(e.into()))?;
        println!("{json}");
    } else {
        print!("{}", crate::terminal::safe(&render::result(&result, state)));
    }
    Ok(state.status.exit_code())
}

/// The name of the person at the keyboard.
pub fn os_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
        .unwrap_or_else(|| "unknown".into())
}

/// Seed 004's approval prompt for a stage.
fn approval_prompt(pipeline: &Pipeline, stage: &StageId, state: &RunState) -> String {
    let Some(s) = pipeline.stage(stage.as_str()) else { return String::new() };
    let inputs = loopwright_engine::prompt::resolve_inputs(pipeline, s, state);
    let mut text = format!(
        "---\n## Approval Required: Stage '{}'\n**Description:** {}\n**Agent:** {}\n**Mode:** {}\n### Inputs\n",
        s.id,
        s.description.trim(),
        s.agent.name(),
        s.mode
    );
    for i in &inputs {
        let summary =
            i.text.as_deref().and_then(|t| t.lines().find(|l| !l.trim().is_empty())).unwrap_or("(not available)");
        text.push_str(&format!("- {}: {}\n", i.key, summary.chars().take(100).collect::<String>()));
    }
    if inputs.is_empty() {
        text.push_str("(none)\n");
    }
    text.push_str("### Expected Outputs\n");
    text.push_str(&if s.outputs.is_empty() { "(none)".to_owned() } else { s.outputs.join(", ") });
    text.push_str("\nType `proceed` to continue or `abort` to cancel pipeline.\n---\n");
    text
}

/// Shows an escalation and reads answers until one is understood; `None` at end of input.
fn ask_escalation(message: &str) -> Option<loopwright_engine::event::Answer> {
    use loopwright_engine::event::Answer;
    eprintln!("{message}");
    ask_until(
        "retry | skip | abort | fix <instruction> > ",
        "Answer `retry`, `skip`, `abort`, or `fix` followed by the instruction.",
        |line| {
            let (word, rest) = line.split_once([' ', ':']).unwrap_or((line, ""));
            match (word.to_lowercase().as_str(), rest.trim()) {
                ("retry", _) => Some(Answer::Retry),
                ("skip", _) => Some(Answer::Skip),
                ("abort", _) => Some(Answer::Abort),
                ("fix", text) if !text.is_empty() => Some(Answer::Fix { text: text.to_owned() }),
                _ => None,
            }
        },
    )
}

/// Shows the prompt and reads answers until one is understood.
fn ask_approval(text: &str) -> bool {
    eprint!("{text}");
    ask_until("> ", "Type `proceed` to continue or `abort` to cancel pipeline.", |line| {
        match line.to_lowercase().as_str() {
            "proceed" | "yes" | "continue" => Some(true),
            "abort" | "cancel" | "no" => Some(false),
            _ => None,
        }
    })
    .unwrap_or(false)
}

/// Reads lines from the terminal until `understood` accepts one (saying `help` after each it
/// does not); `None` at the end of input.
fn ask_until<T>(prompt: &str, help: &str, understood: impl Fn(&str) -> Option<T>) -> Option<T> {
    let stdin = std::io::stdin();
    loop {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        match understood(line.trim()) {
            Some(answer) => return Some(answer),
            None => eprintln!("{help}"),
        }
    }
}

/// Who answers from this terminal: the name given (`--by`) or the OS user's, which nothing
/// proves; the workspace's owner, so any role.
pub fn cli_answerer(by: Option<String>) -> answer::Answerer {
    answer::Answerer {
        name: by.unwrap_or_else(os_user),
        role: Some(loopwright_spec::pipeline::ApproverRole::Admin),
        verified: false,
        via: Via::Cli,
    }
}
