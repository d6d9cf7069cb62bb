//! `agents`: the agents found, and how one would be run.

use std::collections::BTreeMap;

use loopwright_spec::{Agent, Diagnostics, Mode, RunnerKind};
use serde_json::json;

use crate::error::Error;
use crate::workspace::Workspace;

/// Every valid agent by name, and the problems of the invalid files.
pub fn list(ws: &Workspace) -> (BTreeMap<String, Agent>, Diagnostics) {
    ws.agents()
}

/// How agent `name` would be run in `mode`: the program and arguments (or the URL and model of
/// an HTTP runner), as `agents show --json` prints it.
pub fn show(ws: &Workspace, name: &str, mode: &str) -> Result<serde_json::Value, Error> {
    let (agents, _) = ws.agents();
    let agent = agents.get(name).ok_or_else(|| {
        Error::not_found(format!("no agent `{name}`; found: {}", agents.keys().cloned().collect::<Vec<_>>().join(", ")))
    })?;
    let mode = Mode::parse(mode).ok_or_else(|| Error::usage(format!("mode `{mode}`: expected plan or agent")))?;
    if !agent.allows(mode) {
        return Err(Error::usage(format!("agent `{name}` may not run in {mode} mode")));
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
            let inv = loopwright_runners::presets::invocation(agent, mode)
                .ok_or_else(|| Error::Internal(anyhow::anyhow!("runner `{}` has no preset", agent.runner)))?;
            let mut v =
                json!({"name": agent.name, "runner": agent.runner.as_str(), "mode": mode.as_str(), "argv": inv.argv});
            if !inv.env.is_empty() {
                v["env"] =
                    inv.env.iter().map(|(k, val)| (k.clone(), json!(val))).collect::<serde_json::Map<_, _>>().into();
            }
            v["prompt"] = json!(if inv.stdin { "stdin" } else { "file" });
            v
        }
    };
    Ok(value)
}
