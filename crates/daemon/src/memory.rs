//! Memory given back once the daemon goes quiet.
//!
//! glibc's allocator keeps what a thread freed in that thread's arena, and gives the system back
//! only the free top of each heap: after a burst of requests, event streams or runs, an idle
//! daemon stays at its peak (measured: 9.1 MB allocated after the daemon benchmark's load
//! against 3.7 MB fresh, 5.3 MB once given back). When a whole period passes with no work (a
//! request answered, a run ended) after some, the daemon's stores close their kept readers and
//! free their page caches, then [`give_back`] asks the allocator to return its free pages
//! (`malloc_trim`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long the daemon must have had no request before it gives memory back.
pub const QUIET: Duration = Duration::from_secs(5);

/// Work done so far: requests answered, runs ended.
static WORK: AtomicU64 = AtomicU64::new(0);

/// Counts a piece of work (a request, a run that ended): memory is given back after the next
/// quiet period.
pub fn worked() {
    WORK.fetch_add(1, Ordering::Relaxed);
}

/// Gives memory back after each busy spell, once a whole [`QUIET`] period passed with no work:
/// what `release` frees (the stores' caches), then the allocator's free pages. Runs for as long
/// as it is polled.
pub async fn give_back_when_quiet(release: impl Fn()) {
    let (mut quiet, mut look) = (Quiet::default(), tokio::time::interval(QUIET));
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        look.tick().await;
        if quiet.look(WORK.load(Ordering::Relaxed)) {
            release();
            give_back();
        }
    }
}

/// Whether to give memory back, from the count of work read once per [`QUIET`] period.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// The count at the last look.
    seen: u64,
    /// The count when memory was last given back.
    given_back_at: u64,
}

impl Quiet {
    /// Looks at the count of work done so far: true when none was done since the last look but
    /// some since memory was last given back (a quiet period after work, once).
    pub fn look(&mut self, work: u64) -> bool {
        let quiet = work == self.seen;
        self.seen = work;
        if quiet && work != self.given_back_at {
            self.given_back_at = work;
            return true;
        }
        false
    }
}

/// Asks the allocator to return the free pages of every arena to the system. It locks each
/// arena in turn (a few milliseconds at most): called only when the daemon is quiet.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn give_back() {
    // SAFETY: `malloc_trim` takes no pointer and touches only the allocator's own state, which
    // glibc locks against every other allocator call.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Elsewhere the allocator has no such call (musl and others return memory themselves).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn give_back() {}

#[cfg(test)]
mod tests {
    use super::Quiet;

    #[test]
    fn memory_is_given_back_once_after_each_busy_spell() {
        // (work counted at each look, whether memory is given back then)
        let looks = [
            (0, false), // fresh and quiet: nothing was used
            (0, false),
            (12, false), // busy
            (40, false), // busy
            (40, true),  // quiet after work: give back
            (40, false), // still quiet: once is enough
            (41, false), // one request
            (41, true),  // quiet again after it
            (41, false),
        ];
        let mut quiet = Quiet::default();
        let decided: Vec<(u64, bool)> = looks.iter().map(|&(n, _)| (n, quiet.look(n))).collect();
        assert_eq!(decided, looks);
    }
}
