//! Reading an agent's screen: which prompt it shows (and the key its CLI expects), a quota
//! message and its reset time, a busy marker, or nothing; the hash of the screen with spinner
//! and clock rows masked; the session id from an exit banner.
//!
//! The texts come from each CLI's sources and issues (`shared/research/auto-mode-anchors.md`
//! §4); every pattern has an id with the CLI version range it was taken from, and a screen
//! fixture in the tests. Structured signals come first where a CLI gives them: this table is
//! the fallback, and drifts with every release of a CLI.

use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::quota;

mod subject;

/// The kinds of prompt the policy decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum PromptClass {
    /// Create or edit a file.
    Edit,
    /// Run a command or call a tool.
    Command,
    /// Fetch a web page (Claude Code's WebFetch).
    Fetch,
    /// Trust the workspace folder.
    Trust,
    /// A generic yes/no question.
    YesNo,
    /// "Continue?" / "Press Enter to continue".
    Continuation,
    /// A quota menu (answered with its "wait" choice).
    QuotaMenu,
    /// A question the table does not know: never answered.
    Unclear,
}

impl PromptClass {
    /// Every class a policy may allow.
    pub const ALL: [Self; 7] =
        [Self::Edit, Self::Command, Self::Fetch, Self::Trust, Self::YesNo, Self::Continuation, Self::QuotaMenu];

    /// The name in config and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Edit => "edit",
            Self::Command => "command",
            Self::Fetch => "fetch",
            Self::Trust => "trust",
            Self::YesNo => "yes_no",
            Self::Continuation => "continuation",
            Self::QuotaMenu => "quota_menu",
            Self::Unclear => "unclear",
        }
    }
}

/// A class `[auto] answer` lists, as the screen reader names it.
impl From<loopwright_spec::config::AnswerClass> for PromptClass {
    fn from(class: loopwright_spec::config::AnswerClass) -> Self {
        use loopwright_spec::config::AnswerClass as A;
        match class {
            A::Edit => Self::Edit,
            A::Command => Self::Command,
            A::Fetch => Self::Fetch,
            A::Trust => Self::Trust,
            A::YesNo => Self::YesNo,
            A::Continuation => Self::Continuation,
            A::QuotaMenu => Self::QuotaMenu,
        }
    }
}

/// A prompt on screen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// Its class.
    pub class: PromptClass,
    /// The pattern that recognised it (`claude.command@2.1`).
    pub pattern: String,
    /// The keys that answer it "yes, once" in its CLI.
    pub key: String,
    /// The screen rows of the prompt (the question and what it is about).
    pub excerpt: String,
    /// What the prompt asks about, read whole off the screen (and the scrollback above it).
    #[serde(default)]
    pub subject: Subject,
    /// The screen rows of the prompt's block: what it is about, the question and its
    /// numbered menu.
    #[serde(skip)]
    pub rows: std::ops::Range<usize>,
    /// Nothing but a footer (at most two rows) is drawn below the block: the prompt is the
    /// latest thing on screen, not history with output below it.
    #[serde(skip)]
    pub at_bottom: bool,
}

/// What a command or edit prompt is about, as far as the screen shows it whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Subject {
    /// The whole shell command (its lines joined with `\n`).
    Command(String),
    /// The files an edit changes, as the CLI names them.
    Files(Vec<String>),
    /// The address a fetch prompt asks to read.
    Url(String),
    /// Not shown where this CLI puts it, cut off at the top of what is kept, or a prompt that
    /// is about neither: a command or an edit prompt with it is never answered.
    #[default]
    Unseen,
}

/// How a screen row's characters are drawn: what tells a row a CLI draws as prose (Claude
/// Code's grey description under a command) from the command's own rows, where the text alone
/// cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Face {
    /// A blank row, or one whose drawing is not known (a fixture given as text, a row that
    /// scrolled off).
    #[default]
    Unknown,
    /// Every character in the same colour and intensity.
    Uniform {
        /// Their foreground colour.
        colour: Colour,
        /// Drawn faint (SGR 2).
        dim: bool,
    },
    /// Characters in different colours or intensities.
    Mixed,
}

impl Face {
    /// Drawn in a colour or intensity of its own: faint, or a colour that is not the
    /// terminal's default.
    pub fn muted(self) -> bool {
        matches!(
            self,
            Face::Uniform { dim: true, .. } | Face::Uniform { colour: Colour::Indexed(_) | Colour::Rgb(..), .. }
        )
    }
}

