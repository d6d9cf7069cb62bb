//! Storage that stops growing (SPEC §11): snapshots kept once per content in the workspace's
//! object store, and `gc` freeing what finished runs no longer need — never what a run that
//! may still roll back needs.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::Ws;

/// A git workspace that snapshots without a sandbox: `look` reads (plan mode: git's and
/// loopwright's files are snapshotted too), `gated` changes a file it can undo byte for byte
/// and then waits at a gate.
fn workspace(retention: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", &format!("sandbox = \"off\"\n\n[retention]\n{retention}"));
    ws.write(
        ".loopwright/pipelines/look.yml",
        "name: look\ndescription: d\nversion: 1\nstages:\n  - id: read\n    agent: shell\n    mode: plan\n    description: d\n    run: cat app.txt\n",
    );
    ws.write(
        ".loopwright/pipelines/gated.yml",
        "name: gated\ndescription: d\nversion: 1\nstages:\n  - id: change\n    agent: shell\n    mode: agent\n    description: d\n    run: \"echo 'version 2' > app.txt\"\n    rollback:\n      strategy: file_restore\n  - id: ship\n    agent: shell\n    mode: agent\n    description: d\n    requires_approval: true\n    run: echo shipped\n",
    );
    ws.write("app.txt", "version 1\n");
    ws.init_git();
    // An untracked file of 1 MB: copied into the object store once, whatever the runs.
    ws.write("data/big.bin", &"x".repeat(1 << 20));
    ws
}

/// The bytes of the files under `dir` (what they hold, not the blocks they take).
fn bytes(dir: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(dir) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| bytes(&e.path())).sum()
}

fn run(ws: &Ws, pipeline: &str) -> (i32, String) {
    let (code, result, stderr) = ws.json(&["run", pipeline, "--quiet"]);
    assert!(code == 0 || code == 3, "{pipeline}: {code} {stderr}");
    (code, result["run_id"].as_str().expect("run").to_owned())
}

#[test]
fn snapshots_are_kept_once_per_content_so_a_run_adds_little_whatever_the_workspace() {
    let ws = workspace("");
    let state = ws.path().join(".loopwright/state");
    run(&ws, "look");
    let after_one = bytes(&state);
    assert!(bytes(&state.join("objects")) > 1 << 20, "the first snapshot copies the untracked MB once");
    for _ in 0..10 {
        run(&ws, "look");
    }
    let per_run = (bytes(&state) - after_one) / 10;
    // SPEC §11: ≤ 20 KB per run on average, whatever the workspace's size (here 1 MB of data).
    assert!(per_run <= 20 * 1024, "each run added {per_run} bytes");
    assert!(bytes(&state.join("objects")) < (1 << 20) + 200 * 1024, "the MB was copied once");
}

