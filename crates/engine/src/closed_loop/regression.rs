//! Regression detection (seed 000): the files that depend on the changed ones, found by
//! following imports, and their tests compared before the first attempt and after EVALUATE.
//!
//! Imports followed: Rust `mod x;` and `use crate::…` / `use CRATE::…` (integration tests),
//! Python `import a.b` / `from a.b import c` / relative imports, JS/TS `import … from './x'`,
//! `require('./x')` and `export … from`, and Go imports of the module's own packages.
//! Test outcomes are read per file from pytest `-v`, unittest `-v`, `cargo test` and
//! `go test -v` output.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

use super::{Regression, TestCounts};
use crate::ports::Workspace;

/// Settings from `.loopwright/verification-gates.yml` (seed 000 "verification-gates-local").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Complexities that run regression detection (default medium, high).
    pub enabled_for_complexity: Vec<String>,
    /// Levels of imports followed.
    pub search_depth: usize,
    /// Globs of files never checked.
    pub exclude_patterns: Vec<String>,
    /// The test command (default: the project's, verbose).
    pub test_command: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled_for_complexity: vec!["medium".into(), "high".into()],
            search_depth: 2,
            exclude_patterns: Vec::new(),
            test_command: None,
        }
    }
}

impl Settings {
    /// Parses `verification-gates.yml`.
    pub fn parse(text: &str) -> Result<Self, serde_saphyr::Error> {
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct File {
            #[allow(dead_code)]
            version: Option<u32>,
            #[allow(dead_code)]
            extends: Option<String>,
            regression_detection: Option<Raw>,
        }
        #[derive(serde::Deserialize, Default)]
        #[serde(default, deny_unknown_fields)]
        struct Raw {
            enabled_for_complexity: Option<Vec<String>>,
            search_depth: Option<usize>,
            exclude_patterns: Option<Vec<String>>,
            test_command: Option<String>,
        }
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let file: File = serde_saphyr::from_str(text)?;
        let raw = file.regression_detection.unwrap_or_default();
        let d = Self::default();
        Ok(Self {
            enabled_for_complexity: raw.enabled_for_complexity.unwrap_or(d.enabled_for_complexity),
            search_depth: raw.search_depth.unwrap_or(d.search_depth),
            exclude_patterns: raw.exclude_patterns.unwrap_or_default(),
            test_command: raw.test_command,
        })
    }
}

