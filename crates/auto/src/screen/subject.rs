//! What a command or edit prompt is about, read whole off the rows around its question — or
//! [`Subject::Unseen`] when the layout is not the one this CLI draws, the block is cut off at
//! the top of what the terminal kept, or a row could belong to something else. Only the CLIs
//! whose layouts are known are read (Claude Code, Codex, Gemini CLI, aider); for the others a command or
//! an edit is left to a person.

use std::sync::LazyLock;

use regex::Regex;

use super::{Face, NUMBERED_MENU, Subject, re};

/// How far above its question a prompt's block may start.
const MAX_BLOCK_ROWS: usize = 400;

static CLAUDE_EDIT_HEADER: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(?:Create|Edit|Overwrite|Update|Delete|Write) file\s*$"));
static CLAUDE_EDIT_QUESTION: LazyLock<Regex> =
    LazyLock::new(|| re(r"Do you want to (?:create|make this edit to|overwrite|delete) (.+)\?\s*$"));
static CLAUDE_FETCH_URL: LazyLock<Regex> = LazyLock::new(|| re(r#"^\s+url: "(https?://[^"\s]+)""#));
static CLAUDE_FETCH_HOST: LazyLock<Regex> = LazyLock::new(|| re(r"^\s+Claude wants to fetch content from (\S+)\s*$"));
static CODEX_FILE: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(\S+) \(\+\d+ -\d+\)\s*$"));
static CODEX_DESTINATION: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*Destination: (\S+)\s*$"));
static GEMINI_WRITE: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*\? WriteFile  Writing to (\S+)\s*$"));
static GEMINI_EDIT: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*\? Edit  ([^\s:]+): "));
/// A row that ends a prompt's block: a frame's rule, a question, a menu.
static BOUNDARY: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*[─━]{3,}|Do you want to |Would you like to |\(Y\)es/\(N\)o|^\s*(?:❯|>|›)?\s*1\.\s"));

/// The subject of the prompt recognised by pattern `id` whose question is row `at` of `rows`
/// (`faces`: how each row is drawn, where known).
pub(super) fn of(id: &str, rows: &[&str], faces: &[Face], at: usize) -> Subject {
    let read = match id {
        "claude.command@2.1" => claude_command(rows, faces, at),
        "claude.edit@2.1" => claude_edit(rows, at),
        "claude.fetch@2.1" => claude_fetch(rows, at),
        "codex.command@0.5" => codex_command(rows, at),
        "codex.edit@0.5" => codex_edit(rows, at),
        "gemini.command@0.9" => gemini_command(rows, at),
        "gemini.edit@0.9" => gemini_edit(rows, at),
        "aider.command@0.8" => block_above(rows, at).map(|lines| Subject::Command(lines.join("\n"))),
        "aider.create@0.8" => match block_above(rows, at).as_deref() {
            Some([file]) => Some(Subject::Files(vec![file.clone()])),
            _ => None,
        },
        _ => None,
    };
    read.unwrap_or(Subject::Unseen)
}

/// Claude Code's Bash prompt: a ` Bash command` header, a blank row, the command's rows (and
/// the description the model gave, on the last row, drawn in grey), then, before the question,
/// only Claude Code's own notes drawn at the dialog's edge like the header (2.1.197's `This
/// command requires approval`). Anything else between the command and the question — a
/// second paragraph indented like the command — leaves the command unseen.
fn claude_command(rows: &[&str], faces: &[Face], at: usize) -> Option<Subject> {
    let header = header_above(rows, at, |r| r.trim() == "Bash command" || r.trim().starts_with("Bash command ("))?;
    let blank = |i: usize| rows[i].trim().is_empty();
    let indent = |i: usize| rows[i].len() - rows[i].trim_start_matches(' ').len();
    let edge = indent(header);
    let start = (header + 1..at).find(|&i| !blank(i))?;
    let end = (start..at).find(|&i| blank(i)).unwrap_or(at);
    let filled: Vec<usize> = (start..end).collect();
    if filled.iter().any(|&i| indent(i) <= edge) || (end..at).any(|i| !blank(i) && indent(i) > edge) {
        return None;
    }
    let end = match filled.as_slice() {
        [.., before, last] if is_description(rows, faces, &filled[..filled.len() - 1], *before, *last) => *last,
        _ => end,
    };
    let lines = dedent(&rows[start..end]);
    (!lines.is_empty()).then(|| Subject::Command(lines.join("\n")))
}

/// Claude Code's edit prompt: a `Create file` (`Edit file`, …) header, the path on the next
/// row by itself, the change, the question naming the file's name. The path is taken only
/// when that name is its last part (a path wrapped over two rows is not).
fn claude_edit(rows: &[&str], at: usize) -> Option<Subject> {
    let named = CLAUDE_EDIT_QUESTION.captures(rows[at])?.get(1)?.as_str().trim().to_owned();
    let header = header_above(rows, at, |r| CLAUDE_EDIT_HEADER.is_match(r))?;
    let path_row = (header + 1..at).find(|&i| !rows[i].trim().is_empty())?;
    let path = rows[path_row].trim();
    let next = rows.get(path_row + 1).map_or("", |r| r.trim());
    let ends = next.is_empty() || next.starts_with('╌') || next.starts_with('─') || path_row + 1 == at;
    let last = path.rsplit('/').next().unwrap_or(path);
    (ends && last == named && !path.contains(char::is_whitespace)).then(|| Subject::Files(vec![path.to_owned()]))
}

/// Codex's approval overlay: the question, then `$ command` (its rows), then the menu.
///
/// Codex 0.171 draws `Environment: …` and `Reason: …` (the model's justification, perhaps
/// over several rows) between the question and the command: they are passed over only when
/// the block holds exactly one `$ ` row — a justification that draws one of its own leaves the
/// command unseen.
fn codex_command(rows: &[&str], at: usize) -> Option<Subject> {
    let lines = dedent(&rows[at + 1..menu_below(rows, at)?]);
    let [start] = lines.iter().enumerate().filter(|(_, l)| l.starts_with("$ ")).map(|(i, _)| i).collect::<Vec<_>>()[..]
    else {
        return None;
    };
    let notes = &lines[..start];
    let known = notes.first().is_none_or(|l| l.starts_with("Environment: ") || l.starts_with("Reason: "));
    if !known {
        return None;
    }
    let mut command = vec![lines[start].strip_prefix("$ ")?.to_owned()];
    let rest: Vec<String> = lines[start + 1..].iter().filter(|l| !l.trim().is_empty()).cloned().collect();
    command.extend(rest);
    Some(Subject::Command(command.join("\n")))
}

/// Codex's edit overlay: the question, then one `path (+A -D)` row per file, then the menu —
/// or, from 0.171, one `Description: …` row (Codex's own words, such as `command failed; retry
/// without sandbox?`) and then one `Destination: PATH` row per file. Any other row, a second
/// description row or a path wrapped onto the next row leaves the files unseen.
fn codex_edit(rows: &[&str], at: usize) -> Option<Subject> {
    let filled: Vec<&str> =
        rows[at + 1..menu_below(rows, at)?].iter().copied().filter(|r| !r.trim().is_empty()).collect();
    let files: Option<Vec<String>> = match filled.split_first() {
        Some((first, destinations)) if first.trim_start().starts_with("Description: ") => destinations
            .iter()
            .map(|row| CODEX_DESTINATION.captures(row).and_then(|c| c.get(1)).map(|m| m.as_str().to_owned()))
            .collect(),
        _ => filled
            .iter()
            .map(|row| CODEX_FILE.captures(row).and_then(|c| c.get(1)).map(|m| m.as_str().to_owned()))
            .collect(),
    };
    files.filter(|f| !f.is_empty()).map(Subject::Files)
}

/// Gemini CLI's confirmation (its outer frame already taken off): a header row `? Tool  …`
/// (perhaps over several rows), a box holding the command or the change, then the question
/// right under the box. Returns the header's rows and the box's inner rows — each framed, so
/// that the box's top is the first row above its bottom that is not: text the model gave
/// that draws a box of its own stays inside the real one.
fn gemini_block<'a>(rows: &[&'a str], at: usize) -> Option<(Vec<&'a str>, Vec<String>)> {
    let starts = |i: usize, c: char| rows[i].trim_start().starts_with(c);
    let bottom = at.checked_sub(1).filter(|&b| starts(b, '╰'))?;
    let lowest = at.saturating_sub(MAX_BLOCK_ROWS);
    let top = (lowest..bottom).rev().find(|&i| !starts(i, '│'))?;
    if !starts(top, '╭') {
        return None;
    }
    let inner: Vec<String> = rows[top + 1..bottom].iter().map(|r| super::unframed(r).into_owned()).collect();
    let outer = (lowest..top).rev().find(|&i| starts(i, '╭') || starts(i, '╰') || rows[i].trim().is_empty())?;
    let header: Vec<&str> = rows[outer + 1..top].to_vec();
    let first = header.first()?;
    first.trim_start().starts_with("? ").then_some((header, inner))
}

