//! FIX strategies (seed 000): what each finds out for the next attempt.
//!
//! `auto_fix` runs a fixer (the driver runs it; [`fixer_command`] picks it), `context_expand`
//! and `analyze_then_fix` read the code around the places the error names, `dependency_check`
//! reads the module name from the error and looks it up in the project's manifest, and
//! `retry_with_backoff` only waits ([`backoff_delay`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::LazyLock;

use regex::Regex;

use super::Failure;
use super::checks::Project;
use crate::ports::Workspace;
use crate::tokens::cap_tokens;

/// Token cap of a strategy's findings (seed 000: expanded context < 500 tokens).
pub const CONTEXT_TOKENS: usize = 500;
/// Lines read either side of an error location (seed 000: ±50).
pub const AROUND: usize = 50;
/// The longest `retry_with_backoff` wait.
pub const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(300);

static LOCATION: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // Python tracebacks.
        r#"File "([^"]+)", line (\d+)"#,
        // path:line[:col] as rustc (`--> src/lib.rs:3:5`), gcc, tsc (`a.ts(3,5)`), go, pytest, eslint print it.
        r"(?:^|[\s(\[`'])((?:\.{0,2}/)?[A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z0-9]{1,5})(?::(\d+)|\((\d+),\d+\))",
    ]
    .into_iter()
    .map(|r| Regex::new(r).expect("valid location regex"))
    .collect()
});

/// `file:line` places an error output names that are files of the workspace, in order of
/// first mention, without repeats.
pub fn locations(output: &str, ws: &dyn Workspace) -> Vec<(String, usize)> {
    let files = ws.files();
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in output.lines() {
        for re in LOCATION.iter() {
            for c in re.captures_iter(line) {
                let path = c.get(1).map_or("", |m| m.as_str()).trim_start_matches("./");
                let n: usize = c.get(2).or_else(|| c.get(3)).and_then(|m| m.as_str().parse().ok()).unwrap_or(0);
                if n == 0 {
                    continue;
                }
                // Absolute or build-relative paths: the workspace file they end with.
                let found = files
                    .iter()
                    .find(|f| f.as_str() == path)
                    .or_else(|| files.iter().find(|f| path.ends_with(&format!("/{f}"))));
                if let Some(f) = found
                    && !out.iter().any(|(p, l)| p == f && *l == n)
                {
                    out.push((f.clone(), n));
                }
            }
        }
    }
    out
}

/// Lines `line - around ..= line + around` of a file, numbered.
fn excerpt(text: &str, line: usize, around: usize) -> String {
    let from = line.saturating_sub(around).max(1);
    let mut out = String::new();
    for (i, l) in text.lines().enumerate().skip(from - 1).take(line + around + 1 - from) {
        let mark = if i + 1 == line { ">" } else { " " };
        let _ = writeln!(out, "{mark}{:>5} | {l}", i + 1);
    }
    out
}

/// The code around the places named by the error (at most `max_files` files); when the error
/// names files without lines (a regression report), their beginning.
fn around_locations(failure: &Failure, ws: &dyn Workspace, max_files: usize) -> (String, Vec<String>) {
    let mut body = String::new();
    let mut shown = Vec::new();
    if locations(&failure.output, ws).is_empty() {
        for file in ws.files().into_iter().filter(|f| is_source(f) && failure.output.contains(f.as_str())) {
            if shown.len() == max_files {
                break;
            }
            let Some(text) = ws.read(&file) else { continue };
            let _ = writeln!(body, "--- {file} ---\n{}", excerpt(&text, 1, 2 * AROUND));
            shown.push(file);
        }
    }
    for (file, line) in locations(&failure.output, ws) {
        if shown.contains(&file) {
            continue;
        }
        if shown.len() == max_files {
            break;
        }
        let Some(text) = ws.read(&file) else { continue };
        let _ = writeln!(body, "--- {file} around line {line} ---\n{}", excerpt(&text, line, AROUND));
        shown.push(file);
    }
    (body, shown)
}

static IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?:cannot find (?:value|type|function|struct|trait|macro) `(\w+)`|name '(\w+)' is not defined|'(\w+)' is not defined|Cannot find name '(\w+)'|undefined: (\w+)|no (?:method|field|function) named `(\w+)`|has no attribute '(\w+)'|Property '(\w+)' does not exist)",
    )
    .expect("valid identifier regex")
});

/// Where the names an error says are missing are defined in the workspace (±10 lines).
fn definitions(failure: &Failure, ws: &dyn Workspace) -> String {
    let names: BTreeSet<String> = IDENTIFIER
        .captures_iter(&failure.output)
        .filter_map(|c| c.iter().skip(1).flatten().next().map(|m| m.as_str().to_owned()))
        .collect();
    let mut out = String::new();
    for name in names.iter().take(3) {
        let def = Regex::new(&format!(
            r"\b(?:fn|def|class|struct|enum|trait|type|function|interface|const|let|var|func)\s+{}\b",
            regex::escape(name)
        ))
        .expect("escaped name");
        for file in ws.files().iter().filter(|f| is_source(f)).take(500) {
            let Some(text) = ws.read(file) else { continue };
            if let Some(m) = def.find(&text) {
                let line = text[..m.start()].lines().count().max(1);
                let _ = writeln!(out, "--- `{name}` is defined in {file}:{line} ---\n{}", excerpt(&text, line, 10));
                break;
            }
        }
    }
    out
}

/// Source files the strategies read.
pub fn is_source(path: &str) -> bool {
    const EXT: [&str; 14] = ["rs", "py", "js", "jsx", "ts", "tsx", "mjs", "cjs", "go", "java", "c", "h", "cpp", "sh"];
    path.rsplit_once('.').is_some_and(|(_, e)| EXT.contains(&e))
}

/// `context_expand`: the code the error points at, and where the names it misses are defined.
pub fn context_expand(failure: &Failure, ws: &dyn Workspace) -> (String, Option<String>) {
    let (around, files) = around_locations(failure, ws, 3);
    let defs = definitions(failure, ws);
    let mut body = around;
    body.push_str(&defs);
    if body.trim().is_empty() {
        return ("context_expand: the error names no file of the workspace to read".into(), None);
    }
    let applied = if files.is_empty() {
        "context_expand: added the definitions of the names the error misses".to_owned()
    } else {
        format!("context_expand: added the code around the error in {}", files.join(", "))
    };
    (applied, Some(cap_tokens(body.trim_end(), CONTEXT_TOKENS).0))
}

/// `analyze_then_fix`: the code at the error location and what was expected against what
/// happened, for a targeted fix.
pub fn analyze_then_fix(failure: &Failure, ws: &dyn Workspace) -> (String, Option<String>) {
    let (around, files) = around_locations(failure, ws, 2);
    let expected: Vec<&str> = failure
        .output
        .lines()
        .map(str::trim)
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            ["expected", "left:", "right:", "assert", "got ", "received", "actual", "panicked"]
                .iter()
                .any(|k| lower.contains(k))
        })
        .take(8)
        .collect();
    let mut body = String::new();
    if !expected.is_empty() {
        let _ = writeln!(body, "Expected vs actual, as the failure reports it:\n{}\n", expected.join("\n"));
    }
    body.push_str(&around);
    if body.trim().is_empty() {
        return (
            "analyze_then_fix: no location or expectation found in the error; the error itself is fed back".into(),
            None,
        );
    }
    let applied = match files.as_slice() {
        [] => "analyze_then_fix: extracted what was expected against what happened".to_owned(),
        f => format!("analyze_then_fix: located the failure in {} and compared expected with actual", f.join(", ")),
    };
    (applied, Some(cap_tokens(body.trim_end(), CONTEXT_TOKENS).0))
}

