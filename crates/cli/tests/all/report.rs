//! A run's result for CI through the binary: `--report junit=…`/`markdown=…` and `[report]`,
//! the JUnit XML validated against `junit-10.xsd` with xmllint, GitHub Actions' groups,
//! annotations, job summary and outputs, the composite action's install script against a local
//! release folder, and actionlint on the action's steps, the release workflow and the README's
//! example. scripts/report-test.sh runs them with every tool present
//! (`LOOPWRIGHT_REQUIRE_REPORT_TOOLS=1`); elsewhere a missing tool skips its check, not the test.

use std::path::{Path, PathBuf};

use crate::support::Ws;

/// An agent running `sh .loopwright/agents/NAME.sh`.
fn agent(ws: &Ws, name: &str, script: &str) {
    ws.write(
        &format!(".loopwright/agents/{name}.md"),
        &format!("---\nname: {name}\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/{name}.sh\"]\n---\nYou fix code.\n"),
    );
    ws.write(&format!(".loopwright/agents/{name}.sh"), script);
}

/// A project whose test fails until `stats.py` handles an empty list, and a pipeline `ci`: a
/// plan stage, then a closed loop of at most `tries` attempts whose check prints workflow
/// commands when it fails (as a hostile test could).
fn project(tries: u32) -> Ws {
    let ws = Ws::empty();
    ws.write("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n");
    ws.write(
        "tests/test_stats.py",
        "import unittest\n\nfrom stats import mean\n\n\nclass TestMean(unittest.TestCase):\n    def test_empty(self):\n        self.assertEqual(mean([]), 0)\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
    );
    ws.write(
        "check.sh",
        "python3 -m unittest discover -s tests -v && exit 0\necho '::set-output name=status::success'\necho '  ::add-mask::nothing'\nexit 1\n",
    );
    ws.write(
        ".loopwright/pipelines/ci.yml",
        &format!(
            "name: ci\ndescription: a plan, then a closed loop\nversion: 1\nstages:\n  - id: plan\n    agent: shell\n    mode: plan\n    description: Plan\n    run: echo planned\n  - id: implement\n    description: Make the checks pass\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: {tries}\n    checks:\n      - name: tests_pass\n        type: test\n        command: sh check.sh\n"
        ),
    );
    ws.init_git();
    ws
}

/// The agent: fixes `mean` from attempt `fixed_at` on; notes each attempt in `notes.txt`.
fn dev(ws: &Ws, fixed_at: u32) {
    agent(
        ws,
        "dev",
        &format!(
            "cat > /dev/null\necho \"attempt $LOOPWRIGHT_ATTEMPT\" >> notes.txt\nif [ \"$LOOPWRIGHT_ATTEMPT\" -ge {fixed_at} ]; then printf 'def mean(xs):\\n    return sum(xs) / len(xs) if xs else 0\\n' > stats.py; fi\necho done\n"
        ),
    );
}

