//! The dashboard's pure pieces: formatting, markdown, the order of a report.

use super::run::rollback_line;
use loopwright_engine::Event;
use loopwright_engine::event::RollbackStatus;
use loopwright_spec::StageId;
use loopwright_spec::pipeline::RollbackStrategy;

#[test]
fn glyphs_common_fonts_lack_are_drawn_with_ones_they_have() {
    let screen = "● Bash(cargo test)\n  ⎿  Waiting…\n⏺ Done ⏵⏵ accept edits ⏸ ⏹ ⧉ ❯ ✻";
    assert_eq!(super::auto::legible(screen), "● Bash(cargo test)\n  └  Waiting…\n● Done ▶▶ accept edits ‖ ■ □ ❯ ✻");
}

#[test]
fn backticks_set_code_and_nothing_else_is_markup() {
    let table = [
        ("gate at `ship`, waiting", "gate at <code>ship</code>, waiting"),
        (
            "rejected at `ship` by carol: <b>no</b> & `x`",
            "rejected at <code>ship</code> by carol: &lt;b&gt;no&lt;&#x2f;b&gt; &amp; <code>x</code>",
        ),
        ("a lone ` stays", "a lone ` stays"),
        ("`a` and ` b", "<code>a</code> and ` b"),
        ("``", "<code></code>"),
        ("`<script>`", "<code>&lt;script&gt;</code>"),
        ("", ""),
    ];
    for (text, want) in table {
        assert_eq!(super::ticks(text), want, "{text}");
    }
}

#[test]
fn a_countdown_is_in_whole_seconds_like_the_pages_clock() {
    let shown: Vec<String> = [0.057, -3.0, 4.6, 61.0, 3725.0].map(super::countdown).to_vec();
    assert_eq!(shown, ["0 s", "0 s", "5 s", "1m 01s", "1h 02m"]);
}

#[test]
fn a_reports_suggested_steps_and_its_error_come_first() {
    let report = "## Task Escalation Required\n\nintro\n\n### Failure Summary\n\nfailed\n\n### Last Error Details\n\n```\n# not a heading\nboom\n```\n\n### Files Modified\n\n- a\n\n### Suggested Actions\n\n1. do this\n\n---\n\n**Your options:** retry\n";
    assert_eq!(
        super::actionable_first(report),
        "## Task Escalation Required\n\nintro\n\n### Suggested Actions\n\n1. do this\n\n### Last Error Details\n\n```\n# not a heading\nboom\n```\n\n### Failure Summary\n\nfailed\n\n### Files Modified\n\n- a\n\n---\n\n**Your options:** retry\n"
    );
    let letter = "# Dead letter\n\n## Task Description\n\nt\n\n## Error Chain\n\n### Attempt 1\n\nx\n\n## Suggested Manual Steps\n\n1. s\n";
    assert_eq!(
        super::actionable_first(letter),
        "# Dead letter\n\n## Suggested Manual Steps\n\n1. s\n\n## Error Chain\n\n### Attempt 1\n\nx\n\n## Task Description\n\nt\n\n"
    );
    assert_eq!(super::actionable_first("no headings\n"), "no headings\n");
}

#[test]
fn a_report_is_rendered_without_the_texts_own_html_links_or_images_and_its_fields_apart() {
    let text = "---\ntask_id: t-1\nattempts: 3\n---\n## Error chain\n\n1. `check` failed: <script>alert(1)</script>\n\n[click](javascript:alert(1)) ![x](http://evil/x.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
    let r = super::render_markdown(text);
    assert_eq!(r.frontmatter.as_deref(), Some("task_id: t-1\nattempts: 3"));
    assert_eq!(
        r.html,
        "<h2>Error chain</h2>\n<ol>\n<li><code>check</code> failed: &lt;script&gt;alert(1)&lt;/script&gt;</li>\n</ol>\n<p>click x</p>\n<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody>\n<tr><td>1</td><td>2</td></tr>\n</tbody></table>\n"
    );
    // No frontmatter: all of it is the body.
    assert_eq!(super::render_markdown("plain *text*").html, "<p>plain <em>text</em></p>\n");
}

#[test]
fn a_rollback_reads_as_what_was_undone_and_how_it_went() {
    let id = |s: &str| StageId::parse(s).expect("stage id");
    let lines: Vec<Option<String>> = [
        Event::RollbackStarted { trigger: Some(id("deploy")), stages: vec![id("build"), id("plan")] },
        Event::StageRolledBack {
            stage: id("build"),
            strategy: RollbackStrategy::GitRevert,
            status: RollbackStatus::Success,
            detail: "reverted 2 commits".into(),
        },
        Event::StageRolledBack {
            stage: id("plan"),
            strategy: RollbackStrategy::Manual,
            status: RollbackStatus::Pending,
            detail: " ".into(),
        },
        Event::RollbackFinished { overall: RollbackStatus::Partial },
        Event::RunQueued {},
    ]
    .iter()
    .map(rollback_line)
    .collect();
    assert_eq!(
        lines,
        [
            Some("Rolling back build, plan after deploy failed".to_owned()),
            Some("build — its commits reverted, success: reverted 2 commits".to_owned()),
            Some("plan — manual steps, pending".to_owned()),
            Some("Rollback finished: partial".to_owned()),
            None,
        ]
    );
}
