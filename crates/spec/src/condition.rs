//! Stage conditions: Jinja expressions (minijinja), checked at load and evaluated at run time.
//!
//! Undefined names are errors, never a silent `false` (strict mode), and evaluation runs with
//! a fuel limit so no condition can loop forever.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value};

/// The variables every condition may use (seed 004).
pub const BUILTIN_VARIABLES: [&str; 5] = ["complexity", "task_type", "tags", "always_include", "stage_outputs"];

/// Instructions a single evaluation may run.
const FUEL: u64 = 10_000;

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        env
    })
}

/// A stage output a condition reads: `stage_outputs.<stage>[.<key>]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutputRef {
    /// The stage.
    pub stage: String,
    /// The output key, when the path names one.
    pub key: Option<String>,
}

/// A condition that parsed and names only known variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The expression as written.
    pub source: String,
    /// Top-level variables it reads (`complexity`, `stage_outputs`, a declared var, …).
    pub variables: BTreeSet<String>,
    /// Stage outputs it reads.
    pub outputs: BTreeSet<OutputRef>,
}

/// Why a condition is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionProblem {
    /// What is wrong.
    pub message: String,
    /// Byte range inside the expression, when known.
    pub range: Option<std::ops::Range<usize>>,
    /// How to fix it.
    pub help: Option<String>,
}

/// What a condition may refer to, at its stage's place in the pipeline.
pub struct Scope<'a> {
    /// Variables declared under `vars:`.
    pub vars: &'a BTreeSet<String>,
    /// Earlier stages and their declared outputs.
    pub earlier: &'a BTreeMap<String, Vec<String>>,
    /// Every stage id of the pipeline (to tell a later stage from a missing one).
    pub all: &'a BTreeSet<String>,
    /// The stage the condition belongs to.
    pub this: Option<&'a str>,
}

impl Condition {
    /// Parses `source` and checks every name it uses against `scope`.
    pub fn check(source: &str, scope: &Scope<'_>) -> Result<Self, Vec<ConditionProblem>> {
        let expr = environment().compile_expression(source).map_err(|e| {
            vec![ConditionProblem {
                message: format!("condition does not parse: {}", e.detail().unwrap_or("syntax error")),
                range: e.range(),
                help: Some("conditions use Jinja expression syntax, e.g. `complexity in ['high', 'medium'] and 'ciso' in always_include`".into()),
            }]
        })?;
        let mut problems = Vec::new();
        let mut variables = BTreeSet::new();
        let mut outputs = BTreeSet::new();
        let mut paths: Vec<String> = expr.undeclared_variables(true).into_iter().collect();
        paths.sort();
        for path in paths {
            let mut parts = path.split('.');
            let root = parts.next().unwrap_or_default().to_owned();
            let range = source.find(&path).map(|i| i..i + path.len());
            if root == "stage_outputs" {
                if let Some(stage) = parts.next() {
                    let key = parts.next().map(str::to_owned);
                    match scope.earlier.get(stage) {
                        None => problems.push(ConditionProblem {
                            message: if scope.this == Some(stage) {
                                format!("condition reads `{path}`, but a stage's condition cannot read the stage's own outputs")
                            } else if scope.all.contains(stage) {
                                format!("condition reads `{path}`, but stage `{stage}` runs later, not before this stage")
                            } else {
                                format!("condition reads `{path}`, but there is no stage `{stage}` before this stage")
                            },
                            range,
                            help: Some(format!("earlier stages: {}", list_or_none(scope.earlier.keys()))),
                        }),
                        Some(declared) => match &key {
                            Some(k) if !declared.iter().any(|o| o == k) => problems.push(ConditionProblem {
                                message: format!("condition reads `{path}`, but stage `{stage}` declares no output `{k}`"),
                                range,
                                help: Some(format!("outputs of `{stage}`: {}", list_or_none(declared.iter()))),
                            }),
                            _ => {
                                outputs.insert(OutputRef { stage: stage.to_owned(), key });
                            }
                        },
                    }
                }
            } else if environment().globals().any(|(name, _)| name == root) {
                // A function such as `range` or `dict`: not a variable.
                continue;
            } else if !BUILTIN_VARIABLES.contains(&root.as_str()) && !scope.vars.contains(&root) {
                problems.push(ConditionProblem {
                    message: format!("condition uses unknown variable `{root}`"),
                    range: source.find(&root).map(|i| i..i + root.len()),
                    help: Some(format!(
                        "known variables: {}; declare others under `vars:` at the top of the pipeline",
                        list_or_none(BUILTIN_VARIABLES.iter().copied().chain(scope.vars.iter().map(String::as_str)))
                    )),
                });
            }
            variables.insert(root);
        }
        if problems.is_empty() { Ok(Self { source: source.to_owned(), variables, outputs }) } else { Err(problems) }
    }

