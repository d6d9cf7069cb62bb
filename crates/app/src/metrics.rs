//! What the journal's feed says for metrics (SPEC §15 "Metrics"): a fold over every event of
//! every run, in commit order, that turns each into typed observations — a stage or an attempt
//! ended (and how long it took), an attempt's failure classified (its pattern and the strategy it
//! calls for), an agent's usage (tokens and cost by provider and model), a wait for a provider.
//! The daemon keeps the fold and counts the observations into its `/metrics`; the gauges (runs by
//! status, leases, pauses) are read from the store when scraped.

use std::collections::HashMap;

use loopwright_engine::state::StageStatus;
use loopwright_engine::{Event, RunId, RunState};

use crate::Error;
use loopwright_store::Journal;

/// Something the feed said that a metric counts.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// A stage ended: `status` `success` or `failed`, after `seconds` in its attempts.
    StageEnded {
        /// The run's pipeline.
        pipeline: String,
        /// The stage.
        stage: String,
        /// How it ended.
        status: &'static str,
        /// Time spent in its attempts.
        seconds: f64,
    },
    /// An attempt ended (`succeeded` or `failed`) after `seconds`.
    AttemptEnded {
        /// The run's pipeline.
        pipeline: String,
        /// How it ended.
        outcome: &'static str,
        /// How long it ran.
        seconds: f64,
    },
    /// An attempt failed and its failure was classified (`unclassified` when nothing was sure),
    /// calling for `strategy` (`retry` outside the closed loop, `none` when nothing fits).
    AttemptFailed {
        /// The failure pattern.
        pattern: String,
        /// The strategy it calls for.
        strategy: String,
    },
    /// An agent attempt's usage.
    Usage {
        /// The provider its model belongs to (`unknown` when its name says none).
        provider: String,
        /// The model (`unknown` when the agent did not say).
        model: String,
        /// Tokens in and out.
        tokens: u64,
        /// What they cost, when its model has a price.
        cost_usd: f64,
    },
    /// An attempt waited for what a provider allows.
    ProviderWait,
    /// A run ended with `status`.
    RunEnded {
        /// The run's pipeline.
        pipeline: String,
        /// How it ended.
        status: &'static str,
    },
}

/// The fold: how far into the feed it has read, and the runs it has seen start and not end.
#[derive(Debug, Default)]
pub struct Fold {
    /// The feed position read up to.
    pub position: u64,
    runs: HashMap<RunId, RunState>,
}

impl Fold {
    /// Reads the feed from where it stopped to its end (in batches), handing each observation
    /// to `count`.
    pub async fn catch_up(&mut self, store: &Journal, mut count: impl FnMut(Observation)) -> Result<(), Error> {
        use loopwright_engine::Store;
        loop {
            let batch = store.feed_since(self.position, 2000).await?;
            let Some(last) = batch.last().map(|e| e.position) else { return Ok(()) };
            for entry in &batch {
                for o in self.observe(&entry.run, &entry.record) {
                    count(o);
                }
            }
            self.position = last;
        }
    }

