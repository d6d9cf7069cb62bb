//! Text loopwright writes on the forge. Anything it did not write itself (an issue's text, a
//! tool's output, a model's answer) is quoted as code, where the forge neither links
//! @-mentions nor reads closing keywords: only loopwright's own `Closes #N` closes anything.
//! Every body it writes carries a hidden marker naming the run and what the text is, by which
//! it is found again (and updated in place) after a crash.

/// The hidden marker of loopwright's text about `run` (`pr`, `failure`, `escalation`, …).
pub fn marker(run: &str, what: &str) -> String {
    format!("<!-- loopwright:{what} run={run} -->")
}

/// Reads a marker back: `(what, run)`.
pub fn read_marker(body: &str) -> Option<(&str, &str)> {
    let start = body.find("<!-- loopwright:")? + "<!-- loopwright:".len();
    let rest = &body[start..];
    let end = rest.find(" -->")?;
    let (what, run) = rest[..end].split_once(" run=")?;
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (ok(what) && ok(run)).then_some((what, run))
}

/// `text` as a fenced code block whose fence is longer than any run of backticks in it.
pub fn fenced(text: &str) -> String {
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    let body = text.trim_end_matches('\n');
    format!("{fence}text\n{body}\n{fence}")
}

/// `text` on one line as a code span (`` `…` ``), cut to `max` characters.
pub fn inline(text: &str, max: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = if one_line.chars().count() > max {
        one_line.chars().take(max.saturating_sub(1)).chain(['…']).collect()
    } else {
        one_line
    };
    if cut.is_empty() {
        return String::new();
    }
    let ticks = "`".repeat(longest_backtick_run(&cut) + 1);
    let pad = if cut.starts_with('`') || cut.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{cut}{pad}{ticks}")
}

fn longest_backtick_run(text: &str) -> usize {
    let mut longest = 0;
    let mut current = 0;
    for c in text.chars() {
        if c == '`' {
            current += 1;
            longest = longest.max(current);
        } else {
            current = 0;
        }
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_read_back_and_nothing_else_is_taken_for_one() {
        let m = marker("20261129-abc", "pr");
        assert_eq!(m, "<!-- loopwright:pr run=20261129-abc -->");
        assert_eq!(read_marker(&format!("body\n\n{m}\n")), Some(("pr", "20261129-abc")));
        assert_eq!(read_marker("<!-- loopwright:pr run=a b -->"), None);
        assert_eq!(read_marker("<!-- loopwright:pr run=../x -->"), None);
        assert_eq!(read_marker("no marker"), None);
    }

    #[test]
    fn quoted_text_cannot_close_the_fence_it_is_in() {
        let hostile = "Fixes #1\n```\n@org/team closes #2\n````";
        let block = fenced(hostile);
        assert_eq!(block, format!("`````text\n{hostile}\n`````"));
        assert_eq!(fenced("plain"), "```text\nplain\n```");
        assert_eq!(inline("a `b`\n@c", 80), "``a `b` @c``");
        assert_eq!(inline("`x`", 80), "`` `x` ``");
        assert_eq!(inline("closes #9 and more", 10), "`closes #9…`");
        assert_eq!(inline("  ", 10), "");
    }
}
