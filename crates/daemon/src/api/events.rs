//! Live events as Server-Sent Events: `id:` is the journal's sequence number (per run) or the
//! feed position (every run), so `Last-Event-ID` resumes with no gap and no duplicate. A
//! stream replays from the journal, then follows the journal watcher's broadcast; a client
//! too slow for the broadcast falls back to reading the journal (its memory stays bounded).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use loopwright_app::ops::{output, read};
use loopwright_engine::{Event, EventRecord, FeedEntry, RunId, Store};
use tokio::sync::broadcast::error::RecvError;

use super::dto::EventsQuery;
use super::error::{ApiError, ErrorBody, Query};
use crate::Shared;

/// The most events read from the journal at once when a stream catches up.
const BATCH: usize = 500;

pub(super) fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// Where a stream resumes: `Last-Event-ID`, else `?after=`.
pub(crate) fn resume_from(headers: &HeaderMap, after: Option<u64>) -> Result<u64, ApiError> {
    match headers.get("last-event-id").map(|v| v.to_str().unwrap_or("").trim().to_owned()) {
        Some(id) if !id.is_empty() => {
            id.parse().map_err(|_| ApiError::invalid(format!("Last-Event-ID `{id}`: expected a sequence number")))
        }
        _ => Ok(after.unwrap_or(0)),
    }
}

/// The next broadcast item, or `None` once the daemon shuts down (the stream then ends, so
/// graceful shutdown does not wait on clients).
pub(crate) async fn receive(
    rx: &mut tokio::sync::broadcast::Receiver<Arc<FeedEntry>>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<Result<Arc<FeedEntry>, RecvError>> {
    if *shutdown.borrow() {
        return None;
    }
    tokio::select! {
        r = rx.recv() => Some(r),
        _ = shutdown.changed() => None,
    }
}

fn sse_of(record: &EventRecord, id: u64, run: Option<&RunId>) -> Sse {
    let mut data = serde_json::to_value(record).unwrap_or_default();
    if let (Some(run), Some(map)) = (run, data.as_object_mut()) {
        map.insert("run_id".into(), run.as_str().into());
    }
    Sse::default().id(id.to_string()).event(record.event.kind()).data(data.to_string())
}

pub(crate) fn sse_response(
    shared: &Shared,
    stream: impl Stream<Item = Result<Sse, Infallible>> + Send + 'static,
) -> Response {
    axum::response::Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(shared.heartbeat).text("heartbeat"))
        .into_response()
}

