//! Stages as a graph (SPEC §16) through the binary: stages that need nothing of each other run
//! at once, what a stage needs is finished before it starts, overlapping edits of stages that
//! ran at once fail the later one as a merge conflict, a cycle is refused at file:line, and a
//! run killed in the middle of its graph repeats no finished stage.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{Ws, kill_group, spawn_group, st, stages, wait_for};

/// A diamond: `a`, then `b` and `c` (each sleeping `b_sleep` / `c_sleep` seconds, read-only),
/// then `d`.
fn diamond(ws: &Ws, b: &str, c: &str) {
    ws.write(
        ".loopwright/pipelines/diamond.yml",
        &format!(
            "name: diamond\ndescription: d\nversion: 1\nstages:\n\
             \x20 - id: a\n    description: first\n    agent: shell\n    mode: plan\n    run: echo a\n\
             \x20 - id: b\n    description: left\n    agent: shell\n    mode: plan\n    needs: [a]\n    run: {b}\n\
             \x20 - id: c\n    description: right\n    agent: shell\n    mode: plan\n    needs: [a]\n    run: {c}\n\
             \x20 - id: d\n    description: last\n    agent: shell\n    mode: plan\n    needs: [b, c]\n    run: echo d\n"
        ),
    );
}

/// The journal positions of each event of `kind` for `stage`.
fn seqs(journal: &[Value], kind: &str, stage: &str) -> Vec<u64> {
    journal
        .iter()
        .filter(|e| e["event"]["type"] == kind && e["event"]["stage"] == stage)
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect()
}