/// A foreground colour as the terminal was told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Colour {
    /// The terminal's default.
    #[default]
    Default,
    /// One of the 256 indexed colours.
    Indexed(u8),
    /// A 24-bit colour.
    Rgb(u8, u8, u8),
}

/// What the screen shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reading {
    /// A question waits for an answer.
    Prompt(Prompt),
    /// A usage limit stopped the agent.
    Quota {
        /// The pattern that recognised it.
        pattern: String,
        /// The line.
        excerpt: String,
        /// When it resets, if the message says.
        resets_at: Option<Timestamp>,
        /// The screen row of the line.
        #[serde(default)]
        row: usize,
    },
    /// The provider refused a request (429, 529 overloaded): the CLI retries by itself, or
    /// gave up and waits.
    RateLimited {
        /// The line.
        excerpt: String,
        /// The CLI retries by itself in this many seconds (`Retrying in 4s`).
        retry_in_s: Option<u32>,
        /// The screen row of the line.
        #[serde(default)]
        row: usize,
    },
    /// The agent says it is working (or retrying by itself).
    Busy {
        /// The marker seen.
        marker: String,
    },
    /// None of the above.
    Quiet,
}

fn re(s: &str) -> Regex {
    Regex::new(s).expect("a valid regex")
}

struct PromptPattern {
    id: &'static str,
    class: PromptClass,
    question: Regex,
    /// The key, or `None` when it depends on the menu drawn (numbered menus: `1` only when
    /// option 1 is a "yes").
    key: Option<&'static str>,
}

/// Rows from the bottom a prompt may start in (a prompt is drawn at the bottom; a question
/// further up is history).
const PROMPT_ROWS: usize = 16;

static PROMPTS: LazyLock<Vec<PromptPattern>> = LazyLock::new(|| {
    let p = |id, class, question: &str, key| PromptPattern { id, class, question: re(question), key };
    use PromptClass::*;
    vec![
        // Claude Code 2.x: a question, then a numbered menu whose first option is the yes.
        p("claude.quota_menu@2.1", QuotaMenu, r"Stop and wait for limit to reset", Some("1")),
        p("claude.api_key@2.1", Unclear, r"Do you want to use this API key\?", None),
        // Gemini CLI 0.61's folder dialog asks Claude Code's question: told apart by its menu,
        // whose highlighted first choice trusts the folder.
        p("gemini.trust@0.61", Trust, r"^\s*●\s*1\. Trust folder \(", Some("\r")),
        p("claude.trust@2.1", Trust, r"Do you trust the files in this folder\?|Yes, I trust this folder", None),
        p("claude.edit@2.1", Edit, r"Do you want to (?:create|make this edit to|overwrite|delete) .+\?", None),
        p("claude.command@2.1", Command, r"Do you want to proceed\?", None),
        p("claude.fetch@2.1", Fetch, r"Do you want to allow Claude to fetch this content\?", None),
        p("claude.allow@2.0", Command, r"^\s*(?:❯\s*)?1\. Allow\s*$", None),
        // Codex (codex-rs approval overlay).
        // 0.171's first-run folder dialog: its highlighted first choice trusts the folder.
        p("codex.trust@0.171", Trust, r"^\s*Trust this folder\? Codex can read, edit, and run files here", Some("\r")),
        p("codex.command@0.5", Command, r"Would you like to run the following command\?", Some("y")),
        p("codex.edit@0.5", Edit, r"Would you like to make the following edits\?", Some("y")),
        p("codex.command@0.1", Command, r"Allow command\?", Some("y")),
        // Gemini CLI (ToolConfirmationMessage): the first option, "Allow once", is selected.
        p("gemini.edit@0.9", Edit, r"Apply this change\?", Some("\r")),
        p("gemini.command@0.9", Command, r"Allow execution of (?:MCP tool )?.+\?", Some("\r")),
        // aider: a y/n question answered with y and Enter (only when nothing was typed yet).
        p("aider.command@0.8", Command, r"Run shell commands?\? \(Y\)es/\(N\)o.*\[Yes\]:\s*$", Some("y\r")),
        p("aider.create@0.8", Edit, r"Create new file\? \(Y\)es/\(N\)o.*\[Yes\]:\s*$", Some("y\r")),
        p(
            "aider.add@0.8",
            YesNo,
            r"(?:Add file to the chat|Add command output to the chat|Add URL to the chat)\? \(Y\)es/\(N\)o.*\[Yes\]:\s*$",
            Some("y\r"),
        ),
        // goose and opencode: the first option allows once.
        p(
            "goose.tool@1.0",
            Command,
            r"Goose would like to call the above tool|Do you allow this tool call\?",
            Some("\r"),
        ),
        p("opencode.permission@0.3", Command, r"Permission required", Some("\r")),
        // Generic: continuation and y/n questions on the last line.
        p(
            "generic.continue",
            Continuation,
            r"(?i)(?:press enter to continue|do you want to continue|would you like to continue|continue\? *(?:\(y/n\)|\[y/n\])?:? *$)",
            None,
        ),
        p("generic.yes_no", YesNo, r"(?i)(?:\(y/n\)|\[y/n\]|\(yes/no\)|\[yes/no\])\s*[:?]?\s*$", Some("y\r")),
    ]
});

