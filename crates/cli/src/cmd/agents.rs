//! `loopwright agents`: the agents found, and how one would be run.

use loopwright_spec::{Mode, RunnerKind};
use serde_json::json;

use super::Global;
use crate::error::CliError;
use crate::render;
use crate::workspace::{AGENT_DIRS, Workspace};

/// Arguments of `agents`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub show: Option<Show>,
}

/// `agents show`.
#[derive(Debug, clap::Subcommand)]
pub enum Show {
    /// The exact program and arguments an agent would run with.
    Show {
        /// The agent's name.
        name: String,
        /// The mode to show.
        #[arg(long, value_parser = ["plan", "agent"], default_value = "agent")]
        mode: String,
    },
}

/// `loopwright agents`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let (agents, diags) = ws.agents();
    if !diags.is_empty() {
        eprint!("{}", render::diagnostics(&diags, render::stderr_color()));
    }
    match args.show {
        None => {
            if global.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&agents.values().collect::<Vec<_>>())
                        .map_err(|e| CliError::Internal(e.into()))?
                );
            } else if agents.is_empty() {
                println!("no agents found (looked in {})", AGENT_DIRS.join(", "));
            } else {
                println!("{:<20} {:<10} {:<16} FILE", "NAME", "RUNNER", "MODEL");
                for a in agents.values() {
                    println!(
                        "{:<20} {:<10} {:<16} {}",
                        a.name,
                        a.runner.as_str(),
                        a.model.as_deref().unwrap_or("-"),
                        a.file
                    );
                }
            }
            Ok(if diags.is_empty() { 0 } else { 2 })
        }
        Some(Show::Show { name, mode }) => {
            let agent = agents.get(&name).ok_or_else(|| {
                CliError::usage(format!(
                    "no agent `{name}`; found: {}",
                    agents.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })?;
            let mode = Mode::parse(&mode).unwrap_or(Mode::Agent);
            if !agent.allows(mode) {
                return Err(CliError::usage(format!("agent `{name}` may not run in {mode} mode")));
            }
            let value = match agent.runner {
                RunnerKind::Command | RunnerKind::Shell => {
                    json!({"name": agent.name, "runner": agent.runner.as_str(), "mode": mode.as_str(), "argv": agent.command})
                }
                RunnerKind::Openai | RunnerKind::Anthropic => {
                    use loopwright_runners::http;
                    let model = agent.model.clone().unwrap_or_else(|| {
                        if agent.runner == RunnerKind::Anthropic {
                            http::DEFAULT_ANTHROPIC_MODEL
                        } else {
                            http::DEFAULT_OPENAI_MODEL
                        }
                        .to_owned()
                    });
                    json!({
                        "name": agent.name, "runner": agent.runner.as_str(), "mode": mode.as_str(),
                        "url": http::url(agent), "model": model, "api_key_env": http::key_var(agent)
                    })
                }
                _ => {
                    let inv =
                        loopwright_runners::presets::invocation(agent, mode).expect("every other runner is a preset");
                    let mut v = json!({"name": agent.name, "runner": agent.runner.as_str(), "mode": mode.as_str(), "argv": inv.argv});
                    if !inv.env.is_empty() {
                        v["env"] = inv
                            .env
                            .iter()
                            .map(|(k, val)| (k.clone(), json!(val)))
                            .collect::<serde_json::Map<_, _>>()
                            .into();
                    }
                    v["prompt"] = json!(if inv.stdin { "stdin" } else { "file" });
                    v
                }
            };
            if global.json {
                println!("{}", serde_json::to_string_pretty(&value).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                println!(
                    "{name} ({mode} mode): {}",
                    value.get("argv").map_or_else(|| value.to_string(), ToString::to_string)
                );
            }
            Ok(0)
        }
    }
}
