//! Presets for the coding-agent CLIs: how each is run headless, how loopwright's modes map
//! onto its own permission model, how it gets the prompt, and how its machine-readable output
//! gives the final answer and the token usage.
//!
//! The flags come from each tool's documentation (headless / non-interactive mode pages,
//! checked 2026-11):
//!
//! | runner | headless | plan mode | agent mode | prompt | output |
//! |---|---|---|---|---|---|
//! | claude | `-p` | `--permission-mode plan` | `--permission-mode acceptEdits` | stdin | `--output-format json` |
//! | codex | `exec` | `--sandbox read-only` | `--sandbox workspace-write` | stdin (`-`) | `--json` (JSONL events) |
//! | gemini | non-TTY stdin | `--approval-mode plan` | `--approval-mode auto_edit` | stdin | `--output-format json` |
//! | aider | `--message-file` | `--chat-mode ask` | (edits, `--yes-always`) | the prompt file | text |
//! | opencode | `run` | `--agent plan` | `--agent build` | stdin | `--format json` (JSONL events) |
//! | goose | `run --no-session` | `GOOSE_MODE=chat` | `GOOSE_MODE=auto` | `--instructions` the prompt file | text |
//!
//! loopwright commits agent-mode changes itself, so aider's own commits are turned off.

use loopwright_engine::event::{Unfixable, Usage};
use loopwright_engine::ports::ExecOutcome;
use loopwright_spec::sandbox::Host;
use loopwright_spec::{Agent, Mode, RunnerKind};
use serde_json::Value;

/// How a preset agent is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Program and arguments; `{prompt_file}` stands for the attempt's prompt file.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The prompt is written to stdin.
    pub stdin: bool,
}

/// The placeholder for the prompt file in an argv.
pub const PROMPT_FILE: &str = "{prompt_file}";

/// The invocation of a preset agent in a mode, or `None` for runners that are not presets.
pub fn invocation(agent: &Agent, mode: Mode) -> Option<Invocation> {
    let plan = mode == Mode::Plan;
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let model = |flag: &str| agent.model.as_ref().map(|m| vec![flag.to_owned(), m.clone()]).unwrap_or_default();
    let (mut argv, env, stdin) = match agent.runner {
        RunnerKind::Claude => {
            let mut a = s(&["claude", "-p", "--output-format", "json", "--permission-mode"]);
            a.push(if plan { "plan" } else { "acceptEdits" }.to_owned());
            a.extend(model("--model"));
            (a, vec![], true)
        }
        RunnerKind::Codex => {
            let mut a = s(&["codex", "exec", "--json", "--skip-git-repo-check", "--sandbox"]);
            a.push(if plan { "read-only" } else { "workspace-write" }.to_owned());
            a.extend(model("--model"));
            a.push("-".to_owned());
            (a, vec![], true)
        }
        RunnerKind::Gemini => {
            let mut a = s(&["gemini", "--output-format", "json", "--approval-mode"]);
            a.push(if plan { "plan" } else { "auto_edit" }.to_owned());
            a.extend(model("--model"));
            (a, vec![], true)
        }
        RunnerKind::Aider => {
            let mut a =
                s(&["aider", "--message-file", PROMPT_FILE, "--yes-always", "--no-auto-commits", "--no-pretty"]);
            a.push("--no-stream".to_owned());
            if plan {
                a.extend(s(&["--chat-mode", "ask"]));
            }
            a.extend(model("--model"));
            (a, vec![], false)
        }
        RunnerKind::Opencode => {
            let mut a = s(&["opencode", "run", "--format", "json", "--agent"]);
            a.push(if plan { "plan" } else { "build" }.to_owned());
            a.extend(model("--model"));
            (a, vec![], true)
        }
        RunnerKind::Goose => {
            let a = s(&["goose", "run", "--no-session", "--quiet", "--instructions", PROMPT_FILE]);
            let mut env = vec![("GOOSE_MODE".to_owned(), if plan { "chat" } else { "auto" }.to_owned())];
            if let Some(m) = &agent.model {
                env.push(("GOOSE_MODEL".to_owned(), m.clone()));
            }
            (a, env, false)
        }
        RunnerKind::Command | RunnerKind::Shell | RunnerKind::Openai | RunnerKind::Anthropic => return None,
    };
    // An agent file may still name the program to run (a wrapper, a pinned path).
    if let Some(program) = agent.command.first() {
        argv[0] = program.clone();
    }
    Some(Invocation { argv, env, stdin })
}

