//! The protocol the agent follows in auto mode (`crates/auto/protocol.md`), sent as the
//! session's first message and printed by `loopwright auto protocol`.

use std::path::Path;

/// The protocol, with `{task_dir}` where the module's path goes.
pub const TEXT: &str = include_str!("../protocol.md");

/// The protocol for the module at `task_dir`.
pub fn render(task_dir: &Path) -> String {
    TEXT.replace("{task_dir}", &task_dir.display().to_string())
}

/// The session's first message: the protocol, and where it is kept on disk.
pub fn first_message(task_dir: &Path) -> String {
    format!(
        "{}\n\nThis protocol is also in {}/{}: re-read it whenever you are unsure what to do next (after your context was compacted, too).",
        render(task_dir),
        task_dir.display(),
        crate::module::PROTOCOL
    )
}

/// The first message after a restart that resumes the agent's own conversation.
pub fn resume_message(task_dir: &Path) -> String {
    format!(
        "You were restarted. Continue the loopwright auto loop for {}: read .auto-signal, .index.md and .summary.md \
         there, and resume at `next` with iteration + 1, following the protocol in {}/{} (read it first).",
        task_dir.display(),
        task_dir.display(),
        crate::module::PROTOCOL
    )
}

/// What is typed when the agent sits idle with no prompt (a stall).
pub fn nudge(task_dir: &Path) -> String {
    format!(
        "Continue the loopwright auto loop for {} (if unsure where you are, re-read .auto-signal, .index.md and .summary.md there, and the protocol in {}).",
        task_dir.display(),
        crate::module::PROTOCOL
    )
}
