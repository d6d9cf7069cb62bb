//! `[[spend]]` in config.toml (SPEC §15 "Spend over time"): a cap on what agents use — their
//! cost in US dollars and/or their tokens — per calendar period (UTC), over the workspace, one
//! pipeline, one provider or the runs one person started; and what an attempt does when the
//! period's use is already at or over it (waits for the next period, or fails).

use serde::Deserialize;

/// A calendar period, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// From midnight to midnight.
    Day,
    /// From Monday 00:00 to the next.
    Week,
    /// From the first of the month to the next.
    Month,
}

impl Period {
    /// Its name in config.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// The period `now` falls in: its start and its end (the next one's start).
    pub fn bounds(self, now: jiff::Timestamp) -> (jiff::Timestamp, jiff::Timestamp) {
        let zoned = now.to_zoned(jiff::tz::TimeZone::UTC);
        let day = zoned.start_of_day().unwrap_or_else(|_| zoned.clone());
        let (start, step) = match self {
            Period::Day => (day, jiff::Span::new().days(1)),
            Period::Week => {
                let back = i64::from(zoned.weekday().to_monday_zero_offset());
                (day.checked_sub(jiff::Span::new().days(back)).unwrap_or(day), jiff::Span::new().weeks(1))
            }
            Period::Month => {
                (zoned.first_of_month().and_then(|z| z.start_of_day()).unwrap_or(day), jiff::Span::new().months(1))
            }
        };
        let end = start.checked_add(step).map_or(jiff::Timestamp::MAX, |z| z.timestamp());
        (start.timestamp(), end)
    }
}

/// What an attempt does when its cap's period is already used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExceed {
    /// It waits (the run `queued`, the reason shown) until the next period.
    #[default]
    Wait,
    /// It fails (`budget_exceeded`).
    Fail,
}

/// What a cap counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every run of the workspace's store.
    Workspace,
    /// Runs of this pipeline.
    Pipeline(String),
    /// Attempts of agents of this provider (`anthropic`, `openai`, `google`, …).
    Provider(String),
    /// Runs this person started.
    Person(String),
}

/// One `[[spend]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawCap")]
pub struct Cap {
    /// The period it is counted over.
    pub period: Period,
    /// At most this many US dollars.
    pub cost_usd: Option<f64>,
    /// At most this many tokens (in and out).
    pub tokens: Option<u64>,
    /// What it counts.
    pub scope: Scope,
    /// What an attempt past it does.
    pub on_exceed: OnExceed,
}

/// A `[[spend]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCap {
    period: Period,
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    pipeline: Option<String>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    person: Option<String>,
    #[serde(default)]
    on_exceed: OnExceed,
}

impl TryFrom<RawCap> for Cap {
    type Error = String;

    fn try_from(raw: RawCap) -> Result<Self, String> {
        let scope = match (raw.pipeline, raw.provider, raw.person) {
            (None, None, None) => Scope::Workspace,
            (Some(p), None, None) if !p.trim().is_empty() => Scope::Pipeline(p),
            (None, Some(p), None) if !p.trim().is_empty() => Scope::Provider(p.to_ascii_lowercase()),
            (None, None, Some(p)) if !p.trim().is_empty() => Scope::Person(p),
            (Some(_), None, None) | (None, Some(_), None) | (None, None, Some(_)) => {
                return Err("[[spend]] names an empty pipeline, provider or person".into());
            }
            _ => {
                return Err(
                    "[[spend]] counts one thing: name at most one of `pipeline`, `provider` and `person` (none: the whole workspace)"
                        .into(),
                );
            }
        };
        if raw.cost_usd.is_none() && raw.tokens.is_none() {
            return Err("[[spend]] sets no cap: expected `cost_usd`, `tokens` or both".into());
        }
        if raw.cost_usd.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err("[[spend]] `cost_usd` must be above 0".into());
        }
        if raw.tokens == Some(0) {
            return Err("[[spend]] `tokens` must be 1 or more".into());
        }
        Ok(Self { period: raw.period, cost_usd: raw.cost_usd, tokens: raw.tokens, scope, on_exceed: raw.on_exceed })
    }
}