#[test]
fn gc_frees_finished_runs_snapshots_but_never_a_waiting_runs_whose_rollback_still_works() {
    let ws = workspace("snapshots_days = 0\n");
    let runs = ws.path().join(".loopwright/state/runs");
    let objects = ws.path().join(".loopwright/state/objects");
    let (_, looked) = run(&ws, "look");
    let (code, waiting) = run(&ws, "gated");
    assert_eq!(code, 3, "the gated run waits at its gate");
    assert_eq!(ws.read("app.txt"), "version 2\n");
    // A thousand finished and waiting runs in the journal, each with the snapshots a run of
    // `look` leaves (as a team's workspace would hold them).
    let (code, _, stderr) = ws.run(&["bench", "--list-runs", "1000", "--seed-only"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, listed, _) = ws.json(&["status", "--limit", "2000"]);
    let all: Vec<(String, String)> = listed
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| (r["run_id"].as_str().unwrap_or("").to_owned(), r["status"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(all.len(), 1002);
    for (id, _) in all.iter().filter(|(id, _)| *id != looked && *id != waiting) {
        let to = runs.join(id).join("snapshots");
        std::fs::create_dir_all(&to).expect("dir");
        for manifest in std::fs::read_dir(runs.join(&looked).join("snapshots")).expect("snapshots").flatten() {
            std::fs::copy(manifest.path(), to.join(manifest.file_name())).expect("copy");
        }
    }
    // Copies older than an hour may go once nothing names them.
    let age = |dir: &Path| {
        let status = std::process::Command::new("find")
            .arg(dir)
            .args(["-type", "f", "-exec", "touch", "-d", "3 hours ago", "{}", "+"])
            .status()
            .expect("touch");
        assert!(status.success());
    };
    age(&objects);
    std::fs::write(objects.join("sha256-00ff"), "named by nothing").expect("an orphan");
    age(&objects);
    let held = |id: &str| runs.join(id).join("snapshots").exists();
    let waiting_ids: Vec<&String> = all.iter().filter(|(_, s)| s == "waiting").map(|(id, _)| id).collect();
    let finished: Vec<&String> =
        all.iter().filter(|(_, s)| s == "success" || s == "failed").map(|(id, _)| id).collect();
    assert!(
        waiting_ids.len() > 50 && finished.len() > 800,
        "{} waiting, {} finished",
        waiting_ids.len(),
        finished.len()
    );

    // A dry run says what it would free and frees nothing.
    let before = bytes(&runs) + bytes(&objects);
    let (code, dry, _) = ws.json(&["gc", "--dry-run"]);
    assert_eq!(code, 0);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["runs"].as_array().map(Vec::len), Some(finished.len()));
    assert_eq!(dry["objects"], 1, "the orphan");
    assert_eq!(bytes(&runs) + bytes(&objects), before);
    assert!(finished.iter().all(|id| held(id)));

    let (code, freed, _) = ws.json(&["gc"]);
    assert_eq!(code, 0);
    assert_eq!(freed["dry_run"], false);
    assert_eq!(freed["runs"], dry["runs"]);
    assert_eq!(freed["bytes"], dry["bytes"]);
    assert!(finished.iter().all(|id| !held(id)), "a finished run kept its snapshots");
    assert!(waiting_ids.iter().all(|id| held(id)), "a waiting run lost its snapshots");
    assert!(!objects.join("sha256-00ff").exists());
    // What the waiting run's snapshots name is still there: its rollback still works.
    let (code, result, stderr) = ws.json(&["reject", &waiting, "--rollback", "--quiet"]);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(result["rollback_performed"], Value::Bool(true));
    assert_eq!(ws.read("app.txt"), "version 1\n");
    // Ended now, its snapshots go at the next gc, and nothing else does.
    let (_, again, _) = ws.json(&["gc"]);
    let freed_runs: Vec<&str> =
        again["runs"].as_array().expect("runs").iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(freed_runs, vec![waiting.as_str()], "{again}");
}

#[test]
fn after_runs_days_a_finished_run_goes_whole_and_a_waiting_one_stays() {
    // runs_days = 0: every run that ended goes at the next gc, files and journal.
    let ws = workspace("runs_days = 0\n");
    let (_, first) = run(&ws, "look");
    let (_, second) = run(&ws, "look");
    let (code, waiting) = run(&ws, "gated");
    assert_eq!(code, 3);
    let runs_dir = ws.path().join(".loopwright/state/runs");
    let (code, dry, stderr) = ws.json(&["gc", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    let planned: Vec<(String, String)> = dry["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (r["run_id"].as_str().unwrap_or_default().to_owned(), r["frees"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let mut want = vec![(first.clone(), "run".to_owned()), (second.clone(), "run".to_owned())];
    want.sort();
    let mut got = planned.clone();
    got.sort();
    assert_eq!(got, want);
    // The dry run took nothing: both are still listed and on disk.
    let listed = |ws: &Ws| -> Vec<String> {
        let (_, rows, _) = ws.json(&["status"]);
        rows.as_array().expect("rows").iter().filter_map(|r| r["run_id"].as_str().map(str::to_owned)).collect()
    };
    assert_eq!(listed(&ws).len(), 3);
    assert!(runs_dir.join(&first).exists());
    let (code, freed, stderr) = ws.json(&["gc"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(freed["runs"].as_array().map(Vec::len), Some(2), "{freed}");
    // Gone whole: not listed, no folder, no journal; the waiting run is all there.
    assert_eq!(listed(&ws), vec![waiting.clone()]);
    assert!(!runs_dir.join(&first).exists() && !runs_dir.join(&second).exists());
    let (code, _, stderr) = ws.run(&["status", &first]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&first), "{stderr}");
    // The waiting run still rolls back byte for byte, and is taken at the gc after it ended.
    let (code, result, stderr) = ws.json(&["reject", &waiting, "--rollback", "--quiet"]);
    assert_eq!((code, result["status"].as_str()), (4, Some("rejected")), "{stderr}");
    assert_eq!(ws.read("app.txt"), "version 1\n");
    let (_, again, _) = ws.json(&["gc"]);
    assert_eq!(again["runs"][0]["run_id"], Value::String(waiting));
    assert_eq!(listed(&ws), Vec::<String>::new());
}