/// Gemini CLI's shell confirmation: `? Shell  COMMAND` over the box that holds the command's
/// rows; the command is what the box holds.
fn gemini_command(rows: &[&str], at: usize) -> Option<Subject> {
    let (header, inner) = gemini_block(rows, at)?;
    if !header[0].trim_start().starts_with("? Shell ") {
        return None;
    }
    let inner: Vec<&str> = inner.iter().map(String::as_str).collect();
    let lines = dedent(&inner);
    (!lines.is_empty()).then(|| Subject::Command(lines.join("\n")))
}

/// Gemini CLI's edit confirmation: `? WriteFile  Writing to PATH` (one row) or `? Edit  PATH:
/// OLD => NEW`, the path relative to the workspace. A path Gemini shortened (`…/.../…`), a
/// `WriteFile` header over several rows or an `Edit` path holding a colon is not read.
fn gemini_edit(rows: &[&str], at: usize) -> Option<Subject> {
    let (header, _) = gemini_block(rows, at)?;
    let path = match (GEMINI_WRITE.captures(header[0]), GEMINI_EDIT.captures(header[0])) {
        (Some(c), _) if header.len() == 1 => c.get(1)?.as_str(),
        (_, Some(c)) => c.get(1)?.as_str(),
        _ => return None,
    };
    (!path.contains("...")).then(|| Subject::Files(vec![path.to_owned()]))
}

