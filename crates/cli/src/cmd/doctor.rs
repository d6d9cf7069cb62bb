//! `loopwright doctor`: what this machine offers loopwright — the sandbox's pieces
//! (bubblewrap, user namespaces, an overlay in a user namespace for attempts' layers, the
//! folder they live in, the network proxy, the kernel limits) and the agent CLIs found.

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
    let state = sandbox::state_dir();
    let probe = sandbox::probe(state.as_deref().unwrap_or(&std::env::temp_dir()));
    let prlimit = loopwright_runners::process::resolve("prlimit");
    let prlimit = prlimit.is_absolute().then_some(prlimit);
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
                "capabilities": probe.capabilities.as_ref().err(),
                "overlay": probe.overlay.as_ref().err(),
                "layers": probe.overlay.as_ref().ok().map(|o| o.describe()),
                "state": match &state {
                    Ok(dir) => serde_json::json!({"path": dir.display().to_string()}),
                    Err(why) => serde_json::json!({"missing": why}),
                },
                "proxy": "built in: HTTPS CONNECT to the hosts a stage names, on a Unix socket",
                "limits": prlimit.as_ref().map(|p| p.display().to_string()),
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
    match &probe.capabilities {
        Ok(()) => {
            println!("  capabilities     none inside (CapEff 0, no_new_privs): nothing inside can unmount or remount")
        }
        Err(why) => println!("  capabilities     {why}"),
    }
    match &probe.overlay {
        Ok(overlay) => println!("  layers           {}: agent-mode attempts write into a layer", overlay.describe()),
        Err(why) => println!(
            "  layers           no ({why}): agent-mode attempts write into the workspace, watched and snapshotted"
        ),
    }
    match &state {
        Ok(dir) => println!("  state            {} (attempts' homes and layers)", dir.display()),
        Err(why) => println!("  state            unusable: {why}"),
    }
    println!("  network          built-in proxy: a stage reaches only the hosts it names (`network:`)");
    match &prlimit {
        Some(p) => println!("  limits           {} (file size, processes: [sandbox_limits])", p.display()),
        None => println!("  limits           none: `prlimit` (util-linux) is not installed"),
    }
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