/// A run's journal: JSON, or a live stream with `Accept: text/event-stream`.
#[utoipa::path(get, path = "/api/runs/{run}/events", tag = "events",
    params(("run" = String, Path, description = "The run id"), EventsQuery,
           ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Resume a stream after this sequence number")),
    responses((status = 200, description = "The events (a JSON array, or `text/event-stream`)",
               content((Vec<super::schema::EventRecord> = "application/json"), (String = "text/event-stream"))),
              (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn run_events(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = RunId::parse(&run).ok_or_else(|| ApiError::from(loopwright_app::Error::no_run(&run)))?;
    let after = resume_from(&headers, q.after)?;
    // A stream subscribes before it reads the journal: nothing committed in between is missed
    // (what both hold is sent once, by sequence number).
    let rx = shared.feed.subscribe();
    let events = read::events(&shared.store, &run, after).await?;
    if !wants_stream(&headers) {
        return Ok(axum::Json(events).into_response());
    }
    let state = RunStream {
        shutdown: shared.shutdown.clone(),
        shared: Arc::clone(&shared),
        run,
        last: after,
        rx,
        pending: events.into(),
        stale: false,
        end: false,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, RunStream::next);
    Ok(sse_response(&shared, stream))
}

struct RunStream {
    shared: Arc<Shared>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    run: RunId,
    last: u64,
    rx: tokio::sync::broadcast::Receiver<Arc<FeedEntry>>,
    pending: VecDeque<EventRecord>,
    /// The journal may hold events not yet sent: read it before waiting.
    stale: bool,
    /// `run_finished` was sent: `end` comes next.
    end: bool,
    done: bool,
}

impl RunStream {
    async fn next(mut self) -> Option<(Result<Sse, Infallible>, Self)> {
        loop {
            if self.done {
                return None;
            }
            if let Some(record) = self.pending.pop_front() {
                if record.seq <= self.last {
                    continue;
                }
                self.last = record.seq;
                self.end = matches!(record.event, Event::RunFinished { .. });
                let sse = sse_of(&record, record.seq, None);
                return Some((Ok(sse), self));
            }
            if self.end {
                self.done = true;
                return Some((Ok(Sse::default().event("end").data("{}")), self));
            }
            if self.stale {
                self.stale = false;
                match self.shared.store.events_since(&self.run, self.last).await {
                    Ok(records) => self.pending.extend(records.into_iter().take(BATCH)),
                    Err(_) => return None,
                }
                self.stale = self.pending.len() == BATCH;
                continue;
            }
            let received = receive(&mut self.rx, &mut self.shutdown).await?;
            match received {
                Ok(item) if item.run == self.run => {
                    if item.record.seq == self.last + 1 {
                        self.pending.push_back(item.record.clone());
                    } else if item.record.seq > self.last + 1 {
                        self.stale = true;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => self.stale = true,
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// Every run's events, for the dashboard: each `data` carries `run_id`; `id:` is a feed
/// position that `Last-Event-ID` resumes from.
#[utoipa::path(get, path = "/api/events", tag = "events",
    params(EventsQuery, ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Resume after this feed position")),
    responses((status = 200, description = "A `text/event-stream` of every run's events", content_type = "text/event-stream", body = String),
              (status = 422, body = ErrorBody)))]
pub async fn all_events(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = resume_from(&headers, q.after)?;
    let feed = Follow::new(&shared, after);
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        Some((Ok(sse_of(&item.record, item.position, Some(&item.run))), feed))
    });
    Ok(sse_response(&shared, stream))
}

/// Every run's journal entries after a feed position, in order, each once: read from the
/// journal, then from the journal watcher's broadcast (and from the journal again when the
/// broadcast skipped some: a slow reader's memory stays bounded).
pub(crate) struct Follow {
    shared: Arc<Shared>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// The position of the last entry given.
    pub(crate) last: u64,
    rx: tokio::sync::broadcast::Receiver<Arc<FeedEntry>>,
    pending: VecDeque<Arc<FeedEntry>>,
    stale: bool,
}

impl Follow {
    /// From feed position `after` (subscribed before the journal is read: nothing committed in
    /// between is missed).
    pub(crate) fn new(shared: &Arc<Shared>, after: u64) -> Self {
        Self {
            rx: shared.feed.subscribe(),
            shutdown: shared.shutdown.clone(),
            shared: Arc::clone(shared),
            last: after,
            pending: VecDeque::new(),
            stale: true,
        }
    }

    /// The next entry, or `None` once the daemon shuts down.
    pub(crate) async fn next(&mut self) -> Option<Arc<FeedEntry>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                if item.position <= self.last {
                    continue;
                }
                self.last = item.position;
                return Some(item);
            }
            if self.stale {
                let batch = self.shared.store.feed_since(self.last, BATCH).await.ok()?;
                self.stale = batch.len() == BATCH;
                self.pending.extend(batch.into_iter().map(Arc::new));
                continue;
            }
            let received = receive(&mut self.rx, &mut self.shutdown).await?;
            self.take(received)?;
        }
    }

    /// The entry after the last one given, when it is there already or comes within `wait`
    /// (it is given by the next [`Follow::next`] too, unless taken with [`Follow::skip_next`]).
    pub(crate) async fn peek_within(&mut self, wait: std::time::Duration) -> Option<Arc<FeedEntry>> {
        if self.pending.is_empty() && !self.stale {
            let received = tokio::time::timeout(wait, receive(&mut self.rx, &mut self.shutdown)).await;
            if let Ok(Some(received)) = received {
                self.take(received)?;
            }
        }
        self.pending.front().filter(|next| next.position == self.last + 1).cloned()
    }

    /// Nothing more is known to follow yet: the journal read and the broadcast received.
    pub(crate) fn caught_up(&self) -> bool {
        self.pending.is_empty() && !self.stale && self.rx.is_empty()
    }

    /// Passes over the entry [`Follow::peek_within`] gave.
    pub(crate) fn skip_next(&mut self) {
        if let Some(next) = self.pending.pop_front() {
            self.last = next.position;
        }
    }

    /// A broadcast entry: kept, or the journal read again.
    fn take(&mut self, received: Result<Arc<FeedEntry>, RecvError>) -> Option<()> {
        match received {
            Ok(item) if item.position == self.last + 1 + self.pending.len() as u64 => self.pending.push_back(item),
            Ok(item) if item.position > self.last + 1 + self.pending.len() as u64 => self.stale = true,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => self.stale = true,
            Err(RecvError::Closed) => return None,
        }
        Some(())
    }
}

/// How often the output of the stage in flight is looked at.
const OUTPUT_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// The output of a run's stage in flight, as it is printed: `event: output` per piece
/// (`{"stage","attempt","stream","offset","text"}`; no `id`, it is not journaled), from the
/// beginning of the attempt in flight and of each attempt after it; `event: journal`
/// (`{"seq","status"}`) when the run's journal grew (at once when it holds events after
/// `after`); `event: end` once the run is over. The whole output of a finished attempt is in
/// its attempts.
#[utoipa::path(get, path = "/api/runs/{run}/output", tag = "events",
    params(("run" = String, Path, description = "The run id"), EventsQuery),
    responses((status = 200, description = "A `text/event-stream` of the stage in flight's output", content_type = "text/event-stream", body = String),
              (status = 404, body = ErrorBody)))]
pub async fn run_output(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let run = RunId::parse(&run).ok_or_else(|| ApiError::from(loopwright_app::Error::no_run(&run)))?;
    let rx = shared.feed.subscribe();
    let state = shared.folds.state(&shared.store, &run).await?;
    // The journal moved past what the reader last saw (`after`): it is told at once.
    let journal_moved = q.after.is_some_and(|after| state.last_seq > after);
    let mut follow = output::Follow::new(shared.ws.runs_dir().join(run.as_str()));
    follow.track(&state);
    let stream = OutputStream {
        follow,
        over: state.status.is_final(),
        shutdown: shared.shutdown.clone(),
        shared: Arc::clone(&shared),
        run,
        rx,
        pending: VecDeque::new(),
        journal_moved,
        done: false,
    };
    Ok(sse_response(&shared, futures_util::stream::unfold(stream, OutputStream::next)))
}

struct OutputStream {
    shared: Arc<Shared>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    run: RunId,
    rx: tokio::sync::broadcast::Receiver<Arc<FeedEntry>>,
    follow: output::Follow,
    pending: VecDeque<output::Chunk>,
    /// The run's journal has grown: the attempt in flight may have changed.
    journal_moved: bool,
    /// The run is over: once its last output is sent, the stream ends.
    over: bool,
    done: bool,
}

impl OutputStream {
    async fn next(mut self) -> Option<(Result<Sse, Infallible>, Self)> {
        loop {
            if self.done {
                return None;
            }
            if let Some(chunk) = self.pending.pop_front() {
                let data = serde_json::to_string(&chunk).unwrap_or_default();
                return Some((Ok(Sse::default().event("output").data(data)), self));
            }
            self.pending.extend(self.follow.read());
            if !self.pending.is_empty() {
                continue;
            }
            if self.journal_moved {
                self.journal_moved = false;
                let state = self.shared.folds.state(&self.shared.store, &self.run).await.ok()?;
                // What the attempt that ended printed last was read above.
                self.follow.track(&state);
                self.over = state.status.is_final();
                // The run's page shows its journal: it reads itself again on this.
                let data = serde_json::json!({ "seq": state.last_seq, "status": state.status.as_str() });
                return Some((Ok(Sse::default().event("journal").data(data.to_string())), self));
            }
            if self.over {
                self.done = true;
                return Some((Ok(Sse::default().event("end").data("{}")), self));
            }
            let polling = self.follow.following();
            tokio::select! {
                received = receive(&mut self.rx, &mut self.shutdown) => match received? {
                    Ok(item) => self.journal_moved |= item.run == self.run,
                    Err(RecvError::Lagged(_)) => self.journal_moved = true,
                    Err(RecvError::Closed) => return None,
                },
                () = tokio::time::sleep(OUTPUT_POLL), if polling => {}
            }
        }
    }
}