/// The row of the header above `at` that `is_header` recognises, with nothing between that
/// belongs to another block.
fn header_above(rows: &[&str], at: usize, is_header: impl Fn(&str) -> bool) -> Option<usize> {
    let lowest = at.saturating_sub(MAX_BLOCK_ROWS);
    for i in (lowest..at).rev() {
        if is_header(rows[i]) {
            return Some(i);
        }
        if BOUNDARY.is_match(rows[i]) {
            return None;
        }
    }
    None
}

/// Claude Code's WebFetch prompt: a ` Fetch` header, the tool's input (`url: "…", prompt:
/// "…"`, the model's words, perhaps over several rows), then Claude Code's own `Claude wants
/// to fetch content from HOST` as the last row before the question. The address is taken only
/// when the first row starts with it and its host is the one Claude Code names.
fn claude_fetch(rows: &[&str], at: usize) -> Option<Subject> {
    let header = header_above(rows, at, |r| r.trim() == "Fetch")?;
    let filled: Vec<usize> = (header + 1..at).filter(|&i| !rows[i].trim().is_empty()).collect();
    let (&first, &last) = (filled.first()?, filled.last()?);
    let url = CLAUDE_FETCH_URL.captures(rows[first])?.get(1)?.as_str();
    let named = CLAUDE_FETCH_HOST.captures(rows[last])?.get(1)?.as_str();
    let host = crate::policy::url_host(url)?;
    (first != last && host.eq_ignore_ascii_case(named)).then(|| Subject::Url(url.to_owned()))
}

/// The first menu row below the question at `at`.
fn menu_below(rows: &[&str], at: usize) -> Option<usize> {
    (at + 1..rows.len().min(at + MAX_BLOCK_ROWS)).find(|&i| NUMBERED_MENU.is_match(rows[i]))
}

