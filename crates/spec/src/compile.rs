//! `compile`: raw pipeline file -> validated [`Pipeline`], with every problem reported.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_saphyr::{Location, Spanned};

use crate::agent::Agent;
use crate::condition::{Condition, Scope};
use crate::diag::{Diagnostic, Diagnostics, Position, SourceFile, closest, yaml_error};
use crate::pipeline::{
    AgentRef, Backoff, Budget, Candidates, Check, CheckKind, ClosedLoop, Complexity, FeedbackLoop, Mode, Pipeline,
    RetryPolicy, Rollback, RollbackStrategy, Select, Stage, StageId,
};
use crate::raw::{RawNetworkValue, RawPipeline, RawRun, RawSelectValue, RawStage};

/// The stages' graph, by position: what each needs, and what each needs through others.
struct Graph {
    needs: Vec<Vec<usize>>,
    ancestors: Vec<BTreeSet<usize>>,
}
use crate::sandbox::{Host, Network, SandboxMode};

/// Inputs every pipeline may use without a stage producing them.
pub const BUILTIN_INITIAL_INPUTS: [&str; 2] = ["task_description", "context"];

/// The default stage timeout (seed 004).
pub const DEFAULT_TIMEOUT_MINUTES: f64 = 30.0;

/// What compilation needs besides the file itself.
pub struct CompileContext<'a> {
    /// Agents found in the workspace, by name.
    pub agents: &'a BTreeMap<String, Agent>,
    /// Input keys the caller provides at run time (`--input`), besides the declared ones.
    pub extra_inputs: &'a [String],
    /// Stage timeout when a stage sets none.
    pub default_timeout_minutes: f64,
}

/// Parses and validates a pipeline file.
pub fn compile(source: &SourceFile, cx: &CompileContext<'_>) -> Result<Pipeline, Diagnostics> {
    let mut c = Compiler { source, diags: Diagnostics::default(), producers: BTreeMap::new(), at: 0 };
    c.diags.add_source(source);
    let raw: RawPipeline =
        match serde_saphyr::from_str_with_options(&source.text, serde_saphyr::options! { with_snippet: false }) {
            Ok(raw) => raw,
            Err(err) => {
                let mut d = yaml_error(source, &err, 0, 0);
                if d.message.contains("invalid type") && d.position.is_some_and(|p| p.line == 1) {
                    d = d.help("a pipeline file is a YAML mapping with `name`, `description`, `version` and `stages`");
                }
                c.diags.push(d);
                return Err(c.diags);
            }
        };
    let pipeline = c.pipeline(raw, cx);
    match pipeline {
        Some(p) if c.diags.is_empty() => Ok(p),
        _ => {
            c.diags.sort();
            Err(c.diags)
        }
    }
}

struct Compiler<'a> {
    source: &'a SourceFile,
    diags: Diagnostics,
    /// Each output key and the first stage that declares it (its id and position).
    producers: BTreeMap<String, (String, usize)>,
    /// The position of the stage being compiled.
    at: usize,
}

/// Where a diagnostic points when it has no node of its own.
#[derive(Clone, Copy)]
struct Anchor<'a> {
    stage: Option<&'a str>,
    location: &'a Location,
}