static PY_IMPORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\s*(?:from\s+(\.*[\w.]*)\s+import\s+([\w, ]+)|import\s+([\w., ]+))").expect("valid")
});
static JS_IMPORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:from\s+|require\(\s*|import\s*\(\s*|import\s+)['"](\.{1,2}/[^'"]+)['"]"#).expect("valid")
});
static RS_MOD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").expect("valid"));
static RS_USE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(crate|super|self|\w+)::((?:\w+::)*\w+)").expect("valid"));
static GO_IMPORT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#""([\w.\-/]+)""#).expect("valid"));

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in rel.split('/') {
        match p {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The workspace files each file imports.
pub fn import_graph(ws: &dyn Workspace) -> BTreeMap<String, BTreeSet<String>> {
    let files: BTreeSet<String> = ws.files().into_iter().collect();
    let crate_name = ws
        .read("Cargo.toml")
        .and_then(|t| toml::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.pointer("/package/name").and_then(|n| n.as_str()).map(|n| n.replace('-', "_")));
    let go_module =
        ws.read("go.mod").and_then(|t| t.lines().find_map(|l| l.strip_prefix("module ").map(|m| m.trim().to_owned())));
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files.iter().filter(|f| super::strategies::is_source(f)).take(5000) {
        let Some(text) = ws.read(file) else { continue };
        let ext = file.rsplit_once('.').map_or("", |(_, e)| e);
        let mut deps = match ext {
            "py" => python_imports(&text, file, &files),
            "js" | "jsx" | "ts" | "tsx" | "mjs" | "cjs" => js_imports(&text, file, &files),
            "rs" => rust_imports(&text, file, &files, crate_name.as_deref()),
            "go" => go_module.as_deref().map(|m| go_imports(&text, m, &files)).unwrap_or_default(),
            _ => BTreeSet::new(),
        };
        deps.remove(file);
        graph.insert(file.clone(), deps);
    }
    graph
}

/// The workspace files a Python file imports (`import a.b`, `from .c import d`), looked for
/// from the root, `src/` and its own folder.
fn python_imports(text: &str, file: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let dir = parent(file);
    let mut deps = BTreeSet::new();
    for c in PY_IMPORT.captures_iter(text) {
        let mut modules: Vec<String> = Vec::new();
        if let Some(from) = c.get(1) {
            let from = from.as_str();
            let dots = from.chars().take_while(|c| *c == '.').count();
            let rest = from[dots..].replace('.', "/");
            let base = if dots == 0 { String::new() } else { join(dir, &"../".repeat(dots - 1)) };
            let module = join(&base, &rest);
            for name in c.get(2).map_or("", |m| m.as_str()).split(',').map(str::trim) {
                modules.push(join(&module, name));
            }
            modules.push(module);
        }
        if let Some(list) = c.get(3) {
            for m in list.as_str().split(',') {
                let m = m.split_whitespace().next().unwrap_or("");
                modules.push(m.replace('.', "/"));
            }
        }
        for m in modules.into_iter().filter(|m| !m.is_empty()) {
            for root in ["", "src/", dir] {
                let base =
                    if root.is_empty() || root.ends_with('/') { format!("{root}{m}") } else { format!("{root}/{m}") };
                for cand in [format!("{base}.py"), format!("{base}/__init__.py")] {
                    if files.contains(&cand) && cand != file {
                        deps.insert(cand);
                    }
                }
            }
        }
    }
    deps
}

/// The workspace files a JavaScript or TypeScript file imports by a relative path.
fn js_imports(text: &str, file: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let dir = parent(file);
    let mut deps = BTreeSet::new();
    for c in JS_IMPORT.captures_iter(text) {
        let base = join(dir, &c[1]);
        let found = std::iter::once(base.clone())
            .chain(["ts", "tsx", "js", "jsx", "mjs", "cjs"].iter().map(|e| format!("{base}.{e}")))
            .chain(["ts", "js"].iter().map(|e| format!("{base}/index.{e}")))
            .find(|c| files.contains(c));
        if let Some(f) = found {
            deps.insert(f);
        }
    }
    deps
}

/// The workspace files a Rust file names: its `mod`s, and the modules its `crate::`,
/// `super::`, `self::` or own-crate paths lead to (and the crate's root for those).
fn rust_imports(text: &str, file: &str, files: &BTreeSet<String>, crate_name: Option<&str>) -> BTreeSet<String> {
    let dir = parent(file);
    let has = |p: &str| files.contains(p);
    let mut deps = BTreeSet::new();
    let name = file.rsplit('/').next().unwrap_or(file);
    let mod_dir = if matches!(name, "lib.rs" | "main.rs" | "mod.rs") {
        dir.to_owned()
    } else {
        join(dir, name.trim_end_matches(".rs"))
    };
    for c in RS_MOD.captures_iter(text) {
        for cand in [join(&mod_dir, &format!("{}.rs", &c[1])), join(&mod_dir, &format!("{}/mod.rs", &c[1]))] {
            if has(&cand) {
                deps.insert(cand);
            }
        }
    }
    for c in RS_USE.captures_iter(text) {
        let root = &c[1];
        let (base, crate_root) = match root {
            "crate" => ("src".to_owned(), true),
            "super" => (parent(&mod_dir).to_owned(), false),
            "self" => (mod_dir.clone(), false),
            r if Some(r) == crate_name => ("src".to_owned(), true),
            _ => continue,
        };
        if crate_root && !file.starts_with("src/") {
            for lib in ["src/lib.rs", "src/main.rs"] {
                if has(lib) {
                    deps.insert(lib.to_owned());
                }
            }
        }
        let mut path = base;
        for seg in c[2].split("::") {
            path = join(&path, seg);
            for cand in [format!("{path}.rs"), format!("{path}/mod.rs")] {
                if has(&cand) && cand != file {
                    deps.insert(cand);
                }
            }
        }
    }
    deps
}

/// The workspace's Go files in the packages of `module` a Go file imports.
fn go_imports(text: &str, module: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    for c in GO_IMPORT.captures_iter(text) {
        if let Some(pkg) = c[1].strip_prefix(module) {
            let pkg = pkg.trim_start_matches('/');
            for f in files.iter().filter(|f| f.ends_with(".go") && parent(f) == pkg) {
                deps.insert(f.clone());
            }
        }
    }
    deps
}

/// The files that import the changed files, up to `depth` levels, without the changed files
/// themselves and without excluded ones.
pub fn dependents(ws: &dyn Workspace, changed: &[&str], depth: usize, exclude: &[String]) -> Vec<String> {
    let graph = import_graph(ws);
    let mut glob = globset::GlobSetBuilder::new();
    for p in exclude {
        if let Ok(g) = globset::Glob::new(p) {
            glob.add(g);
        }
    }
    let excluded = glob.build().unwrap_or_else(|_| globset::GlobSet::empty());
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut frontier: BTreeSet<String> = changed.iter().map(|s| (*s).to_owned()).collect();
    for _ in 0..depth.max(1) {
        let next: BTreeSet<String> = graph
            .iter()
            .filter(|(f, deps)| {
                !found.contains(*f) && !changed.contains(&f.as_str()) && deps.iter().any(|d| frontier.contains(d))
            })
            .map(|(f, _)| f.clone())
            .collect();
        if next.is_empty() {
            break;
        }
        found.extend(next.iter().cloned());
        frontier = next;
    }
    found.into_iter().filter(|f| !excluded.is_match(f)).collect()
}

static PYTEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([\w./-]+\.py)::(\S+)\s+(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)").expect("valid"));
static UNITTEST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\w+) \(([\w.]+)\)(?:\s*\n?.*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure)").expect("valid")
});
static CARGO_SECTION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*Running (?:unittests )?(\S+\.rs)").expect("valid"));
static CARGO_TEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^test (\S+) \.\.\. (ok|FAILED|ignored)").expect("valid"));
static GO_TEST: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*--- (PASS|FAIL): (\S+)").expect("valid"));
static GO_PKG: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(?:ok|FAIL)\s+(\S+)\s").expect("valid"));