/// `invocation` as it runs inside loopwright's sandbox: a CLI's own sandbox, where it cannot be
/// nested in loopwright's, is turned off, loopwright's holding in its place (plan mode
/// read-only, agent mode in a layer). Codex's sandbox is bubblewrap on Linux, which needs the
/// user namespaces loopwright's sandbox forbids, so every command Codex ran would fail.
pub fn inside_sandbox(runner: RunnerKind, mut invocation: Invocation) -> Invocation {
    if runner == RunnerKind::Codex
        && let Some(i) = invocation.argv.iter().position(|a| a == "--sandbox")
        && let Some(mode) = invocation.argv.get_mut(i + 1)
    {
        "danger-full-access".clone_into(mode);
    }
    invocation
}

/// The words agent CLIs print when they cannot go on, and what each means (SPEC §16
/// "Fallback"): an allow list of their own messages, read only from a failed attempt's last
/// output. What is not in it is an ordinary failure (retried, classified, fixed).
const CANNOT_GO_ON: &[(&str, Unfixable)] = &[
    // Claude Code (`claude -p`): its result's text, or its stderr.
    ("Invalid API key", Unfixable::Authentication),
    ("Please run /login", Unfixable::Authentication),
    ("OAuth token has expired", Unfixable::Authentication),
    ("authentication_error", Unfixable::Authentication),
    ("Credit balance is too low", Unfixable::Quota),
    ("usage limit reached", Unfixable::Quota),
    ("Prompt is too long", Unfixable::ContextLength),
    ("There's an issue with the selected model", Unfixable::ModelMissing),
    ("not_found_error", Unfixable::ModelMissing),
    ("rate_limit_error", Unfixable::RateLimit),
    // Codex.
    ("You've hit your usage limit", Unfixable::Quota),
    ("Quota exceeded. Check your plan and billing details", Unfixable::Quota),
    ("insufficient_quota", Unfixable::Quota),
    ("401 Unauthorized", Unfixable::Authentication),
    ("context_length_exceeded", Unfixable::ContextLength),
    ("model_not_found", Unfixable::ModelMissing),
    // Gemini CLI.
    ("TerminalQuotaError", Unfixable::Quota),
    ("You have exhausted your capacity", Unfixable::Quota),
    ("API key not valid", Unfixable::Authentication),
    ("ModelNotFoundError", Unfixable::ModelMissing),
    // aider (after its own retries).
    ("The API provider has rate limited you", Unfixable::RateLimit),
    ("AuthenticationError", Unfixable::Authentication),
    ("ContextWindowExceededError", Unfixable::ContextLength),
];

/// How much of a failed attempt's output is read for [`CANNOT_GO_ON`]: its end, where a CLI
/// says why it stopped.
const CANNOT_GO_ON_TAIL: usize = 4096;

/// Why an agent's failed attempt cannot be fixed by the agent itself (SPEC §16 "Fallback"):
/// its program is not installed, or its CLI said, in its own words, that its credentials,
/// quota, model or context cannot go on. `None` for a success, a shell stage, or any other
/// failure.
pub fn unfixable(agent: &Agent, outcome: &ExecOutcome, stdout: &str, stderr: &str) -> Option<Unfixable> {
    let missing = |text: &str| {
        text.contains("program not found") || (text.starts_with("bwrap: execvp") && text.contains("No such file"))
    };
    match outcome {
        ExecOutcome::Exited(0) => None,
        ExecOutcome::SpawnFailed(why) if missing(why) => Some(Unfixable::CliMissing),
        ExecOutcome::Exited(_) if missing(stderr) => Some(Unfixable::CliMissing),
        ExecOutcome::Exited(_) if invocation(agent, Mode::Agent).is_some() => {
            let tail = |s: &'_ str| -> String {
                let mut start = s.len().saturating_sub(CANNOT_GO_ON_TAIL);
                while !s.is_char_boundary(start) {
                    start += 1;
                }
                s[start..].to_owned()
            };
            let said = format!("{}\n{}", tail(stdout), tail(stderr));
            CANNOT_GO_ON.iter().find(|(words, _)| said.contains(words)).map(|(_, why)| *why)
        }
        _ => None,
    }
}

/// How to install a preset's CLI, for the error that says it is missing.
pub fn install_hint(runner: RunnerKind) -> Option<&'static str> {
    Some(match runner {
        RunnerKind::Claude => "npm install -g @anthropic-ai/claude-code",
        RunnerKind::Codex => "npm install -g @openai/codex",
        RunnerKind::Gemini => "npm install -g @google/gemini-cli",
        RunnerKind::Opencode => "npm install -g opencode-ai",
        RunnerKind::Aider => "python3 -m pip install aider-chat",
        RunnerKind::Goose => "see https://block.github.io/goose/ for goose",
        RunnerKind::Command | RunnerKind::Shell | RunnerKind::Openai | RunnerKind::Anthropic => return None,
    })
}