/// `text` with what changes from run to run replaced: run ids, times, the workspace's path,
/// token counts.
fn stable(ws: &Ws, text: &str) -> String {
    let root = ws.path().canonicalize().expect("root").display().to_string();
    let mut out = text.replace(&root, "WS").replace(&ws.path().display().to_string(), "WS");
    let patterns: [(&str, &str); 7] = [
        (r"\d{8}-\d{6}-[0-9a-f]{6}", "RUN"),
        (r#"time="\d+\.\d{3}""#, r#"time="T""#),
        (r#"timestamp="[0-9T:-]+""#, r#"timestamp="TS""#),
        (r#"name="tokens" value="\d+""#, r#"name="tokens" value="N""#),
        (r"\d+ tokens", "N tokens"),
        (r"\| \d+\.\d s \|", "| T |"),
        (r"· \d+\.\d s", "· T"),
    ];
    for (pattern, with) in patterns {
        out = regex::Regex::new(pattern).expect("regex").replace_all(&out, with).into_owned();
    }
    out
}

/// True when tools a check needs must be there (scripts/report-test.sh).
fn required() -> bool {
    std::env::var("LOOPWRIGHT_REQUIRE_REPORT_TOOLS").is_ok_and(|v| v == "1")
}

/// `junit-10.xsd`, where scripts/report-test.sh put it.
fn xsd() -> Option<PathBuf> {
    let given = std::env::var_os("LOOPWRIGHT_JUNIT_XSD").map(PathBuf::from);
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/junit-10.xsd");
    given.or(Some(built)).filter(|p| p.is_file())
}

/// Validates a JUnit file against the schema with xmllint (skipped, with a note, where either is
/// missing and not required).
fn valid_junit(path: &Path) {
    let xmllint = std::process::Command::new("xmllint").arg("--version").output().is_ok();
    let Some(xsd) = xsd().filter(|_| xmllint) else {
        assert!(!required(), "xmllint or junit-10.xsd is missing (scripts/report-test.sh installs both)");
        eprintln!("skipped: no xmllint or junit-10.xsd here to validate {}", path.display());
        return;
    };
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&xsd)
        .arg(path)
        .output()
        .expect("xmllint");
    assert!(
        out.status.success(),
        "{} is not valid JUnit:\n{}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
}

/// Runs `args` as a GitHub Actions step would: `GITHUB_ACTIONS=true`, a summary file and an
/// output file (each holding a line already, as earlier steps leave them). Returns (exit code,
/// stdout, stderr, summary, outputs).
fn as_actions_step(ws: &Ws, args: &[&str]) -> (i32, String, String, String, String) {
    let (summary, outputs) = (ws.path().join("step-summary.md"), ws.path().join("step-outputs"));
    std::fs::write(&summary, "earlier step\n").expect("summary");
    std::fs::write(&outputs, "earlier=1\n").expect("outputs");
    let out = ws
        .cmd()
        .args(args)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &outputs)
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&summary).expect("summary"),
        std::fs::read_to_string(&outputs).expect("outputs"),
    )
}

/// The workflow commands in `text`: every line that starts (after blanks) with `::`.
fn commands(text: &str) -> Vec<String> {
    text.lines().filter(|l| l.trim_start().starts_with("::")).map(str::to_owned).collect()
}

#[test]
fn a_closed_loop_that_recovers_is_reported_as_junit_markdown_and_to_github_actions() {
    let ws = project(3);
    dev(&ws, 2);
    let args = [
        "run",
        "ci",
        "--task",
        "mean of nothing is 0",
        "--report",
        "junit=out/junit.xml",
        "--report",
        "markdown=out/why.md",
    ];
    let (code, stdout, stderr, summary, outputs) = as_actions_step(&ws, &args);
    assert_eq!(code, 0, "{stderr}");
    let junit = ws.read("out/junit.xml");
    valid_junit(&ws.path().join("out/junit.xml"));
    insta::assert_snapshot!("recovered_junit", stable(&ws, &junit));
    let why = ws.read("out/why.md");
    insta::assert_snapshot!("recovered_markdown", stable(&ws, &why));
    // The summary is appended to what earlier steps wrote, and so are the outputs.
    assert_eq!(summary, format!("earlier step\n{why}"));
    let run = std::fs::read_dir(ws.path().join(".loopwright/state/runs")).expect("runs").next().expect("a run");
    let run = run.expect("entry").file_name().to_string_lossy().into_owned();
    assert_eq!(outputs, format!("earlier=1\nrun_id={run}\nstatus=success\n"));
    // One group per stage, and no annotation: the run succeeded.
    assert_eq!(
        commands(&format!("{stdout}{stderr}")),
        ["::group::plan [shell, plan mode]", "::endgroup::", "::group::implement [dev, agent mode]", "::endgroup::"],
        "{stderr}"
    );
}

