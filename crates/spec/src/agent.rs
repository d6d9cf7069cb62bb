//! Agent files: markdown with YAML frontmatter (SPEC §5). The body is the agent's persona.
//!
//! Claude Code and Cursor sub-agent files are accepted as they are: their keys (`name`,
//! `description`, `tools`, `model`, and any others) are read or ignored, never rejected.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::diag::{Diagnostic, Diagnostics, Position, SourceFile, closest, yaml_error};

/// Execution mode of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Read-only review and analysis.
    Plan,
    /// Full implementation capabilities.
    Agent,
}

impl Mode {
    /// The mode's name as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Agent => "agent",
        }
    }

    /// Parses `plan` or `agent`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "plan" => Some(Mode::Plan),
            "agent" => Some(Mode::Agent),
            _ => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an agent is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerKind {
    /// Any program: the prompt on stdin, the answer on stdout.
    Command,
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// Gemini CLI.
    Gemini,
    /// aider.
    Aider,
    /// opencode.
    Opencode,
    /// goose.
    Goose,
    /// An OpenAI-compatible HTTP API.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// `sh -c` with the agent's `command` joined.
    Shell,
}

impl RunnerKind {
    /// All runners with their names.
    pub const ALL: [(&'static str, RunnerKind); 10] = [
        ("command", RunnerKind::Command),
        ("claude", RunnerKind::Claude),
        ("codex", RunnerKind::Codex),
        ("gemini", RunnerKind::Gemini),
        ("aider", RunnerKind::Aider),
        ("opencode", RunnerKind::Opencode),
        ("goose", RunnerKind::Goose),
        ("openai", RunnerKind::Openai),
        ("anthropic", RunnerKind::Anthropic),
        ("shell", RunnerKind::Shell),
    ];

    /// Parses a runner name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, k)| *k)
    }

    /// The runner's name.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, k)| *k == self).map_or("command", |(n, _)| n)
    }

    /// True for a model (HTTP) or a coding-agent CLI: a runner that can answer a question,
    /// unlike a plain program (`command`, `shell`).
    pub fn is_model_or_cli(self) -> bool {
        !matches!(self, RunnerKind::Command | RunnerKind::Shell)
    }

    /// True for runners that talk HTTP rather than start a process.
    pub fn is_http(self) -> bool {
        matches!(self, RunnerKind::Openai | RunnerKind::Anthropic)
    }
}

impl fmt::Display for RunnerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated agent definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agent {
    /// The name stages use.
    pub name: String,
    /// What the agent is for.
    pub description: Option<String>,
    /// How it is run.
    pub runner: RunnerKind,
    /// Program and arguments (`runner: command` / `shell`).
    pub command: Vec<String>,
    /// Model for presets and HTTP runners.
    pub model: Option<String>,
    /// Base URL for HTTP runners.
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Cap on answer length (HTTP runners).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (HTTP runners).
    pub temperature: Option<f64>,
    /// Modes the agent may run in; empty means any.
    pub modes: Vec<Mode>,
    /// `network:` as written: what it may reach in a sandbox (`None`: its API host).
    pub network: Option<crate::sandbox::Network>,
    /// `fallback:`: the agents that take a stage's attempt over, in order, when this one fails
    /// in a way it cannot fix (a stage's own `fallback:` replaces it).
    pub fallback: Vec<String>,
    /// The persona / system prompt: the file's body.
    pub persona: String,
    /// The file it was read from.
    pub file: String,
}

impl Agent {
    /// True when the agent may run in `mode`.
    pub fn allows(&self, mode: Mode) -> bool {
        self.modes.is_empty() || self.modes.contains(&mode)
    }
}

#[derive(Debug, Deserialize)]
struct RawAgent {
    name: Option<Spanned<String>>,
    description: Option<String>,
    model: Option<String>,
    runner: Option<Spanned<String>>,
    command: Option<Spanned<CommandSpec>>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    modes: Option<Vec<Spanned<String>>>,
    network: Option<Spanned<crate::raw::RawNetworkValue>>,
    fallback: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum CommandSpec {
    Argv(Vec<String>),
    Line(String),
}

/// A markdown file split into its YAML frontmatter and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Frontmatter<'a> {
    /// The YAML between the fences (empty when there is none).
    pub yaml: &'a str,
    /// Lines before the YAML (to shift diagnostics).
    pub line_offset: usize,
    /// Bytes before the YAML.
    pub byte_offset: usize,
    /// The markdown after the closing fence.
    pub body: &'a str,
}

