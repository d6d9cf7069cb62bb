//! A run as JUnit XML, as the JUnit readers of GitHub, GitLab and Jenkins take it and valid
//! against `junit-10.xsd` (the schema of Jenkins' xunit plugin): one `<testsuite>` for the run
//! (its properties: run, pipeline, task, status, spend), a `<testcase>` per stage (classname:
//! the pipeline) and per check of a closed-loop stage (classname: `PIPELINE.STAGE`). A failed
//! stage or check carries a `<failure>` whose message is the classified headline and whose text
//! holds the key lines, the category, what was tried and what happens next; a check that
//! failed in an earlier attempt and passed in the last carries a `<flakyFailure>` for each such
//! attempt. Skipped, reused, waiting and unreached stages are `<skipped>` with why.

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event};

use super::{CheckLine, Outcome, StageLine, Summary};

/// The XML of `summary`.
pub fn render(summary: &Summary) -> String {
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    // Writing into memory cannot fail.
    let _ = document(&mut w, summary);
    let mut out = String::from_utf8(w.into_inner()).unwrap_or_default();
    out.push('\n');
    out
}

/// Seconds with at most three decimals, as the schema's `SUREFIRE_TIME` has them.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `text` without what XML 1.0 cannot hold (control characters but tab and line ends, and
/// terminal escape sequences).
fn xml_text(text: &str) -> String {
    loopwright_engine::patterns::strip_ansi(text)
        .chars()
        .filter(|&c| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && !matches!(c, '\u{7f}' | '\u{FFFE}' | '\u{FFFF}')))
        .collect()
}

type W = Writer<Vec<u8>>;

fn document(w: &mut W, s: &Summary) -> std::io::Result<()> {
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let tests = s.stages.len() + s.stages.iter().map(|st| st.checks.len()).sum::<usize>();
    let skipped = s
        .stages
        .iter()
        .filter(|st| {
            matches!(
                st.outcome,
                Outcome::Skipped | Outcome::Reused | Outcome::NotRun | Outcome::Waiting | Outcome::Running
            )
        })
        .count();
    let (tests, failures, skipped) = (tests.to_string(), s.failures().to_string(), skipped.to_string());
    let time = seconds(s.duration_ms);
    let name = xml_text(&format!("loopwright {}", s.pipeline));
    // The one suite's counts, which the document's root repeats.
    let counts = [("name", name.as_str()), ("tests", tests.as_str()), ("failures", failures.as_str()), ("errors", "0")];
    w.create_element("testsuites")
        .with_attributes(counts.into_iter().chain([("time", time.as_str())]))
        .write_inner_content(|w| {
            let timestamp = s.started.map(|t| t.strftime("%Y-%m-%dT%H:%M:%S").to_string()).unwrap_or_default();
            w.create_element("testsuite")
                .with_attributes(counts.into_iter().chain([
                    ("skipped", skipped.as_str()),
                    ("time", time.as_str()),
                    ("timestamp", timestamp.as_str()),
                    ("id", s.run_id.as_str()),
                ]))
                .write_inner_content(|w| suite(w, s))
                .map(drop)
        })?;
    Ok(())
}

fn suite(w: &mut W, s: &Summary) -> std::io::Result<()> {
    let cost = format!("{:.4}", s.cost_usd);
    let tokens = s.tokens.to_string();
    let task = xml_text(&s.task);
    let properties = [
        ("run_id", s.run_id.as_str()),
        ("pipeline", s.pipeline.as_str()),
        ("task", task.as_str()),
        ("status", s.status.as_str()),
        ("tokens", tokens.as_str()),
        ("cost_usd", cost.as_str()),
    ];
    w.create_element("properties").write_inner_content(|w| {
        for (name, value) in properties {
            w.create_element("property").with_attributes([("name", name), ("value", value)]).write_empty()?;
        }
        Ok(())
    })?;
    for stage in &s.stages {
        stage_case(w, s, stage)?;
        for check in &stage.checks {
            check_case(w, s, stage, check)?;
        }
    }
    if let Some(h) = &s.headline {
        let text = xml_text(&format!("{}\n{}", h.title, h.next));
        w.create_element("system-out").write_text_content(BytesText::new(&text))?;
    }
    Ok(())
}