/// Per-file test outcomes from a verbose test run.
pub fn parse_results(output: &str, ws: &dyn Workspace) -> BTreeMap<String, TestCounts> {
    let files: BTreeSet<String> = ws.files().into_iter().collect();
    let mut out: BTreeMap<String, TestCounts> = BTreeMap::new();
    let mut record = |file: String, name: String, passed: bool| {
        let e = out.entry(file).or_default();
        if passed {
            e.pass += 1;
            e.passing.push(name);
        } else {
            e.fail += 1;
            e.failing.push(name);
        }
    };
    let mut section: Option<String> = None;
    let go_module =
        ws.read("go.mod").and_then(|t| t.lines().find_map(|l| l.strip_prefix("module ").map(|m| m.trim().to_owned())));
    let mut go_pending: Vec<(String, bool)> = Vec::new();
    for line in output.lines() {
        if let Some(c) = PYTEST.captures(line) {
            if &c[3] != "SKIPPED" {
                record(c[1].to_owned(), c[2].to_owned(), matches!(&c[3], "PASSED" | "XFAIL"));
            }
        } else if let Some(c) = UNITTEST.captures(line) {
            let dotted = &c[2];
            let parts: Vec<&str> = dotted.split('.').collect();
            let file = (1..=parts.len())
                .rev()
                .map(|n| format!("{}.py", parts[..n].join("/")))
                .find(|f| files.contains(f) || files.contains(&format!("tests/{f}")))
                .map(|f| if files.contains(&f) { f } else { format!("tests/{f}") });
            if let Some(file) = file
                && &c[3] != "skipped"
            {
                record(file, c[1].to_owned(), matches!(&c[3], "ok" | "expected failure"));
            }
        } else if let Some(c) = CARGO_SECTION.captures(line) {
            section = Some(c[1].to_owned());
        } else if let Some(c) = CARGO_TEST.captures(line) {
            if &c[2] == "ignored" {
                continue;
            }
            let root = section.clone().unwrap_or_else(|| "src/lib.rs".into());
            let file = if root.starts_with("tests/") {
                root
            } else {
                // `a::b::tests::name` → the longest module path that is a file.
                let segs: Vec<&str> = c[1].split("::").collect();
                let base = parent(&root).to_owned();
                (1..segs.len())
                    .rev()
                    .flat_map(|n| {
                        let p = join(&base, &segs[..n].join("/"));
                        [format!("{p}.rs"), format!("{p}/mod.rs")]
                    })
                    .find(|f| files.contains(f))
                    .unwrap_or(root)
            };
            record(file, c[1].to_owned(), &c[2] == "ok");
        } else if let Some(c) = GO_TEST.captures(line) {
            go_pending.push((c[2].to_owned(), &c[1] == "PASS"));
        } else if let Some(c) = GO_PKG.captures(line) {
            let pkg = c[1].to_owned();
            let dir = go_module
                .as_deref()
                .and_then(|m| pkg.strip_prefix(m))
                .map_or(pkg.clone(), |d| d.trim_start_matches('/').to_owned());
            let file = files
                .iter()
                .find(|f| f.ends_with("_test.go") && parent(f) == dir)
                .cloned()
                .unwrap_or_else(|| if dir.is_empty() { ".".into() } else { format!("{dir}/") });
            for (name, passed) in go_pending.drain(..) {
                record(file.clone(), name, passed);
            }
        }
    }
    out
}

