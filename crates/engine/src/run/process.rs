//! An attempt's process kept in flight beside others (a graph's branches, a round's
//! candidates): its runner future, owning its request, and what the runner notices while it
//! runs; dropping it ends the process.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::mpsc;

use crate::ports::{Execution, Notice, Runner, StageRequest};

/// A process in flight.
pub(super) struct Process<'a> {
    run: Pin<Box<dyn Future<Output = Execution> + 'a>>,
    notices: mpsc::UnboundedReceiver<Notice>,
}

impl<'a> Process<'a> {
    /// Starts `request` with `runner` (it runs as the future is polled).
    pub(super) fn start<R: Runner>(runner: &'a R, request: &StageRequest) -> Self {
        let (tx, notices) = mpsc::unbounded_channel();
        let request = request.clone();
        Self { run: Box::pin(async move { runner.run(&request, tx).await }), notices }
    }

    /// What the runner noticed and was not read yet (after the process ended).
    pub(super) fn left(&mut self) -> Vec<Notice> {
        std::iter::from_fn(|| self.notices.try_recv().ok()).collect()
    }
}

/// What one of the processes in flight did.
pub(super) enum Reported {
    /// The item at this position noticed something.
    Notice(usize, Notice),
    /// The item at this position's process ended.
    Ended(usize, Execution),
}

/// The next thing a process of `items` does: a notice (first), or its end.
pub(super) fn next_of<'f, 'a: 'f, T>(
    items: &'f mut [T],
    process: impl Fn(&mut T) -> &mut Process<'a> + 'f,
) -> impl Future<Output = Reported> + 'f {
    std::future::poll_fn(move |cx| {
        for (i, item) in items.iter_mut().enumerate() {
            if let Poll::Ready(Some(notice)) = process(item).notices.poll_recv(cx) {
                return Poll::Ready(Reported::Notice(i, notice));
            }
        }
        for (i, item) in items.iter_mut().enumerate() {
            if let Poll::Ready(execution) = process(item).run.as_mut().poll(cx) {
                return Poll::Ready(Reported::Ended(i, execution));
            }
        }
        Poll::Pending
    })
}