/// aider prints what it asks about on the rows right above its question, after a blank row.
fn block_above(rows: &[&str], at: usize) -> Option<Vec<String>> {
    let top = (at.saturating_sub(MAX_BLOCK_ROWS)..at).rev().find(|&i| rows[i].trim().is_empty())?;
    let lines = dedent(&rows[top + 1..at]);
    (!lines.is_empty() && !lines.iter().any(|l| BOUNDARY.is_match(l))).then_some(lines)
}

/// The rows with blank rows at either end dropped and the indentation they share removed.
fn dedent(rows: &[&str]) -> Vec<String> {
    let first = rows.iter().position(|r| !r.trim().is_empty());
    let last = rows.iter().rposition(|r| !r.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else { return Vec::new() };
    let block = &rows[first..=last];
    let indent = block
        .iter()
        .filter(|r| !r.trim().is_empty())
        .map(|r| r.len() - r.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    block.iter().map(|r| r.get(indent..).unwrap_or("").trim_end().to_owned()).collect()
}

/// Whether row `last`, the last of a Bash prompt's block, is the description Claude Code draws
/// under the command rather than part of the command. First by how it is drawn: in a colour or
/// intensity of its own (Claude Code's grey) that none of the command's rows (`command`) is
/// drawn in — a command's tail wrapped onto the last row is drawn like the rest of it, and a
/// screen whose drawing is not known has no description. Then, as well, only when it could run
/// nothing: the row before (`before`) does not continue onto it, it has no shell syntax, and
/// its first word is a capitalised plain word that names no program on `PATH` (so a command
/// that paints its own tail grey is still read whole). Anything else counts as command — a
/// line too many makes the command refused, never answered.
fn is_description(rows: &[&str], faces: &[Face], command: &[usize], before: usize, last: usize) -> bool {
    let face = |i: usize| faces.get(i).copied().unwrap_or_default();
    if !face(last).muted() || command.iter().any(|&i| face(i) == face(last)) {
        return false;
    }
    let (line, before) = (rows[last], rows[before].trim_end());
    if before.ends_with('\\') || before.ends_with("&&") || before.ends_with('|') {
        return false;
    }
    if line.chars().any(|c| "`$;&|<>()\\=\"'{}".contains(c)) {
        return false;
    }
    let mut words = line.split_whitespace();
    let Some(first) = words.next() else { return false };
    let capitalised = first.chars().next().is_some_and(|c| c.is_ascii_uppercase());
    capitalised && first.chars().all(|c| c.is_ascii_alphabetic()) && words.next().is_some() && !on_path(first)
}

/// A program of that name on `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else { return false };
    std::env::split_paths(&path)
        .any(|dir| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::screen::Colour;

    const GREY: Face = Face::Uniform { colour: Colour::Indexed(246), dim: false };
    const PLAIN: Face = Face::Uniform { colour: Colour::Default, dim: false };

    /// A screen given as text, a row starting with `§` drawn in Claude Code's grey (the `§`
    /// not drawn), the others in the terminal's default colour.
    fn drawn(screen: &str) -> (Vec<&str>, Vec<Face>) {
        screen
            .split('\n')
            .map(|r| match r.strip_prefix('§') {
                Some(grey) => (grey, GREY),
                None if r.trim().is_empty() => (r, Face::Unknown),
                None => (r, PLAIN),
            })
            .unzip()
    }

    fn subject(id: &str, screen: &str, question: &str) -> Subject {
        let (rows, faces) = drawn(screen);
        let at = rows.iter().position(|r| r.contains(question)).expect("the question");
        of(id, &rows, &faces, at)
    }

    #[test]
    fn claude_bash_blocks() {
        let prompt = |body: &str| format!(" Bash command\n\n{body}\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. No");
        let cases: &[(&str, Subject)] = &[
            ("   cargo build\n§   Build the project", Subject::Command("cargo build".into())),
            // Claude Code 2.1.197's note under the command, at the dialog's edge.
            (
                "   cargo test\n§   Run the tests\n\n This command requires approval",
                Subject::Command("cargo test".into()),
            ),
            // A second paragraph indented like the command: not a note, the command unseen.
            ("   ls\n\n   rm -rf ~/", Subject::Unseen),
            ("   cargo test\n§   Run the tests\n\n   rm -rf ~/\n\n This command requires approval", Subject::Unseen),
            ("   cargo build", Subject::Command("cargo build".into())),
            // The same words drawn like the command: its wrapped tail, not a description.
            ("   cargo build\n   Build the project", Subject::Command("cargo build\nBuild the project".into())),
            (
                "   sort -o /outside/file notes.txt other.txt something\n   Sorted",
                Subject::Command("sort -o /outside/file notes.txt other.txt something\nSorted".into()),
            ),
            ("   ls\n§   rm -rf ~/", Subject::Command("ls\nrm -rf ~/".into())),
            ("   cargo test && \\\n§     Publish it", Subject::Command("cargo test && \\\n  Publish it".into())),
            ("   cargo test\n§   Cleanup = yes", Subject::Command("cargo test\nCleanup = yes".into())),
            // A grey row that is the only row, or one the command's rows are drawn in too.
            ("§   Build the project", Subject::Command("Build the project".into())),
            ("§   cargo build\n§   Build the project", Subject::Command("cargo build\nBuild the project".into())),
        ];
        for (body, expected) in cases {
            assert_eq!(&subject("claude.command@2.1", &prompt(body), "Do you want to proceed?"), expected, "{body}");
        }
        // A screen whose drawing is not known: every row is the command's.
        let text = prompt("   cargo build\n   Build the project");
        let rows: Vec<&str> = text.split('\n').collect();
        let at = rows.iter().position(|r| r.contains("proceed")).expect("question");
        assert_eq!(of("claude.command@2.1", &rows, &[], at), Subject::Command("cargo build\nBuild the project".into()));
        // The header scrolled away: an older prompt's rows above are not taken for it.
        let cut =
            "   rm -rf ~/\n Do you want to proceed?\n ❯ 1. Yes\n   echo ok\n§   Print it\n\n Do you want to proceed?";
        let (rows, faces) = drawn(cut);
        assert_eq!(of("claude.command@2.1", &rows, &faces, rows.len() - 1), Subject::Unseen);
    }

    #[test]
    fn claude_edit_paths() {
        let screen = " Create file\n src/plan.md\n╌╌╌╌\n  1 hello\n╌╌╌╌\n Do you want to create plan.md?\n ❯ 1. Yes";
        assert_eq!(subject("claude.edit@2.1", screen, "Do you want"), Subject::Files(vec!["src/plan.md".into()]));
        let wrapped = " Edit file\n /w/sub/\n ../../etc/x\n Do you want to make this edit to x?\n ❯ 1. Yes";
        assert_eq!(subject("claude.edit@2.1", wrapped, "Do you want"), Subject::Unseen);
        let bare = "● Write(plan.md)\n Do you want to create plan.md?\n ❯ 1. Yes";
        assert_eq!(subject("claude.edit@2.1", bare, "Do you want"), Subject::Unseen);
    }

    #[test]
    fn codex_and_aider() {
        let codex = "  Would you like to run the following command?\n\n  $ cargo test\n\n› 1. Yes, proceed (y)";
        assert_eq!(subject("codex.command@0.5", codex, "Would you"), Subject::Command("cargo test".into()));
        let edits = "  Would you like to make the following edits?\n\n  src/main.rs (+2 -1)\n\n› 1. Yes, proceed (y)";
        assert_eq!(subject("codex.edit@0.5", edits, "Would you"), Subject::Files(vec!["src/main.rs".into()]));
        let aider = "\ncargo test     \nRun shell command? (Y)es/(N)o/(D)on't ask again [Yes]: ";
        assert_eq!(subject("aider.command@0.8", aider, "Run shell"), Subject::Command("cargo test".into()));
        let gemini = " Allow execution of [cargo test]?\n ● 1. Allow once";
        assert_eq!(subject("gemini.command@0.9", gemini, "Allow"), Subject::Unseen);
    }
}
