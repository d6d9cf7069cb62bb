//! Regression detection's pieces on real tool output (captured on this machine, see
//! `fixtures/regression/`) and small source trees: per-file test results and dependents.

use std::collections::BTreeMap;

use loopwright_engine::closed_loop::TestCounts;
use loopwright_engine::closed_loop::regression::{compare, dependents, parse_results, report};
use loopwright_engine::ports::Workspace;
use pretty_assertions::assert_eq;

/// A workspace of files in memory.
struct Files(BTreeMap<&'static str, &'static str>);

impl Workspace for Files {
    fn read(&self, path: &str) -> Option<String> {
        self.0.get(path).map(|s| (*s).to_owned())
    }
    fn files(&self) -> Vec<String> {
        self.0.keys().map(|k| (*k).to_owned()).collect()
    }
}

fn counts(pass: &[&str], fail: &[&str]) -> TestCounts {
    TestCounts {
        pass: pass.len() as u32,
        fail: fail.len() as u32,
        passing: pass.iter().map(|s| (*s).to_owned()).collect(),
        failing: fail.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/regression/{name}", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture")
}

#[test]
fn cargo_test_results_are_attributed_to_module_files() {
    let ws = Files(BTreeMap::from([
        ("Cargo.toml", "[package]\nname = \"rg\"\n"),
        ("src/lib.rs", "pub mod util;\n"),
        ("src/util/mod.rs", "pub mod math;\n"),
        ("src/util/math.rs", ""),
        ("tests/api.rs", "use rg::util::math::double;\n"),
    ]));
    assert_eq!(
        parse_results(&fixture("cargo-test.txt"), &ws),
        BTreeMap::from([
            ("src/lib.rs".to_owned(), counts(&["tests::top_is_one"], &[])),
            ("src/util/math.rs".to_owned(), counts(&["util::math::tests::zero"], &["util::math::tests::doubles"])),
            ("tests/api.rs".to_owned(), counts(&[], &["it_doubles"])),
        ])
    );
}

#[test]
fn pytest_and_go_results_are_attributed_to_their_files() {
    let ws = Files(BTreeMap::from([("tests/test_core.py", ""), ("pkg/core.py", "")]));
    assert_eq!(
        parse_results(&fixture("pytest-v.txt"), &ws),
        BTreeMap::from([("tests/test_core.py".to_owned(), counts(&["test_inc_zero"], &["test_inc"]))])
    );
    let ws = Files(BTreeMap::from([
        ("go.mod", "module example.com/gog\n\ngo 1.20\n"),
        ("mathx/mathx.go", ""),
        ("mathx/mathx_test.go", ""),
    ]));
    assert_eq!(
        parse_results(&fixture("go-test-v.txt"), &ws),
        BTreeMap::from([("mathx/mathx_test.go".to_owned(), counts(&["TestZero"], &["TestTriple"]))])
    );
}

#[test]
fn dependents_follow_imports_to_the_search_depth() {
    let ws = Files(BTreeMap::from([
        // Rust: a module, its parent, and an integration test using the crate.
        ("Cargo.toml", "[package]\nname = \"my-crate\"\n"),
        ("src/lib.rs", "pub mod util;\nmod app;\n"),
        ("src/util/mod.rs", "pub mod math;\n"),
        ("src/util/math.rs", "pub fn double() {}\n"),
        ("src/app.rs", "use crate::util::math::double;\n"),
        ("tests/api.rs", "use my_crate::util::math;\n"),
        // Python: absolute and relative imports, two levels.
        ("pkg/__init__.py", ""),
        ("pkg/core.py", "X = 1\n"),
        ("pkg/report.py", "from .core import X\n"),
        ("tests/test_report.py", "from pkg.report import total\n"),
        ("tests/test_other.py", "import os\n"),
        // JS / TS.
        ("web/lib.ts", "export const a = 1;\n"),
        ("web/view.tsx", "import { a } from './lib';\n"),
        ("web/view.test.ts", "import { v } from './view';\n"),
        // Go.
        ("go.mod", "module example.com/m\n"),
        ("store/store.go", "package store\n"),
        ("api/api.go", "package api\n\nimport (\n\t\"fmt\"\n\t\"example.com/m/store\"\n)\n"),
    ]));
    assert_eq!(dependents(&ws, &["src/util/math.rs"], 1, &[]), vec!["src/app.rs", "src/util/mod.rs", "tests/api.rs"]);
    assert_eq!(
        dependents(&ws, &["src/util/math.rs"], 2, &[]),
        vec!["src/app.rs", "src/lib.rs", "src/util/mod.rs", "tests/api.rs"]
    );
    assert_eq!(dependents(&ws, &["pkg/core.py"], 1, &[]), vec!["pkg/report.py"]);
    assert_eq!(dependents(&ws, &["pkg/core.py"], 2, &[]), vec!["pkg/report.py", "tests/test_report.py"]);
    assert_eq!(dependents(&ws, &["web/lib.ts"], 2, &[]), vec!["web/view.test.ts", "web/view.tsx"]);
    assert_eq!(dependents(&ws, &["web/lib.ts"], 2, &["**/*.test.ts".to_owned()]), vec!["web/view.tsx"]);
    assert_eq!(dependents(&ws, &["store/store.go"], 1, &[]), vec!["api/api.go"]);
}

