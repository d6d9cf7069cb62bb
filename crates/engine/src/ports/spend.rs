//! What the limits port is told of an attempt's spend: what it is counted by, and what it used.

/// What an attempt's spend is counted by (`[[spend]]` caps, SPEC §15): its run's pipeline and
/// the person who started the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payer<'a> {
    /// The run's pipeline.
    pub pipeline: &'a str,
    /// Who started the run, when someone is named.
    pub person: Option<&'a str>,
}

/// What an attempt used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Used {
    /// Tokens in and out.
    pub tokens: u64,
    /// What they cost, in US dollars (0 when its model has no price).
    pub cost_usd: f64,
}
