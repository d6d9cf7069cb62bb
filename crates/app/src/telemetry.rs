//! Traces of runs over OTLP/HTTP (SPEC §15 "Traces"), when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `[telemetry] otlp_endpoint`) names a collector. A span per run, stage, attempt, agent
//! invocation, check, fix strategy, and wait for a person or a provider, nested as the run is,
//! with loopwright's attributes and the GenAI conventions for model usage.
//!
//! Spans are made from the journal as the process driving a run records it ([`Spans::of`], a
//! pure function of each event and the run's state), each when what it covers ends, with the
//! times the journal gives and ids derived from the run's trace id
//! ([`loopwright_engine::trace`]): a run resumed in another process continues its trace under
//! the same parents. They go to the SDK's batch processor, which exports on a thread of its own:
//! a collector that is down or slow never holds a run up; a command gives it a few seconds to
//! send what is left before it exits ([`Telemetry::shutdown`]).

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use loopwright_engine::closed_loop::Failure;
use loopwright_engine::state::StageStatus;
use loopwright_engine::trace::Place;
use loopwright_engine::{Event, EventRecord, Observer, RunState, RunStatus};
use loopwright_spec::Pipeline;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanProcessor};

/// How long a span waits to be sent with others.
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// How long one request to the collector may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a command waits for the collector to take what is left when it exits.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// True when traces are to be exported: a collector is named by the environment or the config.
pub fn enabled(config: &loopwright_spec::config::Config) -> bool {
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    set("OTEL_EXPORTER_OTLP_ENDPOINT")
        || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        || config.telemetry.otlp_endpoint.is_some()
}

/// A new random trace id (32 hex).
pub fn new_trace_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    // The system's random source failing leaves the run without a journaled id: one derived
    // from its run id serves.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        return String::new();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// A whole number.
    Int(i64),
    /// A number.
    F64(f64),
    /// Yes or no.
    Bool(bool),
}