#[test]
fn what_a_check_prints_cannot_issue_workflow_commands_in_a_job() {
    let ws = project(6);
    // The check's key lines are workflow commands: each time the same failure, which escalates.
    ws.write(
        "check.sh",
        "echo '::set-output name=status::ZeroDivisionError: division by zero'\necho '  ::add-mask::Traceback (most recent call last):'\nexit 1\n",
    );
    dev(&ws, 99);
    let (code, stdout, stderr, _, outputs) = as_actions_step(&ws, &["run", "ci", "--task", "mean"]);
    assert_eq!(code, 3, "{stderr}");
    let run = outputs.lines().find_map(|l| l.strip_prefix("run_id=")).expect("run id").to_owned();
    assert_eq!(outputs, format!("earlier=1\nrun_id={run}\nstatus=waiting\n"));
    let ours =
        |c: &String| c.starts_with("::group::") || c == "::endgroup::" || c.starts_with("::warning title=loopwright::");
    let all = commands(&format!("{stdout}{stderr}"));
    assert!(all.iter().all(ours), "{all:?}");
    // `status` shows the escalation with the check's last lines: quoted in a job, as they are.
    let (_, shown, _, _, _) = as_actions_step(&ws, &["status", &run]);
    assert_eq!(commands(&shown), Vec::<String>::new(), "{shown}");
    assert!(shown.contains("│ ::set-output name=status::ZeroDivisionError: division by zero\n"), "{shown}");
    let (_, plain, _) = ws.run(&["status", &run]);
    assert_eq!(commands(&plain).len(), 2, "outside a job the lines are shown as printed: {plain}");
}

#[test]
fn a_dead_letter_fails_its_stage_and_check_with_the_classified_headline_and_annotations() {
    let ws = project(2);
    dev(&ws, 99);
    let (code, stdout, stderr, summary, outputs) =
        as_actions_step(&ws, &["run", "ci", "--task", "mean of nothing is 0", "--report", "junit=junit.xml"]);
    assert_eq!(code, 1, "{stderr}");
    valid_junit(&ws.path().join("junit.xml"));
    insta::assert_snapshot!("dead_letter_junit", stable(&ws, &ws.read("junit.xml")));
    insta::assert_snapshot!("dead_letter_summary", stable(&ws, &summary));
    assert!(outputs.ends_with("status=failed\n"), "{outputs}");
    // The run's headline, then each place in the repository the failure's output names.
    let all = commands(&format!("{stdout}{stderr}"));
    let errors: Vec<String> = all.iter().filter(|c| c.starts_with("::error")).map(|c| stable(&ws, c)).collect();
    insta::assert_debug_snapshot!("dead_letter_annotations", errors);
    assert!(
        all.iter().all(|c| c.starts_with("::group::") || c == "::endgroup::" || c.starts_with("::error ")),
        "{all:?}"
    );
}

#[test]
fn a_gate_waiting_then_rejected_is_reported_and_config_names_the_reports() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/gate.yml",
        &std::fs::read_to_string(crate::support::examples().join("../tests/fixtures/gate.yml")).expect("fixture"),
    );
    ws.write(".loopwright/config.toml", "[report]\njunit = \"reports/junit.xml\"\nmarkdown = \"reports/why.md\"\n");
    let (code, result, stderr) = ws.json(&["run", "gate", "--task", "ship it"]);
    assert_eq!(code, 3, "{stderr}");
    let run = result["run_id"].as_str().expect("run id").to_owned();
    valid_junit(&ws.path().join("reports/junit.xml"));
    insta::assert_snapshot!("gate_waiting_junit", stable(&ws, &ws.read("reports/junit.xml")));
    let (code, _, stderr) = ws.run(&["reject", &run, "--by", "carol", "--comment", "not this week"]);
    assert_eq!(code, 4, "{stderr}");
    // `resume` of an ended run writes its reports (a flag replaces config's of its format).
    let (code, _, stderr) = ws.run(&["resume", &run, "--report", "junit=rejected.xml"]);
    assert_eq!(code, 4, "{stderr}");
    valid_junit(&ws.path().join("rejected.xml"));
    insta::assert_snapshot!("gate_rejected_junit", stable(&ws, &ws.read("rejected.xml")));
    insta::assert_snapshot!("gate_rejected_markdown", stable(&ws, &ws.read("reports/why.md")));
}

#[test]
fn a_report_flag_that_names_no_format_or_file_is_refused_before_anything_runs() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/gate.yml",
        &std::fs::read_to_string(crate::support::examples().join("../tests/fixtures/gate.yml")).expect("fixture"),
    );
    for (flag, expected) in [
        ("junit", "expected FORMAT=FILE, where FORMAT is junit or markdown"),
        ("html=out.html", "unknown format `html`; expected junit or markdown"),
        ("junit=", "the file is missing after `=`"),
    ] {
        let (code, _, stderr) = ws.run(&["run", "gate", "--report", flag]);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(expected), "{flag}: {stderr}");
    }
    assert!(!ws.has_store(), "a refused command started a run");
}

