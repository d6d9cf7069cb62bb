//! The pattern library on built-in and project patterns, and on real tools' output.

use loopwright_spec::patterns::{PatternFile, RawPattern, RawSignal};

use super::*;

#[test]
fn builtin_library_has_every_spec_id_with_its_strategy() {
    let lib = Library::builtin();
    let got: Vec<(&str, &str, bool)> =
        lib.patterns().iter().map(|p| (p.id.as_str(), p.strategy.as_str(), p.retryable)).collect();
    assert_eq!(
        got,
        vec![
            ("lint-error", "auto_fix", true),
            ("format-error", "auto_fix", true),
            ("type-error", "context_expand", true),
            ("syntax-error", "analyze_then_fix", true),
            ("import-not-found", "dependency_check", true),
            ("undefined-name", "context_expand", true),
            ("test-failure", "analyze_then_fix", true),
            ("build-error", "analyze_then_fix", true),
            ("dependency-conflict", "dependency_check", true),
            ("command-not-found", "dependency_check", true),
            ("config-error", "analyze_then_fix", true),
            ("runtime-error", "analyze_then_fix", true),
            ("timeout", "retry_with_backoff", true),
            ("network-error", "retry_with_backoff", true),
            ("rate-limit", "retry_with_backoff", true),
            ("out-of-memory", "analyze_then_fix", true),
            ("disk-full", "escalate", false),
            ("permission-error", "escalate", false),
            ("merge-conflict", "escalate", false),
            ("git-error", "escalate", false),
            ("regression-detected", "context_expand", true),
        ]
    );
}

#[test]
fn a_bad_project_regex_is_reported_when_the_library_is_made() {
    let file: PatternFile =
        serde_saphyr::from_str("patterns:\n  - id: broken\n    signals: ['/unclosed(/']\n").expect("file");
    let err = Library::new(Some(file)).expect_err("invalid regex").to_string();
    assert!(err.starts_with("pattern `broken`: signal /unclosed(/: regex parse error"), "{err}");
}

#[test]
fn broad_words_alone_do_not_match() {
    let lib = Library::new(Some(PatternFile {
        patterns: vec![RawPattern {
            id: "vague".into(),
            signals: Some(vec![RawSignal::Text("error".into()), RawSignal::Text("failed".into())]),
            ..RawPattern::default()
        }],
        ..PatternFile::default()
    }))
    .expect("library");
    let c = lib.classify("error: something failed\n");
    assert_eq!(c.matched_pattern, None);
    assert!(c.confidence < MIN_CONFIDENCE);
}

#[test]
fn project_patterns_add_override_and_replace() {
    let file: PatternFile = serde_saphyr::from_str(
        "patterns:\n  - id: flaky-api\n    signals: ['/staging\\.example\\.com.*timed out/']\n    strategy: retry_with_backoff\n  - id: disk-full\n    strategy: analyze_then_fix\n",
    )
    .expect("file");
    let lib = Library::new(Some(file.clone())).expect("library");
    assert_eq!(lib.get("disk-full").map(|p| p.strategy.as_str()), Some("analyze_then_fix"));
    assert_eq!(lib.get("disk-full").map(|p| p.signals.len()), Some(3), "signals kept from the built-in");
    let c = lib.classify("GET https://staging.example.com/v1 timed out after 30s\n");
    assert_eq!(c.matched_pattern.as_deref(), Some("flaky-api"));
    assert_eq!(lib.patterns()[0].id, "flaky-api");
    let only = Library::new(Some(PatternFile { extends: Some("none".into()), ..file })).expect("library");
    assert_eq!(only.patterns().len(), 2);
}

fn context(command: Option<&str>, exit_code: Option<i32>, check_type: Option<&str>) -> Context {
    Context {
        command: command.map(str::to_owned),
        exit_code,
        check_type: check_type.map(str::to_owned),
        ..Context::default()
    }
}

fn kinds(c: &Classification) -> Vec<(&str, &str)> {
    c.evidence.iter().map(|e| (e.kind.as_str(), e.value.as_str())).collect()
}

