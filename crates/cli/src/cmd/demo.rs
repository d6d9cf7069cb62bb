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
}

/// `loopwright demo`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let root =
        args.dir.unwrap_or_else(|| std::env::temp_dir().join(format!("loopwright-demo-{:08x}", random_u64() as u32)));
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
    let demo_global = Global { dir: Some(root.clone()), json: global.json };
    let args = super::run::Args {
        pipeline: "bug-fix".into(),
        task: Some("Fix add() in src/calc.sh: the test `add 2 3` fails".into()),
        task_id: None,
        vars: vec!["complexity=low".into()],
        inputs: vec![],
        start_from: None,
        skip: vec![],
        yes: false,
        quiet: false,
        worktree: false,
    };
    let code = super::run::run(&demo_global, args).await?;
    eprintln!(
        "\nThe workspace is kept: look around with\n  loopwright -C {0} status latest\n  loopwright -C {0} logs latest\n  ls {0}/.loopwright/state/runs/*/",
        root.display()
    );
    Ok(code)
}
