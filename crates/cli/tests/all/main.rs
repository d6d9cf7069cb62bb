//! Integration tests of the `loopwright` binary on temporary workspaces.

mod attacks;
mod auto;
mod bad_input;
mod bench;
mod chaos;
mod claude_tui;
mod closed_loop;
mod codex_tui;
mod crashes;
mod daemon;
mod durability;
mod enforcement;
mod feedback;
mod fleet;
mod http;
mod init_demo;
mod limits;
mod postgres;
mod presets;
mod rollback;
mod run;
mod sandbox;
mod support;
mod team;
mod validate;
mod worktree;
