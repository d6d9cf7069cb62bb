//! `loopwright doctor`: what this machine offers loopwright — the sandbox's pieces
//! (bubblewrap, user namespaces, an overlay in a user namespace) and the agent CLIs found.

use super::Global;
use crate::error::CliError;

/// Arguments of `doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// The coding-agent CLIs loopwright has presets for, by program name.
const AGENT_CLIS: [(&str, loopwright_spec::RunnerKind); 6] = [
    ("claude", loopwright_spec::RunnerKind::Claude),
    ("codex", loopwright_spec::RunnerKind::Codex),
    ("gemini", loopwright_spec::RunnerKind::Gemini),
    ("aider", loopwright_spec::RunnerKind::Aider),
    ("opencode", loopwright_spec::RunnerKind::Opencode),
    ("goose", loopwright_spec::RunnerKind::Goose),
];

/// `loopwright doctor`.
pub fn run(global: &Global, _args: Args) -> Result<u8, CliError> {
    use loopwright_runners::sandbox;
    let scratch = std::env::temp_dir();
    let probe = sandbox::probe(&scratch);
    let word = |r: &Result<(), String>| r.as_ref().map_or_else(Clone::clone, |()| "yes".to_owned());
    let clis: Vec<(&str, Option<std::path::PathBuf>, &str)> = AGENT_CLIS
        .iter()
        .map(|(name, kind)| {
            let path = loopwright_runners::process::resolve(name);
            let found = path.is_absolute().then_some(path);
            (*name, found, loopwright_runners::presets::install_hint(*kind).unwrap_or(""))
        })
        .collect();
    if global.json {
        let bwrap = match &probe.bwrap {
            Ok((path, version)) => serde_json::json!({"path": path.display().to_string(), "version": version}),
            Err(why) => serde_json::json!({"missing": why}),
        };
        let out = serde_json::json!({
            "sandbox": {
                "available": probe.missing().is_none(),
                "bubblewrap": bwrap,
                "namespaces": probe.namespaces.as_ref().err(),
                "overlay": probe.overlay.as_ref().err(),
            },
            "agents": clis.iter().map(|(name, path, hint)| serde_json::json!({
                "name": name, "path": path.as_ref().map(|p| p.display().to_string()), "install": hint,
            })).collect::<Vec<_>>(),
        });
        println!("{out}");
        return Ok(0);
    }
    println!("Sandbox");
    match &probe.bwrap {
        Ok((path, version)) => println!("  bubblewrap       {version} ({})", path.display()),
        Err(why) => println!("  bubblewrap       missing: {why}"),
    }
    println!("  namespaces       {}", word(&probe.namespaces));
    println!("  overlay          {}", word(&probe.overlay));
    match probe.missing() {
        None => println!("  → agents can run sandboxed here"),
        Some(why) => println!("  → no sandbox here: {why}"),
    }
    println!("Agent CLIs");
    for (name, path, hint) in &clis {
        match path {
            Some(p) => println!("  {name:<16} {}", p.display()),
            None => println!("  {name:<16} not found ({hint})"),
        }
    }
    Ok(0)
}