/// The hosts an agent's model is reached at (`network: model` in a sandbox): its `base_url`;
/// for a CLI preset, the base URLs its own environment variables and configuration files in
/// the user's home set (Codex's `openai_base_url` and its chosen `model_providers` entry,
/// opencode's providers' `baseURL`), else the hosts the CLI talks to by default (its API and
/// sign-in). A `command` agent without `base_url` has none that loopwright knows: its stage
/// names them with `network: [hosts]`.
pub fn model_hosts(agent: &Agent) -> Vec<Host> {
    if let Some(url) = &agent.base_url {
        return Host::parse(url).into_iter().collect();
    }
    let (vars, defaults): (&[&str], &[&str]) = match agent.runner {
        RunnerKind::Claude => (&["ANTHROPIC_BASE_URL"], &["api.anthropic.com"]),
        RunnerKind::Codex => (&["OPENAI_BASE_URL"], &["api.openai.com", "chatgpt.com", "auth.openai.com"]),
        RunnerKind::Gemini => (
            &["GOOGLE_GEMINI_BASE_URL"],
            &["generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com"],
        ),
        RunnerKind::Aider => (&["OPENAI_API_BASE", "ANTHROPIC_BASE_URL"], &["api.openai.com", "api.anthropic.com"]),
        RunnerKind::Opencode => (
            &["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"],
            &["api.anthropic.com", "api.openai.com", "opencode.ai", "models.dev"],
        ),
        RunnerKind::Goose => (&["OPENAI_HOST", "ANTHROPIC_HOST"], &["api.openai.com", "api.anthropic.com"]),
        RunnerKind::Openai => (&[], &["api.openai.com"]),
        RunnerKind::Anthropic => (&[], &["api.anthropic.com"]),
        RunnerKind::Command | RunnerKind::Shell => (&[], &[]),
    };
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).filter(|h| h.is_absolute());
    let configured = home.map(|h| configured_base_urls(agent.runner, &h)).unwrap_or_default();
    let mut set: Vec<Host> = vars
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .chain(configured)
        .filter_map(|url| Host::parse(&url).ok())
        .collect();
    set.dedup();
    if set.is_empty() { defaults.iter().filter_map(|h| Host::parse(h).ok()).collect() } else { set }
}

/// The base URLs a CLI's own configuration files under `home` point it at (the user's files,
/// not the workspace's: what an agent wrote must not widen what the next attempt reaches).
pub fn configured_base_urls(runner: RunnerKind, home: &std::path::Path) -> Vec<String> {
    match runner {
        RunnerKind::Codex => {
            let Some(text) = small_file(&home.join(".codex/config.toml")) else { return Vec::new() };
            let Ok(config) = toml::from_str::<toml::Table>(&text) else { return Vec::new() };
            let provider = config
                .get("model_provider")
                .and_then(toml::Value::as_str)
                .and_then(|name| config.get("model_providers")?.get(name)?.get("base_url")?.as_str());
            config
                .get("openai_base_url")
                .and_then(toml::Value::as_str)
                .into_iter()
                .chain(provider)
                .map(str::to_owned)
                .collect()
        }
        RunnerKind::Opencode => {
            let Some(text) = small_file(&home.join(".config/opencode/opencode.json")) else { return Vec::new() };
            let Ok(config) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
            let providers = config.get("provider").and_then(serde_json::Value::as_object);
            providers
                .into_iter()
                .flat_map(|p| p.values())
                .filter_map(|p| p.pointer("/options/baseURL").and_then(serde_json::Value::as_str))
                .map(str::to_owned)
                .collect()
        }
        _ => Vec::new(),
    }
}

/// A configuration file's text: a regular file (a link is followed, as the CLI would) of at
/// most 1 MiB, else nothing.
fn small_file(path: &std::path::Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_file() && meta.len() <= 1024 * 1024).then(|| std::fs::read_to_string(path).ok()).flatten()
}

/// The environment variables an agent's own process is given in a sandbox, besides those
/// every sandboxed process gets: its `api_key_env`, and for a CLI preset the variables it
/// reads its API key, sign-in and model host from (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`,
/// …). Nothing else of loopwright's environment reaches it.
pub fn agent_environment(agent: &Agent) -> Vec<String> {
    let own: &[&str] = match agent.runner {
        RunnerKind::Claude => &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
        ],
        RunnerKind::Codex => &["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY"],
        RunnerKind::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT"],
        RunnerKind::Aider => &["OPENAI_API_KEY", "OPENAI_API_BASE", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        RunnerKind::Opencode => &["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"],
        RunnerKind::Goose => {
            &["GOOSE_PROVIDER", "OPENAI_API_KEY", "OPENAI_HOST", "ANTHROPIC_API_KEY", "ANTHROPIC_HOST"]
        }
        RunnerKind::Openai | RunnerKind::Anthropic | RunnerKind::Command | RunnerKind::Shell => &[],
    };
    agent.api_key_env.iter().cloned().chain(own.iter().map(|v| (*v).to_owned())).collect()
}