#[test]
fn new_failures_against_the_baseline_make_the_seed_report() {
    let before = BTreeMap::from([
        ("a.py".to_owned(), counts(&["t1", "t2"], &[])),
        ("b.py".to_owned(), counts(&["t3"], &["t4"])),
    ]);
    let after =
        BTreeMap::from([("a.py".to_owned(), counts(&["t1"], &["t2"])), ("b.py".to_owned(), counts(&["t3"], &["t4"]))]);
    let regressions = compare(&before, &after, &["a.py".to_owned(), "b.py".to_owned()]);
    assert_eq!(regressions.len(), 1);
    assert_eq!(
        report(&regressions),
        "## Regression Detected\n\n1 dependent file has new test failures after your changes:\n\n| File | Baseline | Current | New Failures |\n|------|----------|---------|--------------|\n| a.py | 2/2 pass | 1/2 pass | 1 |\n\n### Affected Tests\n\n**a.py:**\n- `t2` - was passing, now failing\n\n### Suggested Investigation\n1. Read the dependent file to understand its usage of modified code\n2. Check if API contract changed (function signature, return type)\n3. Update dependent code or add backwards compatibility\n"
    );
}

/// A workspace with some programs on PATH.
struct WithPrograms(Files, &'static [&'static str]);

impl Workspace for WithPrograms {
    fn read(&self, path: &str) -> Option<String> {
        self.0.read(path)
    }
    fn files(&self) -> Vec<String> {
        self.0.files()
    }
    fn has_program(&self, name: &str) -> bool {
        self.1.contains(&name)
    }
}

#[test]
fn default_checks_and_fixers_come_from_the_project() {
    use loopwright_engine::closed_loop::checks::{Project, checks_for};
    let commands = |ws: &dyn Workspace, task_type: Option<&str>| -> Vec<(String, String)> {
        checks_for(&[], task_type, ws).into_iter().map(|c| (c.name, c.command)).collect()
    };
    let rust =
        WithPrograms(Files(BTreeMap::from([("Cargo.toml", "[package]\n"), ("src/lib.rs", "")])), &["cargo-clippy"]);
    assert_eq!(
        commands(&rust, Some("bug_fix")),
        vec![
            ("tests_pass".to_owned(), "cargo test --quiet".to_owned()),
            ("lint_clean".to_owned(), "cargo clippy --quiet --all-targets -- -D warnings".to_owned())
        ]
    );
    assert_eq!(commands(&rust, Some("config_change")), vec![]);
    assert_eq!(Project::detect(&rust).fixer(Some("format-error")).as_deref(), Some("cargo fmt"));
    let python = WithPrograms(Files(BTreeMap::from([("pyproject.toml", ""), ("app.py", "")])), &["ruff"]);
    assert_eq!(
        commands(&python, None),
        vec![
            ("tests_pass".to_owned(), "python3 -m unittest discover -v".to_owned()),
            ("lint_clean".to_owned(), "ruff check .".to_owned())
        ]
    );
    assert_eq!(Project::detect(&python).fixer(Some("lint-error")).as_deref(), Some("ruff check --fix ."));
    let node = WithPrograms(
        Files(BTreeMap::from([
            ("package.json", "{\"scripts\": {\"test\": \"jest\", \"lint\": \"eslint .\"}}"),
            ("biome.json", "{}"),
        ])),
        &["npx"],
    );
    assert_eq!(
        commands(&node, Some("feature")),
        vec![
            ("tests_pass".to_owned(), "npm test --silent".to_owned()),
            ("lint_clean".to_owned(), "npm run lint --silent".to_owned())
        ]
    );
    assert_eq!(
        Project::detect(&node).fixer(Some("lint-error")).as_deref(),
        Some("npx --no-install biome check --write .")
    );
    let go = WithPrograms(Files(BTreeMap::from([("go.mod", "module m\n")])), &["go"]);
    assert_eq!(
        commands(&go, None),
        vec![
            ("tests_pass".to_owned(), "go test ./...".to_owned()),
            ("lint_clean".to_owned(), "go vet ./...".to_owned())
        ]
    );
}
