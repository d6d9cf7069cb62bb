//! Secrets stay out of loopwright's files: the values of secret-looking environment variables
//! (API keys, tokens, passwords) are replaced by `[REDACTED:NAME]` in everything a stage's
//! processes print and in every prompt written, before any of it reaches the journal, the run
//! files or the logs. The processes themselves still get the environment: an agent needs its
//! key to call its model.

use std::borrow::Cow;

/// Shortest value treated as a secret (shorter ones would redact ordinary text).
const MIN_LEN: usize = 8;

/// True for the names of variables that hold secrets.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["_API_KEY", "_APIKEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY", "_PRIVATE_KEY"]
        .iter()
        .any(|suffix| upper.ends_with(suffix))
        || matches!(upper.as_str(), "API_KEY" | "TOKEN" | "PASSWORD" | "SECRET")
        || upper.contains("SECRET")
}

/// Replaces known secret values in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (text to find, replacement), longest text first: each secret's value, its JSON-escaped
    /// form, and the stable middle of its base64 encodings (standard and URL-safe, at each of
    /// the three alignments it can have inside a longer encoded text).
    patterns: Vec<(String, String)>,
    /// (value, name) of each secret, for a value cut at the output cap.
    secrets: Vec<(String, String)>,
}

/// The line the output cap puts before what it kept (see `process::read_capped`).
pub const CUT_MARKER_END: &str = " bytes of earlier output omitted ...]\n";

/// Shortest end of a secret that is redacted where the output cap cut the text.
const MIN_CUT: usize = 3;

impl Redactor {
    /// The secrets of this process's environment, plus the variables named in `extra` (an
    /// agent's `api_key_env`).
    pub fn from_env(extra: &[String]) -> Self {
        let vars = std::env::vars().filter(|(k, _)| is_secret_name(k) || extra.contains(k));
        Self::new(vars)
    }

    /// A redactor of the given (name, value) pairs; values shorter than 8 characters are left
    /// alone (they would redact ordinary words).
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let mut secrets: Vec<(String, String)> =
            vars.into_iter().filter(|(_, v)| v.len() >= MIN_LEN).map(|(k, v)| (v, k)).collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        let mut patterns = Vec::new();
        for (value, name) in &secrets {
            patterns.push((value.clone(), format!("[REDACTED:{name}]")));
            let escaped = serde_json::to_string(value).unwrap_or_default();
            let escaped = escaped.trim_matches('"');
            if escaped != value {
                patterns.push((escaped.to_owned(), format!("[REDACTED:{name}]")));
            }
            // In base64 each 3 bytes become 4 characters, so the secret's bytes encode the same
            // way wherever they start modulo 3; the characters that mix in a neighbour's bits
            // (at most two at each end) are left out.
            for shift in 0..3usize {
                let mut bytes = vec![0u8; shift];
                bytes.extend_from_slice(value.as_bytes());
                let first = (8 * shift).div_ceil(6);
                let end = 8 * (shift + value.len()) / 6;
                for engine in [&STANDARD, &URL_SAFE] {
                    let encoded = engine.encode(&bytes);
                    if let Some(core) = encoded.get(first..end) {
                        patterns.push((core.to_owned(), format!("[REDACTED:{name}:base64]")));
                    }
                }
            }
        }
        patterns.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
        patterns.dedup_by(|a, b| a.0 == b.0);
        Self { patterns, secrets }
    }

    /// The text with every secret value (or its encoded form) replaced by
    /// `[REDACTED:NAME]`; where the output cap cut a secret, the part of it that was kept is
    /// replaced too.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let cut = text.find(CUT_MARKER_END).map(|i| i + CUT_MARKER_END.len());
        let partial = cut.and_then(|at| self.partial_at(&text[at..]).map(|(len, name)| (at, len, name)));
        if partial.is_none() && !self.patterns.iter().any(|(v, _)| text.contains(v.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        if let Some((at, len, name)) = partial {
            out.replace_range(at..at + len, &format!("[REDACTED:{name}]"));
        }
        for (value, replacement) in &self.patterns {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), replacement);
            }
        }
        Cow::Owned(out)
    }

    /// The longest end of a secret that `text` starts with (at least [`MIN_CUT`] bytes), and
    /// the secret's name.
    fn partial_at(&self, text: &str) -> Option<(usize, &str)> {
        self.secrets
            .iter()
            .filter_map(|(value, name)| {
                (MIN_CUT..value.len())
                    .rev()
                    .find(|&n| value.is_char_boundary(value.len() - n) && text.starts_with(&value[value.len() - n..]))
                    .map(|n| (n, name.as_str()))
            })
            .max_by_key(|(n, _)| *n)
    }

    /// How many bytes at the end of `text` may be the beginning of a secret (or of one of its
    /// encoded forms) that the bytes after it complete: the longest end of `text` that is a
    /// proper beginning of a pattern; 0 when none is.
    pub fn held_back(&self, text: &[u8]) -> usize {
        self.patterns
            .iter()
            .filter_map(|(value, _)| {
                let value = value.as_bytes();
                (1..value.len().min(text.len() + 1)).rev().find(|&n| text.ends_with(&value[..n]))
            })
            .max()
            .unwrap_or(0)
    }

    /// Redacts in place.
    pub fn scrub(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_and_redaction() {
        assert!(is_secret_name("OPENAI_API_KEY") && is_secret_name("GITHUB_TOKEN") && is_secret_name("DB_PASSWORD"));
        assert!(!is_secret_name("PATH") && !is_secret_name("HOME") && !is_secret_name("TOKENIZERS_PARALLELISM"));
        let r = Redactor::new([
            ("OPENAI_API_KEY".to_owned(), "sk-abc-123456789".to_owned()),
            ("GH_TOKEN".to_owned(), "ghp_zzzzzzzz".to_owned()),
            ("SHORT_TOKEN".to_owned(), "abc".to_owned()),
        ]);
        assert_eq!(
            r.redact("key=sk-abc-123456789 and ghp_zzzzzzzz, abc"),
            "key=[REDACTED:OPENAI_API_KEY] and [REDACTED:GH_TOKEN], abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn encoded_quoted_and_cut_secrets_are_redacted() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let key = "sk-live-\"quoted\"-0123456789?>";
        let r = Redactor::new([("MY_API_KEY".to_owned(), key.to_owned())]);
        // Base64 of the key alone, and inside a longer text at each alignment.
        for prefix in ["", "u:", "us:", "use:"] {
            for encoded in [STANDARD.encode(format!("{prefix}{key}")), URL_SAFE.encode(format!("{prefix}{key}\n"))] {
                let clean = r.redact(&encoded).into_owned();
                assert!(clean.contains("[REDACTED:MY_API_KEY:base64]"), "{prefix:?}: {encoded} -> {clean}");
                // What is left: the prefix's characters, and at most two mixed ones at each end.
                let rest = clean.replace("[REDACTED:MY_API_KEY:base64]", "");
                assert!(rest.trim_end_matches('=').len() <= prefix.len() * 4 / 3 + 4, "{prefix:?}: {clean}");
            }
        }
        // As it appears inside JSON.
        let json = serde_json::json!({"error": format!("bad key {key}")}).to_string();
        assert_eq!(r.redact(&json), r#"{"error":"bad key [REDACTED:MY_API_KEY]"}"#);
        // The output cap kept only the key's end.
        let cut = format!("[... 1000{CUT_MARKER_END}{}\nmore", &key[10..]);
        assert_eq!(r.redact(&cut), format!("[... 1000{CUT_MARKER_END}[REDACTED:MY_API_KEY]\nmore"));
    }
}