// A menu's highlighted row is marked `❯` (Claude Code), `›` (Codex), `●` (Gemini CLI) or `>`.
static NUMBERED_YES: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(?:❯|>|›|●)?\s*1\.\s+(?:Yes|Allow)\b"));
static NUMBERED_MENU: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(?:❯|>|›|●)?\s*[12]\.\s+\S"));
/// A row of a numbered menu: its number and its label.
static MENU_ROW: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(?:❯|>|›|●)?\s*(\d+)\.\s+(\S.*?)\s*$"));
/// A CLI saying, under a dialog, that it took the answer: the dialog above is history.
static MOVED_ON: LazyLock<Regex> = LazyLock::new(|| re(r"Gemini CLI is restarting to apply the trust changes"));
static QUESTION: LazyLock<Regex> = LazyLock::new(|| re(r"\?\s*$"));

struct QuotaPattern {
    id: &'static str,
    line: Regex,
}

static QUOTAS: LazyLock<Vec<QuotaPattern>> = LazyLock::new(|| {
    let q = |id, line: &str| QuotaPattern { id, line: re(line) };
    vec![
        q("claude.limit@2026", r"You've hit your (?:\w+ )?limit\s*[·∙•]\s*resets .+"),
        q("claude.limit@2025-10", r"(?i)(?:5-hour|session|(?:opus )?weekly) limit reached\s*[·∙•]\s*resets .+"),
        q("claude.limit@2025", r"Claude (?:AI )?usage limit reached(?:\. Your limit will reset at .+|\|\d{10})"),
        q("claude.extra@2026", r"You're out of extra usage\s*[·∙•]\s*resets .+"),
        q("codex.limit@2026", r"You've hit your usage limit\..*"),
        q("codex.free@2026", r"Upgrade to Plus to continue using Codex"),
        q("codex.quota@2026", r"Quota exceeded\. Check your plan and billing details"),
        q("gemini.limit@0.9", r"Usage limit reached for .+"),
        q("gemini.capacity@0.9", r"You have exhausted your capacity on this model\..*"),
        q("gemini.daily@0.5", r"You have reached your daily .+ quota limit"),
    ]
});

/// Lines that look like a quota but are not a stop: the 95 % wrap-up notice (the turn ends by
/// itself) and transient rate limits the CLI retries itself.
static NOT_QUOTA: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)Approaching your .*usage limit|rate_limit_error|rate limited you"));
static GEMINI_RESET: LazyLock<Regex> = LazyLock::new(|| re(r"Access resets at .+"));

/// The provider refused a request: Claude's `API Error: 429 …` / `API error · Retrying in 4s`,
/// 2.1's `API Error: Request rejected (429)`, `Server is temporarily limiting requests` and
/// `Repeated 529 Overloaded errors`, a 529 `overloaded_error`, Codex's `last status: 429`,
/// aider's `rate limited you`.
static RATE_LIMIT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)API Error:?\s*(?:429|529)\b|API Error: Request rejected \((?:429|529)\)|API Error: Server is temporarily limiting requests|Repeated 529 Overloaded|API error · Retrying|overloaded_error|rate_limit_error|\bOverloaded\b.*(?:retry|try again)|rate limited you|last status: (?:429|529|503)\b|429 Too Many Requests",
    )
});
static RETRYING: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)Retrying in (\d+)(?:\.\d+)?\s*s"));

