//! Text from agents and models — what they printed, their screens, their signals — reaches a
//! person's terminal through `status`, `logs`, `auto status` and `auto log`. An escape
//! sequence in it could set the clipboard (OSC 52), retitle the window, or move the cursor over
//! what loopwright printed; so everything such text reaches goes through [`safe`] before it is
//! printed: escape sequences removed (parsed by `strip-ansi-escapes`), then every other control
//! character but newline and tab. JSON output needs nothing: JSON escapes control characters.
//! In a GitHub Actions job the log is read for workflow commands too: there no line of such
//! text may start with `::` (see `loopwright_app::report::actions::inert`).

use std::borrow::Cow;

/// `text` with nothing a terminal (or, in a GitHub Actions job, its runner) would act on.
pub fn safe(text: &str) -> Cow<'_, str> {
    static ACTIONS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let text = without_controls(text);
    if !*ACTIONS.get_or_init(loopwright_app::report::actions::enabled) {
        return text;
    }
    match loopwright_app::report::actions::inert(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(quoted) => Cow::Owned(quoted),
    }
}

/// `text` without escape sequences and control characters but newline and tab.
fn without_controls(text: &str) -> Cow<'_, str> {
    let plain = |c: char| !c.is_control() || c == '\n' || c == '\t';
    if text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    let stripped = strip_ansi_escapes::strip_str(text);
    Cow::Owned(stripped.chars().filter(|&c| plain(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_are_removed_and_text_kept() {
        let cases = [
            ("plain\ttext\n", "plain\ttext\n"),
            ("\x1b[31mred\x1b[0m", "red"),
            ("copy\x1b]52;c;cm0gLXJmIH4=\x07 this", "copy this"),
            ("title\x1b]0;owned\x1b\\ here", "title here"),
            ("bell\x07 back\x08space\r", "bell backspace"),
            ("c1 \u{9b}31m csi", "c1 31m csi"),
            ("ünïcödé ✓", "ünïcödé ✓"),
        ];
        for (given, expected) in cases {
            assert_eq!(safe(given), expected, "{given:?}");
        }
    }
}
