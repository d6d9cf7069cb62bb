//! The arrows of ARCHITECTURE.md, checked on the sources: which crate may depend on which,
//! no cycle between the modules of any crate, no operation or command importing another
//! (they share library modules instead), decisions that do no I/O, and a run driver whose
//! functions and files stay small (AGENTS.md's house rules).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// The `loopwright-*` crates each crate depends on (not dev-dependencies).
fn crate_deps() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(workspace().join("crates")).expect("crates dir") {
        let dir = entry.expect("entry").path();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        let manifest: toml::Table = manifest.parse().expect("valid Cargo.toml");
        let name = manifest["package"]["name"].as_str().expect("package name").to_owned();
        let deps = manifest.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
        let ours = deps.keys().filter(|d| d.starts_with("loopwright-")).cloned().collect();
        out.insert(name, ours);
    }
    out
}

#[test]
fn crates_depend_only_downwards() {
    let expected: BTreeMap<&str, &[&str]> = BTreeMap::from([
        // The binary is the composition root: it names the store type and the bench drives
        // the process runner itself.
        (
            "loopwright",
            &[
                "loopwright-app",
                "loopwright-auto",
                "loopwright-daemon",
                "loopwright-engine",
                "loopwright-runners",
                "loopwright-spec",
                "loopwright-store",
            ][..],
        ),
        // The daemon sends notifications over HTTPS with the runners' TLS setup, and reads
        // GitHub's webhook deliveries with the forge's adapter.
        (
            "loopwright-daemon",
            &[
                "loopwright-app",
                "loopwright-auto",
                "loopwright-engine",
                "loopwright-forge",
                "loopwright-runners",
                "loopwright-spec",
                "loopwright-store",
            ][..],
        ),
        (
            "loopwright-app",
            &[
                "loopwright-auto",
                "loopwright-engine",
                "loopwright-forge",
                "loopwright-runners",
                "loopwright-spec",
                "loopwright-store",
            ][..],
        ),
        // The forge knows the file formats only: the engine and the store know nothing of it.
        ("loopwright-forge", &["loopwright-spec"][..]),
        ("loopwright-auto", &["loopwright-engine", "loopwright-runners", "loopwright-spec", "loopwright-store"][..]),
        ("loopwright-runners", &["loopwright-engine", "loopwright-spec"][..]),
        ("loopwright-store", &["loopwright-journal", "loopwright-spec"][..]),
        ("loopwright-engine", &["loopwright-journal", "loopwright-spec"][..]),
        ("loopwright-journal", &["loopwright-spec"][..]),
        ("loopwright-spec", &[][..]),
        ("loopwright-testkit", &["loopwright-engine", "loopwright-journal", "loopwright-spec"][..]),
    ]);
    let expected: BTreeMap<String, BTreeSet<String>> =
        expected.into_iter().map(|(k, v)| (k.to_owned(), v.iter().map(|s| (*s).to_owned()).collect())).collect();
    assert_eq!(crate_deps(), expected);
}

/// A module's name within its crate: the first path component under `src/`, or the first
/// two for a file under one of `split` (`cmd/run` rather than `cmd`).
fn module_of(rel: &Path, split: &[&str]) -> Option<String> {
    let mut parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [] => None,
        [one] if one == "lib" || one == "main" => None,
        [first, second, ..] if split.contains(&first.as_str()) => Some(format!("{first}/{second}")),
        [first, ..] => Some(first.clone()),
    }
}

/// Code without comment lines and without the unit tests at the end of a file.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Identifiers that follow `prefix` in `text` (`crate::event::X` → `event`, and with
/// `second`, the one after it too).
fn paths_after(text: &str, prefix: &str) -> Vec<(String, Option<String>)> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect::<String>();
    text.match_indices(prefix)
        .filter(|(i, _)| !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let first = ident(rest);
            let second = rest[first.len()..].strip_prefix("::").map(ident).filter(|s| !s.is_empty());
            (first, second)
        })
        .filter(|(first, _)| !first.is_empty())
        .collect()
}

/// Module → modules of the same crate it uses.
fn module_graph(krate: &str, split: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let src = workspace().join("crates").join(krate).join("src");
    let mut files = vec![];
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(rel, split) else { continue };
        let text = code(&std::fs::read_to_string(&file).expect("read source"));
        let mut uses = BTreeSet::new();
        for (first, second) in paths_after(&text, "crate::") {
            match second {
                Some(second) if split.contains(&first.as_str()) => uses.insert(format!("{first}/{second}")),
                _ => uses.insert(first),
            };
        }
        if let Some((folder, _)) = module.split_once('/') {
            for (first, _) in paths_after(&text, "super::") {
                uses.insert(format!("{folder}/{first}"));
            }
        }
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    graph.values_mut().for_each(|uses| uses.retain(|u| known.contains(u)));
    graph
}

/// A cycle in `graph`, if there is one (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut vec![], &mut done))
}

/// The folders whose modules are siblings that must not import each other.
const SPLIT: [(&str, &[&str]); 9] = [
    ("spec", &[]),
    ("journal", &[]),
    ("engine", &["closed_loop"]),
    ("store", &[]),
    ("runners", &[]),
    ("app", &["ops"]),
    ("daemon", &["api"]),
    ("cli", &["cmd"]),
    ("testkit", &[]),
];

#[test]
fn no_crate_has_a_cycle_between_its_modules() {
    for (krate, split) in SPLIT {
        let graph = module_graph(krate, split);
        assert!(graph.len() > 1 || krate == "store", "{krate}: the scan found its modules: {graph:?}");
        assert_eq!(find_cycle(&graph), None, "crate {krate}: a cycle between modules");
    }
}