static BUSY: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)esc to interrupt|esc to cancel|ctrl\+c to interrupt|retrying in \d|• Working \(|ctrl\+b to run in background",
    )
});

/// Rows that change while nothing happens: spinners, elapsed counters, clocks.
static MASK: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)^\s*[·✢✳✶✻✽*⠀-⣿◐◓◑◒◴◷◶◵]\s*\S+…|esc to interrupt|esc to cancel|\b\d{1,2}:\d{2}:\d{2}\b|\(\d+[hms]\b|\b\d+s\s*[·•)]",
    )
});

static SESSION_ID: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?:claude --resume|codex resume|gemini --resume)\s+([0-9A-Za-z][0-9A-Za-z_\-]{7,})"));

/// One choice of a prompt's numbered menu, as the CLI labels it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// The key that picks it (its number).
    pub key: String,
    /// Its label (`Yes`, `No, and tell Claude what to do differently`).
    pub label: String,
}

/// The numbered choices drawn in `prompt`'s block of `screen` (the screen it was read from):
/// empty for a prompt without a numbered menu (aider's `(Y)es/(N)o`).
pub fn choices(screen: &str, prompt: &Prompt) -> Vec<Choice> {
    // The menu ends the block: the rows from its end up to the question.
    let block: Vec<String> =
        screen.split('\n').skip(prompt.rows.start).take(prompt.rows.len()).map(|r| unframed(r).into_owned()).collect();
    let mut menu: Vec<Choice> = block
        .iter()
        .rev()
        .map_while(|row| MENU_ROW.captures(row))
        .map(|c| Choice { key: c[1].to_owned(), label: c[2].to_owned() })
        .collect();
    menu.reverse();
    menu
}

impl Choice {
    /// The choice says yes (`Yes`, `Yes, and don't ask again`, `Allow once`): picking it lets
    /// the agent go on with what the prompt asks.
    pub fn is_yes(&self) -> bool {
        let first = self.label.split([' ', ',']).next().unwrap_or_default().to_ascii_lowercase();
        matches!(first.as_str(), "yes" | "allow" | "proceed" | "approve" | "always")
    }
}

/// Reads a screen (the visible rows, `\n`-separated) at `now`.
pub fn read(screen: &str, now: Timestamp, local: &TimeZone) -> Reading {
    read_view(screen, screen, "", &[], now, local)
}

/// Reads `view` — the screen with the rows that are old news blanked, row for row as `full`
/// — for a prompt, a quota message or a busy marker; what a prompt is about is read from
/// `full` and the rows `above` it that scrolled off (oldest first), so a long command is read
/// whole. `faces` says how each row of `full` is drawn (empty when not known).
pub fn read_view(view: &str, full: &str, above: &str, faces: &[Face], now: Timestamp, local: &TimeZone) -> Reading {
    let (view, full, above) = (unframe(view), unframe(full), unframe(above));
    let (view, full, above) = (view.as_str(), full.as_str(), above.as_str());
    let rows: Vec<&str> = view.split('\n').collect();
    let filled: Vec<(usize, &str)> = rows.iter().copied().enumerate().filter(|(_, r)| !r.trim().is_empty()).collect();
    let recent: Vec<(usize, &str)> = filled.iter().rev().take(PROMPT_ROWS).rev().copied().collect();
    // What is above a CLI's word that it took an answer is history.
    let recent = match recent.iter().rposition(|(_, r)| MOVED_ON.is_match(r)) {
        Some(moved_on) => recent[moved_on + 1..].to_vec(),
        None => recent,
    };

    // A quota menu or a prompt waits for a key: it wins over everything else on screen.
    let found: Vec<(usize, PromptClass, Prompt)> = PROMPTS
        .iter()
        .filter_map(|pattern| {
            let last_line_only =
                matches!(pattern.id, "generic.yes_no" | "generic.continue") || pattern.id.starts_with("aider.");
            let candidates: &[(usize, &str)] =
                if last_line_only { &recent[recent.len().saturating_sub(1)..] } else { &recent };
            // The lowest such question: one further up is history.
            let &(at, _) = candidates.iter().rev().find(|(_, r)| pattern.question.is_match(r))?;
            Some((at, pattern.class, prompt_at(pattern, at, &rows, &recent, full, above, faces)))
        })
        .collect();
    if let Some(prompt) = one_dialog(found, &rows) {
        return Reading::Prompt(prompt);
    }

    if let Some(quota) = quota_line(&rows, &recent, now, local) {
        return quota;
    }
    // The provider's rate limit: the lowest such line, unless the agent went on below it.
    if let Some(&(row, line)) = recent.iter().rev().take(6).find(|(_, r)| RATE_LIMIT.is_match(r)) {
        let retry_in_s = rows[row..].iter().find_map(|r| RETRYING.captures(r)).and_then(|c| c[1].parse().ok());
        return Reading::RateLimited { excerpt: line.trim().to_owned(), retry_in_s, row };
    }

    // A numbered menu under a question the table does not know: someone must look.
    let menu = recent.iter().filter(|(_, r)| NUMBERED_MENU.is_match(r)).count() >= 2;
    if menu && let Some(&(at, _)) = recent.iter().rev().find(|(_, r)| QUESTION.is_match(r)) {
        let excerpt = rows[at.saturating_sub(4)..].join("\n").trim_end().to_owned();
        return Reading::Prompt(Prompt {
            class: PromptClass::Unclear,
            pattern: "generic.menu".into(),
            key: String::new(),
            excerpt,
            subject: Subject::Unseen,
            rows: at.saturating_sub(4)..rows.len(),
            at_bottom: true,
        });
    }

    if let Some(m) = recent.iter().rev().find_map(|(_, r)| BUSY.find(r)) {
        return Reading::Busy { marker: m.as_str().to_owned() };
    }
    Reading::Quiet
}