/// The provider an agent calls, as `[[limits]]` entries name it: the one its CLI or API is
/// made for, else (CLIs that take any model) the one its model belongs to (`anthropic/…`,
/// `claude-…`; `openai/…`, `gpt-…`, `o3`; `google/…`, `gemini-…`); none for a `command`
/// agent whose model says nothing, and for shell stages.
pub fn provider(agent: &Agent) -> Option<&'static str> {
    let fixed = match agent.runner {
        RunnerKind::Claude | RunnerKind::Anthropic => Some("anthropic"),
        RunnerKind::Codex | RunnerKind::Openai => Some("openai"),
        RunnerKind::Gemini => Some("google"),
        RunnerKind::Shell => return None,
        RunnerKind::Aider | RunnerKind::Opencode | RunnerKind::Goose | RunnerKind::Command => None,
    };
    fixed.or_else(|| provider_of_model(agent.model.as_deref()?))
}

/// The provider a model's name says it belongs to (`anthropic/…`, `claude-…`; `openai/…`,
/// `gpt-…`, `o3`; `google/…`, `gemini-…`), if it says one.
pub fn provider_of_model(model: &str) -> Option<&'static str> {
    let model = model.to_ascii_lowercase();
    let model = model.rsplit_once('/').map_or(model.as_str(), |(vendor, name)| match vendor {
        "anthropic" | "openai" | "google" | "gemini" => vendor,
        _ => name,
    });
    if model.starts_with("anthropic") || model.starts_with("claude") {
        Some("anthropic")
    } else if model.starts_with("openai")
        || model.starts_with("gpt")
        || ["o1", "o3", "o4"].iter().any(|o| model == *o || model.starts_with(&format!("{o}-")))
    {
        Some("openai")
    } else if model.starts_with("google") || model.starts_with("gemini") {
        Some("google")
    } else {
        None
    }
}

/// An agent CLI's own configuration in the user's home (paths relative to it), as a sandbox
/// gives it: `copies` are copied into the attempt's home (files the CLI reads and may write
/// back: its settings, its sign-in, the state file it rewrites at start), `shared` folders are
/// bound read-only (its sub-agents, commands, extensions). Nothing else of the user's home is
/// there. Checked against what each CLI writes: claude rewrites `~/.claude.json` and writes
/// sessions under `~/.claude/projects`; codex writes `~/.codex/sessions` and `log`; gemini
/// `~/.gemini/tmp`; opencode `~/.local/share/opencode`; goose `~/.local/share/goose`.
pub struct AgentConfig {
    /// Files copied into the attempt's home.
    pub copies: &'static [&'static str],
    /// Folders bound read-only.
    pub shared: &'static [&'static str],
}

/// The configuration of a runner's CLI (nothing for other runners).
pub fn agent_config(runner: RunnerKind) -> AgentConfig {
    let (copies, shared): (&'static [&'static str], &'static [&'static str]) = match runner {
        RunnerKind::Claude => (
            &[".claude.json", ".claude/.credentials.json", ".claude/settings.json", ".claude/CLAUDE.md"],
            &[".claude/agents", ".claude/commands", ".claude/skills"],
        ),
        RunnerKind::Codex => (&[".codex/auth.json", ".codex/config.toml", ".codex/AGENTS.md"], &[".codex/prompts"]),
        RunnerKind::Gemini => (
            &[
                ".gemini/settings.json",
                ".gemini/oauth_creds.json",
                ".gemini/google_accounts.json",
                ".gemini/installation_id",
                ".gemini/trustedFolders.json",
                ".gemini/GEMINI.md",
            ],
            &[".gemini/commands", ".gemini/extensions"],
        ),
        RunnerKind::Aider => (&[".aider.conf.yml", ".aider.model.settings.yml", ".aider.model.metadata.json"], &[]),
        RunnerKind::Opencode => (
            &[".local/share/opencode/auth.json", ".config/opencode/opencode.json"],
            &[".config/opencode/agent", ".config/opencode/command"],
        ),
        RunnerKind::Goose => (&[".config/goose/config.yaml"], &[]),
        _ => (&[], &[]),
    };
    AgentConfig { copies, shared }
}