    /// The observations of one event of `run`; its run's state is kept from its start to its
    /// end.
    pub fn observe(&mut self, run: &RunId, record: &loopwright_engine::EventRecord) -> Vec<Observation> {
        let state = self.runs.entry(run.clone()).or_insert_with(|| RunState::replay(run.clone(), &[]));
        state.apply(record);
        let pipeline = state.started.as_ref().map(|s| s.pipeline.clone()).unwrap_or_default();
        let mut out = Vec::new();
        let seconds = |ms: u64| ms as f64 / 1000.0;
        let stage_seconds =
            |state: &RunState, stage: &str| state.stage(stage).map_or(0.0, |s| s.duration_ms as f64 / 1000.0);
        match &record.event {
            Event::AttemptSucceeded { stage, duration_ms, .. } => {
                out.push(Observation::AttemptEnded {
                    pipeline: pipeline.clone(),
                    outcome: "succeeded",
                    seconds: seconds(*duration_ms),
                });
                if state.stage(stage.as_str()).is_some_and(|s| s.status == StageStatus::Success) {
                    let seconds = stage_seconds(state, stage.as_str());
                    out.push(Observation::StageEnded {
                        pipeline,
                        stage: stage.to_string(),
                        status: "success",
                        seconds,
                    });
                }
            }
            Event::AttemptFailed { duration_ms, error, .. } => {
                out.push(Observation::AttemptEnded { pipeline, outcome: "failed", seconds: seconds(*duration_ms) });
                let pattern = error.pattern.clone().unwrap_or_else(|| "unclassified".to_owned());
                out.push(Observation::AttemptFailed { pattern, strategy: "retry".to_owned() });
            }
            // A closed-loop attempt that failed: its phase's classified failure.
            Event::Generated { stage, attempt, failure: Some(f), .. }
            | Event::Validated { stage, attempt, failure: Some(f), .. }
            | Event::Evaluated { stage, attempt, failure: Some(f), .. }
            | Event::RegressionChecked { stage, attempt, failure: Some(f), .. } => {
                let ms = state
                    .stage(stage.as_str())
                    .and_then(|s| s.closed.as_ref())
                    .and_then(|l| l.iterations.iter().find(|i| i.attempt == *attempt))
                    .map_or(0, |i| i.duration_ms);
                out.push(Observation::AttemptEnded { pipeline, outcome: "failed", seconds: seconds(ms) });
                let pattern = f.pattern.clone().unwrap_or_else(|| "unclassified".to_owned());
                let strategy = if f.pattern.is_some() { f.strategy.as_str().to_owned() } else { "none".to_owned() };
                out.push(Observation::AttemptFailed { pattern, strategy });
            }
            Event::StageFailed { stage, .. } => {
                let seconds = stage_seconds(state, stage.as_str());
                out.push(Observation::StageEnded { pipeline, stage: stage.to_string(), status: "failed", seconds });
            }
            Event::UsageRecorded { usage, .. } => {
                let model = usage.model.clone().unwrap_or_else(|| "unknown".to_owned());
                let provider = loopwright_runners::presets::provider_of_model(&model).unwrap_or("unknown").to_owned();
                out.push(Observation::Usage {
                    provider,
                    model,
                    tokens: usage.input_tokens + usage.output_tokens,
                    cost_usd: usage.cost_usd.unwrap_or(0.0),
                });
            }
            Event::LimitWaiting { .. } => out.push(Observation::ProviderWait),
            Event::RunFinished { status } => {
                out.push(Observation::RunEnded { pipeline, status: status.as_str() });
                self.runs.remove(run);
            }
            Event::RunCancelled { .. } => {
                out.push(Observation::RunEnded { pipeline, status: "cancelled" });
                self.runs.remove(run);
            }
            _ => {}
        }
        out
    }
}

/// What the store says now: the gauges of `/metrics`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Gauges {
    /// Runs by their stored status.
    pub runs: Vec<(&'static str, u64)>,
    /// Each worker that is not stopped, and how many leases it holds.
    pub leases: Vec<(String, u64)>,
    /// Each `[[limits]]` entry, and whether its provider is paused now.
    pub paused: Vec<(String, bool)>,
    /// Notifications given up on after every attempt.
    pub notifications_failed: u64,
}

