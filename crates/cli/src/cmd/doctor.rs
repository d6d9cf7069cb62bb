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
    let word =
        |r: &Result<(), sandbox::Unavailable>| r.as_ref().map_or_else(ToString::to_string, |()| "yes".to_owned());
    let clis: Vec<Cli> = AGENT_CLIS.iter().map(|(name, kind)| Cli::find(name, *kind, probe.usable().ok())).collect();
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
            "agents": clis.iter().map(|c| serde_json::json!({
                "name": c.name, "path": c.path.as_ref().map(|p| p.display().to_string()), "install": c.hint,
                "sandbox": c.sandboxed.as_ref().map(|r| match r {
                    Ok(version) => serde_json::json!({"runs": true, "version": version}),
                    Err(why) => serde_json::json!({"runs": false, "why": why}),
                }),
                "hosts": c.hosts,
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
    for c in &clis {
        let name = c.name;
        match &c.path {
            Some(p) => println!("  {name:<16} {}", p.display()),
            None => println!("  {name:<16} not found ({})", c.hint),
        }
        match &c.sandboxed {
            Some(Ok(version)) => println!("  {:<16} runs in the sandbox ({version})", ""),
            Some(Err(why)) => println!("  {:<16} does not run in the sandbox: {why}", ""),
            None => {}
        }
        if c.path.is_some() {
            println!("  {:<16} network: model reaches {}", "", c.hosts.join(", "));
        }
    }
    Ok(0)
}

/// An agent CLI as `doctor` reports it.
struct Cli {
    name: &'static str,
    /// Where it is, if it is installed.
    path: Option<std::path::PathBuf>,
    /// How to install it.
    hint: &'static str,
    /// Whether it starts in a sandbox (its version), or why not; `None` when it is not
    /// installed or no sandbox can be made here.
    sandboxed: Option<Result<String, loopwright_runners::sandbox::Unavailable>>,
    /// What `network: model` lets it reach in a sandbox, from its environment and its own
    /// configuration.
    hosts: Vec<String>,
}

impl Cli {
    /// Finds the CLI `name` of preset `kind` on `PATH` and, with `bwrap`, tries it in a sandbox.
    fn find(name: &'static str, kind: loopwright_spec::RunnerKind, bwrap: Option<&std::path::Path>) -> Self {
        use loopwright_runners::presets;
        let path = loopwright_runners::process::resolve(name);
        let path = path.is_absolute().then_some(path);
        let source = loopwright_spec::SourceFile::new("doctor.md", format!("---\nrunner: {kind}\n---\n"));
        let agent = loopwright_spec::parse_agent(&source, name, kind).ok();
        let hosts =
            agent.as_ref().map(presets::model_hosts).unwrap_or_default().iter().map(ToString::to_string).collect();
        let env = agent.as_ref().map(presets::agent_environment).unwrap_or_default();
        let sandboxed =
            path.as_ref().and(bwrap).map(|bwrap| loopwright_runners::sandbox::try_program(bwrap, name, &env));
        Self { name, path, hint: presets::install_hint(kind).unwrap_or(""), sandboxed, hosts }
    }
}