/// Splits `---`-fenced frontmatter from a markdown text. Handles a BOM and CRLF line ends.
/// Returns `Err` with a message when an opening fence has no closing one.
pub fn split_frontmatter(text: &str) -> Result<Frontmatter<'_>, &'static str> {
    let start = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
    let rest = &text[start..];
    let first_line_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
    if rest[..first_line_end].trim_end() != "---" {
        return Ok(Frontmatter { yaml: "", line_offset: 0, byte_offset: start, body: rest });
    }
    let yaml_start = start + first_line_end;
    let mut pos = yaml_start;
    for line in text[yaml_start..].split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Ok(Frontmatter {
                yaml: &text[yaml_start..pos],
                line_offset: 1,
                byte_offset: yaml_start,
                body: &text[pos + line.len()..],
            });
        }
        pos += line.len();
    }
    Err("the frontmatter opened with `---` on line 1 is never closed by a `---` line")
}

/// Parses an agent file. `stem` (the file name without extension) names the agent when the
/// frontmatter has no `name`; `default_runner` applies when it names no `runner` and no
/// `command`.
pub fn parse_agent(source: &SourceFile, stem: &str, default_runner: RunnerKind) -> Result<Agent, Diagnostics> {
    let mut diags = Diagnostics::default();
    diags.add_source(source);
    let fm = match split_frontmatter(&source.text) {
        Ok(fm) => fm,
        Err(msg) => {
            diags.push(Diagnostic::new(source, msg).help("add a line `---` after the frontmatter"));
            return Err(diags);
        }
    };
    let raw: RawAgent = if fm.yaml.trim().is_empty() {
        RawAgent {
            name: None,
            description: None,
            model: None,
            runner: None,
            command: None,
            base_url: None,
            api_key_env: None,
            max_tokens: None,
            temperature: None,
            modes: None,
            network: None,
            fallback: None,
        }
    } else {
        match serde_saphyr::from_str_with_options(fm.yaml, serde_saphyr::options! { with_snippet: false }) {
            Ok(raw) => raw,
            Err(err) => {
                diags.push(yaml_error(source, &err, fm.line_offset, fm.byte_offset));
                return Err(diags);
            }
        }
    };
    let at = |loc: &serde_saphyr::Location| Position::from_location(loc, source, fm.line_offset, fm.byte_offset);

    let runner = match &raw.runner {
        Some(r) => match RunnerKind::parse(&r.value) {
            Some(k) => Some(k),
            None => {
                let names: Vec<&str> = RunnerKind::ALL.iter().map(|(n, _)| *n).collect();
                let mut d = Diagnostic::new(
                    source,
                    format!("unknown runner `{}`, expected one of {}", r.value, names.join(", ")),
                )
                .at(at(&r.referenced))
                .field("runner")
                .label("unknown runner");
                if let Some(best) = closest(&r.value, &names) {
                    d = d.help(format!("did you mean `{best}`?"));
                }
                diags.push(d);
                None
            }
        },
        None if raw.command.is_some() => Some(RunnerKind::Command),
        None => Some(default_runner),
    };
    let command = match raw.command.as_ref().map(|c| &c.value) {
        Some(CommandSpec::Argv(argv)) => argv.clone(),
        Some(CommandSpec::Line(line)) => vec!["sh".to_owned(), "-c".to_owned(), line.clone()],
        None => Vec::new(),
    };
    if let Some(runner @ (RunnerKind::Command | RunnerKind::Shell)) = runner
        && command.is_empty()
    {
        let mut d = Diagnostic::new(
            source,
            format!("`runner: {runner}` needs a non-empty `command` (the program and its arguments)"),
        )
        .field("command")
        .help("for example: command: [\"my-agent\", \"--flag\"]");
        if let Some(c) = &raw.command {
            d = d.at(at(&c.referenced));
        } else if let Some(r) = &raw.runner {
            d = d.at(at(&r.referenced));
        }
        diags.push(d);
    }
    if let Some(runner) = runner.filter(|r| r.is_http())
        && raw.model.is_none()
    {
        diags.push(Diagnostic::new(source, format!("`runner: {runner}` needs a `model`")).field("model"));
    }
    let mut modes = Vec::new();
    for m in raw.modes.iter().flatten() {
        match Mode::parse(&m.value) {
            Some(mode) => modes.push(mode),
            None => diags.push(
                Diagnostic::new(source, format!("unknown mode `{}`, expected `plan` or `agent`", m.value))
                    .at(at(&m.referenced))
                    .field("modes")
                    .label("expected plan or agent"),
            ),
        }
    }
    let network = match raw.network.as_ref().map(|n| (&n.value, n)) {
        None => None,
        Some((crate::raw::RawNetworkValue::Word(word), n)) => match crate::sandbox::Network::word(word) {
            Some(network) => Some(network),
            None => {
                diags.push(
                    Diagnostic::new(
                        source,
                        format!("unknown network `{word}`, expected `none`, `model` or a list of hosts"),
                    )
                    .at(at(&n.referenced))
                    .field("network"),
                );
                None
            }
        },
        Some((crate::raw::RawNetworkValue::Hosts(hosts), n)) => {
            let mut parsed = Vec::new();
            for host in hosts {
                match crate::sandbox::Host::parse(host) {
                    Ok(h) => parsed.push(h),
                    Err(why) => diags.push(Diagnostic::new(source, why).at(at(&n.referenced)).field("network")),
                }
            }
            Some(crate::sandbox::Network::Hosts(parsed))
        }
    };
    let Some(runner) = runner.filter(|_| diags.is_empty()) else {
        return Err(diags);
    };
    Ok(Agent {
        name: raw.name.map_or_else(|| stem.to_owned(), |n| n.value),
        description: raw.description,
        runner,
        command,
        model: raw.model,
        base_url: raw.base_url,
        api_key_env: raw.api_key_env,
        max_tokens: raw.max_tokens,
        temperature: raw.temperature,
        modes,
        network,
        fallback: raw.fallback.unwrap_or_default(),
        persona: fm.body.trim().to_owned(),
        file: source.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn splits_frontmatter_with_bom_and_crlf() {
        let text = "\u{feff}---\r\nname: a\r\n---\r\nbody\r\n";
        let fm = split_frontmatter(text).expect("closed");
        assert_eq!(fm.yaml, "name: a\r\n");
        assert_eq!(fm.line_offset, 1);
        assert_eq!(fm.body, "body\r\n");
        assert_eq!(&text[fm.byte_offset..fm.byte_offset + 7], "name: a");
    }

    #[test]
    fn no_frontmatter_is_all_body() {
        let fm = split_frontmatter("just text\n").expect("ok");
        assert_eq!((fm.yaml, fm.body), ("", "just text\n"));
    }

    #[test]
    fn unclosed_frontmatter_is_an_error() {
        assert!(split_frontmatter("---\nname: a\n").is_err());
    }

    #[test]
    fn parses_claude_code_subagent_as_is() {
        let src = SourceFile::new(
            ".claude/agents/reviewer.md",
            "---\nname: code-reviewer\ndescription: Reviews code\ntools: Read, Grep\nmodel: sonnet\ncolor: blue\n---\nYou review code.\n",
        );
        let agent = parse_agent(&src, "reviewer", RunnerKind::Claude).expect("valid");
        assert_eq!(
            agent,
            Agent {
                name: "code-reviewer".into(),
                description: Some("Reviews code".into()),
                runner: RunnerKind::Claude,
                command: vec![],
                model: Some("sonnet".into()),
                base_url: None,
                api_key_env: None,
                max_tokens: None,
                temperature: None,
                modes: vec![],
                network: None,
                fallback: vec![],
                persona: "You review code.".into(),
                file: ".claude/agents/reviewer.md".into(),
            }
        );
    }

    #[test]
    fn command_runner_needs_a_command_and_reports_bad_runner_with_line() {
        let src = SourceFile::new("a.md", "---\nrunner: comand\nmodes: [plan, write]\n---\nx\n");
        let diags = parse_agent(&src, "a", RunnerKind::Claude).expect_err("invalid");
        let lines: Vec<String> = diags.items.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            vec![
                "a.md:2:9: error: field `runner`: unknown runner `comand`, expected one of command, claude, codex, gemini, aider, opencode, goose, openai, anthropic, shell (help: did you mean `command`?)",
                "a.md:3:15: error: field `modes`: unknown mode `write`, expected `plan` or `agent`",
            ]
        );
    }

    #[test]
    fn command_line_string_runs_through_sh() {
        let src = SourceFile::new("a.md", "---\ncommand: ./agent.sh --fast\n---\n");
        let agent = parse_agent(&src, "a", RunnerKind::Claude).expect("valid");
        assert_eq!(agent.runner, RunnerKind::Command);
        assert_eq!(agent.command, vec!["sh", "-c", "./agent.sh --fast"]);
    }
}
