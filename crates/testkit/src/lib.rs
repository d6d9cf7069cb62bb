//! Test doubles for the engine's ports and the store conformance suite. Dev-only: no crate
//! depends on it outside `[dev-dependencies]`.
//!
//! - [`MemoryStore`]: a [`Store`](loopwright_journal::Store) in memory, with the same
//!   semantics as the SQLite store (it passes the same [`conformance`] suite).
//! - [`ScriptedRunner`]: plays a script of outcomes and records what it was asked to run.
//! - [`FakeClock`]: stands still except when the engine waits, and records the waits.

pub mod conformance;
mod doubles;

pub use doubles::{FakeClock, MemoryStore, ScriptedRunner};

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_memory_store_conforms() {
        crate::conformance::suite(&crate::MemoryStore::default()).await;
    }
}
