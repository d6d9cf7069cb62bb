//! `loopwright demo`: the bundled example, end to end, in a temporary workspace.

use super::Global;
use crate::error::CliError;
use crate::examples::DEMO;
use loopwright_app::ops::start::random_u64;

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to create the demo workspace (default: a new folder under the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
    /// Run it under a daemon instead (`loopwright serve` on a free port of 127.0.0.1) and print
    /// the dashboard's URL; serves until Ctrl-C.
    #[arg(long)]
    pub serve: bool,
}

/// The demo's task.
const TASK: &str = "Fix add() in src/calc.sh: the test `add 2 3` fails";

/// Writes the demo workspace; returns its root.
fn create(dir: Option<std::path::PathBuf>) -> Result<std::path::PathBuf, CliError> {
    let root = dir.unwrap_or_else(|| std::env::temp_dir().join(format!("loopwright-demo-{:08x}", random_u64() as u32)));
    if root.join(".loopwright").exists() {
        return Err(CliError::usage(format!("{} already holds a workspace; pick another --dir", root.display())));
    }
    for (rel, text) in DEMO {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| CliError::usage(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&path, text).map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))?;
    }
    eprintln!("loopwright demo: a tiny project whose test fails, in {}", root.display());
    eprintln!(
        "  pipeline: diagnose (agent, plan mode) -> security_review (only if 'ciso' in always_include)\n            -> fix (agent, closed loop: checked by the real test, failures fed back) -> verify (shell)\n"
    );
    Ok(root)
}

/// `loopwright demo --serve`: the demo's run queued for a daemon of the demo workspace, which
/// this process then is (its own multi-threaded runtime, like `serve`).
pub fn serve(global: &Global, args: Args) -> Result<u8, CliError> {
    use loopwright_app::ops::start::{StartRequest, prepare};
    let root = create(args.dir)?;
    let ws = loopwright_app::workspace::Workspace::locate(Some(&root))?;
    super::on_daemon_runtime(async {
        let request = StartRequest {
            pipeline: "bug-fix".into(),
            task: Some(TASK.into()),
            vars: [("complexity".to_owned(), "low".to_owned())].into(),
            ..StartRequest::default()
        };
        // Queued for the daemon this process becomes: it takes the run up as soon as it serves.
        let prepared = prepare(&ws, request, loopwright_app::ownership::this_process(true)).await?;
        let run = loopwright_app::ops::start::enqueue(&super::open_store(&ws)?, prepared).await?;
        let options = loopwright_daemon::Options {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            ..loopwright_daemon::Options::default()
        };
        let json = global.json;
        loopwright_daemon::serve(ws.clone(), options, move |started| {
            if json {
                println!("{}", serde_json::json!({"url": started.url, "run_id": run.to_string(), "workspace": root.display().to_string()}));
            } else {
                println!("dashboard: {}", started.url);
                println!("run {run} is under way; Ctrl-C stops the daemon (the run can be resumed with `loopwright -C {} serve`)", root.display());
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
        })
        .await
    })?;
    Ok(0)
}

/// `loopwright demo`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let root = create(args.dir)?;
    let demo_global =
        Global { dir: Some(root.clone()), json: global.json, store: global.store.clone(), reports: Vec::new() };
    let ws = crate::workspace::Workspace::locate(Some(&root))?;
    let request = loopwright_app::ops::start::StartRequest {
        pipeline: "bug-fix".into(),
        task: Some(TASK.into()),
        vars: [("complexity".to_owned(), "low".to_owned())].into(),
        ..loopwright_app::ops::start::StartRequest::default()
    };
    let code = crate::drive::start(&demo_global, &ws, request, false).await?;
    eprintln!(
        "\nThe workspace is kept: look around with\n  loopwright -C {0} status latest\n  loopwright -C {0} logs latest\n  ls {0}/.loopwright/state/runs/*/",
        root.display()
    );
    Ok(code)
}