#[test]
fn operations_and_commands_do_not_import_each_other() {
    for (krate, folder) in [("app", "ops"), ("cli", "cmd")] {
        let graph = module_graph(krate, &[folder]);
        let prefix = format!("{folder}/");
        let crossing: Vec<(String, String)> = graph
            .iter()
            .filter(|(m, _)| m.starts_with(&prefix))
            .flat_map(|(m, uses)| uses.iter().filter(|u| u.starts_with(&prefix)).map(|u| (m.clone(), u.clone())))
            .collect();
        assert_eq!(crossing, vec![], "{krate}: `{folder}` modules import each other");
    }
}

/// The modules that decide: pure functions of a journal, its state and the time.
const DECISIONS: &[&str] = &[
    "engine/src/decide/mod.rs",
    "engine/src/decide/condition.rs",
    "engine/src/decide/feedback.rs",
    "engine/src/decide/looping.rs",
    "engine/src/decide/deliver.rs",
    "engine/src/closed_loop/mod.rs",
    "auto/src/decide.rs",
];

/// What a decision must not use: the file system, processes, the network, the environment,
/// threads, an async runtime, a database or an HTTP client.
const IO: &[&str] = &[
    "std::fs",
    "std::process",
    "std::net",
    "std::io",
    "std::env",
    "std::thread",
    "tokio",
    "reqwest",
    "rusqlite",
    "sqlx",
    "postgres",
    ".await",
];

/// The I/O `text` uses, of [`IO`].
fn io_in(text: &str) -> Vec<&'static str> {
    let code = code(text);
    IO.iter().copied().filter(|io| code.contains(io)).collect()
}

#[test]
fn decisions_do_no_io() {
    for rel in DECISIONS {
        let text = std::fs::read_to_string(workspace().join("crates").join(rel)).expect("a decision module");
        assert_eq!(io_in(&text), Vec::<&str>::new(), "{rel} decides: the driver does its I/O");
    }
}

/// Each function of `text` (at the top level or in an `impl`): its name and its length in
/// lines, from its signature to its closing brace.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else { continue };
        let leading = words[..at].iter().all(|w| ["pub", "pub(super)", "pub(crate)", "async", "const"].contains(w));
        if !leading || (indent != 0 && indent != 4) {
            continue;
        }
        let name = words.get(at + 1).map_or("", |w| w.split(['(', '<']).next().unwrap_or(w));
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = lines[i..].iter().position(|l| *l == close) {
            out.push((name.to_owned(), end + 1));
        }
    }
    out
}

/// The engine's budget: a function of at most this many lines (tests aside), a file of at
/// most…
const ENGINE_FUNCTION_LINES: usize = 80;
const ENGINE_FILE_LINES: usize = 500;

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// What of `text` is not tests: all of it but a `#[cfg(test)]` module at its end.
fn outside_tests(text: &str) -> &str {
    text.find("\n#[cfg(test)]").map_or(text, |at| &text[..at])
}

#[test]
fn the_engine_stays_small() {
    let src = workspace().join("crates/engine/src");
    let mut over = Vec::new();
    for path in rust_files(&src) {
        let text = std::fs::read_to_string(&path).expect("a source file");
        let file = path.strip_prefix(&src).expect("under src").display().to_string();
        if text.lines().count() > ENGINE_FILE_LINES {
            over.push(format!("{file}: {} lines", text.lines().count()));
        }
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        for (name, lines) in function_lengths(outside_tests(&text)) {
            if lines > ENGINE_FUNCTION_LINES {
                over.push(format!("{file}: fn {name}: {lines} lines"));
            }
        }
    }
    assert_eq!(over, Vec::<String>::new(), "split them (AGENTS.md: where a new step goes)");
}

#[test]
fn the_dashboard_renders_typed_views() {
    let dir = workspace().join("crates/daemon/src/dashboard");
    let mut untyped = Vec::new();
    for path in rust_files(&dir) {
        let text = std::fs::read_to_string(&path).expect("a source file");
        if code(&text).contains("json!") {
            untyped.push(path.strip_prefix(&dir).expect("under the dashboard").display().to_string());
        }
    }
    assert_eq!(untyped, Vec::<String>::new(), "a page renders a typed view, not json! (AGENTS.md)");
}

#[test]
fn the_scan_sees_a_cycle_and_a_crossing() {
    // The checks above would pass on an empty scan: show they catch what they look for.
    let graph = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    assert_eq!(
        paths_after("use crate::cmd::run::x; // crate::nope\nnotcrate::y super::z", "crate::"),
        vec![("cmd".to_owned(), Some("run".to_owned())), ("nope".to_owned(), None)]
    );
    assert_eq!(code("a\n  // crate::x\nb\n#[cfg(test)]\nmod tests { crate::y }"), "a\nb");
    assert_eq!(module_of(Path::new("cmd/run.rs"), &["cmd"]), Some("cmd/run".into()));
    assert_eq!(module_of(Path::new("closed_loop/mod.rs"), &[]), Some("closed_loop".into()));
    assert_eq!(module_of(Path::new("main.rs"), &[]), None);
    assert_eq!(io_in("use std::fs;\n// tokio\nfn f() { x.await }"), ["std::fs", ".await"]);
    let driver = "fn a() {\n}\nimpl X {\n    pub(super) async fn b(\n        x: u8,\n    ) {\n        1\n    }\n}\n";
    assert_eq!(function_lengths(driver), [("a".to_owned(), 2), ("b".to_owned(), 5)]);
    assert_eq!(outside_tests("fn a() {}\n#[cfg(test)]\nmod tests {}\n"), "fn a() {}");
}
