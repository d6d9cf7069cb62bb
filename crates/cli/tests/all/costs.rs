//! What a run costs in processes besides its stages' own: counted, not timed (the times are
//! `loopwright bench`'s, in docs/benchmarks.md).

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;

use crate::support::Ws;

/// A folder holding a `NAME` that records each call's arguments in `log`, one line each,
/// then runs the real program; put first on `PATH`, it counts what loopwright starts.
pub fn counting(name: &str, log: &Path) -> (tempfile::TempDir, PathBuf) {
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"));
    let bin = tempfile::tempdir().expect("tempdir");
    let script = format!("#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n", log.display(), real.display());
    let wrapper = bin.path().join(name);
    std::fs::write(&wrapper, script).expect("wrapper");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let path = std::env::join_paths(
        std::iter::once(bin.path().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    (bin, PathBuf::from(path))
}

/// The git commands `loopwright run` starts for a chain of `unchanged` stages that change
/// nothing and one that writes a file, in a git repository.
fn git_calls(unchanged: usize) -> Vec<String> {
    let ws = Ws::empty();
    let mut yaml = String::from("name: chain\ndescription: d\nversion: 1\nstages:\n");
    for i in 0..unchanged {
        yaml.push_str(&format!("  - {{id: s{i}, description: d, agent: shell, mode: agent, run: 'true'}}\n"));
    }
    yaml.push_str("  - {id: write, description: d, agent: shell, mode: agent, run: 'echo hi > note.txt'}\n");
    ws.write(".loopwright/pipelines/chain.yml", &yaml);
    ws.write(".gitignore", ".loopwright/\n");
    ws.init_git();
    let log = ws.path().join(".loopwright/git-calls");
    let (_bin, path) = counting("git", &log);
    let out = ws.cmd().env("PATH", path).args(["run", "chain", "--task", "t"]).output().expect("loopwright");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ws.git(&["log", "-1", "--format=%s"]).starts_with("loopwright: stage write of "));
    std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_owned).collect()
}

#[test]
fn a_stage_that_changes_nothing_starts_no_git_process() {
    let few = git_calls(2);
    let many = git_calls(12);
    // The same git commands, in the same order, for 2 unchanged stages and for 12: none of
    // them is a stage's (the run's setup, and the one commit of the stage that wrote a file).
    let shown = |calls: &[String]| -> Vec<String> {
        calls
            .iter()
            .map(|c| {
                let c = c.trim_start_matches("--no-pager -c core.hooksPath=/dev/null -c core.fsmonitor=false ");
                c.split(' ').take(3).collect::<Vec<_>>().join(" ")
            })
            .collect()
    };
    assert_eq!(shown(&many), shown(&few));
    assert_eq!(shown(&few).iter().filter(|c| c.starts_with("commit ")).count(), 1, "{few:#?}");
}
