//! Files bundled into the binary: the seed pipelines and agents (`init`) and the demo
//! workspace (`demo`). They live in `examples/` at the repository root.

/// A bundled file: its path in a workspace and its text.
pub type File = (&'static str, &'static str);

macro_rules! bundled {
    ($($path:literal => $src:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!("../../../examples/", $src)))),*]
    };
}

/// The scripted agents shared by the seed pipelines.
pub const SEED_AGENTS: &[File] = bundled! {
    ".loopwright/agents/echo-agent.sh" => "seed/agents/echo-agent.sh",
    ".loopwright/agents/cto.md" => "seed/agents/cto.md",
    ".loopwright/agents/vp-architecture.md" => "seed/agents/vp-architecture.md",
    ".loopwright/agents/ciso.md" => "seed/agents/ciso.md",
    ".loopwright/agents/tech-lead.md" => "seed/agents/tech-lead.md",
    ".loopwright/agents/sre-lead.md" => "seed/agents/sre-lead.md",
    ".loopwright/agents/staff-engineer.md" => "seed/agents/staff-engineer.md",
};

/// The example pipelines `init --example NAME` offers.
pub const PIPELINES: &[File] = bundled! {
    "example" => "seed/pipelines/example.yml",
    "bug-fix" => "seed/pipelines/bug-fix.yml",
    "full-feature" => "seed/pipelines/full-feature.yml",
};

/// The demo workspace: a tiny project with a failing test and a pipeline that fixes it.
pub const DEMO: &[File] = bundled! {
    ".loopwright/config.toml" => "demo/.loopwright/config.toml",
    ".loopwright/pipelines/bug-fix.yml" => "demo/.loopwright/pipelines/bug-fix.yml",
    ".loopwright/agents/tech-lead.md" => "demo/.loopwright/agents/tech-lead.md",
    ".loopwright/agents/ciso.md" => "demo/.loopwright/agents/ciso.md",
    ".loopwright/agents/demo-agent.sh" => "demo/.loopwright/agents/demo-agent.sh",
    "src/calc.sh" => "demo/src/calc.sh",
    "tests/test_calc.sh" => "demo/tests/test_calc.sh",
};

/// `.loopwright/config.toml` as `init` writes it.
pub const CONFIG_TEMPLATE: &str = r#"# loopwright workspace settings. Every key is optional; the values shown are the defaults.

# Run each stage's processes in a sandbox (bubblewrap): "auto" where this machine can make
# one, "required" to run nothing without one, "off" to run them as you. In a sandbox an
# agent-mode attempt writes into a layer that reaches the workspace only when it passes,
# plan mode is read-only, your home is hidden, and a stage reaches only the hosts it names
# (`network:` on a stage or an agent). `loopwright doctor` says what this machine has.
sandbox = "auto"

[sandbox_limits]
# The largest file a sandboxed process may write (MiB), the processes your user may have at
# once while it runs, and the most an agent-mode attempt may write in all (MiB) before it
# fails instead of being copied into the workspace.
file_size_mb = 8192
processes = 8192
max_layer_mb = 2048

[defaults]
# Runner for agent files that name neither `runner:` nor `command:`
# (command, claude, codex, gemini, aider, opencode, goose, openai, anthropic).
runner = "claude"
# Stage timeout (minutes) for stages that set no `timeout_minutes`.
timeout_minutes = 30

[store]
# The journal (SQLite), relative to .loopwright/.
path = "state/state.db"
# "normal" survives a crash of loopwright; "full" also survives power loss (slower).
synchronous = "normal"
"#;

/// `.loopwright/failure-patterns.yml` as `init` writes it.
pub const PATTERNS_TEMPLATE: &str = r#"# Project failure patterns, merged over loopwright's built-in library (by id).
# A pattern here adds a new id, or overrides fields of a built-in one with the same id.
# Set `extends: none` to use only the patterns in this file.
#
# patterns:
#   - id: flaky-network-test
#     description: Our integration tests time out when the staging API is slow
#     signals: ["ETIMEDOUT", "/staging\\.example\\.com.*timed out/"]
#     strategy: retry_with_backoff
#     max_auto_retries: 2
#     retryable: true
patterns: []
"#;