/// Adds a reported count to a total that stays `None` until something is reported.
fn add(total: &mut Option<u64>, count: Option<u64>) {
    if let Some(c) = count {
        *total = Some(total.unwrap_or(0) + c);
    }
}

/// What a preset printed, read: the final answer and the usage it reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The final answer (what `## key` outputs are read from).
    pub text: String,
    /// Tokens (and cost) as the tool reported them.
    pub usage: Option<Usage>,
}

/// Reads a preset's output; text that is not the expected JSON is kept as it is.
pub fn parse(runner: RunnerKind, model: Option<&str>, stdout: &str) -> Parsed {
    let raw = || Parsed { text: stdout.to_owned(), usage: None };
    let usage = |input: Option<u64>, output: Option<u64>, cost: Option<f64>| {
        (input.is_some() || output.is_some()).then(|| Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
            estimated: false,
            model: model.map(str::to_owned),
            cost_usd: cost,
            quota_wait_ms: 0,
        })
    };
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_u64);
    match runner {
        RunnerKind::Claude => {
            // `--output-format json`: one object; the last line in case anything precedes it.
            let Some(v) = last_json_object(stdout) else { return raw() };
            let input = ["/usage/input_tokens", "/usage/cache_creation_input_tokens", "/usage/cache_read_input_tokens"]
                .iter()
                .filter_map(|p| n(&v, p))
                .reduce(|a, b| a + b);
            Parsed {
                text: v.get("result").and_then(Value::as_str).unwrap_or_default().to_owned(),
                usage: usage(input, n(&v, "/usage/output_tokens"), v.get("total_cost_usd").and_then(Value::as_f64)),
            }
        }
        RunnerKind::Gemini => {
            let Some(v) = last_json_object(stdout) else { return raw() };
            // stats.models.{name}.tokens.{prompt,candidates}, summed over models.
            let (mut input, mut output) = (None::<u64>, None::<u64>);
            if let Some(models) = v.pointer("/stats/models").and_then(Value::as_object) {
                for m in models.values() {
                    add(&mut input, n(m, "/tokens/prompt"));
                    add(&mut output, n(m, "/tokens/candidates"));
                }
            }
            Parsed {
                text: v.get("response").and_then(Value::as_str).unwrap_or_default().to_owned(),
                usage: usage(input, output, None),
            }
        }
        RunnerKind::Codex | RunnerKind::Opencode => {
            // JSONL events: the agent's messages, and usage on turn completion.
            let mut text = None::<String>;
            let (mut input, mut output) = (None::<u64>, None::<u64>);
            let mut any = false;
            for v in stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok()) {
                any = true;
                let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
                let message = match kind {
                    // codex: {"type":"item.completed","item":{"type":"agent_message","text":…}}
                    "item.completed" if v.pointer("/item/type").and_then(Value::as_str) == Some("agent_message") => {
                        v.pointer("/item/text").and_then(Value::as_str)
                    }
                    // opencode: {"type":"text","part":{"text":…}}
                    "text" => v.pointer("/part/text").and_then(Value::as_str),
                    _ => None,
                };
                if let Some(m) = message {
                    text = Some(match (text.take(), runner) {
                        (Some(t), RunnerKind::Opencode) => format!("{t}{m}"),
                        _ => m.to_owned(),
                    });
                }
                for (i, o) in [
                    (n(&v, "/usage/input_tokens"), n(&v, "/usage/output_tokens")),
                    (n(&v, "/part/tokens/input"), n(&v, "/part/tokens/output")),
                ] {
                    add(&mut input, i);
                    add(&mut output, o);
                }
            }
            if !any {
                return raw();
            }
            Parsed { text: text.unwrap_or_default(), usage: usage(input, output, None) }
        }
        _ => raw(),
    }
}

