//! A run's "why" as Markdown, for a CI job's summary page or a file a pipeline publishes: the
//! run's status and headline (the failing check, its key lines, the category, what was tried,
//! what happens next), a table of its stages, each failed check with its key lines, and what
//! the agents spent. Text loopwright did not write (a task, a tool's output) is quoted as code.

use loopwright_forge::text::{fenced, inline};

use super::{Outcome, Summary};
use crate::ops::why::Headline;

/// The Markdown of `summary`.
pub fn render(s: &Summary) -> String {
    let mut b = String::new();
    let mark = match s.status {
        loopwright_engine::RunStatus::Success => "✅",
        loopwright_engine::RunStatus::Failed => "❌",
        loopwright_engine::RunStatus::Waiting => "⏸️",
        _ => "⏹️",
    };
    b.push_str(&format!(
        "## {mark} loopwright: {} {}\n\nRun `{}` · {} · {:.1} s\n\n",
        plain(&s.pipeline),
        s.status.as_str(),
        s.run_id,
        inline(&s.task, 200),
        s.duration_ms as f64 / 1000.0
    ));
    if let Some(h) = &s.headline {
        headline(&mut b, h);
    }
    b.push_str("| Stage | Result | Attempts | Time |\n|---|---|---|---|\n");
    for st in &s.stages {
        let result = match &st.note {
            Some(note) => format!("{} ({})", st.outcome.as_str(), plain(note)),
            None => st.outcome.as_str().to_owned(),
        };
        b.push_str(&format!(
            "| `{}` | {result} | {} | {:.1} s |\n",
            st.id,
            st.attempts,
            st.duration_ms as f64 / 1000.0
        ));
    }
    // A failed stage the run's headline is not about has its own.
    for st in s.stages.iter().filter(|st| st.outcome == Outcome::Failed) {
        if let Some(h) = st.headline.as_ref().filter(|h| s.headline.as_ref().is_none_or(|r| r.stage != h.stage)) {
            b.push('\n');
            headline(&mut b, h);
        }
    }
    let checks: Vec<_> = s.stages.iter().flat_map(|st| st.checks.iter().map(move |c| (st, c))).collect();
    if !checks.is_empty() {
        b.push_str("\n### Checks\n\n");
        for (st, c) in checks {
            let before = if c.failed_before.is_empty() {
                String::new()
            } else {
                let attempts: Vec<String> = c.failed_before.iter().map(|(a, _, _)| a.to_string()).collect();
                format!(" (failed in attempt {})", attempts.join(", "))
            };
            let result = if c.passed { "passed" } else { "failed" };
            b.push_str(&format!("- {} in `{}`: {result}{before}\n", inline(&c.name, 120), st.id));
        }
    }
    b.push_str(&format!(
        "\n**Spent:** {} tokens{}, ${:.4}\n",
        s.tokens,
        if s.estimated { " (estimated)" } else { "" },
        s.cost_usd
    ));
    b
}

/// A headline: its title, the failing check, key lines, category, what was tried, what next.
fn headline(b: &mut String, h: &Headline) {
    b.push_str(&format!("**{}**\n\n", plain(&h.title)));
    if let Some(check) = &h.check {
        b.push_str(&format!("Failing check: {}\n\n", inline(check, 200)));
    }
    if !h.lines.is_empty() {
        b.push_str(&fenced(&h.lines.join("\n")));
        b.push_str("\n\n");
    }
    if let Some(category) = &h.category {
        b.push_str(&format!("Category: {}\n\n", plain(category)));
    }
    for t in &h.tried {
        b.push_str(&format!("- {}\n", plain(t)));
    }
    if !h.tried.is_empty() {
        b.push('\n');
    }
    b.push_str(&format!("{}\n\n", plain(&h.next)));
}

/// `text` on one line, with what Markdown or HTML would read as markup escaped: loopwright's
/// own sentences hold names and messages of others (a check's name, an agent's error).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in loopwright_engine::patterns::strip_ansi(text).chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '|' | '!' | '~' | '&' | '@' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn markup_in_others_words_is_escaped() {
        assert_eq!(plain("a <img src=x> *b* @team [l](u)\nc"), "a \\<img src=x\\> \\*b\\* \\@team \\[l\\](u) c");
    }
}