/// Reads the gauges from `store` (and the notifications' record in `ws`'s SQLite file).
pub async fn gauges(ws: &crate::workspace::Workspace, store: &Journal) -> Result<Gauges, Error> {
    use loopwright_engine::{RunQuery, RunStatus, Store};
    let mut runs = Vec::new();
    for status in RunStatus::ALL {
        let query = RunQuery { statuses: vec![status], limit: 1, ..RunQuery::default() };
        runs.push((status.as_str(), store.runs_page(&query).await?.total));
    }
    let now = jiff::Timestamp::now();
    let leases = crate::ops::fleet::workers(store, now)
        .await?
        .into_iter()
        .filter(|w| w.stopped_at.is_none())
        .map(|w| (w.id, w.leases.len() as u64))
        .collect();
    let mut paused = Vec::new();
    for limit in &ws.config.limits {
        let until = store.paused_until(&[limit.key()]).await?;
        paused.push((limit.shown(), until.is_some_and(|u| u > now)));
    }
    let notifications_failed = crate::assemble::open_local_store(ws)
        .ok()
        .and_then(|local| local.notify_counts().ok())
        .and_then(|counts| counts.into_iter().find(|(s, _)| s == "notification_failed").map(|(_, n)| n))
        .unwrap_or(0);
    Ok(Gauges { runs, leases, paused, notifications_failed })
}

#[cfg(test)]
mod tests {
    use loopwright_engine::event::{StageError, Usage};
    use loopwright_engine::{EventRecord, FailureKind, RunStatus};
    use pretty_assertions::assert_eq;

    use super::*;

    fn record(seq: u64, event: Event) -> EventRecord {
        EventRecord { seq, at: jiff::Timestamp::UNIX_EPOCH, event }
    }

    fn started() -> Event {
        let mut started = loopwright_testkit::run_started("x");
        started.pipeline = "ci".into();
        Event::RunStarted(Box::new(started))
    }

    #[test]
    fn each_event_is_observed_as_what_a_metric_counts() {
        let stage = loopwright_spec::StageId::parse("build").expect("id");
        let error = StageError {
            kind: FailureKind::ExecutionError,
            message: "exit 1".into(),
            exit_code: Some(1),
            output_tail: String::new(),
            pattern: Some("test-failure".into()),
            classified_by: None,
            unfixable: None,
        };
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 20,
            estimated: false,
            model: Some("claude-sonnet-4".into()),
            cost_usd: Some(0.5),
            quota_wait_ms: 0,
        };
        let events = [
            started(),
            Event::AttemptStarted { stage: stage.clone(), attempt: 1 },
            Event::UsageRecorded { stage: stage.clone(), attempt: 1, usage },
            Event::AttemptFailed { stage: stage.clone(), attempt: 1, duration_ms: 1500, error: error.clone() },
            Event::LimitWaiting { stage: stage.clone(), attempt: 2, reason: "anthropic: busy".into(), until: None },
            Event::AttemptStarted { stage: stage.clone(), attempt: 2 },
            Event::AttemptSucceeded { stage: stage.clone(), attempt: 2, duration_ms: 500, outputs: Default::default() },
            Event::RunFinished { status: RunStatus::Success },
        ];
        let run = RunId::parse("20261130-000000-abcdef").expect("run id");
        let mut fold = Fold::default();
        let seen: Vec<Observation> =
            events.into_iter().enumerate().flat_map(|(i, e)| fold.observe(&run, &record(i as u64 + 1, e))).collect();
        let ci = || "ci".to_owned();
        assert_eq!(
            seen,
            [
                Observation::Usage {
                    provider: "anthropic".into(),
                    model: "claude-sonnet-4".into(),
                    tokens: 120,
                    cost_usd: 0.5
                },
                Observation::AttemptEnded { pipeline: ci(), outcome: "failed", seconds: 1.5 },
                Observation::AttemptFailed { pattern: "test-failure".into(), strategy: "retry".into() },
                Observation::ProviderWait,
                Observation::AttemptEnded { pipeline: ci(), outcome: "succeeded", seconds: 0.5 },
                Observation::StageEnded { pipeline: ci(), stage: "build".into(), status: "success", seconds: 2.0 },
                Observation::RunEnded { pipeline: ci(), status: "success" },
            ]
        );
        assert!(fold.runs.is_empty(), "an ended run's state is let go");
    }
}
