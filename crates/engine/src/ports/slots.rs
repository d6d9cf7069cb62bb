//! The process slots a worker shares among the runs it drives (SPEC §13 and §16): each run it
//! claims holds one for as long as it drives it; a run whose stages run at once takes one more
//! for each attempt in flight beyond its first, while one is free, and gives it back when that
//! attempt ends. A run always has its own slot, so it never waits on another run's.
//!
//! Outside a worker (`loopwright run`, the daemon) there is no pool: every slot asked for is
//! given, and `max_parallel` alone bounds a graph.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// A pool of slots, or none (unbounded). Clones share the pool.
#[derive(Debug, Clone, Default)]
pub struct Slots(Option<Arc<Pool>>);

#[derive(Debug)]
struct Pool {
    permits: Arc<Semaphore>,
    /// Counts the slots given back: every waiter sees each give-back after it began to wait.
    freed: watch::Sender<u64>,
}

/// A slot taken: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    pool: Option<Arc<Pool>>,
}

impl Slots {
    /// A pool of `n` slots.
    pub fn new(n: usize) -> Self {
        let (freed, _) = watch::channel(0);
        Self(Some(Arc::new(Pool { permits: Arc::new(Semaphore::new(n)), freed })))
    }

    /// A free slot, if there is one (always, without a pool).
    pub fn try_take(&self) -> Option<Slot> {
        match &self.0 {
            None => Some(Slot { permit: None, pool: None }),
            Some(pool) => {
                let permit = Arc::clone(&pool.permits).try_acquire_owned().ok()?;
                Some(Slot { permit: Some(permit), pool: Some(Arc::clone(pool)) })
            }
        }
    }

    /// How many slots are free (`usize::MAX` without a pool).
    pub fn free(&self) -> usize {
        self.0.as_ref().map_or(usize::MAX, |p| p.permits.available_permits())
    }

    /// A future that is ready once a slot is given back after this call (never without a
    /// pool): made before looking for a free slot, it misses no give-back after the look.
    pub fn freed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let given = self.0.as_ref().map(|pool| pool.freed.subscribe());
        async move {
            // The sender lives as long as the pool, which its slots and clones hold.
            if let Some(mut given) = given
                && given.changed().await.is_ok()
            {
                return;
            }
            std::future::pending().await
        }
    }
}

impl Slot {
    /// Gives it back untold: for a slot taken to look for work that there was none for (its
    /// waiters were not kept from anything they could have had, and a worker that looked must
    /// not wake itself).
    pub fn unused(mut self) {
        self.pool = None;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        if let Some(pool) = &self.pool {
            pool.freed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_are_shared_between_clones_and_come_back_when_dropped() {
        let slots = Slots::new(2);
        let other = slots.clone();
        let a = slots.try_take().expect("one");
        let b = other.try_take().expect("two");
        assert!(slots.try_take().is_none(), "the pool is shared and full");
        assert_eq!(other.free(), 0);
        // A give-back is told to every waiter, not one before it waited.
        let (first, second) = (slots.freed(), other.freed());
        drop(a);
        let told = tokio::time::timeout(std::time::Duration::from_secs(1), async { tokio::join!(first, second) });
        told.await.expect("both told");
        let late = tokio::time::timeout(std::time::Duration::from_millis(50), slots.freed()).await;
        assert!(late.is_err(), "a give-back before the wait is not told");
        let waiting = slots.freed();
        slots.try_take().expect("a free slot").unused();
        let untold = tokio::time::timeout(std::time::Duration::from_millis(50), waiting).await;
        assert!(untold.is_err(), "an unused slot comes back untold");
        assert_eq!(slots.free(), 1);
        drop(b);
        assert_eq!(slots.free(), 2);
        let unbounded = Slots::default();
        let all: Vec<Slot> = (0..100).filter_map(|_| unbounded.try_take()).collect();
        assert_eq!((all.len(), unbounded.free()), (100, usize::MAX));
    }
}