/// The last line of the text that is a JSON object (or the whole text, if it is one).
fn last_json_object(text: &str) -> Option<Value> {
    serde_json::from_str::<Value>(text.trim()).ok().filter(Value::is_object).or_else(|| {
        text.lines().rev().find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_cli_says_when_it_cannot_go_on_is_read_from_its_own_words_only() {
        let claude = agent(RunnerKind::Claude, None);
        let src = loopwright_spec::SourceFile::new("c.md", "---\ncommand: [\"my-agent\"]\n---\n");
        let command = loopwright_spec::parse_agent(&src, "c", RunnerKind::Command).expect("agent");
        let failed = ExecOutcome::Exited(1);
        let long = format!("Invalid API key\n{}", "x".repeat(2 * CANNOT_GO_ON_TAIL));
        let missing =
            ExecOutcome::SpawnFailed("cannot start `claude`: program not found (is it installed and on PATH?)".into());
        // (what, the agent, how its attempt ended, its stdout, its stderr, what it means)
        type Case<'c> = (&'c str, &'c Agent, ExecOutcome, &'c str, &'c str, Option<Unfixable>);
        let cases: Vec<Case<'_>> = vec![
            ("a success is nothing", &claude, ExecOutcome::Exited(0), "Invalid API key", "", None),
            ("its program is not installed", &claude, missing.clone(), "", "", Some(Unfixable::CliMissing)),
            ("nor is a command agent's", &command, missing, "", "", Some(Unfixable::CliMissing)),
            (
                "in a sandbox, bubblewrap says so",
                &claude,
                failed.clone(),
                "",
                "bwrap: execvp claude: No such file or directory\n",
                Some(Unfixable::CliMissing),
            ),
            (
                "claude -p's result",
                &claude,
                failed.clone(),
                "{\"type\":\"result\",\"is_error\":true,\"result\":\"Invalid API key · Please run /login\"}",
                "",
                Some(Unfixable::Authentication),
            ),
            (
                "claude's usage limit",
                &claude,
                failed.clone(),
                "Claude AI usage limit reached|1749924000",
                "",
                Some(Unfixable::Quota),
            ),
            ("a prompt too long", &claude, failed.clone(), "", "Prompt is too long", Some(Unfixable::ContextLength)),
            (
                "codex's usage limit",
                &claude,
                failed.clone(),
                "",
                "■ You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again at 6:44 PM.",
                Some(Unfixable::Quota),
            ),
            (
                "gemini's spent capacity",
                &claude,
                failed.clone(),
                "",
                "TerminalQuotaError: You have exhausted your capacity on this model.",
                Some(Unfixable::Quota),
            ),
            ("an ordinary failure", &claude, failed.clone(), "", "error[E0308]: mismatched types", None),
            ("a command agent's words are its own business", &command, failed.clone(), "Invalid API key", "", None),
            ("only the end of the output is read", &claude, failed, &long, "", None),
        ];
        for (name, agent, outcome, stdout, stderr, want) in cases {
            assert_eq!(unfixable(agent, &outcome, stdout, stderr), want, "{name}");
        }
    }

    #[test]
    fn a_providers_refusal_says_whether_another_agent_should_take_over() {
        use crate::http::unfixable;
        let cases: Vec<(u16, &str, Option<Unfixable>)> = vec![
            (401, "{\"error\": {\"message\": \"Incorrect API key provided\"}}", Some(Unfixable::Authentication)),
            (403, "forbidden", Some(Unfixable::Authentication)),
            (402, "", Some(Unfixable::Quota)),
            (429, "{\"error\": {\"code\": \"insufficient_quota\"}}", Some(Unfixable::Quota)),
            (429, "slow down", Some(Unfixable::RateLimit)),
            (529, "{\"type\": \"overloaded_error\"}", Some(Unfixable::RateLimit)),
            (400, "{\"error\": {\"message\": \"Your credit balance is too low\"}}", Some(Unfixable::Quota)),
            (400, "{\"error\": {\"code\": \"context_length_exceeded\"}}", Some(Unfixable::ContextLength)),
            (400, "prompt is too long: 210000 tokens > 200000 maximum", Some(Unfixable::ContextLength)),
            (413, "", Some(Unfixable::ContextLength)),
            (404, "{\"error\": {\"code\": \"model_not_found\"}}", Some(Unfixable::ModelMissing)),
            (400, "{\"error\": {\"message\": \"The model `gpt-9` does not exist\"}}", Some(Unfixable::ModelMissing)),
            (404, "no such route", None),
            (400, "messages: field required", None),
            (500, "internal error", None),
        ];
        for (status, body, want) in cases {
            assert_eq!(unfixable(status, body), want, "{status} {body}");
        }
    }

    fn agent(runner: RunnerKind, model: Option<&str>) -> Agent {
        let src = loopwright_spec::SourceFile::new(
            "a.md",
            format!(
                "---\nrunner: {}\n{}---\n",
                runner.as_str(),
                model.map(|m| format!("model: {m}\n")).unwrap_or_default()
            ),
        );
        loopwright_spec::parse_agent(&src, "a", RunnerKind::Command).expect("agent")
    }

    #[test]
    fn an_agents_provider_is_its_clis_else_its_models() {
        let cases = [
            (RunnerKind::Claude, None, Some("anthropic")),
            (RunnerKind::Codex, Some("gpt-5"), Some("openai")),
            (RunnerKind::Gemini, None, Some("google")),
            (RunnerKind::Anthropic, Some("claude-sonnet-4"), Some("anthropic")),
            (RunnerKind::Openai, Some("llama3"), Some("openai")),
            (RunnerKind::Aider, Some("anthropic/claude-3-7-sonnet"), Some("anthropic")),
            (RunnerKind::Aider, Some("o3"), Some("openai")),
            (RunnerKind::Aider, Some("o3-mini"), Some("openai")),
            (RunnerKind::Opencode, Some("openrouter/gpt-4o"), Some("openai")),
            (RunnerKind::Goose, Some("gemini-2.5-pro"), Some("google")),
            (RunnerKind::Opencode, Some("ollama/qwen3"), None),
            (RunnerKind::Aider, None, None),
            (RunnerKind::Aider, Some("o30-turbo"), None),
        ];
        for (runner, model, expected) in cases {
            assert_eq!(provider(&agent(runner, model)), expected, "{runner:?} {model:?}");
        }
    }

    #[test]
    fn claude_json_gives_the_result_and_usage() {
        let out = r###"{"type":"result","subtype":"success","result":"## plan\nDo it.","total_cost_usd":0.012,"usage":{"input_tokens":100,"cache_read_input_tokens":20,"output_tokens":30}}"###;
        assert_eq!(
            parse(RunnerKind::Claude, Some("sonnet"), out),
            Parsed {
                text: "## plan\nDo it.".into(),
                usage: Some(Usage {
                    input_tokens: 120,
                    output_tokens: 30,
                    estimated: false,
                    model: Some("sonnet".into()),
                    cost_usd: Some(0.012),
                    quota_wait_ms: 0
                })
            }
        );
    }

    #[test]
    fn codex_events_give_the_last_message_and_usage() {
        let out = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"1\",\"type\":\"reasoning\",\"text\":\"hm\"}}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"2\",\"type\":\"agent_message\",\"text\":\"done\"}}\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":50,\"cached_input_tokens\":10,\"output_tokens\":5}}\n";
        let p = parse(RunnerKind::Codex, None, out);
        assert_eq!(p.text, "done");
        assert_eq!(p.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((50, 5)));
    }

    #[test]
    fn gemini_json_and_plain_text_fallback() {
        let out = r#"{"response":"ok","stats":{"models":{"gemini-2.5-pro":{"tokens":{"prompt":7,"candidates":3,"total":10}}}}}"#;
        let p = parse(RunnerKind::Gemini, None, out);
        assert_eq!((p.text.as_str(), p.usage.map(|u| (u.input_tokens, u.output_tokens))), ("ok", Some((7, 3))));
        assert_eq!(parse(RunnerKind::Claude, None, "not json").text, "not json");
    }

    #[test]
    fn modes_map_onto_each_tools_permissions() {
        let argv = |r, m| invocation(&agent(r, Some("m1")), m).expect("preset").argv.join(" ");
        assert_eq!(
            argv(RunnerKind::Claude, Mode::Plan),
            "claude -p --output-format json --permission-mode plan --model m1"
        );
        assert_eq!(
            argv(RunnerKind::Claude, Mode::Agent),
            "claude -p --output-format json --permission-mode acceptEdits --model m1"
        );
        assert_eq!(
            argv(RunnerKind::Codex, Mode::Plan),
            "codex exec --json --skip-git-repo-check --sandbox read-only --model m1 -"
        );
        assert_eq!(
            argv(RunnerKind::Codex, Mode::Agent),
            "codex exec --json --skip-git-repo-check --sandbox workspace-write --model m1 -"
        );
        assert_eq!(argv(RunnerKind::Gemini, Mode::Plan), "gemini --output-format json --approval-mode plan --model m1");
        assert_eq!(
            argv(RunnerKind::Gemini, Mode::Agent),
            "gemini --output-format json --approval-mode auto_edit --model m1"
        );
        assert_eq!(
            argv(RunnerKind::Aider, Mode::Plan),
            "aider --message-file {prompt_file} --yes-always --no-auto-commits --no-pretty --no-stream --chat-mode ask --model m1"
        );
        assert_eq!(
            argv(RunnerKind::Aider, Mode::Agent),
            "aider --message-file {prompt_file} --yes-always --no-auto-commits --no-pretty --no-stream --model m1"
        );
        assert_eq!(argv(RunnerKind::Opencode, Mode::Plan), "opencode run --format json --agent plan --model m1");
        assert_eq!(argv(RunnerKind::Opencode, Mode::Agent), "opencode run --format json --agent build --model m1");
        let inside = |r, m| inside_sandbox(r, invocation(&agent(r, Some("m1")), m).expect("preset")).argv.join(" ");
        assert_eq!(
            inside(RunnerKind::Codex, Mode::Plan),
            "codex exec --json --skip-git-repo-check --sandbox danger-full-access --model m1 -"
        );
        assert_eq!(inside(RunnerKind::Claude, Mode::Agent), argv(RunnerKind::Claude, Mode::Agent));
        let goose = invocation(&agent(RunnerKind::Goose, None), Mode::Plan).expect("preset");
        assert_eq!(goose.argv.join(" "), "goose run --no-session --quiet --instructions {prompt_file}");
        assert_eq!(goose.env, vec![("GOOSE_MODE".to_owned(), "chat".to_owned())]);
        let command = loopwright_spec::parse_agent(
            &loopwright_spec::SourceFile::new("c.md", "---\ncommand: [my-agent]\n---\n"),
            "c",
            RunnerKind::Command,
        )
        .expect("agent");
        assert!(invocation(&command, Mode::Plan).is_none());
    }
}

/// How an agent runs as one long-lived interactive session (auto mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interactive {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// The first message, when it must be typed once the CLI is ready (CLIs that take no
    /// first message on the command line).
    pub typed: Option<String>,
    /// The agent's own session id, when loopwright chose it (`claude --session-id`).
    pub session_id: Option<String>,
}

