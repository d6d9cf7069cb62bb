//! `loopwright bench` end to end on a tiny pipeline. Its figures are measurements, so only their
//! presence and consistency are checked here, never a speed.

use serde_json::json;

use crate::support::Ws;

#[test]
fn bench_reports_every_figure_and_cleans_up() {
    let ws = Ws::empty();
    let tmp = ws.path().join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    let out = ws
        .cmd()
        .env("TMPDIR", &tmp)
        .args(["bench", "--stages", "3", "--rounds", "2", "--json"])
        .output()
        .expect("run bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stderr}");
    let figures: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON figures");

    assert_eq!(figures["stages"], 3);
    assert_eq!(figures["rounds"], 2);
    assert_eq!(
        figures["targets"],
        json!({"overhead_median_ms": 2.0, "ratio": 1.5, "peak_rss_mb": 30.0, "classify_1mb_ms": 10.0})
    );
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v} in {figures}"));
    for key in [
        "shell_loop_ms",
        "loopwright_run_ms",
        "engine_in_process_ms",
        "engine_cpu_per_stage_ms",
        "ratio_to_shell_loop",
        "cpu_time_ratio_to_shell_loop",
        "peak_rss_mb",
        "classify_1mb_ms",
    ] {
        assert!(num(&figures[key]) > 0.0, "{key} is measured: {figures}");
    }
    let overhead = &figures["engine_overhead_per_stage_ms"];
    assert!(num(&overhead["median"]) <= num(&overhead["p95"]) && num(&overhead["p95"]) <= num(&overhead["max"]));
    // The fastest rounds are no slower than the medians, and their ratio is theirs.
    let fastest = &figures["fastest_rounds"];
    assert!(num(&fastest["shell_loop_ms"]) <= num(&figures["shell_loop_ms"]));
    assert!(num(&fastest["loopwright_run_ms"]) <= num(&figures["loopwright_run_ms"]));
    let ratio = num(&fastest["loopwright_run_ms"]) / num(&fastest["shell_loop_ms"]);
    assert!((num(&fastest["ratio"]) - ratio).abs() < 1e-9);
    assert!(figures["met"].is_boolean());
    // The same chain in a git repository is measured too.
    let git = &figures["in_git_repository"];
    assert!(num(&git["loopwright_run_ms"]) > 0.0, "{figures}");
    let git_ratio = num(&fastest["in_git_repository_ms"]) / num(&fastest["shell_loop_ms"]);
    assert!((num(&fastest["in_git_repository_ratio"]) - git_ratio).abs() < 1e-9);
    assert!(num(&fastest["in_git_repository_ms"]) <= num(&git["loopwright_run_ms"]));

    for line in ["engine in process:", "round 1:", "round 2:", "median:", "fastest rounds:", "patterns: 1 MB of log"] {
        assert!(stderr.contains(line), "`{line}` is reported:\n{stderr}");
    }
    // Its workspaces are gone.
    assert_eq!(std::fs::read_dir(&tmp).expect("tmp").count(), 0, "bench left files in {}", tmp.display());
}