/// The prompt `pattern` recognised at row `at` of `rows` (the view), with what it is about read
/// from `full` and the rows `above` it.
fn prompt_at(
    pattern: &PromptPattern,
    at: usize,
    rows: &[&str],
    recent: &[(usize, &str)],
    full: &str,
    above: &str,
    faces: &[Face],
) -> Prompt {
    let below: Vec<&str> = rows[at..].to_vec();
    let key = match pattern.key {
        Some(k) => Some(k.to_owned()),
        None if pattern.class == PromptClass::Continuation => {
            let line = rows[at].to_ascii_lowercase();
            Some(
                if line.contains("press enter") {
                    "\r"
                } else if line.contains("y/n") {
                    "y\r"
                } else {
                    "continue\r"
                }
                .to_owned(),
            )
        }
        None if pattern.class == PromptClass::Unclear => None,
        None => below.iter().any(|r| NUMBERED_YES.is_match(r)).then(|| "1".to_owned()),
    };
    let start = at.saturating_sub(8).max(recent.first().map_or(0, |r| r.0));
    let excerpt = rows[start..].join("\n").trim_end().to_owned();
    let (class, key) = match key {
        Some(k) => (pattern.class, k),
        None => (PromptClass::Unclear, String::new()),
    };
    let context: Vec<&str> = above.split('\n').filter(|_| !above.is_empty()).chain(full.split('\n')).collect();
    let offset = if above.is_empty() { 0 } else { above.split('\n').count() };
    let drawn: Vec<Face> = std::iter::repeat_n(Face::Unknown, offset).chain(faces.iter().copied()).collect();
    let subject = match context.get(offset + at) {
        Some(row) if pattern.question.is_match(row) => subject::of(pattern.id, &context, &drawn, offset + at),
        _ => Subject::Unseen,
    };
    // The block ends after the question's menu: the lowest numbered rows below it (Codex
    // draws the command between the question and its menu; rows the model wrote there that
    // look like a menu are above the real one).
    let end = (at + 1..rows.len()).rev().find(|&i| MENU_ROW.is_match(rows[i])).map_or(at + 1, |last| last + 1);
    let below = rows[end..].iter().filter(|r| !r.trim().is_empty()).count();
    Prompt { class, pattern: pattern.id.to_owned(), key, excerpt, subject, rows: start..end, at_bottom: below <= 2 }
}

/// Whether answering `class` lets something happen (a command, an edit, a fetch), rather than
/// settling how the session goes on.
fn consequential(class: PromptClass) -> bool {
    matches!(class, PromptClass::Command | PromptClass::Edit | PromptClass::Fetch | PromptClass::Unclear)
}