/// The interactive session of `agent` with `message` as its first message, resuming the
/// agent's conversation `resume` where the CLI can:
///
/// | runner | first message | set the id | resume |
/// |---|---|---|---|
/// | claude | argument | `--session-id UUID` | `--resume ID` |
/// | codex | argument | (read from the exit banner) | `codex resume ID` |
/// | gemini | `-i` | (read from the exit banner) | `--resume ID` |
/// | others | typed | — | fresh session |
///
/// A `command` agent gets `LOOPWRIGHT_AUTO_RESUME` with the id to resume, and its first
/// message typed (or substituted for a `{message}` argument).
pub fn interactive(agent: &Agent, message: &str, resume: Option<&str>, new_id: &str) -> Interactive {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<String>>();
    let model = |flag: &str| agent.model.as_ref().map(|m| vec![flag.to_owned(), m.clone()]).unwrap_or_default();
    let program = |default: &str| agent.command.first().cloned().unwrap_or_else(|| default.to_owned());
    let mut env = vec![];
    let (argv, typed, session_id) = match agent.runner {
        RunnerKind::Claude => {
            let mut a = vec![program("claude")];
            a.extend(model("--model"));
            let id = match resume {
                Some(id) => {
                    a.extend(s(&["--resume", id]));
                    id.to_owned()
                }
                None => {
                    a.extend(s(&["--session-id", new_id]));
                    new_id.to_owned()
                }
            };
            a.push(message.to_owned());
            (a, None, Some(id))
        }
        RunnerKind::Codex => {
            let mut a = vec![program("codex")];
            if let Some(id) = resume {
                a.extend(s(&["resume", id]));
            }
            a.extend(model("--model"));
            a.push(message.to_owned());
            (a, None, resume.map(str::to_owned))
        }
        RunnerKind::Gemini => {
            let mut a = vec![program("gemini")];
            if let Some(id) = resume {
                a.extend(s(&["--resume", id]));
            }
            a.extend(model("--model"));
            a.extend(["-i".to_owned(), message.to_owned()]);
            (a, None, resume.map(str::to_owned))
        }
        RunnerKind::Aider => {
            let mut a = vec![program("aider"), "--no-auto-commits".to_owned()];
            a.extend(model("--model"));
            (a, Some(message.to_owned()), None)
        }
        RunnerKind::Opencode => {
            let mut a = vec![program("opencode")];
            a.extend(model("--model"));
            (a, Some(message.to_owned()), None)
        }
        RunnerKind::Goose => (vec![program("goose"), "session".to_owned()], Some(message.to_owned()), None),
        RunnerKind::Command | RunnerKind::Shell | RunnerKind::Openai | RunnerKind::Anthropic => {
            let mut typed = Some(message.to_owned());
            let mut argv: Vec<String> = agent
                .command
                .iter()
                .map(|a| {
                    if a.contains("{message}") {
                        typed = None;
                        a.replace("{message}", message)
                    } else {
                        a.clone()
                    }
                })
                .collect();
            if agent.runner == RunnerKind::Shell {
                argv = vec!["sh".to_owned(), "-c".to_owned(), argv.join(" ")];
            }
            env.push(("LOOPWRIGHT_AUTO_RESUME".to_owned(), resume.unwrap_or_default().to_owned()));
            (argv, typed, resume.map(str::to_owned))
        }
    };
    Interactive { argv, env, typed, session_id }
}