/// New failures in `files` between the baseline and now.
pub fn compare(
    baseline: &BTreeMap<String, TestCounts>,
    current: &BTreeMap<String, TestCounts>,
    files: &[String],
) -> Vec<Regression> {
    let mut out = Vec::new();
    for file in files {
        let Some(now) = current.get(file) else { continue };
        let before = baseline.get(file).cloned().unwrap_or_default();
        let new_failures = now.fail.saturating_sub(before.fail);
        if new_failures == 0 {
            continue;
        }
        let tests = now.failing.iter().filter(|t| before.passing.contains(t)).cloned().collect();
        out.push(Regression {
            file: file.clone(),
            baseline_pass: before.pass,
            baseline_total: before.pass + before.fail,
            current_pass: now.pass,
            current_total: now.pass + now.fail,
            new_failures,
            tests,
        });
    }
    out
}

/// Seed 000's regression report.
pub fn report(regressions: &[Regression]) -> String {
    use std::fmt::Write as _;
    let mut m = String::from("## Regression Detected\n\n");
    let _ = writeln!(
        m,
        "{} dependent file{} new test failures after your changes:\n",
        regressions.len(),
        if regressions.len() == 1 { " has" } else { "s have" }
    );
    m.push_str("| File | Baseline | Current | New Failures |\n|------|----------|---------|--------------|\n");
    for r in regressions {
        let _ = writeln!(
            m,
            "| {} | {}/{} pass | {}/{} pass | {} |",
            r.file, r.baseline_pass, r.baseline_total, r.current_pass, r.current_total, r.new_failures
        );
    }
    m.push_str("\n### Affected Tests\n");
    for r in regressions {
        let _ = writeln!(m, "\n**{}:**", r.file);
        for t in &r.tests {
            let _ = writeln!(m, "- `{t}` - was passing, now failing");
        }
    }
    m.push_str(
        "\n### Suggested Investigation\n1. Read the dependent file to understand its usage of modified code\n2. Check if API contract changed (function signature, return type)\n3. Update dependent code or add backwards compatibility\n",
    );
    m
}
