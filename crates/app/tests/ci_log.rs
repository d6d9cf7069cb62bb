//! A failure read from a GitHub Actions job's log is classified as well as the bare output
//! (SPEC §14): every failing sample of the corpus (`corpus/`, real tool output) is written
//! into a job log as GitHub writes one — timestamps on every line, setup steps with their
//! deprecation notices, cache misses and git hints, the failed step's `##[group]Run` header
//! with its command, `##[error]Process completed with exit code N.`, the post-job cleanup — and
//! read back with `ci_failure`; its classification must be the one the bare output gets.

use std::path::{Path, PathBuf};

use loopwright_app::forge::ci_failure;
use loopwright_engine::patterns::{Context, Library};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

/// What a real job prints before the step that fails: the runner's preamble, a checkout with
/// git's hints, a toolchain setup with a deprecation notice and a cache miss.
const BEFORE: &str = "Current runner version: '2.321.0'
##[group]Operating System
Ubuntu
24.04.1
LTS
##[endgroup]
##[group]Run actions/checkout@v4
with:
  repository: acme/shop
  token: ***
##[endgroup]
Syncing repository: acme/shop
##[group]Getting Git version info
Working directory is '/home/runner/work/shop/shop'
[command]/usr/bin/git version
git version 2.47.1
##[endgroup]
hint: Using 'master' as the name for the initial branch. This default branch name
hint: is subject to change. To configure the initial branch name to use in all
hint: of your new repositories, which will suppress this warning, call:
hint:
hint: \tgit config --global init.defaultBranch <name>
Initialized empty Git repository in /home/runner/work/shop/shop/.git/
##[warning]The `set-output` command is deprecated and will be disabled soon. Please upgrade to using Environment Files.
##[group]Run actions/cache@v3
with:
  path: ~/.cache
  key: Linux-deps-8f14e45f
##[endgroup]
##[warning]Node.js 16 actions are deprecated. Please update the following actions to use Node.js 20: actions/cache@v3. For more information see: https://github.blog/changelog/2023-09-22-github-actions-transitioning-from-node-16-to-node-20/.
Cache not found for input keys: Linux-deps-8f14e45f
";

/// After the failed step: the runner's cleanup.
const AFTER: &str = "Post job cleanup.
[command]/usr/bin/git version
git version 2.47.1
Temporarily overriding HOME='/home/runner/work/_temp/2f1e' before making global git config changes
[command]/usr/bin/git config --local --name-only --get-regexp core\\.sshCommand
Cleaning up orphan processes
";

/// The job's log with `output` as the failed step of `command`, exiting `exit`.
fn job_log(command: &str, exit: i32, output: &str) -> String {
    let mut lines = Vec::new();
    lines.extend(BEFORE.lines().map(str::to_owned));
    lines.push(format!("##[group]Run {}", command.lines().next().unwrap_or_default()));
    lines.extend(command.lines().map(|l| format!("\u{1b}[36;1m{l}\u{1b}[0m")));
    lines.extend(
        ["shell: /usr/bin/bash -e {0}", "env:", "  CARGO_TERM_COLOR: always", "##[endgroup]"].map(str::to_owned),
    );
    lines.extend(output.lines().map(str::to_owned));
    lines.push(format!("##[error]Process completed with exit code {exit}."));
    lines.extend(AFTER.lines().map(str::to_owned));
    let start: jiff::Timestamp = "2026-11-20T10:00:00Z".parse().expect("time");
    let mut log = String::from("\u{feff}");
    for (i, line) in lines.iter().enumerate() {
        let at = start + jiff::SignedDuration::from_millis(i as i64 * 37);
        let fraction = at.subsec_nanosecond() / 100;
        log.push_str(&format!("{}.{fraction:07}Z {line}\n", at.strftime("%Y-%m-%dT%H:%M:%S")));
    }
    log
}

#[test]
fn every_failing_sample_is_classified_in_a_job_log_as_it_is_bare() {
    let table = std::fs::read_to_string(corpus().join("samples.tsv")).expect("corpus/samples.tsv");
    let library = Library::builtin();
    let mut compared = 0;
    let mut differ = Vec::new();
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.splitn(6, '\t').collect();
        assert_eq!(cols.len(), 6, "samples.tsv: {line}");
        let exit: i32 = cols[4].parse().expect("exit");
        if exit == 0 || cols[0].starts_with("none/") {
            continue;
        }
        let output = std::fs::read_to_string(corpus().join(format!("{}.txt", cols[0]))).expect("sample");
        let bare_context = Context {
            command: Some(cols[5].to_owned()),
            exit_code: Some(exit),
            check_type: Some(cols[3].to_owned()),
            ..Context::default()
        };
        let bare = library.classify_in(&output, &bare_context);
        let given = Context { check_type: Some(cols[3].to_owned()), ..Context::default() };
        let (text, context, step) = ci_failure(&job_log(cols[5], exit, &output), &given);
        assert_eq!(step.map(|s| s.name), Some(cols[5].lines().next().unwrap_or_default().to_owned()), "{}", cols[0]);
        assert_eq!((context.command.as_deref(), context.exit_code), (Some(cols[5]), Some(exit)), "{}", cols[0]);
        let in_log = library.classify_in(&text, &context);
        compared += 1;
        if (&in_log.matched_pattern, &in_log.strategy) != (&bare.matched_pattern, &bare.strategy) {
            differ.push(format!(
                "{}: bare {:?}, in a job log {:?}",
                cols[0], bare.matched_pattern, in_log.matched_pattern
            ));
        }
    }
    assert!(compared >= 500, "only {compared} failing samples were compared");
    assert!(
        differ.is_empty(),
        "{} of {compared} samples are classified otherwise in a job log:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

#[test]
fn the_noise_of_a_job_alone_is_no_failure() {
    let library = Library::builtin();
    let (text, context, step) = ci_failure(&job_log("true", 1, ""), &Context::default());
    assert_eq!(step.map(|s| (s.name, s.exit_code)), Some(("true".to_owned(), Some(1))));
    assert_eq!(text, "");
    let isolated = library.classify_in(&text, &context);
    assert_eq!(isolated.matched_pattern, None, "{isolated:?}");
}
