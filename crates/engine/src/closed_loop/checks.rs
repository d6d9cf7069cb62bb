//! EVALUATE's checks and VALIDATE's gates.
//!
//! A stage's own `checks:` are run as written. Without them, the defaults of seed 000 for the
//! task's `task_type` apply, with commands found from the project itself: Cargo.toml gives
//! `cargo test` and clippy, a Python project pytest (or unittest) and ruff, package.json its
//! `test` and `lint` scripts, go.mod `go test` and `go vet`, a Makefile its `test` target.

use loopwright_spec::Mode;
use loopwright_spec::pipeline::{Check, CheckKind};

use super::{FileChanges, Gate, Violation};
use crate::ports::Workspace;

/// The checks of EVALUATE for a stage: its own, else the defaults for `task_type`.
pub fn checks_for(own: &[Check], task_type: Option<&str>, ws: &dyn Workspace) -> Vec<Check> {
    if !own.is_empty() {
        return own.to_vec();
    }
    let check = |name: &str, kind, command: String| Check { name: name.into(), kind, command, expected: None };
    let project = Project::detect(ws);
    let mut out = Vec::new();
    if task_type == Some("config_change") {
        // The syntax gate of VALIDATE already parsed every changed config file.
        return out;
    }
    if let Some(test) = project.test_command() {
        out.push(check(
            if task_type == Some("security") { "security_tests_pass" } else { "tests_pass" },
            CheckKind::Test,
            test,
        ));
    }
    if let Some(lint) = project.lint_command() {
        out.push(check("lint_clean", CheckKind::Lint, lint));
    }
    out
}

/// What kind of project the workspace holds, and which tools it has.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Project {
    /// Cargo.toml.
    pub rust: bool,
    /// pyproject.toml, setup.py, requirements.txt or a .py file at the top.
    pub python: bool,
    /// package.json scripts: test, lint.
    pub npm_scripts: Vec<String>,
    /// go.mod.
    pub go: bool,
    /// A Makefile with a `test:` target.
    pub make_test: bool,
    /// biome.json(c): Biome lints and formats.
    pub biome: bool,
    /// Programs found on PATH.
    pub programs: Vec<String>,
}