/// A release folder laid out as GitHub's downloads are: `download/TAG/ASSET` with the archive
/// of a stand-in binary and its `.sha256` (`wrong`: the checksum of something else).
fn release(dir: &Path, tag: &str, wrong: bool) -> String {
    let target = match std::env::consts::ARCH {
        "aarch64" => "aarch64-unknown-linux-gnu",
        _ => "x86_64-unknown-linux-gnu",
    };
    let assets = dir.join("download").join(tag);
    let stage = dir.join("stage");
    std::fs::create_dir_all(&assets).expect("assets");
    std::fs::create_dir_all(&stage).expect("stage");
    std::fs::write(stage.join("loopwright"), format!("#!/bin/sh\necho 'loopwright {tag}'\n")).expect("binary");
    let archive = assets.join(format!("loopwright-{target}.tar.gz"));
    let tar = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&stage)
        .arg("loopwright")
        .status()
        .expect("tar");
    assert!(tar.success());
    let sum = std::process::Command::new("sha256sum")
        .arg(if wrong { stage.join("loopwright") } else { archive.clone() })
        .output()
        .expect("sha256sum");
    let hash = String::from_utf8_lossy(&sum.stdout).split(' ').next().unwrap_or_default().to_owned();
    std::fs::write(
        assets.join(format!("loopwright-{target}.tar.gz.sha256")),
        format!("{hash}  loopwright-{target}.tar.gz\n"),
    )
    .expect("sha");
    format!("file://{}", dir.display())
}

/// Runs the action's install script against `url`; (exit code, stdout, stderr, $GITHUB_PATH).
fn install(url: &str, version: &str, home: &Path) -> (i32, String, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-loopwright.sh");
    let path_file = home.join("github-path");
    std::fs::write(&path_file, "").expect("path file");
    let out = std::process::Command::new("bash")
        .arg(script)
        .env("LOOPWRIGHT_RELEASE_URL", url)
        .env("LOOPWRIGHT_VERSION", version)
        .env("LOOPWRIGHT_INSTALL_DIR", home.join("bin"))
        .env("GITHUB_PATH", &path_file)
        .env("RUNNER_TEMP", home)
        .output()
        .expect("bash");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&path_file).unwrap_or_default(),
    )
}

#[test]
fn the_actions_install_script_installs_a_release_whose_checksum_matches_and_refuses_one_that_does_not() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let good = tempfile::tempdir().expect("tempdir");
    let url = release(good.path(), "v1.2.0", false);
    let home = tempfile::tempdir().expect("home");
    let (code, stdout, stderr, github_path) = install(&url, "v1.2.0", home.path());
    assert_eq!(code, 0, "{stdout}{stderr}");
    let bin = home.path().join("bin");
    assert_eq!(github_path, format!("{}\n", bin.display()));
    let ran = std::process::Command::new(bin.join("loopwright")).output().expect("installed binary");
    assert_eq!(String::from_utf8_lossy(&ran.stdout), "loopwright v1.2.0\n");

    let bad = tempfile::tempdir().expect("tempdir");
    let url = release(bad.path(), "v1.2.0", true);
    let home = tempfile::tempdir().expect("home");
    let (code, stdout, _, github_path) = install(&url, "v1.2.0", home.path());
    assert_eq!(code, 1);
    assert!(stdout.starts_with("::error title=loopwright install::the checksum of loopwright-"), "{stdout}");
    assert!(stdout.contains("not installed"), "{stdout}");
    assert!(!home.path().join("bin/loopwright").exists(), "a binary whose checksum differs was installed");
    assert_eq!(github_path, "");

    // A version that is no tag is refused before anything is fetched.
    let (code, stdout, _, _) = install(&url, "main; rm -rf ~", home.path());
    assert_eq!(code, 1);
    assert!(stdout.contains("is neither `latest` nor a release tag"), "{stdout}");
}

/// The README's example workflow (the YAML block that starts with its path).
fn readme_workflow() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README");
    let start = readme.find("```yaml\n# .github/workflows/loopwright.yml\n").expect("the README's example workflow");
    let block = &readme[start + "```yaml\n".len()..];
    block[..block.find("```").expect("its end")].to_owned()
}

