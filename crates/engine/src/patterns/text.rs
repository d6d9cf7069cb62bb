//! The text patterns are matched on: lines cut to length, colours removed, lines that say
//! little (warnings, skipped tests) told apart.

use regex::Regex;

pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// How much a signal counts on a warning line or a skipped test's line, beside others.
pub(super) const MUTED: f64 = 0.3;

/// A count of no errors (`0 errors`, `0 error(s)`, `no errors`): a summary of warnings.
static NO_ERRORS: std::sync::LazyLock<Regex> =
    std::sync::LazyLock::new(|| Regex::new(r"\b(0|no|zero) errors?\b|\b0 error\(s\)").expect("valid regex"));

/// A warning (that does not also say error, or counts no errors: `✖ 3 problems (0 errors, 3
/// warnings)`), or a test skipped or expected to fail: the line reports something other than
/// why the command failed.
pub(super) fn is_muted(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    (lower.contains("warning") && (!lower.contains("error") || NO_ERRORS.is_match(&lower)))
        || line.contains(" SKIPPED")
        || line.contains(" XFAIL")
        || lower.contains("# skip")
}

pub(super) fn truncate(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Removes ANSI escape sequences (colours, cursor moves) from tool output.
pub fn strip_ansi(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\x1b') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // CSI: parameters, then one final byte in @..~
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some('(' | ')') => {
                chars.next();
                chars.next();
            }
            Some(']') => {
                // OSC: up to BEL or ESC \
                for c in chars.by_ref() {
                    if c == '\x07' || c == '\\' {
                        break;
                    }
                }
            }
            _ => {
                chars.next();
            }
        }
    }
    std::borrow::Cow::Owned(out)
}
