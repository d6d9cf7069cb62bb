//! Provider limits kept in the SQLite store: a pause is read without a write (what a gate with
//! nothing to count asks before each request) — the latest pause in force on any of the keys,
//! none once it passed, another provider's never.

use jiff::{SignedDuration, Timestamp};
use loopwright_store::SqliteStore;
use pretty_assertions::assert_eq;

#[test]
fn a_pause_is_read_without_taking_a_slot() {
    let store = SqliteStore::in_memory().expect("store");
    let keys = vec!["github/*/*".to_owned(), "github/api/*".to_owned()];
    let now = Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now");
    assert_eq!(store.paused_until(&keys, now).expect("read"), None);
    let soon = now + SignedDuration::from_secs(30);
    let later = soon + SignedDuration::from_secs(30);
    store.pause_limit("github/*/*", soon, "secondary rate limit").expect("pause");
    store.pause_limit("github/api/*", later, "Retry-After").expect("pause");
    store.pause_limit("anthropic/*/*", later + SignedDuration::from_secs(60), "429").expect("pause");
    assert_eq!(store.paused_until(&keys, now).expect("read"), Some(later));
    assert_eq!(store.paused_until(&keys, soon + SignedDuration::from_secs(1)).expect("read"), Some(later));
    assert_eq!(store.paused_until(&keys, later).expect("read"), None);
}
