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

/// The longest condition accepted (characters). The documents' conditions are under 100; a
/// bound on the source bounds what a condition can build, since an expression has no loops.
pub const MAX_SOURCE: usize = 500;

/// The filters a condition may use: each gives a value no larger than its input (a count, a
/// case change, a subset, a number). Those that build larger values (`replace`, `join`,
/// `split`, `batch`, `indent`, `format`, `list`, `tojson`, …) are not available, and neither
/// are functions (`range`, `dict`, …), nor `*` (which repeats strings and lists).
const FILTERS: [&str; 27] = [
    "lower",
    "upper",
    "title",
    "capitalize",
    "length",
    "count",
    "reverse",
    "trim",
    "default",
    "d",
    "round",
    "abs",
    "int",
    "float",
    "first",
    "last",
    "min",
    "max",
    "sort",
    "bool",
    "unique",
    "select",
    "reject",
    "sum",
    "items",
    "dictsort",
    "attr",
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(FUEL));
        for name in [
            "replace",
            "join",
            "split",
            "lines",
            "escape",
            "e",
            "safe",
            "indent",
            "format",
            "tojson",
            "urlencode",
            "pprint",
            "batch",
            "slice",
            "map",
            "groupby",
            "chain",
            "zip",
            "list",
            "string",
            "center",
            "truncate",
            "wordwrap",
            "wordcount",
            "striptags",
            "filesizeformat",
            "dictsort_by",
        ] {
            env.remove_filter(name);
        }
        let globals: Vec<String> = env.globals().map(|(name, _)| name.to_owned()).collect();
        for name in globals {
            env.remove_global(&name);
        }
        env
    })
}

/// What a condition may not do, found in its syntax tree before it ever runs: call a
/// function, use a filter outside [`FILTERS`], or multiply.
fn limits(expr: &minijinja::machinery::ast::Expr<'_>, problems: &mut Vec<ConditionProblem>) {
    use minijinja::machinery::ast::{BinOpKind, CallArg, Expr};
    let span = |s: minijinja::machinery::Span| Some(s.start_offset as usize..s.end_offset as usize);
    let args = |list: &[CallArg<'_>], problems: &mut Vec<ConditionProblem>| {
        for a in list {
            match a {
                CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => {
                    limits(e, problems)
                }
            }
        }
    };
    match expr {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            limits(&s.expr, problems);
            for e in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                limits(e, problems);
            }
        }
        Expr::UnaryOp(u) => limits(&u.expr, problems),
        Expr::BinOp(b) => {
            if matches!(b.op, BinOpKind::Mul | BinOpKind::Pow) {
                problems.push(ConditionProblem {
                    message: "conditions cannot multiply (`*` and `**` repeat strings and lists without bound)".into(),
                    range: span(b.span()),
                    help: Some("compare values instead, e.g. `stage_outputs.review.risks_identified > 2`".into()),
                });
            }
            limits(&b.left, problems);
            limits(&b.right, problems);
        }
        Expr::Compare(c) => {
            limits(&c.expr, problems);
            for op in &c.ops {
                limits(&op.expr, problems);
            }
        }
        Expr::IfExpr(i) => {
            limits(&i.test_expr, problems);
            limits(&i.true_expr, problems);
            if let Some(e) = &i.false_expr {
                limits(e, problems);
            }
        }
        Expr::Filter(f) => {
            if !FILTERS.contains(&f.name) {
                problems.push(ConditionProblem {
                    message: format!("conditions cannot use the filter `{}`", f.name),
                    range: span(f.span()),
                    help: Some(format!("filters a condition may use: {}", FILTERS.join(", "))),
                });
            }
            if let Some(e) = &f.expr {
                limits(e, problems);
            }
            args(&f.args, problems);
        }
        Expr::Test(t) => {
            limits(&t.expr, problems);
            args(&t.args, problems);
        }
        Expr::GetAttr(g) => limits(&g.expr, problems),
        Expr::GetItem(g) => {
            limits(&g.expr, problems);
            limits(&g.subscript_expr, problems);
        }
        Expr::Call(c) => problems.push(ConditionProblem {
            message: "conditions cannot call functions".into(),
            range: span(c.span()),
            help: Some("a condition compares variables and stage outputs; see `loopwright schema`".into()),
        }),
        Expr::List(l) => l.items.iter().for_each(|e| limits(e, problems)),
        Expr::Tuple(t) => t.items.iter().for_each(|e| limits(e, problems)),
        Expr::Map(m) => m.keys.iter().chain(&m.values).for_each(|e| limits(e, problems)),
    }
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
        let length = source.chars().count();
        if length > MAX_SOURCE {
            return Err(vec![ConditionProblem {
                message: format!("condition is {length} characters long; at most {MAX_SOURCE} are accepted"),
                range: None,
                help: Some("split the decision: compute it in an earlier stage's output and compare that".into()),
            }]);
        }
        if let Ok(ast) = minijinja::machinery::parse_expr(source) {
            let mut problems = Vec::new();
            limits(&ast, &mut problems);
            if !problems.is_empty() {
                return Err(problems);
            }
        }
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
    fn what_could_build_without_bound_is_refused_before_it_runs() {
        let messages =
            |src: &str| -> Vec<String> { scope_check(src).expect_err(src).into_iter().map(|p| p.message).collect() };
        assert_eq!(messages("range(100000000) | length > 0"), vec!["conditions cannot call functions"]);
        assert_eq!(
            messages("('a' * 100000000) | length > 0"),
            vec!["conditions cannot multiply (`*` and `**` repeat strings and lists without bound)"]
        );
        let bomb = format!("'a'{} | length > 0", " | replace('a', 'aaaaaaaaaa')".repeat(10));
        assert_eq!(messages(&bomb), vec!["conditions cannot use the filter `replace`"; 10]);
        let chain = vec!["complexity == 'high'"; 30_000].join(" or ");
        assert_eq!(
            messages(&chain),
            vec![format!("condition is {} characters long; at most 500 are accepted", chain.len())]
        );
        // What conditions are for still works, filters included.
        assert!(eval("tags | length > 0 and (complexity | upper) == 'HIGH'", &ctx()));
    }
}