    /// Evaluates the condition against a context (a JSON object with every variable).
    pub fn evaluate(&self, context: &serde_json::Value) -> Result<bool, String> {
        let expr = environment().compile_expression(&self.source).map_err(|e| e.to_string())?;
        let value = expr.eval(Value::from(Serde(context))).map_err(|e| match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        })?;
        Ok(value.is_true())
    }
}

fn list_or_none<'a>(items: impl Iterator<Item = impl AsRef<str> + 'a>) -> String {
    let v: Vec<String> = items.map(|s| format!("`{}`", s.as_ref())).collect();
    if v.is_empty() { "none".to_owned() } else { v.join(", ") }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn scope_check(src: &str) -> Result<Condition, Vec<ConditionProblem>> {
        let vars: BTreeSet<String> = ["risk_level".to_owned()].into();
        let earlier: BTreeMap<String, Vec<String>> =
            [("architecture_review".to_owned(), vec!["architecture_review".to_owned(), "risks_identified".to_owned()])]
                .into();
        let all: BTreeSet<String> = ["architecture_review".to_owned(), "quality_review".to_owned()].into();
        Condition::check(src, &Scope { vars: &vars, earlier: &earlier, all: &all, this: Some("quality_review_2") })
    }

    fn eval(src: &str, ctx: &serde_json::Value) -> bool {
        scope_check(src).expect("valid").evaluate(ctx).expect("evaluates")
    }

    fn ctx() -> serde_json::Value {
        json!({
            "complexity": "high", "task_type": "feature", "tags": ["auth"], "always_include": ["ciso", "sre"],
            "risk_level": 2,
            "stage_outputs": {"architecture_review": {"risks_identified": 2, "architecture_review": "ok"}}
        })
    }

    #[test]
    fn seed_examples_evaluate() {
        let c = ctx();
        let cases = [
            ("complexity == 'high'", true),
            ("task_type == 'security'", false),
            ("'ciso' in always_include", true),
            ("complexity in ['high', 'medium']", true),
            ("task_type == 'feature' and complexity == 'high'", true),
            ("stage_outputs.architecture_review.risks_identified > 0", true),
            ("'legal' not in always_include", true),
            ("complexity not in ['low']", true),
            ("not (complexity == 'low') and stage_outputs.architecture_review.risks_identified >= 2", true),
            ("complexity == 'low' or 'auth' in tags", true),
            ("(complexity == 'low' or task_type == 'bug') and 'auth' in tags", false),
            ("risk_level > 1", true),
            ("complexity != 'high'", false),
        ];
        let got: Vec<(&str, bool)> = cases.iter().map(|(s, _)| (*s, eval(s, &c))).collect();
        assert_eq!(got, cases.to_vec());
    }

    #[test]
    fn none_complexity_compares_false_not_error() {
        let c = json!({"complexity": null, "task_type": null, "tags": [], "always_include": [], "stage_outputs": {}, "risk_level": 0});
        assert!(!eval("complexity == 'high'", &c));
        assert!(!eval("complexity in ['high', 'medium']", &c));
        assert!(!eval("'ciso' in always_include", &c));
    }

    #[test]
    fn records_variables_and_outputs() {
        let cond = scope_check("stage_outputs.architecture_review.risks_identified > 0 and complexity == 'high'")
            .expect("valid");
        assert_eq!(cond.variables, ["complexity".to_owned(), "stage_outputs".to_owned()].into());
        assert_eq!(
            cond.outputs,
            [OutputRef { stage: "architecture_review".into(), key: Some("risks_identified".into()) }].into()
        );
    }

    #[test]
    fn unknown_variable_is_an_error() {
        let problems = scope_check("complexty == 'high'").expect_err("invalid");
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].message, "condition uses unknown variable `complexty`");
        assert_eq!(problems[0].range, Some(0..9));
    }

    #[test]
    fn syntax_error_is_reported_with_range() {
        let problems = scope_check("complexity == 'high' and").expect_err("invalid");
        assert!(problems[0].message.starts_with("condition does not parse: "), "{}", problems[0].message);
        assert!(problems[0].range.is_some());
    }

    #[test]
    fn stage_output_rules() {
        let later = scope_check("stage_outputs.quality_review.x > 0").expect_err("later stage");
        assert_eq!(
            later[0].message,
            "condition reads `stage_outputs.quality_review.x`, but stage `quality_review` runs later, not before this stage"
        );
        let missing = scope_check("stage_outputs.nope.x > 0").expect_err("no stage");
        assert_eq!(
            missing[0].message,
            "condition reads `stage_outputs.nope.x`, but there is no stage `nope` before this stage"
        );
        let key = scope_check("stage_outputs.architecture_review.riskz > 0").expect_err("no key");
        assert_eq!(
            key[0].message,
            "condition reads `stage_outputs.architecture_review.riskz`, but stage `architecture_review` declares no output `riskz`"
        );
    }

    #[test]
    fn runaway_expression_runs_out_of_fuel() {
        let c = ctx();
        let cond = scope_check("range(100000000) | list | length > 0").expect("parses");
        assert!(cond.evaluate(&c).is_err());
    }
}
