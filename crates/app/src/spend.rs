//! `[[spend]]` caps (SPEC §15 "Spend over time") as the store counts them: the caps that count
//! an attempt, for the period now, and each cap's use so far — for the engine's limits port,
//! `loopwright spend`, the API and the Stats page.

use loopwright_spec::spend::{Cap, OnExceed, Scope};
use loopwright_store::Journal;
use loopwright_store::spend::{CapRule, Standing};
use serde::Serialize;

use crate::Error;

/// `cap` as the store counts it in the period `now` falls in.
pub fn rule(cap: &Cap, now: jiff::Timestamp) -> CapRule {
    let (start, end) = cap.period.bounds(now);
    let (mut pipeline, mut provider, mut person) = (None, None, None);
    match &cap.scope {
        Scope::Workspace => {}
        Scope::Pipeline(p) => pipeline = Some(p.clone()),
        Scope::Provider(p) => provider = Some(p.clone()),
        Scope::Person(p) => person = Some(p.clone()),
    }
    CapRule {
        key: cap.key(),
        shown: cap.shown(),
        start,
        end,
        tokens: cap.tokens,
        cost_usd: cap.cost_usd,
        pipeline,
        provider,
        person,
    }
}

/// The caps that count an attempt of a run of `pipeline` started by `person` whose agent calls
/// `provider`, with what each says to do once used up.
pub fn rules_for(
    caps: &[Cap],
    now: jiff::Timestamp,
    pipeline: &str,
    provider: Option<&str>,
    person: Option<&str>,
) -> Vec<(CapRule, OnExceed)> {
    caps.iter().filter(|c| c.applies(pipeline, provider, person)).map(|c| (rule(c, now), c.on_exceed)).collect()
}

/// One cap and its period's use so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapUse {
    /// Its identity (`day:workspace`).
    pub key: String,
    /// In words (`the workspace's daily spend cap`).
    pub shown: String,
    /// `day`, `week` or `month`.
    pub period: &'static str,
    /// When the period began.
    pub since: jiff::Timestamp,
    /// When it ends.
    pub until: jiff::Timestamp,
    /// Tokens used, and the cap's tokens when it has some.
    pub tokens: (u64, Option<u64>),
    /// US dollars spent, and the cap's when it has some.
    pub cost_usd: (f64, Option<f64>),
    /// The larger of the two shares used, in percent (may pass 100).
    pub percent: f64,
    /// `wait` or `fail`, once used up.
    pub on_exceed: &'static str,
}

impl CapUse {
    /// What the period used against the cap, in words: `$3.10 of $5.00, 1200 of 4000 tokens`.
    pub fn used_words(&self) -> String {
        let mut parts = Vec::new();
        if let (spent, Some(most)) = self.cost_usd {
            parts.push(format!("${spent:.2} of ${most:.2}"));
        }
        if let (used, Some(most)) = self.tokens {
            parts.push(format!("{used} of {most} tokens"));
        }
        parts.join(", ")
    }
}

/// The share of a cap that `used` is, in percent: the larger of tokens' and cost's.
pub fn percent(rule: &CapRule, used: &Standing) -> f64 {
    let tokens = rule.tokens.map_or(0.0, |most| used.tokens as f64 / most as f64 * 100.0);
    let cost = rule.cost_usd.map_or(0.0, |most| used.cost_usd / most * 100.0);
    tokens.max(cost)
}

/// Each `[[spend]]` cap of the workspace and its use in the period now.
pub async fn standing(caps: &[Cap], store: &Journal, now: jiff::Timestamp) -> Result<Vec<CapUse>, Error> {
    let mut out = Vec::new();
    for cap in caps {
        let rule = rule(cap, now);
        let used = store.spend_used(&rule).await?;
        out.push(CapUse {
            key: rule.key.clone(),
            shown: rule.shown.clone(),
            period: cap.period.as_str(),
            since: rule.start,
            until: rule.end,
            tokens: (used.tokens, cap.tokens),
            cost_usd: (used.cost_usd, cap.cost_usd),
            percent: percent(&rule, &used),
            on_exceed: match cap.on_exceed {
                OnExceed::Wait => "wait",
                OnExceed::Fail => "fail",
            },
        });
    }
    Ok(out)
}