/// A span as a run's journal makes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Where it is (its id).
    pub place: Place,
    /// Its parent's place (none for the run's).
    pub parent: Option<Place>,
    /// Its name.
    pub name: String,
    /// When it began.
    pub start: Timestamp,
    /// When it ended.
    pub end: Timestamp,
    /// Its attributes.
    pub attributes: Vec<(&'static str, Value)>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// What the spans of one process remember between events: when the waits it saw began.
#[derive(Debug, Default)]
pub struct Spans {
    person: HashMap<String, (u64, Timestamp)>,
    provider: HashMap<(String, u32), Timestamp>,
}

fn s(v: &str) -> Value {
    Value::Str(v.to_owned())
}

fn int(v: impl TryInto<i64>) -> Value {
    Value::Int(v.try_into().unwrap_or(i64::MAX))
}

/// The attributes a classified failure adds to the span it ended.
fn failure_attributes(f: &Failure) -> Vec<(&'static str, Value)> {
    let mut out = vec![("loopwright.failure_type", s(f.failure_type.as_str()))];
    if let Some(p) = &f.pattern {
        out.push(("loopwright.pattern", s(p)));
        out.push(("loopwright.confidence", Value::F64(f.confidence)));
        out.push(("loopwright.strategy", s(f.strategy.as_str())));
    }
    let by = match f.classified_by() {
        loopwright_engine::closed_loop::ClassifiedBy::Pattern => "pattern",
        loopwright_engine::closed_loop::ClassifiedBy::Statistical => "statistical",
        loopwright_engine::closed_loop::ClassifiedBy::Agent => "agent",
        loopwright_engine::closed_loop::ClassifiedBy::None => "none",
    };
    out.push(("loopwright.classified_by", s(by)));
    out
}

impl Spans {
    /// The spans event `record` ends, `state` being the run's state with it applied.
    pub fn of(&mut self, record: &EventRecord, state: &RunState) -> Vec<Span> {
        let run = state.run_id.as_str();
        let at = record.at;
        let base = |stage: &str| vec![("loopwright.run_id", s(run)), ("loopwright.stage", s(stage))];
        let attempt_start = |stage: &str, attempt: u32| {
            state
                .stage(stage)
                .and_then(|st| st.attempt_log.iter().find(|a| a.attempt == attempt))
                .map_or(at, |a| a.timestamp)
        };
        let mut out = Vec::new();
        let attempt_span = |stage: &str, attempt: u32, error: Option<String>, extra: Vec<(&'static str, Value)>| {
            let mut attributes = base(stage);
            attributes.push(("loopwright.attempt", int(attempt)));
            attributes.extend(extra);
            Span {
                place: Place::Attempt(stage.to_owned(), attempt),
                parent: Some(Place::Stage(stage.to_owned())),
                name: format!("attempt {stage}#{attempt}"),
                start: attempt_start(stage, attempt),
                end: at,
                attributes,
                error,
            }
        };
        match &record.event {
            // A closed-loop attempt's span ended at its evaluation.
            Event::AttemptSucceeded { stage, attempt, .. }
                if state.stage(stage.as_str()).is_none_or(|st| st.closed.is_none()) =>
            {
                out.push(attempt_span(stage.as_str(), *attempt, None, Vec::new()));
            }
            Event::AttemptFailed { stage, attempt, error, .. } => {
                let mut extra = vec![("error.type", s(error.kind.as_str()))];
                if let Some(p) = &error.pattern {
                    extra.push(("loopwright.pattern", s(p)));
                }
                out.push(attempt_span(stage.as_str(), *attempt, Some(error.message.clone()), extra));
            }
            // A closed-loop attempt ends at its evaluation, or earlier at a failure before it.
            Event::Generated { stage, attempt, failure: Some(f), .. }
            | Event::Validated { stage, attempt, failure: Some(f), .. } => {
                out.push(attempt_span(stage.as_str(), *attempt, Some(f.summary.clone()), failure_attributes(f)));
            }
            Event::Evaluated { stage, attempt, checks, failure, .. } => {
                let stage = stage.as_str();
                // The checks ran one after another and ended as the evaluation was journaled.
                let mut end = at;
                let mut spans = Vec::new();
                for (i, c) in checks.iter().enumerate().rev() {
                    let start = end - jiff::SignedDuration::from_millis(i64::try_from(c.duration_ms).unwrap_or(0));
                    let mut attributes = base(stage);
                    attributes.push(("loopwright.attempt", int(*attempt)));
                    attributes.push(("loopwright.check", s(&c.name)));
                    attributes.push(("loopwright.check.command", s(&c.command)));
                    attributes.push(("loopwright.check.passed", Value::Bool(c.passed)));
                    if let Some(code) = c.exit_code {
                        attributes.push(("process.exit.code", int(code)));
                    }
                    spans.push(Span {
                        place: Place::Check(stage.to_owned(), *attempt, i),
                        parent: Some(Place::Attempt(stage.to_owned(), *attempt)),
                        name: format!("check {}", c.name),
                        start,
                        end,
                        attributes,
                        error: (!c.passed).then(|| format!("check `{}` failed", c.name)),
                    });
                    end = start;
                }
                spans.reverse();
                let (error, extra) = match failure {
                    Some(f) => (Some(f.summary.clone()), failure_attributes(f)),
                    None => (None, Vec::new()),
                };
                out.push(attempt_span(stage, *attempt, error, extra));
                out.extend(spans);
            }
            Event::UsageRecorded { stage, attempt, usage } => {
                let stage = stage.as_str();
                let model = usage.model.clone().unwrap_or_default();
                let mut attributes = base(stage);
                attributes.push(("loopwright.attempt", int(*attempt)));
                attributes.push(("gen_ai.operation.name", s("invoke_agent")));
                if let Some(provider) = loopwright_runners::presets::provider_of_model(&model) {
                    attributes.push(("gen_ai.provider.name", s(provider)));
                }
                if !model.is_empty() {
                    attributes.push(("gen_ai.request.model", s(&model)));
                }
                attributes.push(("gen_ai.usage.input_tokens", int(usage.input_tokens)));
                attributes.push(("gen_ai.usage.output_tokens", int(usage.output_tokens)));
                if let Some(cost) = usage.cost_usd {
                    attributes.push(("loopwright.cost_usd", Value::F64(cost)));
                }
                attributes.push(("loopwright.usage.estimated", Value::Bool(usage.estimated)));
                out.push(Span {
                    place: Place::Agent(stage.to_owned(), *attempt),
                    parent: Some(Place::Attempt(stage.to_owned(), *attempt)),
                    name: if model.is_empty() { "invoke_agent".to_owned() } else { format!("invoke_agent {model}") },
                    start: attempt_start(stage, *attempt),
                    end: at,
                    attributes,
                    error: None,
                });
            }
            Event::FixApplied { stage, attempt, fix } => {
                let stage = stage.as_str();
                let mut attributes = base(stage);
                attributes.push(("loopwright.attempt", int(*attempt)));
                attributes.push(("loopwright.strategy", s(fix.strategy.as_str())));
                attributes.push(("loopwright.fix.resolved", Value::Bool(fix.resolved)));
                let start = at - jiff::SignedDuration::from_millis(i64::try_from(fix.wait_ms).unwrap_or(0));
                out.push(Span {
                    place: Place::Fix(stage.to_owned(), *attempt),
                    parent: Some(Place::Attempt(stage.to_owned(), *attempt)),
                    name: format!("fix {}", fix.strategy.as_str()),
                    start,
                    end: at,
                    attributes,
                    error: None,
                });
            }
            Event::ApprovalRequested { stage } | Event::LoopEscalated { stage, .. } => {
                self.person.insert(stage.to_string(), (record.seq, at));
            }
            Event::ApprovalGranted { stage, by, .. }
            | Event::ApprovalRejected { stage, by, .. }
            | Event::EscalationAnswered { stage, by, .. } => {
                let (seq, start) = self.person.remove(stage.as_str()).unwrap_or((record.seq, at));
                let mut attributes = base(stage.as_str());
                attributes.push(("loopwright.answered_by", s(by)));
                out.push(Span {
                    place: Place::WaitPerson(stage.to_string(), seq),
                    parent: Some(Place::Stage(stage.to_string())),
                    name: format!("wait for a person at {stage}"),
                    start,
                    end: at,
                    attributes,
                    error: None,
                });
            }
            Event::LimitWaiting { stage, attempt, .. } => {
                self.provider.entry((stage.to_string(), *attempt)).or_insert(at);
            }
            Event::LimitTaken { stage, attempt } => {
                let start = self.provider.remove(&(stage.to_string(), *attempt)).unwrap_or(at);
                let mut attributes = base(stage.as_str());
                attributes.push(("loopwright.attempt", int(*attempt)));
                out.push(Span {
                    place: Place::WaitProvider(stage.to_string(), *attempt),
                    parent: Some(Place::Stage(stage.to_string())),
                    name: format!("wait for the provider of {stage}"),
                    start,
                    end: at,
                    attributes,
                    error: None,
                });
            }
            _ => {}
        }
        // A stage's span ends with the event that ends the stage.
        if let Some(stage) = record.event.stage()
            && let Some(st) = state.stage(stage.as_str())
            && matches!(record.event, Event::AttemptSucceeded { .. } | Event::StageFailed { .. })
            && matches!(st.status, StageStatus::Success | StageStatus::Failed | StageStatus::Timeout)
        {
            let mut attributes = base(stage.as_str());
            attributes.push(("loopwright.attempts", int(st.attempts)));
            attributes.push(("loopwright.stage.status", s(st.status.as_str())));
            let start = st.attempt_log.first().map_or(at, |a| a.timestamp);
            out.push(Span {
                place: Place::Stage(stage.to_string()),
                parent: Some(Place::Run),
                name: format!("stage {stage}"),
                start,
                end: at,
                attributes,
                error: st.last_error.as_ref().filter(|_| st.status != StageStatus::Success).map(|e| e.message.clone()),
            });
        }
        let ended = match &record.event {
            Event::RunFinished { status } => Some(*status),
            Event::RunCancelled { .. } => Some(RunStatus::Cancelled),
            _ => None,
        };
        if let Some(status) = ended {
            let started = state.started.as_ref();
            let pipeline = started.map(|s| s.pipeline.clone()).unwrap_or_default();
            let mut attributes = vec![
                ("loopwright.run_id", s(run)),
                ("loopwright.pipeline", s(&pipeline)),
                ("loopwright.status", s(status.as_str())),
            ];
            if let Some(task) = started.map(|s| s.task_id.to_string()) {
                attributes.push(("loopwright.task_id", s(&task)));
            }
            out.push(Span {
                place: Place::Run,
                parent: None,
                name: format!("run {pipeline}"),
                start: state.created_at.unwrap_or(at),
                end: at,
                attributes,
                error: (status == RunStatus::Failed).then(|| format!("run {run} failed")),
            });
        }
        out
    }
}

/// The process's one exporter: the SDK's batch processor over OTLP/HTTP, shared by the runs the
/// process drives (a daemon drives many).
struct Exporter {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

/// The exporter, made at the first run that exports (none when it could not be made).
static EXPORTER: std::sync::Mutex<Option<std::sync::Weak<Exporter>>> = std::sync::Mutex::new(None);

/// Traces of a run this process drives, exported as its spans end.
pub struct Telemetry {
    exporter: std::sync::Arc<Exporter>,
    spans: Spans,
}

impl Telemetry {
    /// A telemetry observer for one run when `config` (or the environment) names a collector;
    /// runs driven at once share the process's exporter, which sends what is left when the last
    /// of them is dropped.
    pub fn new(config: &loopwright_spec::config::Config) -> Option<Self> {
        if !enabled(config) {
            return None;
        }
        let mut shared = EXPORTER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(exporter) = shared.as_ref().and_then(std::sync::Weak::upgrade) {
            return Some(Self { exporter, spans: Spans::default() });
        }
        let exporter = std::sync::Arc::new(Exporter::new(config)?);
        *shared = Some(std::sync::Arc::downgrade(&exporter));
        Some(Self { exporter, spans: Spans::default() })
    }

    /// Sends what is left, waiting a few seconds at most for the collector.
    pub fn shutdown(&self) {
        let _ = self.exporter.processor.force_flush();
    }
}

impl Exporter {
    fn new(config: &loopwright_spec::config::Config) -> Option<Self> {
        loopwright_runners::http::tls();
        use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
        // A batch the collector does not take is dropped, not tried again: with the collector
        // down, a command's exit waits for nothing (a refused connection is answered at once).
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_timeout(EXPORT_TIMEOUT)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled());
        if let Some(endpoint) = &config.telemetry.otlp_endpoint {
            exporter = exporter.with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')));
        }
        let exporter = match exporter.build() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("loopwright: traces are not exported: {e}");
                return None;
            }
        };
        // Spans leave within half a second of their end: a process killed a moment later has
        // sent what it finished.
        let batch = opentelemetry_sdk::trace::BatchConfigBuilder::default().with_scheduled_delay(EXPORT_DELAY).build();
        let mut processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
        let service = std::env::var("OTEL_SERVICE_NAME").ok().filter(|s| !s.is_empty());
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(service.unwrap_or_else(|| "loopwright".to_owned()))
            .build();
        processor.set_resource(&resource);
        let scope = InstrumentationScope::builder("loopwright").with_version(env!("CARGO_PKG_VERSION")).build();
        Some(Self { processor, scope })
    }

    fn data(&self, trace_id: TraceId, trace: &str, span: Span) -> SpanData {
        let id = |place: &Place| SpanId::from_bytes(place.span_id(trace).to_be_bytes());
        let context = SpanContext::new(trace_id, id(&span.place), TraceFlags::SAMPLED, false, TraceState::default());
        let attributes = span
            .attributes
            .into_iter()
            .map(|(k, v)| match v {
                Value::Str(v) => KeyValue::new(k, v),
                Value::Int(v) => KeyValue::new(k, v),
                Value::F64(v) => KeyValue::new(k, v),
                Value::Bool(v) => KeyValue::new(k, v),
            })
            .collect();
        SpanData {
            span_context: context,
            parent_span_id: span.parent.as_ref().map_or(SpanId::INVALID, id),
            parent_span_is_remote: false,
            span_kind: if matches!(span.place, Place::Agent(..)) { SpanKind::Client } else { SpanKind::Internal },
            name: span.name.into(),
            start_time: std::time::SystemTime::from(span.start),
            end_time: std::time::SystemTime::from(span.end),
            attributes,
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: match span.error {
                Some(why) => Status::error(why),
                None => Status::Unset,
            },
            instrumentation_scope: self.scope.clone(),
        }
    }
}

