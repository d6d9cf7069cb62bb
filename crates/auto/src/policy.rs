//! The answer policy: which prompt classes the supervisor may answer, and the commands it
//! never approves. It fails closed: an unknown prompt, a class not allowed, or a prompt that
//! mentions a destructive command is left for a person.

use std::collections::BTreeSet;

use regex::Regex;

use crate::screen::{Prompt, PromptClass};

/// Commands no prompt is ever approved for (matched against the prompt's excerpt).
pub const DENY: &[&str] = &[
    r"git\s+push\b[^\n]*(?:--force\b|--force-with-lease\b|\s-f\b|\s\+\S)",
    r"\brm\s+(?:-[a-zA-Z]*[rR][a-zA-Z]*\s+|--recursive\s+)+(?:-\S+\s+)*(?:/|~|\$HOME|\.\.|\*)",
    r"(?i)\bdrop\s+(?:table|database|schema|index)\b",
    r"(?i)\btruncate\s+table\b",
    r"(?i)\bdelete\s+from\s+\w+\s*(?:;|$)",
    r"git\s+reset\s+--hard\b",
    r"git\s+clean\s+-[a-zA-Z]*f",
    r"git\s+branch\s+-D\b",
    r"\bmkfs(?:\.\w+)?\b",
    r"\bdd\s+[^\n]*of=/dev/",
    r"chmod\s+-R\s+[0-7]{3,4}\s+/",
    r":\(\)\s*\{\s*:\|:&\s*\};:",
];

/// What to do about a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Type these keys.
    Answer(String),
    /// Leave it for a person, for this reason.
    Refuse(String),
}

/// The policy.
#[derive(Debug, Clone)]
pub struct Policy {
    answer: BTreeSet<PromptClass>,
    deny: Vec<(String, Regex)>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::new(PromptClass::ALL.iter().copied().collect(), &[]).expect("the built-in deny list compiles")
    }
}

impl Policy {
    /// A policy answering `answer`'s classes, never for a prompt matching the built-in deny
    /// list or one of `extra_deny` (regular expressions).
    pub fn new(answer: BTreeSet<PromptClass>, extra_deny: &[String]) -> Result<Self, String> {
        let mut deny = Vec::new();
        for p in DENY.iter().map(|s| (*s).to_owned()).chain(extra_deny.iter().cloned()) {
            let re = Regex::new(&p).map_err(|e| format!("deny pattern {p:?}: {e}"))?;
            deny.push((p, re));
        }
        let mut answer = answer;
        answer.remove(&PromptClass::Unclear);
        Ok(Self { answer, deny })
    }

    /// The classes answered.
    pub fn answered(&self) -> &BTreeSet<PromptClass> {
        &self.answer
    }

    /// Decides on a prompt.
    pub fn decide(&self, prompt: &Prompt) -> Decision {
        if let Some((p, _)) = self.deny.iter().find(|(_, re)| re.is_match(&prompt.excerpt)) {
            return Decision::Refuse(format!("the prompt is about a destructive command (deny pattern {p})"));
        }
        if prompt.class == PromptClass::Unclear || prompt.key.is_empty() {
            return Decision::Refuse(format!("an unclear prompt ({}): not answered without a person", prompt.pattern));
        }
        if !self.answer.contains(&prompt.class) {
            return Decision::Refuse(format!("the policy does not answer {} prompts", prompt.class.as_str()));
        }
        Decision::Answer(prompt.key.clone())
    }
}