fn stage_case(w: &mut W, s: &Summary, stage: &StageLine) -> std::io::Result<()> {
    let time = seconds(stage.duration_ms);
    let name = xml_text(&stage.id);
    let classname = xml_text(&s.pipeline);
    let element = w.create_element("testcase").with_attributes([
        ("name", name.as_str()),
        ("classname", classname.as_str()),
        ("time", time.as_str()),
    ]);
    let note = stage.note.clone().unwrap_or_default();
    match stage.outcome {
        Outcome::Passed | Outcome::RolledBack => element.write_empty().map(drop),
        Outcome::Failed | Outcome::Rejected => element
            .write_inner_content(|w| {
                let kind = match stage.outcome {
                    Outcome::Rejected => "rejected".to_owned(),
                    _ => stage.pattern.clone().unwrap_or_else(|| "unclassified".into()),
                };
                let (message, body) = match &stage.headline {
                    Some(h) => (h.title.clone(), detail(h)),
                    None => (note.clone(), note.clone()),
                };
                failure(w, "failure", &message, &kind, &body)
            })
            .map(drop),
        Outcome::Waiting => element
            .write_inner_content(|w| {
                let message =
                    stage.headline.as_ref().map_or_else(|| "waits for a person".to_owned(), |h| h.title.clone());
                skipped(w, &message)
            })
            .map(drop),
        Outcome::Skipped | Outcome::Reused | Outcome::NotRun | Outcome::Running => element
            .write_inner_content(|w| skipped(w, if note.is_empty() { stage.outcome.as_str() } else { &note }))
            .map(drop),
    }
}

fn check_case(w: &mut W, s: &Summary, stage: &StageLine, check: &CheckLine) -> std::io::Result<()> {
    let time = seconds(check.duration_ms);
    let name = xml_text(&check.name);
    let classname = xml_text(&format!("{}.{}", s.pipeline, stage.id));
    let element = w.create_element("testcase").with_attributes([
        ("name", name.as_str()),
        ("classname", classname.as_str()),
        ("time", time.as_str()),
    ]);
    if check.passed && check.failed_before.is_empty() {
        return element.write_empty().map(drop);
    }
    element
        .write_inner_content(|w| {
            if !check.passed {
                let message = format!(
                    "check `{}` failed{}",
                    check.name,
                    check.exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default()
                );
                let kind = check.pattern.clone().unwrap_or_else(|| "unclassified".into());
                let body = format!("$ {}\n{}", check.command, check.lines.join("\n"));
                failure(w, "failure", &message, &kind, &body)?;
            }
            for (attempt, pattern, lines) in &check.failed_before {
                let message = format!("check `{}` failed in attempt {attempt}", check.name);
                let kind = pattern.clone().unwrap_or_else(|| "unclassified".into());
                let tag = if check.passed { "flakyFailure" } else { "rerunFailure" };
                failure(w, tag, &message, &kind, &lines.join("\n"))?;
            }
            Ok(())
        })
        .map(drop)
}

/// A headline's text under its title: the failing check, key lines, category, what was tried
/// and what happens next.
fn detail(h: &crate::ops::why::Headline) -> String {
    let mut out = String::new();
    if let Some(check) = &h.check {
        out.push_str(&format!("check: {check}\n"));
    }
    for line in &h.lines {
        out.push_str(&format!("{line}\n"));
    }
    if let Some(category) = &h.category {
        out.push_str(&format!("category: {category}\n"));
    }
    for t in &h.tried {
        out.push_str(&format!("tried: {t}\n"));
    }
    out.push_str(&format!("next: {}", h.next));
    out
}

fn failure(w: &mut W, tag: &str, message: &str, kind: &str, body: &str) -> std::io::Result<()> {
    let (message, kind, body) = (xml_text(message), xml_text(kind), xml_text(body));
    w.create_element(tag)
        .with_attributes([("message", message.as_str()), ("type", kind.as_str())])
        .write_text_content(BytesText::new(&body))
        .map(drop)
}

fn skipped(w: &mut W, message: &str) -> std::io::Result<()> {
    let message = xml_text(message);
    w.create_element("skipped").with_attribute(("message", message.as_str())).write_empty().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_xml_cannot_hold_is_left_out() {
        assert_eq!(xml_text("a\x1b[31mred\x1b[0m\x07 b\u{0}c\td\n"), "ared bc\td\n");
        assert_eq!(seconds(0), "0.000");
        assert_eq!(seconds(61_005), "61.005");
    }
}