impl Observer for Telemetry {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, _pipeline: &Pipeline) {
        let spans = self.spans.of(record, state);
        if spans.is_empty() {
            return;
        }
        let trace = loopwright_engine::trace::trace_id(
            state.started.as_ref().and_then(|s| s.trace_id.as_deref()),
            state.run_id.as_str(),
        );
        let Ok(trace_id) = TraceId::from_hex(&trace) else { return };
        for span in spans {
            let data = self.exporter.data(trace_id, &trace, span);
            self.exporter.processor.on_end(data);
        }
    }
}

impl Drop for Exporter {
    /// The last run is done: what is left is sent, a few seconds at most.
    fn drop(&mut self) {
        let _ = self.processor.shutdown_with_timeout(FLUSH_TIMEOUT);
    }
}

/// Another observer of a run, and the run's traces when a collector is named.
pub struct Traced<O> {
    inner: O,
    telemetry: Option<Telemetry>,
}

impl<O: Observer> Traced<O> {
    /// `inner`, with traces as `config` (or the environment) says.
    pub fn new(inner: O, config: &loopwright_spec::config::Config) -> Self {
        Self { inner, telemetry: Telemetry::new(config) }
    }
}

impl<O: Observer> Observer for Traced<O> {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        self.inner.on_event(record, state, pipeline);
        if let Some(t) = &mut self.telemetry {
            t.on_event(record, state, pipeline);
        }
    }
}