/// The one prompt to decide on among those `found` (each with its question's row and its
/// pattern's class, in the table's order). Two dialogs drawn at once (Gemini CLI draws its
/// folder trust dialog under the first tool's confirmation) share the keyboard: a key meant
/// for one may reach the other. So the one that lets something happen is decided on — an
/// Enter that reaches the trust dialog instead trusts the folder, which would have been
/// answered anyway — and when two such dialogs show, or their keys differ, nobody is
/// answered: a person decides.
fn one_dialog(found: Vec<(usize, PromptClass, Prompt)>, rows: &[&str]) -> Option<Prompt> {
    let mut found = found.into_iter();
    let (at, class, first) = found.next()?;
    // Patterns of one class read one dialog (Gemini's trust menu and its question).
    let mut others = found.filter(|(row, c, _)| *row != at && *c != class);
    let Some((other_at, _, mut other)) = others.find(|(_, c, _)| consequential(*c)) else { return Some(first) };
    // A dialog above another ends with its own menu, not the lower one's.
    if other_at < at
        && let Some(last) = (other_at + 1..at).rev().find(|&i| MENU_ROW.is_match(&unframed(rows[i])))
    {
        other.rows.end = other.rows.end.min(last + 1);
    }
    if consequential(class) || other.key != first.key || other.class == PromptClass::Unclear {
        let rows = first.rows.start.min(other.rows.start)..first.rows.end.max(other.rows.end);
        return Some(Prompt { class: PromptClass::Unclear, key: String::new(), rows, ..other });
    }
    Some(other)
}

/// `row` without the frame a CLI draws its dialog in (Gemini CLI: `│ … │`): each bar replaced
/// by a space, so the row keeps its columns. A frame inside it (a box in the dialog) is kept.
fn unframed(row: &str) -> std::borrow::Cow<'_, str> {
    let body = row.trim_end();
    let lead = body.len() - body.trim_start().len();
    match body[lead..].strip_prefix('│').and_then(|r| r.strip_suffix('│')) {
        Some(inner) => format!("{} {inner} ", &body[..lead]).into(),
        None => row.into(),
    }
}

/// Every row of `screen` [`unframed`].
fn unframe(screen: &str) -> String {
    screen.split('\n').map(unframed).collect::<Vec<_>>().join("\n")
}

/// The lowest quota line among `recent` rows, with its reset time.
fn quota_line(rows: &[&str], recent: &[(usize, &str)], now: Timestamp, local: &TimeZone) -> Option<Reading> {
    for &(at, row) in recent.iter().rev() {
        if NOT_QUOTA.is_match(row) {
            continue;
        }
        for q in QUOTAS.iter() {
            if let Some(m) = q.line.find(row) {
                let mut source = m.as_str().to_owned();
                if let Some(r) = rows.iter().find_map(|r| GEMINI_RESET.find(r)) {
                    source.push(' ');
                    source.push_str(r.as_str());
                }
                let resets_at = quota::reset_time(&source, now, local);
                return Some(Reading::Quota {
                    pattern: q.id.to_owned(),
                    excerpt: row.trim().to_owned(),
                    resets_at,
                    row: at,
                });
            }
        }
    }
    None
}

/// The quota line on a screen that shows a quota menu (Claude's `/rate-limit-options` is drawn
/// under the limit line that says when it resets).
pub fn quota_of(screen: &str, now: Timestamp, local: &TimeZone) -> Option<Reading> {
    let rows: Vec<&str> = screen.split('\n').collect();
    let filled: Vec<(usize, &str)> = rows.iter().copied().enumerate().filter(|(_, r)| !r.trim().is_empty()).collect();
    quota_line(&rows, &filled, now, local)
}

/// A hash of the screen with the rows that change by themselves (spinners, elapsed times,
/// clocks) blanked: equal hashes mean nothing happened.
pub fn masked_hash(screen: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for row in screen.lines() {
        if MASK.is_match(row) { "" } else { row.trim_end() }.hash(&mut h);
    }
    h.finish()
}

/// A hash of `text` that stays the same across processes and versions.
pub fn text_hash(text: &str) -> u64 {
    loopwright_engine::hash::fnv1a(text.as_bytes())
}

/// The session id an exit banner gives (`claude --resume ID`, `codex resume ID`,
/// `gemini --resume ID`), the last one on screen.
pub fn session_id(screen: &str) -> Option<String> {
    SESSION_ID.captures_iter(screen).last().map(|c| c[1].to_owned())
}