impl Project {
    /// Looks at the workspace's top-level files.
    pub fn detect(ws: &dyn Workspace) -> Self {
        let files = ws.files();
        let top = |name: &str| files.iter().any(|f| f == name);
        let npm_scripts = ws
            .read("package.json")
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("scripts").and_then(|s| s.as_object()).map(|s| s.keys().cloned().collect()))
            .unwrap_or_default();
        let programs = ["cargo-clippy", "pytest", "ruff", "black", "npx", "go", "make"]
            .into_iter()
            .filter(|p| ws.has_program(p))
            .map(str::to_owned)
            .collect();
        Self {
            rust: top("Cargo.toml"),
            python: top("pyproject.toml")
                || top("setup.py")
                || top("requirements.txt")
                || files.iter().any(|f| f.ends_with(".py") && !f.contains('/'))
                || files.iter().any(|f| f.starts_with("tests/") && f.ends_with(".py")),
            npm_scripts,
            go: top("go.mod"),
            make_test: ws.read("Makefile").is_some_and(|m| m.lines().any(|l| l.starts_with("test:"))),
            biome: top("biome.json") || top("biome.jsonc"),
            programs,
        }
    }

    fn has(&self, program: &str) -> bool {
        self.programs.iter().any(|p| p == program)
    }

    /// The project's test command.
    pub fn test_command(&self) -> Option<String> {
        if self.rust {
            Some("cargo test --quiet".into())
        } else if self.npm_scripts.iter().any(|s| s == "test") {
            Some("npm test --silent".into())
        } else if self.go {
            Some("go test ./...".into())
        } else if self.python {
            Some(if self.has("pytest") { "python3 -m pytest -q" } else { "python3 -m unittest discover -v" }.into())
        } else if self.make_test {
            Some("make test".into())
        } else {
            None
        }
    }

    /// The test command that names each test and its outcome (for regression detection).
    pub fn verbose_test_command(&self) -> Option<String> {
        if self.rust {
            Some("cargo test --no-fail-fast".into())
        } else if self.go {
            Some("go test -v ./...".into())
        } else if self.python && self.npm_scripts.is_empty() {
            Some(
                if self.has("pytest") {
                    "python3 -m pytest -v -p no:cacheprovider"
                } else {
                    "python3 -m unittest discover -v"
                }
                .into(),
            )
        } else {
            self.test_command()
        }
    }

    /// The project's linter command.
    pub fn lint_command(&self) -> Option<String> {
        if self.rust && self.has("cargo-clippy") {
            Some("cargo clippy --quiet --all-targets -- -D warnings".into())
        } else if self.npm_scripts.iter().any(|s| s == "lint") {
            Some("npm run lint --silent".into())
        } else if self.go {
            Some("go vet ./...".into())
        } else if self.python && self.has("ruff") {
            Some("ruff check .".into())
        } else {
            None
        }
    }

    /// The fixer for a lint or format failure (`auto_fix`), if the project has one.
    pub fn fixer(&self, pattern: Option<&str>) -> Option<String> {
        let format = pattern.and_then(crate::patterns::Builtin::of) == Some(crate::patterns::Builtin::FormatError);
        if self.rust {
            return Some(if format || !self.has("cargo-clippy") {
                "cargo fmt".into()
            } else {
                "cargo clippy --fix --allow-dirty --allow-staged --allow-no-vcs --all-targets --quiet && cargo fmt"
                    .into()
            });
        }
        if !self.npm_scripts.is_empty() {
            if let Some(s) = ["lint:fix", "format", "fix"].iter().find(|s| self.npm_scripts.iter().any(|n| n == *s)) {
                return Some(format!("npm run {s} --silent"));
            }
            if self.has("npx") {
                let fixer = if self.biome {
                    "npx --no-install biome check --write ."
                } else if format {
                    "npx --no-install prettier --write ."
                } else {
                    "npx --no-install eslint --fix ."
                };
                return Some(fixer.into());
            }
        }
        if self.go && self.has("go") {
            return Some("gofmt -w .".into());
        }
        if self.python {
            if format && self.has("black") {
                return Some("black -q .".into());
            }
            if self.has("ruff") {
                return Some(if format { "ruff format ." } else { "ruff check --fix ." }.into());
            }
            if self.has("black") {
                return Some("black -q .".into());
            }
        }
        None
    }
}

/// VALIDATE (seed 000 pre-execution gates): changed YAML / JSON / TOML files parse, nothing
/// changed points outside the workspace, and a plan-mode stage changed nothing.
pub fn validate(files: &FileChanges, mode: Mode, ws: &dyn Workspace) -> Vec<Violation> {
    let mut out = Vec::new();
    if mode == Mode::Plan && !files.is_empty() {
        out.push(Violation {
            gate: Gate::PlanMode,
            file: None,
            message: format!(
                "a plan-mode stage changed files: {} (plan mode is read-only; the files were restored)",
                files.described().join(", ")
            ),
        });
    }
    for path in files.modified.iter().chain(&files.created) {
        if ws.escapes(path) {
            out.push(Violation {
                gate: Gate::WorkspaceBoundary,
                file: Some(path.clone()),
                message: format!("{path} points outside the workspace"),
            });
            continue;
        }
        let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
        let problem = match ext {
            "yml" | "yaml" | "json" | "toml" => ws.read(path).and_then(|text| syntax_error(ext, &text)),
            _ => None,
        };
        if let Some(problem) = problem {
            out.push(Violation { gate: Gate::Syntax, file: Some(path.clone()), message: format!("{path}: {problem}") });
        }
    }
    out
}

/// Why a config file does not parse, if it does not.
fn syntax_error(ext: &str, text: &str) -> Option<String> {
    match ext {
        "json" => serde_json::from_str::<serde_json::Value>(text).err().map(|e| format!("invalid JSON: {e}")),
        "toml" => toml_error(text),
        _ => serde_saphyr::from_multiple::<serde_json::Value>(text)
            .err()
            .map(|e| format!("invalid YAML: {}", e.to_string().lines().next().unwrap_or_default())),
    }
}

fn toml_error(text: &str) -> Option<String> {
    toml::from_str::<serde_json::Value>(text).err().map(|e| format!("invalid TOML: {}", e.message()))
}