#[test]
fn exit_127_decides_when_the_output_says_not_found_or_nothing_and_126_decides_always() {
    let lib = Library::builtin();
    // A wrapper's own words for the missing program, and nothing at all: 127 decides.
    for text in ["sh: 1: pytset: not found\n", "", "  \n", "run.sh: line 3: frob: No such file or directory\n"] {
        let c = lib.classify_in(text, &context(Some("sh -c 'pytset -q'"), Some(127), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("command-not-found"), "{text:?}: {c:?}");
        assert_eq!(c.strategy, Strategy::DependencyCheck);
        assert!(
            c.evidence.iter().any(|e| (e.kind.as_str(), e.value.as_str(), e.strength) == ("exit_code", "127", 0.95)),
            "{c:?}"
        );
    }
    // A program that exits 127 for its own error (escript's uncaught error) and make passing
    // on a child's 127 next to why: 127 is a hint, the text decides.
    let escript = "escript: exception error: bad argument in an arithmetic expression\n  in operator  +/2\n     called as 1 + a\n";
    let c = lib.classify_in(escript, &context(Some("escript bad.erl"), Some(127), None));
    assert_ne!(c.matched_pattern.as_deref(), Some("command-not-found"), "{c:?}");
    let make = "/bin/sh: 1: ./tools/gen.sh: Permission denied\nmake: *** [Makefile:3: all] Error 127\n";
    let c = lib.classify_in(make, &context(Some("make"), Some(2), Some("build")));
    assert_eq!(c.matched_pattern.as_deref(), Some("permission-error"), "{c:?}");
    let c = lib.classify_in("", &context(Some("./run-checks.sh"), Some(126), None));
    assert_eq!((c.matched_pattern.as_deref(), c.confidence), (Some("permission-error"), 0.95));
}

#[test]
fn only_a_sure_pattern_or_a_universal_fact_decides_then_the_statistical_proposal_then_nothing() {
    let lib = Library::builtin();
    let lint = context(Some("npm run check"), Some(1), Some("lint"));
    let killed = Context { signal: Some("SIGKILL".into()), ..Context::default() };
    let build = context(Some("cargo build"), Some(101), Some("build"));
    let plain_lint = "src/app.js\n  3 problems found in 1 file\n";
    type Row<'a> = (&'a str, &'a Context, Option<&'a str>, ClassifiedBy, &'a [(&'a str, &'a str)]);
    let table: [Row<'_>; 3] = [
        // Sure: a pattern at 0.7 and more.
        (
            "error[E0425]: cannot find value `total` in this scope\n",
            &build,
            Some("undefined-name"),
            ClassifiedBy::Pattern,
            &[
                ("signal", "/error\\[E0425\\]/"),
                ("signal", "/cannot find (value|function|type|struct|macro) `.+` in this scope/"),
            ],
        ),
        // A universal fact decides at any strength: the kill.
        ("running 12 tests\n", &killed, Some("out-of-memory"), ClassifiedBy::Pattern, &[("exit_signal", "SIGKILL")]),
        // Unsure (the check's type alone, 0.4): the learned classifier's proposal, above its
        // threshold, is taken; the pattern's is kept as evidence.
        (
            plain_lint,
            &lint,
            Some("lint-error"),
            ClassifiedBy::Statistical,
            &[("statistical", "lint-error"), ("unsure_pattern", "lint-error")],
        ),
    ];
    for (text, cx, want, by, evidence) in table {
        let c = lib.classify_in(text, cx);
        assert_eq!(
            (c.matched_pattern.as_deref(), c.classified_by, kinds(&c).as_slice()),
            (want, by, evidence),
            "{text:?}"
        );
        if by == ClassifiedBy::None {
            assert_eq!((c.strategy, c.confidence), (Strategy::AnalyzeThenFix, 0.0));
        }
    }
    // The rule over given proposals, whatever the model would say.
    let unsure = lib.match_patterns(plain_lint, &lint);
    let proposal = |class: &str, p: f64| learned::Proposal { class: class.into(), probability: p, threshold: 0.65 };
    type Case<'a> = (learned::Proposal, Option<&'a str>, ClassifiedBy, &'a [(&'a str, &'a str)]);
    let cases: [Case<'_>; 6] = [
        (
            proposal("lint-error", 0.9),
            Some("lint-error"),
            ClassifiedBy::Statistical,
            &[("statistical", "lint-error"), ("unsure_pattern", "lint-error")],
        ),
        // Below its threshold: unclassified, the proposal kept.
        (
            proposal("lint-error", 0.5),
            None,
            ClassifiedBy::None,
            &[("unsure_pattern", "lint-error"), ("unsure_statistical", "lint-error")],
        ),
        // Categories that stop the run for a person need a sure pattern, however likely.
        (
            proposal("disk-full", 0.99),
            None,
            ClassifiedBy::None,
            &[("unsure_pattern", "lint-error"), ("unsure_statistical", "disk-full")],
        ),
        (
            proposal("git-error", 0.95),
            None,
            ClassifiedBy::None,
            &[("unsure_pattern", "lint-error"), ("unsure_statistical", "git-error")],
        ),
        // "No failure" is not a category to take; one the library does not have is not either.
        (proposal(learned::NONE, 0.9), None, ClassifiedBy::None, &[("unsure_pattern", "lint-error")]),
        (
            proposal("made-up", 0.9),
            None,
            ClassifiedBy::None,
            &[("unsure_pattern", "lint-error"), ("unsure_statistical", "made-up")],
        ),
    ];
    for (p, want, by, evidence) in cases {
        let c = lib.decide(unsure.clone(), p.clone());
        assert_eq!(
            (c.matched_pattern.as_deref(), c.classified_by, kinds(&c).as_slice()),
            (want, by, evidence),
            "{p:?}"
        );
    }
    // A sure answer is kept whatever is proposed.
    let sure = lib.match_patterns("error[E0425]: cannot find value `total` in this scope\n", &build);
    assert_eq!(lib.decide(sure.clone(), proposal("disk-full", 0.99)), sure);
    // The patterns alone take any answer of 0.3 and more.
    let c = lib.clone().patterns_only().classify_in(plain_lint, &lint);
    assert_eq!(
        (c.matched_pattern.as_deref(), c.confidence, c.classified_by),
        (Some("lint-error"), 0.4, ClassifiedBy::Pattern)
    );
    let json = serde_json::to_value(lib.classify_in(plain_lint, &lint)).expect("json");
    assert_eq!(json["classified_by"], "statistical");
}

#[test]
fn a_summary_of_warnings_with_no_errors_is_not_a_failure_of_a_run_that_passed() {
    let lib = Library::builtin();
    let eslint = "/work/src/a.js\n  3:7  warning  'x' is assigned a value but never used  no-unused-vars\n\n✖ 1 problem (0 errors, 1 warning)\n";
    let c = lib.classify_in(eslint, &context(Some("npx eslint src"), Some(0), Some("lint")));
    assert_eq!(c.matched_pattern, None, "{c:?}");
    // The same summary is what a run failed on when it exited 1 (`--max-warnings 0`).
    let c = lib.classify_in(eslint, &context(Some("npx eslint --max-warnings 0 src"), Some(1), Some("lint")));
    assert_eq!(c.matched_pattern.as_deref(), Some("lint-error"), "{c:?}");
}

#[test]
fn a_test_runners_header_naming_its_config_file_is_not_a_config_error() {
    let lib = Library::builtin();
    let text = "============================= test session starts ==============================\nrootdir: /work\nconfigfile: pytest.ini\ncollected 1 item\n\ntests/test_a.py F\n";
    let c = lib.classify_in(text, &context(Some("pytest -q"), Some(1), Some("test")));
    assert_eq!(c.matched_pattern.as_deref(), Some("test-failure"), "{c:?}");
}

#[test]
fn a_kill_is_out_of_memory_unless_loopwright_timed_it_out() {
    let lib = Library::builtin();
    for how in [
        Context { exit_code: Some(137), ..Context::default() },
        Context { signal: Some("SIGKILL".into()), ..Context::default() },
    ] {
        let c = lib.classify_in("running 12 tests\n", &how);
        assert_eq!(c.matched_pattern.as_deref(), Some("out-of-memory"), "{how:?}");
        assert_eq!(kinds(&c), [("exit_signal", "SIGKILL")]);
    }
    let ours = Context { signal: Some("SIGKILL".into()), timed_out: true, ..Context::default() };
    let c = lib.classify_in("running 12 tests\n", &ours);
    assert_eq!(c.matched_pattern.as_deref(), Some("timeout"));
    assert_eq!(kinds(&c), [("timeout", "timeout")]);
    let c = lib.classify_in("", &context(Some("timeout 60 make check"), Some(124), Some("test")));
    assert_eq!(c.matched_pattern.as_deref(), Some("timeout"));
    let c = lib.classify_in("", &Context { exit_code: Some(139), ..Context::default() });
    assert_eq!((c.matched_pattern.as_deref(), kinds(&c)), (Some("runtime-error"), vec![("exit_signal", "SIGSEGV")]));
}

#[test]
fn a_failing_checks_type_decides_only_when_nothing_more_specific_is_printed() {
    let lib = Library::builtin();
    let plain = "src/app.js\n  3 problems found in 1 file\n";
    assert_eq!(lib.match_patterns(plain, &Context::default()).matched_pattern, None);
    let c = lib.match_patterns(plain, &context(Some("npm run check"), Some(1), Some("lint")));
    assert_eq!((c.matched_pattern.as_deref(), kinds(&c)), (Some("lint-error"), vec![("check_type", "lint")]));
    // The same output from a command that succeeded is not a failure of any kind.
    assert_eq!(lib.match_patterns(plain, &context(Some("npm run check"), Some(0), Some("lint"))).matched_pattern, None);
    let specific = "E   ModuleNotFoundError: No module named 'yaml'\n";
    let c = lib.match_patterns(specific, &context(Some("pytest -q"), Some(2), Some("test")));
    assert_eq!(c.matched_pattern.as_deref(), Some("import-not-found"), "{c:?}");
}

#[test]
fn the_tool_that_ran_weighs_its_own_vocabulary() {
    let lib = Library::builtin();
    let out =
        "In deploy.sh line 3:\necho $1\n     ^-- SC2086 (info): Double quote to prevent globbing and word splitting.\n";
    let c = lib.match_patterns(out, &context(Some("shellcheck deploy.sh"), Some(1), None));
    assert_eq!(c.matched_pattern.as_deref(), Some("lint-error"), "{c:?}");
    assert!(kinds(&c).contains(&("command", "shellcheck")), "{c:?}");
    // Nothing said which tool ran and nothing in the text is strong enough.
    assert_eq!(lib.match_patterns(out, &context(Some("./check.sh"), Some(1), None)).matched_pattern, None);
}

#[test]
fn warning_and_skipped_lines_count_for_little_unless_they_are_all_a_failed_command_said() {
    let lib = Library::builtin();
    // rcs merge's only line is a warning; it exited 1: the warning is why.
    let merge = "merge: warning: conflicts during merge\n";
    let c = lib.match_patterns(merge, &context(Some("merge a.txt base.txt b.txt"), Some(1), None));
    assert_eq!((c.matched_pattern.as_deref(), c.confidence), (Some("merge-conflict"), 0.95), "{c:?}");
    // The same line from a command that succeeded, or said nothing of its exit: 0.3 of it.
    for exit in [Some(0), None] {
        let c = lib.match_patterns(merge, &context(None, exit, None));
        assert_eq!((c.matched_pattern, c.confidence), (None, 0.285), "exit {exit:?}");
    }
    // A skipped test's reason is not a failure, even in words that would be one.
    let pytest =
        "test_errors.py::test_ok PASSED\ntest_errors.py::test_remote SKIPPED (flaky on CI: connection refused)\n";
    let c = lib.match_patterns(pytest, &context(Some("pytest -v"), Some(0), Some("test")));
    assert_eq!(c.matched_pattern, None, "{c:?}");
    // Beside a line that says error, a warning's match counts for 0.3: the error decides.
    let mixed = "warning: request timed out, retrying\nerror: cannot find value `total` in this scope\n";
    let c = lib.match_patterns(mixed, &context(Some("cargo build"), Some(101), Some("build")));
    assert_eq!(c.matched_pattern.as_deref(), Some("undefined-name"), "{c:?}");
}

#[test]
fn a_specific_cause_wins_over_the_step_that_reported_it() {
    let lib = Library::builtin();
    // eslint's own summary is a strong lint-error signal; the rule says why it failed.
    let eslint =
        "/work/undef.js\n  1:28  error  'itemz' is not defined  no-undef\n\n✖ 1 problem (1 error, 0 warnings)\n";
    let c = lib.classify_in(eslint, &context(Some("npx eslint ."), Some(1), Some("lint")));
    assert_eq!(c.matched_pattern.as_deref(), Some("undefined-name"), "{c:?}");
    let pytest = "=================================== FAILURES ===================================\nE       MemoryError\nFAILED test_mem.py::test_big - MemoryError\n1 failed in 0.02s\n";
    let c = lib.classify_in(pytest, &context(Some("pytest -q"), Some(1), Some("test")));
    assert_eq!(c.matched_pattern.as_deref(), Some("out-of-memory"), "{c:?}");
    // A weak word of a specific pattern does not: the tests failed.
    let weak = "=================================== FAILURES ===================================\nE   assert 'syntax error' == 'ok'\n1 failed in 0.02s\n";
    let c = lib.classify_in(weak, &context(Some("pytest -q"), Some(1), Some("test")));
    assert_eq!(c.matched_pattern.as_deref(), Some("test-failure"), "{c:?}");
    // Two generic patterns are compared by confidence: a build script that panicked is a
    // failed build, not a crash.
    let cargo =
        "error: failed to run custom build command for `app v0.1.0`\n  thread 'main' panicked at build.rs:2:5:\n";
    let c = lib.classify_in(cargo, &context(Some("cargo build"), Some(101), Some("build")));
    assert_eq!(c.matched_pattern.as_deref(), Some("build-error"), "{c:?}");
    assert!(lib.get("build-error").is_some_and(|p| p.generic) && lib.get("undefined-name").is_some_and(|p| !p.generic));
    // A project's own pattern may be generic too; without `generic` it is specific.
    let text = "deploy step failed\nError: connect ECONNREFUSED 10.0.0.7:5432\n";
    for (generic, want) in [("true", "network-error"), ("false", "deploy-failed")] {
        let file: PatternFile = serde_saphyr::from_str(&format!(
            "patterns:\n  - id: deploy-failed\n    generic: {generic}\n    signals: [{{literal: deploy step failed, strength: 0.99}}]\n"
        ))
        .expect("file");
        let c = Library::new(Some(file)).expect("library").classify(text);
        assert_eq!(c.matched_pattern.as_deref(), Some(want), "generic: {generic}");
    }
}

#[test]
fn a_project_patterns_context_entries_are_checked_and_used() {
    let file: PatternFile = serde_saphyr::from_str(
        "patterns:\n  - id: flaky-db\n    exit_codes: [{when: 75, strength: 0.97}]\n    commands: [dbtool]\n    strategy: retry_with_backoff\n",
    )
    .expect("file");
    let lib = Library::new(Some(file)).expect("library");
    let c = lib.classify_in("error: something failed\n", &context(Some("dbtool migrate"), Some(75), None));
    assert_eq!(c.matched_pattern.as_deref(), Some("flaky-db"));
    assert_eq!(kinds(&c), [("exit_code", "75"), ("command", "dbtool")]);
    let bad: PatternFile = serde_saphyr::from_str("patterns:\n  - id: odd\n    exit_codes: [SIGNOPE]\n").expect("file");
    let err = Library::new(Some(bad)).expect_err("bad entry");
    assert_eq!(
        err.to_string(),
        "pattern `odd`: exit_codes: `SIGNOPE` is not an exit code, a signal name (SIGKILL) or `timeout`"
    );
    let bad: PatternFile =
        serde_saphyr::from_str("patterns:\n  - id: odd\n    check_types: [{when: lint, strength: 2}]\n").expect("file");
    assert_eq!(
        Library::new(Some(bad)).expect_err("bad").to_string(),
        "pattern `odd`: check_types: strength 2 is not between 0 and 1"
    );
}

#[test]
fn ansi_colours_are_removed() {
    assert_eq!(strip_ansi("\x1b[31m-fn main\x1b(B\x1b[m x"), "-fn main x");
}

#[test]
fn every_pattern_loopwright_names_is_in_the_built_in_library() {
    let lib = Library::builtin();
    let missing: Vec<Builtin> = Builtin::ALL.into_iter().filter(|b| lib.get(b.id()).is_none()).collect();
    assert_eq!(missing, Vec::<Builtin>::new());
    assert_eq!(Builtin::of("merge-conflict"), Some(Builtin::MergeConflict));
    assert_eq!(Builtin::of("a-project-pattern"), None);
}