impl Cap {
    /// Its identity in the store: `day:workspace`, `week:pipeline=bug-fix`.
    pub fn key(&self) -> String {
        let scope = match &self.scope {
            Scope::Workspace => "workspace".to_owned(),
            Scope::Pipeline(p) => format!("pipeline={p}"),
            Scope::Provider(p) => format!("provider={p}"),
            Scope::Person(p) => format!("person={p}"),
        };
        format!("{}:{scope}", self.period.as_str())
    }

    /// How people read it: `the workspace's daily cap`, `pipeline bug-fix's weekly cap`.
    pub fn shown(&self) -> String {
        let period = match self.period {
            Period::Day => "daily",
            Period::Week => "weekly",
            Period::Month => "monthly",
        };
        match &self.scope {
            Scope::Workspace => format!("the workspace's {period} spend cap"),
            Scope::Pipeline(p) => format!("pipeline {p}'s {period} spend cap"),
            Scope::Provider(p) => format!("provider {p}'s {period} spend cap"),
            Scope::Person(p) => format!("{p}'s {period} spend cap"),
        }
    }

    /// True when it counts an attempt of a run of `pipeline` started by `person`, whose agent
    /// calls `provider`.
    pub fn applies(&self, pipeline: &str, provider: Option<&str>, person: Option<&str>) -> bool {
        match &self.scope {
            Scope::Workspace => true,
            Scope::Pipeline(p) => p == pipeline,
            Scope::Provider(p) => provider.is_some_and(|q| q.eq_ignore_ascii_case(p)),
            Scope::Person(p) => person == Some(p.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_calendar_periods_in_utc() {
        let now: jiff::Timestamp = "2026-11-26T15:04:05Z".parse().expect("time");
        let at = |s: &str| s.parse::<jiff::Timestamp>().expect("time");
        assert_eq!(Period::Day.bounds(now), (at("2026-11-26T00:00:00Z"), at("2026-11-27T00:00:00Z")));
        // A Thursday: its week began on Monday the 23rd.
        assert_eq!(Period::Week.bounds(now), (at("2026-11-23T00:00:00Z"), at("2026-11-30T00:00:00Z")));
        assert_eq!(Period::Month.bounds(now), (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z")));
        assert_eq!(Period::Week.bounds(at("2026-11-30T00:00:00Z")).0, at("2026-11-30T00:00:00Z"));
    }

    #[test]
    fn a_cap_counts_one_scope_and_sets_a_limit() {
        let cap = |text: &str| {
            toml::from_str::<toml::Table>(text).map(|_| ()).and_then(|()| {
                #[derive(Deserialize)]
                struct One {
                    spend: Vec<Cap>,
                }
                toml::from_str::<One>(text).map(|o| o.spend.into_iter().next().expect("one"))
            })
        };
        let ok = cap("[[spend]]\nperiod = \"day\"\ncost_usd = 20.0\nprovider = \"Anthropic\"\non_exceed = \"fail\"\n")
            .expect("valid");
        assert_eq!(
            ok,
            Cap {
                period: Period::Day,
                cost_usd: Some(20.0),
                tokens: None,
                scope: Scope::Provider("anthropic".into()),
                on_exceed: OnExceed::Fail
            }
        );
        assert_eq!(ok.key(), "day:provider=anthropic");
        assert!(ok.applies("any", Some("anthropic"), None) && !ok.applies("any", Some("openai"), None));
        for (text, expected) in [
            ("[[spend]]\nperiod = \"day\"\n", "sets no cap"),
            ("[[spend]]\nperiod = \"day\"\ntokens = 5\npipeline = \"a\"\nperson = \"b\"\n", "counts one thing"),
            ("[[spend]]\nperiod = \"year\"\ntokens = 5\n", "unknown variant `year`"),
            ("[[spend]]\nperiod = \"day\"\ncost_usd = -1.0\n", "must be above 0"),
        ] {
            let e = cap(text).expect_err(text).to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
    }
}
