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
    /// (value, name), longest value first.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// The secrets of this process's environment, plus the variables named in `extra` (an
    /// agent's `api_key_env`).
    pub fn from_env(extra: &[String]) -> Self {
        let mut secrets: Vec<(String, String)> = std::env::vars()
            .filter(|(k, v)| (is_secret_name(k) || extra.contains(k)) && v.len() >= MIN_LEN)
            .map(|(k, v)| (v, k))
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        Self { secrets }
    }

    /// The text with every secret value replaced by `[REDACTED:NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.secrets.iter().any(|(v, _)| text.contains(v.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_owned();
        for (value, name) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[REDACTED:{name}]"));
            }
        }
        Cow::Owned(out)
    }

    /// Redacts in place.
    pub fn scrub(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_and_redaction() {
        assert!(is_secret_name("OPENAI_API_KEY") && is_secret_name("GITHUB_TOKEN") && is_secret_name("DB_PASSWORD"));
        assert!(!is_secret_name("PATH") && !is_secret_name("HOME") && !is_secret_name("TOKENIZERS_PARALLELISM"));
        let r = Redactor {
            secrets: vec![
                ("sk-abc-123456789".into(), "OPENAI_API_KEY".into()),
                ("ghp_zzzzzzzz".into(), "GH_TOKEN".into()),
            ],
        };
        assert_eq!(
            r.redact("key=sk-abc-123456789 and ghp_zzzzzzzz"),
            "key=[REDACTED:OPENAI_API_KEY] and [REDACTED:GH_TOKEN]"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }
}
