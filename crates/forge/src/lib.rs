//! Where loopwright's work comes from and where it goes (SPEC §14): the forge port — what
//! loopwright asks of a code host and hears from it, in its own types — and its GitHub
//! adapter. The engine and the store know nothing of any forge; `app` drives this crate.
//!
//! - [`port`]: the `Forge` trait and its types (issues, change requests, checks, reviews).
//! - [`trigger`]: what a happening may make loopwright do, decided without I/O.
//! - [`actions_log`]: a GitHub Actions job's log read into its steps; the failed one is what
//!   is classified.
//! - [`text`]: what loopwright writes there: quoted text that cannot act, hidden markers.
//! - [`github`]: the adapter (REST client, App sign-in, webhooks).

pub mod actions_log;
pub mod github;
pub mod port;
pub mod text;
pub mod trigger;

pub use port::{Forge, ForgeError};

/// Makes ring rustls's crypto for this process, once (reqwest is built without a provider).
pub fn tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Fails only when another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