impl Compiler<'_> {
    fn pos(&self, loc: &Location) -> Position {
        Position::from_location(loc, self.source, 0, 0)
    }

    /// A gate's `approvers` (and `prevent_self_approval`), which go with `requires_approval`.
    fn approvers(&mut self, rs: &RawStage, stage: Option<&str>) -> Vec<crate::pipeline::Approver> {
        let gate = rs.requires_approval.as_ref().is_some_and(|r| r.value);
        if !gate {
            if let Some(first) = rs.approvers.as_ref().and_then(|a| a.first()) {
                let message = "`approvers` goes with `requires_approval: true`: only a gate is answered";
                self.error(Some(&first.referenced), stage, "approvers", message.to_owned());
            }
            if let Some(p) = &rs.prevent_self_approval {
                let message = "`prevent_self_approval` goes with `requires_approval: true`";
                self.error(Some(&p.referenced), stage, "prevent_self_approval", message.to_owned());
            }
        }
        let mut approvers = Vec::new();
        for a in rs.approvers.iter().flatten() {
            match crate::pipeline::Approver::parse(&a.value) {
                Ok(approver) if !approvers.contains(&approver) => approvers.push(approver),
                Ok(approver) => {
                    self.error(Some(&a.referenced), stage, "approvers", format!("`{approver}` is listed twice"));
                }
                Err(message) => {
                    self.error(Some(&a.referenced), stage, "approvers", message);
                }
            }
        }
        approvers
    }

    fn error(
        &mut self,
        loc: Option<&Location>,
        stage: Option<&str>,
        field: &str,
        message: impl Into<String>,
    ) -> &mut Diagnostic {
        let mut d = Diagnostic::new(self.source, message).stage(stage).field(field);
        if let Some(loc) = loc {
            d = d.at(self.pos(loc));
        }
        self.diags.push(d);
        let last = self.diags.items.len() - 1;
        &mut self.diags.items[last]
    }

    fn required<'v, T>(
        &mut self,
        value: &'v Option<Spanned<T>>,
        anchor: Anchor<'_>,
        field: &str,
        what: &str,
    ) -> Option<&'v T> {
        match value {
            Some(v) => Some(&v.value),
            None => {
                let whose = anchor.stage.map_or_else(|| "the pipeline".to_owned(), |s| format!("stage `{s}`"));
                let d = self.error(
                    Some(anchor.location),
                    anchor.stage,
                    field,
                    format!("missing required field `{field}` in {whose}"),
                );
                d.label = Some(format!("`{field}` is missing here"));
                d.help = Some(format!("add `{field}:` ({what})"));
                None
            }
        }
    }

    fn non_empty_string(
        &mut self,
        value: &Option<Spanned<String>>,
        anchor: Anchor<'_>,
        field: &str,
        what: &str,
    ) -> Option<String> {
        let v = value.as_ref()?;
        if v.value.trim().is_empty() {
            self.error(Some(&v.referenced), anchor.stage, field, format!("`{field}` is empty, expected {what}"));
            return None;
        }
        Some(v.value.clone())
    }

    fn pipeline(&mut self, raw: RawPipeline, cx: &CompileContext<'_>) -> Option<Pipeline> {
        let top = Location::UNKNOWN;
        let top_anchor = Anchor { stage: None, location: &top };
        let name = self.required(&raw.name, top_anchor, "name", "a unique pipeline identifier").cloned();
        let name = name.and_then(|_| self.non_empty_string(&raw.name, top_anchor, "name", "a pipeline identifier"));
        let description =
            self.required(&raw.description, top_anchor, "description", "what this pipeline does").cloned();
        let version = self.required(&raw.version, top_anchor, "version", "the schema version, e.g. `1`").copied();
        let max_retries = match &raw.max_retries {
            None => 5,
            Some(m) if m.value < 0 => {
                self.error(
                    Some(&m.referenced),
                    None,
                    "max_retries",
                    format!("`max_retries` is {}, expected 0 or more", m.value),
                );
                5
            }
            Some(m) => u32::try_from(m.value).unwrap_or(u32::MAX),
        };
        let mut vars = BTreeMap::new();
        for (key, value) in raw.vars.iter().flat_map(|v| v.value.iter()) {
            let field = format!("vars.{key}");
            if crate::condition::BUILTIN_VARIABLES.contains(&key.as_str()) {
                self.error(
                    Some(&value.referenced),
                    None,
                    &field,
                    format!("`{key}` is a built-in variable and cannot be declared under `vars:`"),
                );
            } else if StageId::parse(key).is_none() {
                self.error(
                    Some(&value.referenced),
                    None,
                    &field,
                    format!("variable name `{key}` must match ^[a-z][a-z0-9_]*$"),
                );
            } else {
                vars.insert(key.clone(), value.value.clone());
            }
        }
        let mut initial_inputs: Vec<String> = BUILTIN_INITIAL_INPUTS.iter().map(|s| (*s).to_owned()).collect();
        for i in raw.initial_inputs.iter().flatten() {
            if !initial_inputs.contains(&i.value) {
                initial_inputs.push(i.value.clone());
            }
        }
        for i in cx.extra_inputs {
            if !initial_inputs.contains(i) {
                initial_inputs.push(i.clone());
            }
        }

        let stages = match &raw.stages {
            None => {
                self.required(&raw.stages, top_anchor, "stages", "a list of stages");
                Vec::new()
            }
            Some(list) if list.value.is_empty() => {
                self.error(Some(&list.referenced), None, "stages", "`stages` is empty, expected at least one stage");
                Vec::new()
            }
            Some(list) => self.stages(&list.value, &vars, &initial_inputs, cx),
        };
        let budget = raw.budget.as_ref().map_or(Some(Budget::default()), |b| self.budget(b, None));
        let mut pipeline = Pipeline::new(
            name?,
            description?,
            version?,
            max_retries,
            vars,
            initial_inputs,
            stages,
            cx.agents.clone(),
            self.source.clone(),
        );
        pipeline.budget = budget?;
        pipeline.max_parallel = match &raw.max_parallel {
            None => crate::pipeline::DEFAULT_MAX_PARALLEL,
            Some(m) if m.value < 1 || m.value > 64 => {
                self.error(
                    Some(&m.referenced),
                    None,
                    "max_parallel",
                    format!("`max_parallel` is {}, expected 1 to 64 stages at once", m.value),
                );
                crate::pipeline::DEFAULT_MAX_PARALLEL
            }
            Some(m) => usize::try_from(m.value).unwrap_or(crate::pipeline::DEFAULT_MAX_PARALLEL),
        };
        pipeline.repo = raw.repo.as_ref().and_then(|repo| {
            let fine = !repo.value.trim().is_empty() && !repo.value.starts_with('-');
            if !fine {
                self.error(
                    Some(&repo.referenced),
                    None,
                    "repo",
                    format!("`repo` is `{}`, expected a git repository's URL or path", repo.value),
                );
            }
            fine.then(|| repo.value.clone())
        });
        for (key, value) in raw.runs_on.iter().flat_map(|r| r.value.iter()) {
            if !crate::pipeline::is_label(key) || !crate::pipeline::is_label(&value.value) {
                self.error(
                    Some(&value.referenced),
                    None,
                    &format!("runs_on.{key}"),
                    format!(
                        "`{key}: {}` is not a label, expected a name and a value of letters, digits, `-`, `_`, `.` or `/` (at most 64 each)",
                        value.value
                    ),
                );
            } else {
                pipeline.runs_on.insert(key.clone(), value.value.clone());
            }
        }
        Some(pipeline)
    }

    fn stages(
        &mut self,
        raw: &[Spanned<RawStage>],
        vars: &BTreeMap<String, serde_json::Value>,
        initial_inputs: &[String],
        cx: &CompileContext<'_>,
    ) -> Vec<Stage> {
        let var_names: BTreeSet<String> = vars.keys().cloned().collect();
        let all_ids: BTreeSet<String> =
            raw.iter().filter_map(|s| s.value.id.as_ref().map(|i| i.value.clone())).collect();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let graph = self.graph(raw);
        for (i, rs) in raw.iter().map(|s| &s.value).enumerate() {
            for output in rs.outputs.iter().flatten() {
                if let Some(id) = &rs.id {
                    self.producers.entry(output.value.clone()).or_insert_with(|| (id.value.clone(), i));
                }
            }
        }
        let mut stages = Vec::new();
        for (index, spanned) in raw.iter().enumerate() {
            let rs = &spanned.value;
            let label = rs.id.as_ref().map_or_else(|| format!("#{}", index + 1), |i| i.value.clone());
            let anchor = Anchor { stage: Some(&label), location: &spanned.referenced };
            let id = self.stage_id(rs, anchor, &mut seen, index);
            // What a stage may read (inputs, conditions) and loop back to comes from the
            // stages it needs, directly or through others: in a line, every stage before it.
            let mut earlier: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut modes: BTreeMap<String, Mode> = BTreeMap::new();
            for &a in &graph.ancestors[index] {
                let before = &raw[a].value;
                // Only a valid id, where it first appears (a duplicate or a bad one is reported
                // at its own stage).
                let Some(aid) = before.id.as_ref().map(|i| i.value.clone()) else { continue };
                let first = raw.iter().position(|s| s.value.id.as_ref().is_some_and(|i| i.value == aid));
                if StageId::parse(&aid).is_none() || first != Some(a) {
                    continue;
                }
                earlier.insert(aid.clone(), before.outputs.iter().flatten().map(|o| o.value.clone()).collect());
                if let Some(mode) = before.mode.as_ref().and_then(|m| Mode::parse(&m.value)) {
                    modes.insert(aid, mode);
                }
            }
            self.at = index;
            let stage = self.stage(rs, anchor, id.clone(), &earlier, &all_ids, &var_names, initial_inputs, &modes, cx);
            if let Some(mut stage) = stage {
                stage.needs = graph.needs[index]
                    .iter()
                    .filter_map(|&n| raw[n].value.id.as_ref())
                    .filter_map(|i| StageId::parse(&i.value))
                    .collect();
                stages.push(stage);
            }
        }
        self.judges(raw, &mut stages);
        stages
    }

    /// The stages' graph: what each needs (its `needs:`, else the stage before it), checked —
    /// known ids, none twice, not itself, no cycle — and what each needs through others.
    fn graph(&mut self, raw: &[Spanned<RawStage>]) -> Graph {
        let id_of = |i: usize| raw[i].value.id.as_ref().map(|s| s.value.as_str());
        let mut position: BTreeMap<&str, usize> = BTreeMap::new();
        for i in 0..raw.len() {
            if let Some(id) = id_of(i) {
                position.entry(id).or_insert(i);
            }
        }
        let known: Vec<&str> = position.keys().copied().collect();
        let mut needs: Vec<Vec<usize>> = Vec::with_capacity(raw.len());
        // Where each edge is written (none: the default, the stage before).
        let mut written: Vec<Vec<Option<&Location>>> = Vec::with_capacity(raw.len());
        for (i, spanned) in raw.iter().enumerate() {
            let label = id_of(i).map(str::to_owned);
            let (mut edges, mut at) = (Vec::new(), Vec::new());
            match &spanned.value.needs {
                None if i > 0 => {
                    edges.push(i - 1);
                    at.push(None);
                }
                None => {}
                Some(list) => {
                    for name in list {
                        let loc = Some(&name.referenced);
                        match position.get(name.value.as_str()) {
                            None => {
                                let d = self.error(
                                    loc,
                                    label.as_deref(),
                                    "needs",
                                    format!("`needs:` names stage `{}`, which the pipeline does not have", name.value),
                                );
                                d.label = Some("unknown stage".into());
                                d.help = Some(match closest(&name.value, &known) {
                                    Some(best) => format!("did you mean `{best}`?"),
                                    None => format!(
                                        "the stages are {}",
                                        known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                                    ),
                                });
                            }
                            Some(&j) if j == i => {
                                self.error(loc, label.as_deref(), "needs", "a stage cannot need itself");
                            }
                            Some(&j) if edges.contains(&j) => {
                                self.error(
                                    loc,
                                    label.as_deref(),
                                    "needs",
                                    format!("`needs:` names stage `{}` twice", name.value),
                                );
                            }
                            Some(&j) => {
                                edges.push(j);
                                at.push(loc);
                            }
                        }
                    }
                }
            }
            needs.push(edges);
            written.push(at);
        }
        // A cycle is reported once, where the edge that closes it is written.
        let mut state = vec![0u8; raw.len()];
        let mut stack: Vec<usize> = Vec::new();
        for start in 0..raw.len() {
            if state[start] != 0 {
                continue;
            }
            // Depth first, by hand: (stage, next edge to follow).
            let mut work = vec![(start, 0usize)];
            state[start] = 1;
            stack.push(start);
            while let Some(&mut (node, ref mut edge)) = work.last_mut() {
                if let Some(&next) = needs[node].get(*edge) {
                    let e = *edge;
                    *edge += 1;
                    match state[next] {
                        0 => {
                            state[next] = 1;
                            stack.push(next);
                            work.push((next, 0));
                        }
                        1 => {
                            let from = stack.iter().position(|&s| s == next).unwrap_or(0);
                            let mut path: Vec<&str> = stack[from..].iter().map(|&s| id_of(s).unwrap_or("?")).collect();
                            path.push(id_of(next).unwrap_or("?"));
                            let loc = written[node][e].or(Some(&raw[node].referenced));
                            let d = self.error(
                                loc,
                                id_of(node),
                                "needs",
                                format!("the stages' `needs:` make a cycle: {}", path.join(" needs ")),
                            );
                            d.label = Some("closes the cycle".into());
                            d.help = Some(
                                "a stage without `needs:` needs the stage before it; break the cycle by changing one `needs:`"
                                    .into(),
                            );
                        }
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    stack.pop();
                    work.pop();
                }
            }
        }
        let ancestors = crate::pipeline::reachable(&needs);
        Graph { needs, ancestors }
    }

    fn stage_id(
        &mut self,
        rs: &RawStage,
        anchor: Anchor<'_>,
        seen: &mut BTreeMap<String, usize>,
        index: usize,
    ) -> Option<StageId> {
        let raw_id = self.required(&rs.id, anchor, "id", "a unique id matching ^[a-z][a-z0-9_]*$")?;
        let loc = rs.id.as_ref().map(|i| &i.referenced);
        let id = match StageId::parse(raw_id) {
            Some(id) => id,
            None => {
                let suggestion: String =
                    raw_id.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                let d = self.error(
                    loc,
                    Some(raw_id),
                    "id",
                    format!("stage id `{raw_id}` does not match ^[a-z][a-z0-9_]*$"),
                );
                d.label = Some("invalid stage id".into());
                d.help = Some(if StageId::parse(&suggestion).is_some() {
                    format!("use lowercase letters, digits and `_`, starting with a letter: `{suggestion}`")
                } else {
                    "use lowercase letters, digits and `_`, starting with a letter".into()
                });
                return None;
            }
        };
        if let Some(first) = seen.get(raw_id) {
            let d = self.error(
                loc,
                Some(raw_id),
                "id",
                format!("duplicate stage id `{raw_id}`: stage #{} already uses it", first + 1),
            );
            d.label = Some("duplicate id".into());
            d.help = Some("stage ids must be unique within a pipeline".into());
            return None;
        }
        seen.insert(raw_id.clone(), index);
        Some(id)
    }

    #[allow(clippy::too_many_arguments)]
    fn stage(
        &mut self,
        rs: &RawStage,
        anchor: Anchor<'_>,
        id: Option<StageId>,
        earlier: &BTreeMap<String, Vec<String>>,
        all: &BTreeSet<String>,
        vars: &BTreeSet<String>,
        initial_inputs: &[String],
        modes: &BTreeMap<String, Mode>,
        cx: &CompileContext<'_>,
    ) -> Option<Stage> {
        let stage = anchor.stage;
        let agent_name = self.required(&rs.agent, anchor, "agent", "an agent name, or `shell`").cloned();
        let mode = self.required(&rs.mode, anchor, "mode", "`plan` or `agent`").and_then(|m| match Mode::parse(m) {
            Some(mode) => Some(mode),
            None => {
                let loc = rs.mode.as_ref().map(|m| &m.referenced);
                let d = self.error(loc, stage, "mode", format!("unknown mode `{m}`, expected `plan` or `agent`"));
                d.label = Some("expected plan or agent".into());
                d.help = Some("`plan` is read-only review; `agent` may change files".into());
                None
            }
        });
        let description = self.required(&rs.description, anchor, "description", "the stage's purpose").cloned();

        let agent = agent_name.as_ref().and_then(|name| self.agent_ref(rs, stage, name, mode, cx));
        let run = self.run_commands(rs, stage, &agent);

        let mut inputs = Vec::new();
        for input in rs.inputs.iter().flatten() {
            let key = &input.value;
            let produced = earlier.values().any(|outs| outs.contains(key));
            // An earlier stage makes it, but this one does not wait for it.
            let unneeded = self.producers.get(key).filter(|(_, i)| *i < self.at).map(|(id, _)| id.clone());
            if let (false, false, Some(from)) = (produced, initial_inputs.contains(key), unneeded) {
                let d = self.error(
                    Some(&input.referenced),
                    stage,
                    "inputs",
                    format!("input `{key}` comes from stage `{from}`, which this stage does not need"),
                );
                d.label = Some("not produced before this stage starts".into());
                d.help = Some(format!("add `{from}` to this stage's `needs:`"));
            } else if !produced && !initial_inputs.contains(key) {
                let d = self.error(
                    Some(&input.referenced),
                    stage,
                    "inputs",
                    format!("input `{key}` is not an output of any earlier stage nor an initial input"),
                );
                d.label = Some("no earlier stage produces this".into());
                let known: Vec<&str> = earlier
                    .values()
                    .flatten()
                    .map(String::as_str)
                    .chain(initial_inputs.iter().map(String::as_str))
                    .collect();
                d.help = Some(match closest(key, &known) {
                    Some(best) => format!("did you mean `{best}`?"),
                    None => format!(
                        "available here: {}; an input the caller provides is declared under `initial_inputs:` and given with `--input {key}=...`",
                        known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            inputs.push(key.clone());
        }
        let mut outputs: Vec<String> = Vec::new();
        for output in rs.outputs.iter().flatten() {
            if StageId::parse(&output.value).is_none() {
                self.error(
                    Some(&output.referenced),
                    stage,
                    "outputs",
                    format!("output key `{}` must match ^[a-z][a-z0-9_]*$", output.value),
                );
            } else if outputs.contains(&output.value) {
                self.error(
                    Some(&output.referenced),
                    stage,
                    "outputs",
                    format!("output `{}` is declared twice", output.value),
                );
            } else {
                outputs.push(output.value.clone());
            }
        }

        let condition = rs.condition.as_ref().and_then(|c| self.condition(c, stage, earlier, all, vars));
        let timeout = match &rs.timeout_minutes {
            Some(t) if !(t.value.is_finite() && t.value > 0.0) => {
                self.error(
                    Some(&t.referenced),
                    stage,
                    "timeout_minutes",
                    format!(
                        "`timeout_minutes` is {}, expected a number of minutes above 0 (fractions allowed: 0.05 = 3 s)",
                        t.value
                    ),
                );
                None
            }
            Some(t) => Some(Duration::from_secs_f64(t.value * 60.0)),
            None => Some(Duration::from_secs_f64(cx.default_timeout_minutes * 60.0)),
        };
        let retry = rs.retry.as_ref().and_then(|r| self.retry(r, stage));
        let rollback = rs.rollback.as_ref().and_then(|r| self.rollback(r, stage));
        let checks = self.checks(rs, stage);
        let closed_loop = rs.closed_loop.as_ref().and_then(|c| self.closed_loop(c, stage));
        let feedback_loop =
            rs.feedback_loop.as_ref().and_then(|f| self.feedback_loop(f, stage, mode, &outputs, earlier, modes));
        let budget = rs.budget.as_ref().map_or(Some(Budget::default()), |b| self.budget(b, stage));
        let sandbox = rs.sandbox.as_ref().map(|m| self.sandbox_mode(m, stage));
        let network = rs.network.as_ref().map(|n| self.network(n, stage, &agent));
        let env = rs.env.as_ref().map_or(Some(Vec::new()), |e| self.env_names(e, stage));
        let fallback = self.fallback(rs, stage, &agent, mode, cx);
        let candidates = rs.candidates.as_ref().map(|c| self.candidates(c, stage, &agent, mode, cx));
        let approvers = self.approvers(rs, stage);

        Some(Stage {
            id: id?,
            agent: agent?,
            mode: mode?,
            description: description?,
            inputs,
            outputs,
            condition: match &rs.condition {
                Some(_) => Some(condition?),
                None => None,
            },
            requires_approval: rs.requires_approval.as_ref().is_some_and(|r| r.value),
            approvers,
            prevent_self_approval: rs.prevent_self_approval.as_ref().map(|p| p.value),
            timeout: timeout?,
            retry: match &rs.retry {
                Some(_) => Some(retry?),
                None => None,
            },
            rollback: match &rs.rollback {
                Some(_) => Some(rollback?),
                None => None,
            },
            skill: rs.skill.as_ref().map(|s| s.value.clone()),
            run: run?,
            checks: checks?,
            closed_loop,
            feedback_loop,
            budget: budget?,
            sandbox: match sandbox {
                Some(mode) => Some(mode?),
                None => None,
            },
            network: match network {
                Some(network) => Some(network?),
                None => None,
            },
            env: env?,
            fallback: fallback?,
            needs: Vec::new(),
            judges: None,
            candidates: match candidates {
                Some(c) => Some(c?),
                None => None,
            },
        })
    }

    /// A stage's `candidates:`: 2 to 8, agents that may run in its mode (the stage's own by
    /// default), known selectors or a judge; an agent-mode stage.
    fn candidates(
        &mut self,
        raw: &Spanned<crate::raw::RawCandidates>,
        stage: Option<&str>,
        agent: &Option<AgentRef>,
        mode: Option<Mode>,
        cx: &CompileContext<'_>,
    ) -> Option<Candidates> {
        let at = &raw.referenced;
        let mut ok = true;
        if mode == Some(Mode::Plan) {
            let d = self.error(
                Some(at),
                stage,
                "candidates",
                "best of N applies a winner's changes: it needs `mode: agent`",
            );
            d.help = Some("set `mode: agent`, or remove `candidates:`".into());
            ok = false;
        }
        if matches!(agent, Some(AgentRef::Shell)) && raw.value.agents.is_none() {
            self.error(
                Some(at),
                stage,
                "candidates",
                "best of N needs agents: name them in `candidates.agents`, or run the stage with an agent",
            );
            ok = false;
        }
        let count = match &raw.value.count {
            None => {
                self.error(
                    Some(at),
                    stage,
                    "candidates.count",
                    "missing `count`, expected how many attempts at once (2 to 8)",
                );
                ok = false;
                2
            }
            Some(c) if !(2..=8).contains(&c.value) => {
                self.error(
                    Some(&c.referenced),
                    stage,
                    "candidates.count",
                    format!("`count` is {}, expected 2 to 8", c.value),
                );
                ok = false;
                2
            }
            Some(c) => usize::try_from(c.value).unwrap_or(2),
        };
        let named: Vec<(String, Option<&Location>)> = match &raw.value.agents {
            Some(list) if !list.is_empty() => list.iter().map(|a| (a.value.clone(), Some(&a.referenced))).collect(),
            _ => agent.iter().map(|a| (a.name().to_owned(), None)).collect(),
        };
        for &(ref name, loc) in &named {
            let problem = match cx.agents.get(name) {
                _ if name == "shell" => {
                    Some("`shell` cannot be a candidate: it runs commands, it does not write a change".to_owned())
                }
                None => Some(format!("candidate agent `{name}` not found")),
                Some(a) => mode
                    .filter(|m| !a.allows(*m))
                    .map(|m| format!("candidate agent `{name}` may not run in `{m}` mode")),
            };
            if let Some(message) = problem {
                self.error(loc.or(Some(at)), stage, "candidates.agents", message);
                ok = false;
            }
        }
        let select = match raw.value.select.as_ref().map(|s| &s.value) {
            None => Some(Select::By(crate::pipeline::DEFAULT_SELECTORS.to_vec())),
            // The judge is checked once every stage is known ([`Compiler::judges`]).
            Some(RawSelectValue::Judge(judge)) => StageId::parse(&judge.value).map(Select::Judge).or_else(|| {
                self.error(
                    Some(&judge.referenced),
                    stage,
                    "candidates.select.judge",
                    format!(
                        "`{}` is not a stage id, expected the id of a plan-mode stage of this pipeline",
                        judge.value
                    ),
                );
                None
            }),
            Some(RawSelectValue::By(list)) => self.selectors(list, stage),
        };
        ok &= select.is_some();
        let agents: Vec<String> =
            (0..count).filter_map(|i| named.get(i % named.len().max(1)).map(|(n, _)| n.clone())).collect();
        (ok && agents.len() == count).then(|| Candidates { agents, select: select.unwrap_or(Select::By(Vec::new())) })
    }

    /// `select:` as a list of selectors: each known, none twice (none named: the default).
    fn selectors(&mut self, list: &[Spanned<String>], stage: Option<&str>) -> Option<Select> {
        let mut select = Vec::new();
        let mut ok = true;
        for s in list {
            match crate::pipeline::Selector::ALL.iter().find(|(n, _)| *n == s.value) {
                Some((_, sel)) if !select.contains(sel) => select.push(*sel),
                Some(_) => {
                    self.error(
                        Some(&s.referenced),
                        stage,
                        "candidates.select",
                        format!("`{}` is named twice", s.value),
                    );
                    ok = false;
                }
                None => {
                    let names: Vec<&str> = crate::pipeline::Selector::ALL.iter().map(|(n, _)| *n).collect();
                    let d = self.error(
                        Some(&s.referenced),
                        stage,
                        "candidates.select",
                        format!("unknown selector `{}`, expected {} or `{{judge: STAGE}}`", s.value, names.join(", ")),
                    );
                    if let Some(best) = closest(&s.value, &names) {
                        d.help = Some(format!("did you mean `{best}`?"));
                    }
                    ok = false;
                }
            }
        }
        if select.is_empty() {
            select = crate::pipeline::DEFAULT_SELECTORS.to_vec();
        }
        ok.then_some(Select::By(select))
    }

    /// The judges of the stages' candidates (`select: {judge: STAGE}`): each a stage of the
    /// pipeline, not the judged one, in plan mode, run by an agent, itself neither a round of
    /// candidates nor a closed loop, judging one stage only. Each is marked with what it judges.
    fn judges(&mut self, raw: &[Spanned<RawStage>], stages: &mut [Stage]) {
        let ids: Vec<String> = stages.iter().map(|s| s.id.to_string()).collect();
        let mut judged: Vec<(usize, StageId)> = Vec::new();
        for spanned in raw {
            let select = spanned.value.candidates.as_ref().and_then(|c| c.value.select.as_ref());
            let Some(RawSelectValue::Judge(judge)) = select.map(|s| &s.value) else { continue };
            let Some(by) = spanned.value.id.as_ref().and_then(|i| StageId::parse(&i.value)) else { continue };
            let (at, stage, field) = (Some(&judge.referenced), Some(by.as_str()), "candidates.select.judge");
            let Some(j) = stages.iter().position(|s| s.id.as_str() == judge.value) else {
                if StageId::parse(&judge.value).is_some() {
                    let d = self.error(at, stage, field, format!("judge stage `{}` not found", judge.value));
                    let names: Vec<&str> = ids.iter().map(String::as_str).collect();
                    if let Some(best) = closest(&judge.value, &names) {
                        d.help = Some(format!("did you mean `{best}`?"));
                    }
                }
                continue;
            };
            match judge_problem(&stages[j], &by, &judged, j) {
                Some(message) => {
                    self.error(at, stage, field, message);
                }
                None => judged.push((j, by)),
            }
        }
        for (j, by) in judged {
            stages[j].judges = Some(by);
        }
    }

    /// A stage's fallback agents: its `fallback:`, else its agent's; each an agent that may
    /// run in the stage's mode, named once, not the stage's own.
    fn fallback(
        &mut self,
        rs: &RawStage,
        stage: Option<&str>,
        agent: &Option<AgentRef>,
        mode: Option<Mode>,
        cx: &CompileContext<'_>,
    ) -> Option<Vec<String>> {
        let own = agent.as_ref().map(AgentRef::name);
        // Each name, with where the stage wrote it (none: its agent's file says it).
        type Named<'r> = Vec<(String, Option<&'r Spanned<String>>)>;
        let (names, from_agent): (Named<'_>, Option<&Agent>) = match &rs.fallback {
            Some(list) => (list.iter().map(|n| (n.value.clone(), Some(n))).collect(), None),
            None => match agent.as_ref().and_then(|a| match a {
                AgentRef::Named(name) => cx.agents.get(name),
                AgentRef::Shell => None,
            }) {
                Some(a) => (a.fallback.iter().map(|n| (n.clone(), None)).collect(), Some(a)),
                None => (Vec::new(), None),
            },
        };
        if matches!(agent, Some(AgentRef::Shell)) && rs.fallback.is_some() {
            let loc = rs.fallback.as_ref().and_then(|l| l.first()).map(|n| &n.referenced);
            let d =
                self.error(loc, stage, "fallback", "`fallback:` is for a stage run by an agent, not `agent: shell`");
            d.help = Some("remove `fallback:`, or run the stage with an agent".into());
            return None;
        }
        let agent_loc = rs.agent.as_ref().map(|a| &a.referenced);
        let mut ok = true;
        let mut chain: Vec<String> = Vec::new();
        for (name, at) in names {
            let loc = at.map(|n| &n.referenced).or(agent_loc);
            let whose = from_agent
                .map(|a| format!(" (the `fallback:` of agent `{}` in {})", a.name, a.file))
                .unwrap_or_default();
            let problem = match cx.agents.get(&name) {
                _ if name == "shell" => Some(format!("`shell` cannot take an agent's attempt over{whose}")),
                None => Some(format!("fallback agent `{name}` not found{whose}")),
                Some(_) if Some(name.as_str()) == own => {
                    Some(format!("agent `{name}` cannot fall back to itself{whose}"))
                }
                Some(_) if chain.contains(&name) => Some(format!("fallback agent `{name}` is named twice{whose}")),
                Some(a) => mode
                    .filter(|m| !a.allows(*m))
                    .map(|m| format!("fallback agent `{name}` may not run in `{m}` mode{whose}")),
            };
            match problem {
                Some(message) => {
                    ok = false;
                    let d = self.error(loc, stage, "fallback", message);
                    if !cx.agents.contains_key(&name) && name != "shell" {
                        let known: Vec<&str> = cx.agents.keys().map(String::as_str).collect();
                        d.help = Some(match closest(&name, &known) {
                            Some(best) => format!("did you mean `{best}`?"),
                            None => format!(
                                "agents are read from .loopwright/agents/, .claude/agents/ and .cursor/agents/ (NAME.md); known: {}",
                                known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                            ),
                        });
                    }
                }
                None => chain.push(name),
            }
        }
        ok.then_some(chain)
    }

    /// A stage's `env:`: names of environment variables (letters, digits, `_`, not starting
    /// with a digit), each once.
    fn env_names(&mut self, raw: &Spanned<Vec<String>>, stage: Option<&str>) -> Option<Vec<String>> {
        let mut names: Vec<String> = Vec::new();
        let mut ok = true;
        for name in &raw.value {
            let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                let d = self.error(
                    Some(&raw.referenced),
                    stage,
                    "env",
                    format!("`{name}` is not the name of an environment variable"),
                );
                d.help = Some("write names only, for example: env: [DATABASE_URL, RUST_LOG]".into());
                ok = false;
            } else if !names.contains(name) {
                names.push(name.clone());
            }
        }
        ok.then_some(names)
    }

    /// A stage's `sandbox:`: `auto`, `required` or `off`.
    fn sandbox_mode(&mut self, raw: &Spanned<String>, stage: Option<&str>) -> Option<SandboxMode> {
        SandboxMode::parse(&raw.value).or_else(|| {
            let names: Vec<&str> = SandboxMode::ALL.iter().map(|(n, _)| *n).collect();
            let d = self.error(
                Some(&raw.referenced),
                stage,
                "sandbox",
                format!("unknown sandbox mode `{}`, expected `auto`, `required` or `off`", raw.value),
            );
            d.label = Some("expected auto, required or off".into());
            d.help = closest(&raw.value, &names).map(|best| format!("did you mean `{best}`?"));
            None
        })
    }

    /// A stage's `network:`: `none`, `model` (an agent's stage only) or hosts.
    fn network(
        &mut self,
        raw: &Spanned<RawNetworkValue>,
        stage: Option<&str>,
        agent: &Option<AgentRef>,
    ) -> Option<Network> {
        match &raw.value {
            RawNetworkValue::Word(word) => match Network::word(word) {
                Some(Network::Model) if matches!(agent, Some(AgentRef::Shell)) => {
                    let d = self.error(
                        Some(&raw.referenced),
                        stage,
                        "network",
                        "`network: model` on a shell stage: a shell stage has no model to reach",
                    );
                    d.help = Some("write `network: none`, or the hosts its commands need: network: [crates.io]".into());
                    None
                }
                Some(network) => Some(network),
                None => {
                    let d = self.error(
                        Some(&raw.referenced),
                        stage,
                        "network",
                        format!("unknown network `{word}`, expected `none`, `model` or a list of hosts"),
                    );
                    d.help = Some("for example: network: [api.example.com, \"127.0.0.1:8080\"]".into());
                    None
                }
            },
            RawNetworkValue::Hosts(hosts) => {
                let mut parsed = Vec::new();
                let mut ok = true;
                for host in hosts {
                    match Host::parse(host) {
                        Ok(h) => parsed.push(h),
                        Err(why) => {
                            self.error(Some(&raw.referenced), stage, "network", why);
                            ok = false;
                        }
                    }
                }
                ok.then_some(Network::Hosts(parsed))
            }
        }
    }

    /// A `budget:` mapping: every limit positive.
    fn budget(&mut self, raw: &Spanned<crate::raw::RawBudget>, stage: Option<&str>) -> Option<Budget> {
        let r = &raw.value;
        let mut ok = true;
        let whole = |v: i64| v > 0;
        let fraction = |v: f64| v.is_finite() && v > 0.0;
        let tokens = self.positive(&r.tokens, stage, "tokens", whole, &mut ok).and_then(|n| u64::try_from(n).ok());
        let invocations = self
            .positive(&r.invocations, stage, "invocations", whole, &mut ok)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        let cost_usd = self.positive(&r.cost_usd, stage, "cost_usd", fraction, &mut ok);
        let wall_ms = self
            .positive(&r.wall_minutes, stage, "wall_minutes", fraction, &mut ok)
            .map(|m| (m * 60_000.0).round() as u64);
        ok.then_some(Budget { tokens, cost_usd, wall_ms, invocations })
    }

    /// One limit of a `budget:`: its value when `valid`, else an error (and `ok` cleared).
    fn positive<T: Copy + std::fmt::Display>(
        &mut self,
        value: &Option<Spanned<T>>,
        stage: Option<&str>,
        field: &str,
        valid: impl Fn(T) -> bool,
        ok: &mut bool,
    ) -> Option<T> {
        let v = value.as_ref()?;
        if valid(v.value) {
            return Some(v.value);
        }
        self.error(
            Some(&v.referenced),
            stage,
            &format!("budget.{field}"),
            format!("`{field}` is {}, expected a positive number", v.value),
        );
        *ok = false;
        None
    }

    fn agent_ref(
        &mut self,
        rs: &RawStage,
        stage: Option<&str>,
        name: &str,
        mode: Option<Mode>,
        cx: &CompileContext<'_>,
    ) -> Option<AgentRef> {
        let loc = rs.agent.as_ref().map(|a| &a.referenced);
        if name == "shell" {
            return Some(AgentRef::Shell);
        }
        let Some(agent) = cx.agents.get(name) else {
            let known: Vec<&str> = cx.agents.keys().map(String::as_str).chain(["shell"]).collect();
            let d = self.error(
                loc,
                stage,
                "agent",
                format!("Agent '{name}' not found for stage '{}'", stage.unwrap_or("?")),
            );
            d.label = Some("unknown agent".into());
            d.help = Some(match closest(name, &known) {
                Some(best) => format!("did you mean `{best}`?"),
                None => format!(
                    "agents are read from .loopwright/agents/, .claude/agents/ and .cursor/agents/ (NAME.md); known: {}",
                    known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                ),
            });
            return None;
        };
        if let Some(mode) = mode
            && !agent.allows(mode)
        {
            let allowed: Vec<&str> = agent.modes.iter().map(|m| m.as_str()).collect();
            let d = self.error(
                loc,
                stage,
                "mode",
                format!("agent `{name}` may not run in `{mode}` mode (its `modes:` allow {})", allowed.join(", ")),
            );
            d.help = Some(format!("change the stage's mode, or add `{mode}` to `modes:` in {}", agent.file));
        }
        Some(AgentRef::Named(name.to_owned()))
    }

    fn run_commands(&mut self, rs: &RawStage, stage: Option<&str>, agent: &Option<AgentRef>) -> Option<Vec<String>> {
        let commands = match rs.run.as_ref().map(|r| &r.value) {
            None => Vec::new(),
            Some(RawRun::One(c)) => vec![c.clone()],
            Some(RawRun::Many(cs)) => cs.clone(),
        };
        match agent {
            Some(AgentRef::Shell) if commands.iter().all(|c| c.trim().is_empty()) => {
                let loc = rs.run.as_ref().map(|r| &r.referenced).or(rs.agent.as_ref().map(|a| &a.referenced));
                let d =
                    self.error(loc, stage, "run", "`agent: shell` needs `run:` with a command or a list of commands");
                d.help = Some("for example: run: cargo test".into());
                None
            }
            Some(AgentRef::Named(name)) if rs.run.is_some() => {
                let loc = rs.run.as_ref().map(|r| &r.referenced);
                let d = self.error(
                    loc,
                    stage,
                    "run",
                    format!("`run:` is only for `agent: shell`, but this stage runs agent `{name}`"),
                );
                d.help = Some("remove `run:`, or set `agent: shell`".into());
                None
            }
            _ => Some(commands),
        }
    }

    fn condition(
        &mut self,
        raw: &Spanned<String>,
        stage: Option<&str>,
        earlier: &BTreeMap<String, Vec<String>>,
        all: &BTreeSet<String>,
        vars: &BTreeSet<String>,
    ) -> Option<Condition> {
        match Condition::check(&raw.value, &Scope { vars, earlier, all, this: stage }) {
            Ok(c) => Some(c),
            Err(problems) => {
                let base = self.pos(&raw.referenced);
                // Point inside the expression when its text appears verbatim in the file.
                let text_start = self
                    .source
                    .text
                    .get(base.offset..)
                    .and_then(|t| t.find(raw.value.as_str()))
                    .map(|i| base.offset + i);
                for p in problems {
                    let mut pos = base;
                    if let (Some(start), Some(range)) = (text_start, p.range.clone()) {
                        pos.offset = start + range.start;
                        pos.len = range.len();
                        pos.column = base.column + (start - base.offset) + raw.value[..range.start].chars().count();
                    }
                    let mut d = Diagnostic::new(self.source, p.message).stage(stage).field("condition").at(pos);
                    d.help = p.help;
                    self.diags.push(d);
                }
                None
            }
        }
    }

    fn retry(&mut self, raw: &Spanned<crate::raw::RawRetry>, stage: Option<&str>) -> Option<RetryPolicy> {
        let r = &raw.value;
        let mut ok = true;
        let max_attempts = match &r.max_attempts {
            None => 3,
            Some(m) if (1..=10).contains(&m.value) => m.value as u32,
            Some(m) => {
                let d = self.error(
                    Some(&m.referenced),
                    stage,
                    "retry.max_attempts",
                    format!("`max_attempts` is {}, expected 1 to 10", m.value),
                );
                d.label = Some("out of range".into());
                ok = false;
                3
            }
        };
        let backoff = match r.backoff.as_ref() {
            None => Backoff::Exponential,
            Some(b) => match b.value.as_str() {
                "exponential" => Backoff::Exponential,
                "linear" => Backoff::Linear,
                "fixed" => Backoff::Fixed,
                other => {
                    let d = self.error(
                        Some(&b.referenced),
                        stage,
                        "retry.backoff",
                        format!("unknown backoff `{other}`, expected `exponential`, `linear` or `fixed`"),
                    );
                    d.label = Some("unknown backoff".into());
                    if let Some(best) = closest(other, &["exponential", "linear", "fixed"]) {
                        d.help = Some(format!("did you mean `{best}`?"));
                    }
                    ok = false;
                    Backoff::Exponential
                }
            },
        };
        let initial_delay = match &r.initial_delay_seconds {
            None => Duration::from_secs(5),
            Some(d) if (1.0..=300.0).contains(&d.value) => Duration::from_secs_f64(d.value),
            Some(d) => {
                let diag = self.error(
                    Some(&d.referenced),
                    stage,
                    "retry.initial_delay_seconds",
                    format!("`initial_delay_seconds` is {}, expected 1 to 300", d.value),
                );
                diag.label = Some("out of range".into());
                ok = false;
                Duration::from_secs(5)
            }
        };
        ok.then_some(RetryPolicy { max_attempts, backoff, initial_delay })
    }

    fn rollback(&mut self, raw: &Spanned<crate::raw::RawRollback>, stage: Option<&str>) -> Option<Rollback> {
        let anchor = Anchor { stage, location: &raw.referenced };
        let name = self.required(
            &raw.value.strategy,
            anchor,
            "rollback.strategy",
            "git_revert, file_restore, memory_cleanup or manual",
        )?;
        let names: Vec<&str> = RollbackStrategy::ALL.iter().map(|(n, _)| *n).collect();
        let Some(strategy) = RollbackStrategy::ALL.iter().find(|(n, _)| n == name).map(|(_, s)| *s) else {
            let loc = raw.value.strategy.as_ref().map(|s| &s.referenced);
            let d = self.error(
                loc,
                stage,
                "rollback.strategy",
                format!("unknown rollback strategy `{name}`, expected one of {}", names.join(", ")),
            );
            d.label = Some("unknown strategy".into());
            if let Some(best) = closest(name, &names) {
                d.help = Some(format!("did you mean `{best}`?"));
            }
            return None;
        };
        let description = raw.value.description.as_ref().map(|d| d.value.clone());
        if strategy == RollbackStrategy::Manual && description.as_deref().is_none_or(|d| d.trim().is_empty()) {
            let d = self.error(
                Some(&raw.referenced),
                stage,
                "rollback.description",
                "`strategy: manual` needs a `description` with the steps to show the user",
            );
            d.help = Some("add `description:` under `rollback:`".into());
            return None;
        }
        Some(Rollback { strategy, description })
    }

    fn checks(&mut self, rs: &RawStage, stage: Option<&str>) -> Option<Vec<Check>> {
        let mut checks = Vec::new();
        let mut ok = true;
        let fallback = rs.id.as_ref().map(|i| i.referenced).unwrap_or(Location::UNKNOWN);
        for (i, raw) in rs.checks.iter().flatten().enumerate() {
            let loc = raw.name.as_ref().or(raw.command.as_ref()).map_or(fallback, |s| s.referenced);
            let anchor = Anchor { stage, location: &loc };
            let field = format!("checks[{i}]");
            let name = self.required(&raw.name, anchor, &format!("{field}.name"), "a name for the check").cloned();
            let command = self
                .required(&raw.command, anchor, &format!("{field}.command"), "a shell command; exit 0 passes")
                .cloned();
            let kind = self
                .required(
                    &raw.kind,
                    anchor,
                    &format!("{field}.type"),
                    "lint, format, type, test, build, custom, syntax or command",
                )
                .and_then(|k| {
                    CheckKind::ALL.iter().find(|(n, _)| n == k).map(|(_, kind)| *kind).or_else(|| {
                        let names: Vec<&str> = CheckKind::ALL.iter().map(|(n, _)| *n).collect();
                        let l = raw.kind.as_ref().map(|k| &k.referenced);
                        self.error(
                            l,
                            stage,
                            &format!("{field}.type"),
                            format!("unknown check type `{k}`, expected one of {}", names.join(", ")),
                        );
                        None
                    })
                });
            match (name, kind, command) {
                (Some(name), Some(kind), Some(command)) => {
                    checks.push(Check { name, kind, command, expected: raw.expected.as_ref().map(|e| e.value.clone()) })
                }
                _ => ok = false,
            }
        }
        ok.then_some(checks)
    }

    fn closed_loop(&mut self, raw: &Spanned<crate::raw::RawClosedLoop>, stage: Option<&str>) -> Option<ClosedLoop> {
        let r = &raw.value;
        let max_retries = match &r.max_retries {
            Some(m) if m.value < 0 || m.value > 20 => {
                self.error(
                    Some(&m.referenced),
                    stage,
                    "closed_loop.max_retries",
                    format!("`max_retries` is {}, expected 0 to 20", m.value),
                );
                return None;
            }
            Some(m) => Some(m.value as u32),
            None => None,
        };
        let complexity = match &r.complexity {
            None => None,
            Some(c) => match c.value.as_str() {
                "low" => Some(Complexity::Low),
                "medium" => Some(Complexity::Medium),
                "high" => Some(Complexity::High),
                other => {
                    self.error(
                        Some(&c.referenced),
                        stage,
                        "closed_loop.complexity",
                        format!("unknown complexity `{other}`, expected `low`, `medium` or `high`"),
                    );
                    return None;
                }
            },
        };
        Some(ClosedLoop { max_retries, complexity, regression: r.regression.as_ref().map(|r| r.value) })
    }

    fn feedback_loop(
        &mut self,
        raw: &Spanned<crate::raw::RawFeedbackLoop>,
        stage: Option<&str>,
        mode: Option<Mode>,
        outputs: &[String],
        earlier: &BTreeMap<String, Vec<String>>,
        modes: &BTreeMap<String, Mode>,
    ) -> Option<FeedbackLoop> {
        let anchor = Anchor { stage, location: &raw.referenced };
        let target = self.required(
            &raw.value.target_stage,
            anchor,
            "feedback_loop.target_stage",
            "the earlier agent-mode stage to re-run",
        )?;
        let loc = raw.value.target_stage.as_ref().map(|t| &t.referenced);
        let mut ok = true;
        if !earlier.contains_key(target) {
            self.error(
                loc,
                stage,
                "feedback_loop.target_stage",
                format!("feedback target `{target}` is not a stage before this one"),
            );
            ok = false;
        } else if modes.get(target) != Some(&Mode::Agent) {
            let d = self.error(
                loc,
                stage,
                "feedback_loop.target_stage",
                format!("feedback target `{target}` must be a `mode: agent` implementation stage"),
            );
            d.help = Some("only review (plan) -> implementation (agent) pairs can loop".into());
            ok = false;
        }
        if mode == Some(Mode::Agent) {
            let d = self.error(
                Some(&raw.referenced),
                stage,
                "feedback_loop",
                "a stage with `feedback_loop` must be a `mode: plan` review stage",
            );
            d.help = Some("only review (plan) -> implementation (agent) pairs can loop".into());
            ok = false;
        }
        if !outputs.iter().any(|o| o == "feedback_items") {
            let d = self.error(
                Some(&raw.referenced),
                stage,
                "outputs",
                "a stage with `feedback_loop` must declare `feedback_items` in its `outputs`",
            );
            d.help = Some("add `feedback_items` to `outputs:`".into());
            ok = false;
        }
        let max_iterations = match &raw.value.max_iterations {
            None => 2,
            Some(m) if (1..=10).contains(&m.value) => m.value as u32,
            Some(m) => {
                self.error(
                    Some(&m.referenced),
                    stage,
                    "feedback_loop.max_iterations",
                    format!("`max_iterations` is {}, expected 1 to 10", m.value),
                );
                return None;
            }
        };
        let target_stage = StageId::parse(target)?;
        ok.then_some(FeedbackLoop { target_stage, max_iterations })
    }
}

/// Why `judge` cannot judge the candidates of `by`, if it cannot (`judged`: the judges taken
/// so far, by index).
fn judge_problem(judge: &Stage, by: &StageId, judged: &[(usize, StageId)], index: usize) -> Option<String> {
    let id = &judge.id;
    if judge.id == *by {
        return Some("a stage cannot judge its own candidates: name another, plan-mode stage".to_owned());
    }
    if judge.mode != Mode::Plan {
        return Some(format!(
            "judge stage `{id}` must be `mode: plan`: a judge reads the candidates, it does not change the workspace"
        ));
    }
    if matches!(judge.agent, AgentRef::Shell) {
        return Some(format!("judge stage `{id}` runs `shell`: a judge is an agent that reads the diffs and answers"));
    }
    if judge.candidates.is_some() || judge.skill.as_deref() == Some("closed-loop-execution") {
        return Some(format!("judge stage `{id}` must be a plain stage, not a round of candidates nor a closed loop"));
    }
    judged.iter().find(|(k, _)| *k == index).map(|(_, other)| {
        format!("stage `{id}` judges the candidates of `{other}` already: give each its own judge stage")
    })
}

/// The stages of a pipeline file as a graph, read without its agents (what a run journaled
/// is enough): each stage's id and what it needs (its `needs:`, else the stage before it), in
/// the file's order. `None` when no stage says `needs:` (a line) or the file does not parse.
pub fn graph_of(source: &str) -> Option<Vec<(String, Vec<String>)>> {
    let raw: RawPipeline =
        serde_saphyr::from_str_with_options(source, serde_saphyr::options! { with_snippet: false }).ok()?;
    let stages = raw.stages?.value;
    if stages.iter().all(|s| s.value.needs.is_none()) {
        return None;
    }
    let ids: Vec<String> =
        stages.iter().map(|s| s.value.id.as_ref().map(|i| i.value.clone()).unwrap_or_default()).collect();
    Some(
        stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let needs = match &s.value.needs {
                    Some(list) => list.iter().map(|n| n.value.clone()).collect(),
                    None if i > 0 => vec![ids[i - 1].clone()],
                    None => Vec::new(),
                };
                (ids[i].clone(), needs)
            })
            .collect(),
    )
}
