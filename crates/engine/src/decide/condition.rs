//! A stage's `condition`, evaluated against the run's variables and earlier outputs.

use loopwright_spec::outputs::typed_value;
use loopwright_spec::{Condition, Pipeline, Stage, StageId};
use serde_json::{Map, Value, json};

use crate::event::{ConditionOutcome, Event};
use crate::state::RunState;

/// Evaluates a stage's condition against the run's variables and earlier outputs.
pub(super) fn evaluate_condition(pipeline: &Pipeline, state: &RunState, stage: &Stage, condition: &Condition) -> Event {
    let context = condition_context(pipeline, state);
    let mut values = Map::new();
    for var in &condition.variables {
        if var == "stage_outputs" {
            let mut outs = Map::new();
            for r in &condition.outputs {
                let v = context["stage_outputs"].get(&r.stage).cloned().unwrap_or(Value::Null);
                let v = match &r.key {
                    Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
                    None => v,
                };
                outs.insert(r.key.as_ref().map_or_else(|| r.stage.clone(), |k| format!("{}.{k}", r.stage)), v);
            }
            values.insert(var.clone(), Value::Object(outs));
        } else {
            values.insert(var.clone(), context.get(var).cloned().unwrap_or(Value::Null));
        }
    }
    let skipped = condition.outputs.iter().find(|r| state.outputs_of(&r.stage).is_none());
    let outcome = match skipped {
        Some(r) => ConditionOutcome::ReadsSkippedStage { stage: StageId::parse(&r.stage).expect("validated stage id") },
        None => match condition.evaluate(&context) {
            Ok(true) => ConditionOutcome::True,
            Ok(false) => ConditionOutcome::False,
            Err(message) => ConditionOutcome::Error { message },
        },
    };
    Event::ConditionEvaluated {
        stage: stage.id.clone(),
        condition: condition.source.clone(),
        values: Value::Object(values),
        outcome,
    }
}

/// The variables conditions see: `complexity`, `task_type`, `tags`, `always_include`,
/// `stage_outputs` and the pipeline's declared `vars`.
pub fn condition_context(pipeline: &Pipeline, state: &RunState) -> Value {
    let given = state.started.as_ref().map(|s| s.vars.clone()).unwrap_or_default();
    let text = |k: &str| given.get(k).filter(|v| !v.is_empty()).map_or(Value::Null, |v| Value::String(v.clone()));
    let list = |k: &str| {
        Value::Array(
            given
                .get(k)
                .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| json!(s)).collect())
                .unwrap_or_default(),
        )
    };
    let mut ctx = Map::new();
    for (name, default) in &pipeline.vars {
        ctx.insert(name.clone(), given.get(name).map_or_else(|| default.clone(), |v| typed_value(v)));
    }
    ctx.insert("complexity".into(), text("complexity"));
    ctx.insert("task_type".into(), text("task_type"));
    ctx.insert("tags".into(), list("tags"));
    ctx.insert("always_include".into(), list("always_include"));
    let mut outs = Map::new();
    for (stage, outputs) in state.all_outputs() {
        outs.insert(
            stage.to_owned(),
            Value::Object(outputs.iter().map(|(k, v)| (k.clone(), typed_value(v))).collect()),
        );
    }
    ctx.insert("stage_outputs".into(), Value::Object(outs));
    Value::Object(ctx)
}