static MODULE: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"No module named '([\w.]+)'",
        r"ModuleNotFoundError: No module named ([\w.]+)",
        r#"Cannot find (?:module|package) '([^']+)'"#,
        r"unresolved import `(\w+)",
        r"use of (?:undeclared|unresolved) (?:crate or module|module or unlinked crate) `(\w+)`",
        r"can't find crate for `(\w+)`",
        r#"no required module provides package ([\w./-]+)"#,
        r#"cannot find package "([^"]+)""#,
        r"package ([\w.]+) does not exist",
        r"fatal error: ([\w/.+-]+): No such file or directory",
        r"Could not find a version that satisfies the requirement ([\w.-]+)",
    ]
    .into_iter()
    .map(|r| Regex::new(r).expect("valid module regex"))
    .collect()
});

/// `dependency_check`: the module the error misses, and whether the project's manifest
/// declares it (missing, or declared — then a version or path conflict is likely).
pub fn dependency_check(failure: &Failure, ws: &dyn Workspace) -> (String, Option<String>) {
    let Some(module) = MODULE.iter().find_map(|re| re.captures(&failure.output)).and_then(|c| c.get(1)) else {
        return ("dependency_check: no module name found in the error; the error itself is fed back".into(), None);
    };
    let module = module.as_str();
    let top = module.split(['.', '/']).next().unwrap_or(module);
    let dashed = top.replace('_', "-");
    let manifests: [(&str, Vec<&str>); 6] = [
        ("Cargo.toml", vec![top, &dashed]),
        ("package.json", vec![module, top]),
        ("pyproject.toml", vec![top, &dashed]),
        ("requirements.txt", vec![top, &dashed]),
        ("go.mod", vec![module]),
        ("setup.py", vec![top]),
    ];
    let mut findings = Vec::new();
    for (manifest, names) in &manifests {
        let Some(text) = ws.read(manifest) else { continue };
        findings.push(match declared_line(&text, names) {
            Some(line) => format!(
                "`{module}` is declared in {manifest} (`{}`): the declaration exists, so check its version, features or import path",
                line.trim()
            ),
            None => format!("`{module}` is missing from {manifest}: add it as a dependency (or fix the import if the name is wrong)"),
        });
    }
    let local = ws.files().into_iter().find(|f| {
        let stem = f.rsplit('/').next().unwrap_or(f).split('.').next().unwrap_or_default();
        stem == top && is_source(f)
    });
    if let Some(local) = local {
        findings.push(format!("the workspace has a local module {local}: the import path may be wrong"));
    }
    if findings.is_empty() {
        findings.push(format!("`{module}` is needed but the workspace has no package manifest to declare it in"));
    }
    let applied = format!("dependency_check: {}", findings[0]);
    (applied, Some(findings.join("\n")))
}

fn declared_line<'a>(text: &'a str, names: &[&str]) -> Option<&'a str> {
    let ident = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    text.lines().find(|l| {
        let t = l.trim_start().to_ascii_lowercase();
        names.iter().any(|n| {
            let n = n.to_ascii_lowercase();
            let at_start = t
                .trim_start_matches(['"', '\''])
                .strip_prefix(n.as_str())
                .or_else(|| t.strip_prefix(&format!("require {n}")));
            let quoted =
                t.split(['"', '\'']).any(|part| part.strip_prefix(n.as_str()).is_some_and(|r| !r.starts_with(ident)));
            at_start.is_some_and(|r| !r.starts_with(ident)) || quoted
        })
    })
}

/// The fixer `auto_fix` runs: the pattern's `fix_command` (with `{file}` set to the first file
/// the error names), else the project's own fixer.
pub fn fixer_command(failure: &Failure, fix_command: Option<&str>, ws: &dyn Workspace) -> Option<String> {
    if let Some(cmd) = fix_command {
        let file = locations(&failure.output, ws).into_iter().next().map_or_else(|| ".".to_owned(), |(f, _)| f);
        return Some(cmd.replace("{file}", &file));
    }
    Project::detect(ws).fixer(failure.pattern.as_deref())
}

/// `retry_with_backoff`: `initial · 2^(n-1)` for the n-th backoff of the loop, capped.
pub fn backoff_delay(initial: std::time::Duration, n: u32) -> std::time::Duration {
    let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
    initial.saturating_mul(factor).min(MAX_BACKOFF)
}
