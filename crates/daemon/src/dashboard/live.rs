//! `/live`: what an open dashboard page needs to stay current, and no more. Every page shares
//! one such stream (its script's shared worker); it carries one small `run` message when a
//! run's status changes — `{"run", "status", "started", "needs"}` — and, after a burst, one
//! `count` message with the badge's count (`{"needs"}`) — never a run's own events,
//! so a page's traffic grows with how many runs change state, not with how busy they are. A
//! run page follows its own run's events through that run's output stream (`journal`
//! messages there). `id:` is the journal's feed position, as on `/api/events`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::Event as Sse;
use axum::response::{IntoResponse, Response};
use loopwright_engine::{Event, RunId, RunStatus};
use serde::{Deserialize, Serialize};

use super::waiting_count;
use crate::Shared;
use crate::api::auth::Caller;
use crate::api::events::{Follow, resume_from, sse_response};

/// How long a run's start waits for the entry journaled with it (its queueing).
const COMPANION: std::time::Duration = std::time::Duration::from_millis(50);

/// How many runs' last statuses a stream remembers (past it, it starts again: at worst a run's
/// unchanged status is sent once more).
const REMEMBERED: usize = 20_000;

/// `/live?after=POS`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LiveQuery {
    after: Option<u64>,
}

/// A run whose status changed, as `/live` sends it.
#[derive(Debug, PartialEq, Serialize)]
pub(super) struct RunChange {
    /// The run.
    run: String,
    /// Its status now.
    status: &'static str,
    /// It started with this change (a run the page has never shown); left out when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    started: bool,
    /// How many runs and auto loops wait for a person, when this change may have changed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    needs: Option<u64>,
}

/// The badge's count, as `/live` sends it after a burst of changes.
#[derive(Debug, Serialize)]
struct Count {
    /// How many runs and auto loops wait for a person.
    needs: u64,
}

/// What a stream knows of the runs it has told about: their last status sent.
#[derive(Debug, Default)]
pub(super) struct Told {
    statuses: HashMap<RunId, RunStatus>,
}

impl Told {
    /// Whether `status`, after an event (`started`: the run's first), is news for this stream,
    /// and whether it may have changed how many runs wait for a person. Pure: the event says
    /// the status it moves its run to.
    pub(super) fn news(&mut self, run: &RunId, started: bool, status: RunStatus) -> Option<(bool, bool)> {
        let before = self.statuses.get(run).copied();
        if before == Some(status) && !started {
            return None;
        }
        if self.statuses.len() >= REMEMBERED {
            self.statuses.clear();
        }
        self.statuses.insert(run.clone(), status);
        let waiting = |s: Option<RunStatus>| s == Some(RunStatus::Waiting);
        // A run first told about may have been waiting before: its count is sent too.
        let needs = waiting(Some(status)) || waiting(before) || before.is_none();
        Some((started, needs))
    }
}

pub(super) async fn live(
    State(shared): State<Arc<Shared>>,
    caller: Option<Extension<Caller>>,
    Query(q): Query<LiveQuery>,
    headers: HeaderMap,
) -> Response {
    if caller.is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let after = match resume_from(&headers, q.after) {
        Ok(after) => after,
        Err(e) => return e.into_response(),
    };
    let feed = Follow::new(&shared, after);
    let state = LiveStream { shared: Arc::clone(&shared), feed, told: Told::default(), owed: false };
    sse_response(&shared, futures_util::stream::unfold(state, LiveStream::next))
}

struct LiveStream {
    shared: Arc<Shared>,
    feed: Follow,
    told: Told,
    /// A change may have moved the badge's count while more entries were coming: the count is
    /// sent once caught up (`event: count`), not read for each change of a burst.
    owed: bool,
}

impl LiveStream {
    async fn next(mut self) -> Option<(Result<Sse, Infallible>, Self)> {
        loop {
            if self.owed && self.feed.caught_up() {
                self.owed = false;
                let data =
                    serde_json::to_string(&Count { needs: waiting_count(&self.shared).await }).unwrap_or_default();
                let sse = Sse::default().id(self.feed.last.to_string()).event("count").data(data);
                return Some((Ok(sse), self));
            }
            let item = self.feed.next().await?;
            let started = matches!(item.record.event, Event::RunStarted(_));
            let mut status = item.record.event.run_status();
            // A start written with its queueing in one append is one change: `queued`.
            if started
                && let Some(next) = self.feed.peek_within(COMPANION).await
                && next.run == item.run
                && let Some(then) = next.record.event.run_status()
            {
                status = Some(then);
                self.feed.skip_next();
            }
            if let Some(sse) = self.change(&item.run, started, status).await {
                return Some((Ok(sse), self));
            }
        }
    }

    /// The message a run's `status` after an event makes, if it is news.
    async fn change(&mut self, run: &RunId, first: bool, status: Option<RunStatus>) -> Option<Sse> {
        let (started, needs) = self.told.news(run, first, status?)?;
        let needs = if needs && self.feed.caught_up() {
            Some(waiting_count(&self.shared).await)
        } else {
            self.owed |= needs;
            None
        };
        let change = RunChange { run: run.to_string(), status: status?.as_str(), started, needs };
        let data = serde_json::to_string(&change).unwrap_or_default();
        Some(Sse::default().id(self.feed.last.to_string()).event("run").data(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u8) -> RunId {
        RunId::parse(&format!("20261130-040000-00{n:02}")).expect("a run id")
    }

    #[test]
    fn a_stream_tells_a_status_once_and_the_badge_only_when_waiting_may_have_changed() {
        let mut told = Told::default();
        let (a, b) = (run(1), run(2));
        let seen = [
            told.news(&a, true, RunStatus::Running),
            told.news(&a, false, RunStatus::Running),
            told.news(&a, false, RunStatus::Waiting),
            told.news(&a, false, RunStatus::Waiting),
            told.news(&a, false, RunStatus::Running),
            told.news(&a, false, RunStatus::Success),
            told.news(&b, false, RunStatus::Failed),
            told.news(&b, false, RunStatus::Failed),
        ];
        let expected = [
            Some((true, true)),
            None,
            Some((false, true)),
            None,
            Some((false, true)),
            Some((false, false)),
            Some((false, true)),
            None,
        ];
        assert_eq!(seen, expected);
    }
}
