//! The OpenAPI document the daemon serves at `/openapi.json`, checked in as
//! `crates/daemon/openapi.json`: a change to the API's routes or wire types shows in review,
//! and clients can be generated without running a daemon.

use std::path::Path;

#[test]
fn the_checked_in_openapi_document_is_the_one_the_daemon_serves() {
    let (_, doc) = loopwright_daemon::api::router();
    let served = serde_json::to_string_pretty(&doc).expect("the document as JSON") + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("LOOPWRIGHT_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &served).expect("write openapi.json");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    let drifted = checked_in.lines().zip(served.lines()).position(|(a, b)| a != b);
    assert!(
        checked_in == served,
        "crates/daemon/openapi.json is not the document the daemon serves (first difference at line {}): \
         run `LOOPWRIGHT_UPDATE_OPENAPI=1 cargo test -p loopwright-daemon --test openapi` and review the diff",
        drifted.map_or_else(|| checked_in.lines().count().min(served.lines().count()) + 1, |l| l + 1)
    );
}
