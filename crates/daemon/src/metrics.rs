//! `GET /metrics` (SPEC §15): the workspace's runs in Prometheus' text format. Counters and
//! histograms count what the journal's feed says ([`loopwright_app::metrics::Fold`], read on
//! from where it stopped at each scrape, so every process's runs count, not only this daemon's);
//! gauges are read from the store when scraped. Served behind the API's token, and without one on
//! `--metrics-addr`, which must be a loopback address.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use loopwright_app::metrics::{Fold, Observation, gauges};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::Shared;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    pipeline: String,
    stage: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    pipeline: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    pattern: String,
    strategy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    pipeline: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
}

type Seconds = Family<StageLabels, Histogram, fn() -> Histogram>;
type AttemptSeconds = Family<AttemptLabels, Histogram, fn() -> Histogram>;

/// Buckets of stage and attempt durations, in seconds: a second to four hours.
fn duration_buckets() -> Histogram {
    Histogram::new([1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0])
}

/// What the feed has said so far, counted.
struct Counted {
    fold: Fold,
    stage_seconds: Seconds,
    attempt_seconds: AttemptSeconds,
    attempts_failed: Family<FailureLabels, Counter>,
    tokens: Family<ModelLabels, Counter>,
    cost: Family<ModelLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    provider_waits: Counter,
    runs_ended: Family<RunLabels, Counter>,
}

impl Counted {
    fn count(&self, o: Observation) {
        match o {
            Observation::StageEnded { pipeline, stage, status, seconds } => {
                let labels = StageLabels { pipeline, stage, status: status.to_owned() };
                self.stage_seconds.get_or_create(&labels).observe(seconds);
            }
            Observation::AttemptEnded { pipeline, outcome, seconds } => {
                let labels = AttemptLabels { pipeline, outcome: outcome.to_owned() };
                self.attempt_seconds.get_or_create(&labels).observe(seconds);
            }
            Observation::AttemptFailed { pattern, strategy } => {
                self.attempts_failed.get_or_create(&FailureLabels { pattern, strategy }).inc();
            }
            Observation::Usage { provider, model, tokens, cost_usd } => {
                let labels = ModelLabels { provider, model };
                self.tokens.get_or_create(&labels).inc_by(tokens);
                self.cost.get_or_create(&labels).inc_by(cost_usd);
            }
            Observation::ProviderWait => {
                self.provider_waits.inc();
            }
            Observation::RunEnded { pipeline, status } => {
                self.runs_ended.get_or_create(&RunLabels { pipeline, status: status.to_owned() }).inc();
            }
        }
    }
}

/// The daemon's metrics: the fold and its counts, kept between scrapes.
pub struct Metrics(tokio::sync::Mutex<Counted>);

impl Default for Metrics {
    fn default() -> Self {
        Self(tokio::sync::Mutex::new(Counted {
            fold: Fold::default(),
            stage_seconds: Family::new_with_constructor(duration_buckets),
            attempt_seconds: Family::new_with_constructor(duration_buckets),
            attempts_failed: Family::default(),
            tokens: Family::default(),
            cost: Family::default(),
            provider_waits: Counter::default(),
            runs_ended: Family::default(),
        }))
    }
}

impl Metrics {
    /// The text a scrape gets: the feed read on to its end, the gauges read now.
    pub async fn render(&self, shared: &Shared) -> Result<String, loopwright_app::Error> {
        let mut counted = self.0.lock().await;
        let Counted { fold, .. } = &mut *counted;
        let mut seen = Vec::new();
        fold.catch_up(&shared.store, |o| seen.push(o)).await?;
        for o in seen {
            counted.count(o);
        }
        let gauges = gauges(&shared.ws, &shared.store).await?;
        let mut registry = Registry::with_prefix("loopwright");
        let c = &*counted;
        registry.register(
            "stage_duration_seconds",
            "Time stages spent in their attempts, by how they ended",
            c.stage_seconds.clone(),
        );
        registry.register(
            "attempt_duration_seconds",
            "How long attempts ran, by how they ended",
            c.attempt_seconds.clone(),
        );
        registry.register(
            "attempts_failed",
            "Attempts that failed, by the failure pattern they were classified as and the strategy it calls for",
            c.attempts_failed.clone(),
        );
        registry.register("tokens", "Tokens agents used (in and out), by provider and model", c.tokens.clone());
        registry.register("cost_usd", "What agents' tokens cost in US dollars, by provider and model", c.cost.clone());
        registry.register(
            "provider_waits",
            "Times an attempt waited for what a provider allows",
            c.provider_waits.clone(),
        );
        registry.register("runs_ended", "Runs that ended, by pipeline and how", c.runs_ended.clone());
        let runs: Family<StatusLabels, Gauge> = Family::default();
        for (status, n) in &gauges.runs {
            runs.get_or_create(&StatusLabels { status: (*status).to_owned() })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let count = |status: &str| gauges.runs.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n);
        let queued: Gauge = Gauge::default();
        queued.set(i64::try_from(count("queued")).unwrap_or(i64::MAX));
        let waiting: Gauge = Gauge::default();
        waiting.set(i64::try_from(count("waiting")).unwrap_or(i64::MAX));
        let leases: Family<WorkerLabels, Gauge> = Family::default();
        for (worker, n) in &gauges.leases {
            leases.get_or_create(&WorkerLabels { worker: worker.clone() }).set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let paused: Family<LimitLabels, Gauge> = Family::default();
        for (limit, now) in &gauges.paused {
            paused.get_or_create(&LimitLabels { limit: limit.clone() }).set(i64::from(*now));
        }
        let failed: Counter = Counter::default();
        failed.inc_by(gauges.notifications_failed);
        registry.register("runs", "Runs by their status", runs);
        registry.register("queue_depth", "Runs queued, waiting for a slot, a worker or a provider", queued);
        registry.register("runs_waiting_for_person", "Runs waiting for a person's answer", waiting);
        registry.register("worker_leases", "Runs each worker holds a lease on", leases);
        registry.register(
            "provider_paused",
            "1 while a [[limits]] entry's provider is paused after a rate limit",
            paused,
        );
        registry.register("notifications_failed", "Notifications given up on after every attempt", failed);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
            .map_err(|e| loopwright_app::Error::Internal(anyhow::anyhow!("cannot encode the metrics: {e}")))?;
        Ok(text)
    }
}

/// `GET /metrics`.
pub async fn scrape(State(shared): State<Arc<Shared>>) -> Response {
    match shared.metrics.render(&shared).await {
        Ok(text) => {
            ([(header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], text).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}