#[test]
fn independent_stages_run_at_once_and_a_stage_starts_when_what_it_needs_is_done() {
    let ws = Ws::empty();
    diamond(&ws, "sleep 1", "sleep 1");
    let (code, result, stderr) = ws.json(&["run", "diamond"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stages(&result),
        vec![
            st("a", "success", 1, None),
            st("b", "success", 1, None),
            st("c", "success", 1, None),
            st("d", "success", 1, None)
        ]
    );
    let run = result["run_id"].as_str().expect("run id");
    let journal = ws.journal(run);
    let started = |s| seqs(&journal, "attempt_started", s)[0];
    let ended = |s| seqs(&journal, "attempt_succeeded", s)[0];
    // b and c overlap: each started before the other ended.
    assert!(started("b") < ended("c") && started("c") < ended("b"), "{journal:#?}");
    // Each started after what it needs ended.
    assert!(ended("a") < started("b") && ended("a") < started("c"), "{journal:#?}");
    assert!(ended("b") < started("d") && ended("c") < started("d"), "{journal:#?}");

    // The run's page draws the graph: a column per depth, each stage with its state.
    let daemon = crate::daemon::Daemon::start(&ws, &[]);
    let (code, page) = daemon.page(&format!("/runs/{run}"));
    assert_eq!(code, 200);
    let start = page.find("<ol class=\"graph\">").expect("the graph is drawn");
    let graph = &page[start..start + page[start..].find("</ol>").expect("its end")];
    let columns: Vec<Vec<String>> = graph
        .split("<li><ul>")
        .skip(1)
        .map(|column| {
            column
                .split("<li class=\"node node-")
                .skip(1)
                .map(|node| {
                    let status = node.split('"').next().unwrap_or_default();
                    let id = node.split("#stage-").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
                    let needs = node.split("<small>").nth(1).and_then(|r| r.split('<').next()).unwrap_or_default();
                    format!("{id} {status} {needs}").trim_end().to_owned()
                })
                .collect()
        })
        .collect();
    assert_eq!(
        columns,
        vec![
            vec!["a success".to_owned()],
            vec!["b success needs a".into(), "c success needs a".into()],
            vec!["d success needs b, c".into()]
        ]
    );
}

#[test]
fn max_parallel_one_runs_the_graph_one_stage_at_a_time_and_a_line_is_unchanged() {
    let ws = Ws::empty();
    diamond(&ws, "sleep 0.2", "sleep 0.2");
    let text = ws.read(".loopwright/pipelines/diamond.yml").replace("version: 1\n", "version: 1\nmax_parallel: 1\n");
    ws.write(".loopwright/pipelines/diamond.yml", &text);
    let (code, result, stderr) = ws.json(&["run", "diamond"]);
    assert_eq!(code, 0, "{stderr}");
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let order: Vec<String> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "attempt_started" || e["event"]["type"] == "attempt_succeeded")
        .map(|e| {
            format!("{} {}", e["event"]["type"].as_str().unwrap_or(""), e["event"]["stage"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        order,
        [
            "attempt_started a",
            "attempt_succeeded a",
            "attempt_started b",
            "attempt_succeeded b",
            "attempt_started c",
            "attempt_succeeded c",
            "attempt_started d",
            "attempt_succeeded d"
        ]
    );
}

#[test]
fn a_failed_branch_fails_the_run_after_the_other_branch_ends_and_what_needs_it_never_starts() {
    let ws = Ws::empty();
    diamond(&ws, "sleep 0.3; echo broke >&2; exit 3", "sleep 0.6");
    let (code, result, stderr) = ws.json(&["run", "diamond"]);
    assert_eq!(code, 1, "{stderr}");
    let got: Vec<(String, String)> = stages(&result).into_iter().map(|(id, status, _, _)| (id, status)).collect();
    let want: Vec<(String, String)> =
        [("a", "success"), ("b", "failed"), ("c", "success")].map(|(a, b)| (a.into(), b.into())).into();
    assert_eq!(got, want);
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    assert!(seqs(&journal, "attempt_started", "d").is_empty());
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(status.contains("\n  · d                        pending    waits for b\n"), "{status}");
}

#[test]
fn a_cycle_or_an_unknown_stage_in_needs_is_refused_at_its_line() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/loop.yml",
        "name: loop\ndescription: d\nversion: 1\nstages:\n  - id: a\n    description: x\n    agent: shell\n    mode: plan\n    needs: [b]\n    run: 'true'\n  - id: b\n    description: y\n    agent: shell\n    mode: plan\n    needs: [a, z]\n    run: 'true'\n",
    );
    let (code, out, err) = ws.run(&["validate", "loop"]);
    assert_eq!(code, 2, "{out}{err}");
    for said in [
        "stage `b`, field `needs`: the stages' `needs:` make a cycle: a needs b needs a",
        "loop.yml:15:13]",
        "stage `b`, field `needs`: `needs:` names stage `z`, which the pipeline does not have",
        "loop.yml:15:16]",
    ] {
        assert!(err.contains(said), "{said}\n{err}");
    }
    let (code, _, err) = ws.run(&["run", "loop"]);
    assert_eq!(code, 2, "{err}");
}

/// Runs `run diamond` in its own process group and kills the group with SIGKILL once `marker`
/// exists in the workspace.
fn killed_when(ws: &Ws, marker: &std::path::Path) {
    let child = spawn_group(ws, &["run", "diamond", "--task-id", "task-kill"]);
    wait_for(marker);
    kill_group(child);
}

#[test]
fn killed_mid_graph_a_resume_repeats_no_finished_stage_and_restarts_what_was_in_flight() {
    let ws = Ws::empty();
    // Outside the workspace, where read-only stages may write: each stage's runs, counted.
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().display();
    ws.write(".loopwright/config.toml", "sandbox = \"off\"\n");
    // b ends at once; c waits for b's end, then is killed in flight the first time.
    diamond(
        &ws,
        &format!("echo b >> {dir}/counts"),
        &format!(
            "echo c >> {dir}/counts; if [ ! -f {dir}/c-ran ]; then while ! grep -q b {dir}/counts; do sleep 0.05; done; sleep 0.5; touch {dir}/c-ran; sleep 30; fi"
        ),
    );
    killed_when(&ws, &out.path().join("c-ran"));
    let (code, result, stderr) = ws.json(&["resume", "latest"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stages(&result),
        vec![
            st("a", "success", 1, None),
            st("b", "success", 1, None),
            st("c", "success", 1, None),
            st("d", "success", 1, None)
        ]
    );
    let ran = std::fs::read_to_string(out.path().join("counts")).expect("counts");
    let b_runs = ran.lines().filter(|l| *l == "b").count();
    let c_runs = ran.lines().filter(|l| *l == "c").count();
    assert_eq!((b_runs, c_runs), (1, 2), "{ran}");
}

#[test]
fn killed_at_twenty_moments_of_a_graph_resume_never_starts_a_finished_stage_again() {
    for round in 0..20u64 {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", "sandbox = \"off\"\n");
        diamond(&ws, "sleep 0.15", "sleep 0.25");
        let child = spawn_group(&ws, &["run", "diamond", "--task-id", "task-kill"]);
        // Moments spread over the run's half second (and past it).
        std::thread::sleep(std::time::Duration::from_millis(40 + (round * 137) % 560));
        kill_group(child);
        let (code, out, stderr) = ws.run(&["resume", "latest", "--json"]);
        // Killed before the run was journaled: there is nothing to resume.
        if code != 0 && stderr.contains("no runs yet") {
            continue;
        }
        let result: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        assert!(code == 0 || result["status"] == "success", "round {round}: {stderr}");
        let (_, shown, _) = ws.json(&["status", "latest"]);
        assert_eq!(shown["status"], "success", "round {round}: {shown}");
        let run = shown["run_id"].as_str().expect("run id").to_owned();
        let journal = ws.journal(&run);
        for stage in ["a", "b", "c", "d"] {
            let succeeded = seqs(&journal, "attempt_succeeded", stage);
            assert_eq!(succeeded.len(), 1, "round {round}, stage {stage}: {journal:#?}");
            let started_after = seqs(&journal, "attempt_started", stage).into_iter().filter(|s| *s > succeeded[0]);
            assert_eq!(started_after.count(), 0, "round {round}, stage {stage} started again after it ended");
        }
    }
}