/// The composite action's steps as a reusable workflow's job (its inputs as the workflow's),
/// so that actionlint checks their expressions and scripts.
fn action_as_workflow() -> String {
    let action =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../action.yml")).expect("action.yml");
    let inputs = &action[action.find("inputs:\n").expect("inputs")..action.find("outputs:\n").expect("outputs")];
    // A reusable workflow's inputs say their type; an action's are all strings.
    let inputs: String = inputs
        .lines()
        .flat_map(|l| {
            let typed = l.trim_start().starts_with("required:").then(|| l.replace(l.trim_start(), "type: string"));
            std::iter::once(l.to_owned()).chain(typed)
        })
        .collect::<Vec<_>>()
        .join("\n");
    let steps = &action[action.find("  steps:\n").expect("steps") + "  steps:\n".len()..];
    let indent = |text: &str, by: &str| {
        text.lines()
            .map(|l| if l.is_empty() { String::new() } else { format!("{by}{l}") })
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "name: action\non:\n  workflow_call:\n{}\njobs:\n  run:\n    runs-on: ubuntu-24.04\n    steps:\n{}\n",
        indent(&inputs, "    "),
        indent(steps.trim_end(), "  ")
    )
}

#[test]
fn the_action_the_release_workflow_and_the_readme_example_pass_actionlint() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(actionlint) = std::env::var_os("LOOPWRIGHT_ACTIONLINT") else {
        assert!(!required(), "LOOPWRIGHT_ACTIONLINT is not set (scripts/report-test.sh installs actionlint)");
        eprintln!("skipped: no actionlint here");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        ("release.yml", std::fs::read_to_string(repo.join(".github/workflows/release.yml")).expect("release workflow")),
        ("readme.yml", readme_workflow()),
        ("action.yml", action_as_workflow()),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).expect("write");
        let out =
            std::process::Command::new(&actionlint).arg(name).current_dir(dir.path()).output().expect("actionlint");
        assert!(
            out.status.success(),
            "actionlint on {name}:\n{}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A workflow it must refuse, so that a linter that accepts everything fails this test.
    std::fs::write(
        dir.path().join("broken.yml"),
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.nothing }}\n",
    )
    .expect("write");
    let out =
        std::process::Command::new(&actionlint).arg("broken.yml").current_dir(dir.path()).output().expect("actionlint");
    assert!(!out.status.success(), "actionlint accepted a broken workflow");
}

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// `promtool check metrics` on `text` (skipped, with a note, where promtool is missing and not
/// required).
fn promtool_clean(text: &str) {
    use std::io::Write;
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert!(!required(), "promtool is missing (scripts/report-test.sh installs Debian's prometheus)");
        eprintln!("skipped: no promtool here");
        return;
    };
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn metrics_count_every_runs_ends_attempts_failures_and_usage_and_pass_promtool() {
    let ws = project(2);
    dev(&ws, 2);
    let (code, _, stderr) = ws.run(&["run", "ci", "--task", "recovers"]);
    assert_eq!(code, 0, "{stderr}");
    dev(&ws, 99);
    ws.write("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n");
    let (code, _, stderr) = ws.run(&["run", "ci", "--task", "gives up"]);
    assert_eq!(code, 1, "{stderr}");
    ws.write(
        ".loopwright/pipelines/gate.yml",
        &std::fs::read_to_string(crate::support::examples().join("../tests/fixtures/gate.yml")).expect("fixture"),
    );
    let (code, _, stderr) = ws.run(&["run", "gate", "--task", "ship"]);
    assert_eq!(code, 3, "{stderr}");

    // Without a token only on this machine.
    let (code, _, stderr) = ws.run(&["serve", "--addr", "127.0.0.1:0", "--metrics-addr", "0.0.0.0:9464"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--metrics-addr 0.0.0.0:9464: not a loopback address"), "{stderr}");
    // A provider's limits, whose pause the metrics show.
    ws.write(".loopwright/config.toml", "[[limits]]\nprovider = \"anthropic\"\nconcurrent = 2\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let daemon = crate::daemon::Daemon::start(&ws, &["--metrics-addr", &metrics_addr]);
    // Behind the token on the API's address; without one on the loopback metrics address.
    let (status, _) = daemon.page_as("/metrics", "wrong-token");
    assert_eq!(status, 401);
    let (status, text) = daemon.page("/metrics");
    assert_eq!(status, 200, "{text}");
    promtool_clean(&text);
    let open = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).expect("scrape").text().expect("text");
    assert_eq!(samples(&open), samples(&text));
    let got = samples(&text);
    let value = |series: &str| got.get(series).copied().unwrap_or_else(|| panic!("no {series} in:\n{text}"));
    let expected = [
        (r#"loopwright_runs{status="success"}"#, 1.0),
        (r#"loopwright_runs{status="failed"}"#, 1.0),
        (r#"loopwright_runs{status="waiting"}"#, 1.0),
        (r#"loopwright_runs{status="queued"}"#, 0.0),
        ("loopwright_runs_waiting_for_person", 1.0),
        ("loopwright_queue_depth", 0.0),
        (r#"loopwright_runs_ended_total{pipeline="ci",status="success"}"#, 1.0),
        (r#"loopwright_runs_ended_total{pipeline="ci",status="failed"}"#, 1.0),
        // Plan, implement (recovered), plan, implement (gave up), build: five stages ended.
        (r#"loopwright_stage_duration_seconds_count{pipeline="ci",stage="plan",status="success"}"#, 2.0),
        (r#"loopwright_stage_duration_seconds_count{pipeline="ci",stage="implement",status="success"}"#, 1.0),
        (r#"loopwright_stage_duration_seconds_count{pipeline="ci",stage="implement",status="failed"}"#, 1.0),
        (r#"loopwright_stage_duration_seconds_count{pipeline="gate",stage="build",status="success"}"#, 1.0),
        (r#"loopwright_attempt_duration_seconds_count{pipeline="ci",outcome="failed"}"#, 3.0),
        ("loopwright_notifications_failed_total", 0.0),
        ("loopwright_provider_waits_total", 0.0),
        (r#"loopwright_provider_paused{limit="anthropic"}"#, 0.0),
    ];
    for (series, want) in expected {
        assert_eq!(value(series), want, "{series} in:\n{text}");
    }
    // The scripted agent names no model: its tokens (counted by loopwright) are the unknown's.
    assert!(value(r#"loopwright_tokens_total{provider="unknown",model="unknown"}"#) > 0.0, "{text}");
    let failed: f64 =
        got.iter().filter(|(k, _)| k.starts_with("loopwright_attempts_failed_total{")).map(|(_, v)| v).sum();
    assert_eq!(failed, 3.0, "{text}");

    // Every series the Grafana dashboard in docs/ reads is one the daemon serves.
    let grafana: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/grafana-loopwright.json"))
            .expect("the dashboard"),
    )
    .expect("its JSON");
    let families: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let names = regex::Regex::new(r"loopwright_[a-z_]+").expect("regex");
    let mut read = 0;
    for panel in grafana["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            for name in names.find_iter(target["expr"].as_str().expect("expr")) {
                let name = name.as_str();
                let family = ["_bucket", "_count", "_sum"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
                // Workers share only a PostgreSQL store: on this SQLite one there are none.
                let fleet_only = family == "loopwright_worker_leases";
                assert!(
                    families.contains(&family) || fleet_only,
                    "the dashboard reads {name}, which /metrics does not serve"
                );
                read += 1;
            }
        }
    }
    assert!(read >= 13, "{read}");

    // A run ended since is counted at the next scrape, and nothing counted twice.
    let (code, _, stderr) = ws.run(&["approve", "latest"]);
    assert_eq!(code, 0, "{stderr}");
    let (_, again) = daemon.page("/metrics");
    let again = samples(&again);
    assert_eq!(again[r#"loopwright_runs_ended_total{pipeline="gate",status="success"}"#], 1.0);
    assert_eq!(again[r#"loopwright_runs_ended_total{pipeline="ci",status="success"}"#], 1.0);
    assert_eq!(
        again[r#"loopwright_stage_duration_seconds_count{pipeline="gate",stage="build",status="success"}"#],
        1.0
    );
    assert_eq!(again[r#"loopwright_runs{status="waiting"}"#], 0.0);
}
