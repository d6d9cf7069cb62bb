//! Notifications (SPEC §11): the daemon tells the `[[notify]]` targets of config.toml when a
//! run needs a person, failed, went to the dead letters or ended, and when an auto loop needs a
//! person or ended — once per happening and target (claimed in the notifications journal
//! before it is sent), retried with backoff, its outcome journaled, never in a run's way (a
//! task of its own, fed by the journal watcher's broadcast and the loops' notices).
//!
//! A notification about a gate or an escalation carries one-tap links: signed (HMAC-SHA256
//! with a key kept in `state/notify.key`), expiring after the target's `link_hours`, and
//! single use (the journal records the first use). A link opens a confirmation page showing
//! the headline and the question; confirming answers as the person the target names (`as`), as
//! the recipient it was sent to (`recipients`: one message per person, at their own address),
//! or as the person signed in (`links = "sign-in"`).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use loopwright_app::ops::{self, read};
use loopwright_engine::event::Event;
use loopwright_engine::result::WaitKind;
use loopwright_engine::{FeedEntry, RunStatus};
use loopwright_spec::config::{NotifyEvent, NotifyKind, NotifyOn};
use loopwright_store::notify::{Notification, NotificationStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::Shared;

mod digest;
mod target;

pub(crate) use target::Target;

/// Waits between sending attempts: the first try, then after 2 s, 8 s, 30 s and 2 min.
const BACKOFF: [Duration; 5] =
    [Duration::ZERO, Duration::from_secs(2), Duration::from_secs(8), Duration::from_secs(30), Duration::from_secs(120)];

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a one-tap link does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkAction {
    /// Approve the gate.
    Approve,
    /// Reject the gate (the run ends rejected).
    Reject,
    /// Answer the escalation: retry.
    Retry,
    /// Answer the escalation: retry with guidance (typed on the confirmation page).
    Fix,
    /// Answer the escalation: skip the stage.
    Skip,
    /// Answer the escalation: abort the run.
    Abort,
    /// Answer an auto loop's menu with the choice the link names.
    Choose,
}

impl LinkAction {
    /// The button's words.
    pub fn label(self) -> &'static str {
        match self {
            Self::Approve => "Approve",
            Self::Reject => "Reject",
            Self::Retry => "Retry",
            Self::Fix => "Fix with guidance",
            Self::Skip => "Skip the stage",
            Self::Abort => "Abort the run",
            Self::Choose => "Answer",
        }
    }
}

/// What a signed link says: which notification, run, stage and answer, as whom, until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The notification it came with (single use is recorded on it).
    pub key: String,
    /// The run.
    pub run: String,
    /// The stage at the gate or escalation.
    pub stage: String,
    /// The answer.
    pub action: LinkAction,
    /// Who it answers as.
    #[serde(rename = "as")]
    pub answer_as: String,
    /// Whether `answer_as` was one of the daemon's people when it was made: then it answers
    /// only while they still are, with a role that may answer.
    #[serde(default)]
    pub person: bool,
    /// The journal position of the event that made the run wait: the link answers that wait
    /// only, not a later one at the same stage.
    #[serde(default)]
    pub since: u64,
    /// Expiry, in seconds since the epoch.
    pub exp: i64,
    /// The auto loop's session, for a link that answers a loop's menu (`run` and `stage` are
    /// empty then, `since` is the journal entry that asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The menu's choice it types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<loopwright_auto::screen::Choice>,
    /// Opens only for a person signed in to the dashboard, and answers as them (`links =
    /// "sign-in"`), not as `answer_as`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sign_in: bool,
    /// Sent to `answer_as` alone, at their own address (`recipients`): the link proves them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recipient: bool,
}

/// Signs and checks links with the daemon's key.
pub struct Signer {
    key: ring::hmac::Key,
}

/// Why a link was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRefused {
    /// Not a link this daemon signed (or altered).
    Forged,
    /// Past its expiry.
    Expired,
}

impl Signer {
    /// The signer with the key kept in `state/notify.key`, created (random, 0600) if missing.
    pub fn load(state_dir: &std::path::Path) -> Result<Self, loopwright_app::Error> {
        let path = state_dir.join("notify.key");
        let bytes = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().len() == 64 => decode_hex(text.trim()),
            _ => None,
        };
        let bytes = match bytes {
            Some(b) => b,
            None => {
                let mut fresh = [0u8; 32];
                ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh).map_err(|_| {
                    loopwright_app::Error::Internal(anyhow::anyhow!("the system's random source failed"))
                })?;
                let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
                loopwright_app::workspace::write_atomic_private(&path, &hex)
                    .map_err(|e| loopwright_app::Error::usage(format!("cannot write {}: {e}", path.display())))?;
                fresh.to_vec()
            }
        };
        Ok(Self { key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes) })
    }

    /// The link's token: its JSON, then its signature, each base64url.
    pub fn sign(&self, link: &Link) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = b64.encode(serde_json::to_vec(link).unwrap_or_default());
        let tag = ring::hmac::sign(&self.key, payload.as_bytes());
        format!("{payload}.{}", b64.encode(tag.as_ref()))
    }

    /// The link a token carries, if this daemon signed it and it has not expired.
    pub fn check(&self, token: &str, now: jiff::Timestamp) -> Result<Link, LinkRefused> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (payload, tag) = token.split_once('.').ok_or(LinkRefused::Forged)?;
        let tag = b64.decode(tag).map_err(|_| LinkRefused::Forged)?;
        ring::hmac::verify(&self.key, payload.as_bytes(), &tag).map_err(|_| LinkRefused::Forged)?;
        let link: Link = b64
            .decode(payload)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(LinkRefused::Forged)?;
        if link.exp <= now.as_second() {
            return Err(LinkRefused::Expired);
        }
        Ok(link)
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// The shares of a `[[spend]]` cap at which it is told, in percent.
const SPEND_THRESHOLDS: [u8; 3] = [50, 80, 100];

/// The happening a journal event is, for notifications.
pub fn happening(event: &Event) -> Option<NotifyEvent> {
    match event {
        Event::RunFinished { status: RunStatus::Failed } => Some(NotifyEvent::Failed),
        Event::RunFinished { status: RunStatus::Success | RunStatus::Cancelled | RunStatus::Rejected }
        | Event::RunCancelled { .. } => Some(NotifyEvent::Finished),
        Event::DeadLettered { .. } => Some(NotifyEvent::DeadLetter),
        // Delivered, the run waits for its pull request's CI: nobody is needed.
        Event::Delivered(_) => None,
        e if e.run_status() == Some(RunStatus::Waiting) => Some(NotifyEvent::NeedsHuman),
        _ => None,
    }
}

/// What one notification says, before it is written in a target's format.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// The happening.
    pub event: NotifyEvent,
    /// The run, when it is about one.
    pub run_id: Option<String>,
    /// The auto loop's session, when it is about one.
    pub session: Option<String>,
    /// The run's pipeline.
    pub pipeline: Option<String>,
    /// The run's task.
    pub task: Option<String>,
    /// The stage it is about.
    pub stage: Option<String>,
    /// The headline.
    pub headline: String,
    /// Where to look.
    pub url: String,
    /// The pull request a run from GitHub opened.
    pub pull_request: Option<String>,
    /// One-tap answers.
    pub actions: Vec<Action>,
    /// The person it is sent to (a target with `recipients`).
    pub recipient: Option<String>,
}

impl Message {
    /// Its row in the notifications journal for `target`, under `key`, in `status`, not tried yet.
    fn row(&self, key: String, target: &Target, status: NotificationStatus) -> Notification {
        Notification {
            key,
            run_id: self.run_id.clone(),
            session_name: self.session.clone(),
            event: self.event.as_str().to_owned(),
            target: target.name.clone(),
            status,
            attempts: 0,
            at: jiff::Timestamp::now().to_string(),
            detail: String::new(),
            link_used_at: None,
        }
    }
}

/// A one-tap answer in a notification.
#[derive(Debug, Clone, Serialize)]
pub struct Action {
    /// The answer.
    pub action: LinkAction,
    /// The button's words.
    pub label: String,
    /// The signed link.
    pub url: String,
}

/// The request a target gets for `message`: its body, and the headers ntfy reads.
pub fn request_for(kind: NotifyKind, m: &Message) -> (Vec<(String, String)>, Vec<u8>) {
    match kind {
        NotifyKind::Webhook => {
            let mut body = json!({
                "event": m.event.as_str(), "run_id": m.run_id, "session": m.session, "pipeline": m.pipeline,
                "task": m.task, "stage": m.stage, "headline": m.headline, "url": m.url, "pull_request": m.pull_request,
                "actions": m.actions.iter().map(|a| json!({"action": a.action, "label": a.label, "url": a.url})).collect::<Vec<_>>(),
            });
            if let Some(person) = &m.recipient {
                body["recipient"] = json!(person);
            }
            (vec![("Content-Type".into(), "application/json".into())], body.to_string().into_bytes())
        }
        NotifyKind::Slack => {
            let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": format!(
                "{}\n<{}|Open in loopwright>{}",
                slack_escape(&m.headline),
                m.url,
                m.pull_request.as_ref().map(|p| format!(" · <{p}|The pull request>")).unwrap_or_default()
            )}})];
            if !m.actions.is_empty() {
                let buttons: Vec<Value> = m
                    .actions
                    .iter()
                    .map(|a| json!({"type": "button", "text": {"type": "plain_text", "text": a.label}, "url": a.url}))
                    .collect();
                blocks.push(json!({"type": "actions", "elements": buttons}));
            }
            // The top-level text is the notification's fallback (and what a phone shows): read
            // as mrkdwn too, so escaped like the blocks (`<!channel>`, a disguised link).
            let body = json!({"text": slack_escape(&m.headline), "blocks": blocks});
            (vec![("Content-Type".into(), "application/json".into())], body.to_string().into_bytes())
        }
        NotifyKind::Ntfy => {
            // Header values must be plain text on one line.
            let clean = |s: &str| s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>();
            let mut headers = vec![
                ("Title".to_owned(), clean(&format!("loopwright: {}", m.event.as_str().replace('_', " ")))),
                ("Click".to_owned(), m.url.clone()),
                ("Tags".to_owned(), if m.event == NotifyEvent::Failed { "x".into() } else { "bell".into() }),
            ];
            if !m.actions.is_empty() {
                let actions: Vec<String> =
                    m.actions.iter().take(3).map(|a| format!("view, {}, {}", a.label, a.url)).collect();
                headers.push(("Actions".to_owned(), actions.join("; ")));
            }
            (headers, m.headline.clone().into_bytes())
        }
    }
}

/// Slack's mrkdwn needs `&`, `<` and `>` escaped.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Sends notifications for the daemon.
pub struct Notifier {
    shared: Arc<Shared>,
    targets: Vec<Target>,
    signer: Arc<Signer>,
    http: reqwest::Client,
}

impl Notifier {
    /// A notifier for the targets of `shared`'s workspace config; `None` when there are none.
    pub fn new(shared: Arc<Shared>, signer: Arc<Signer>) -> Option<Self> {
        let targets = Target::all(&shared.ws.config.notify);
        if targets.is_empty() {
            return None;
        }
        loopwright_runners::http::tls();
        let http = reqwest::Client::builder().timeout(ATTEMPT_TIMEOUT).build().ok()?;
        Some(Self { shared, targets, signer, http })
    }

    /// Follows the journal and the loops' notices until the daemon stops.
    pub async fn run(self, mut feed: broadcast::Receiver<Arc<FeedEntry>>) {
        let this = Arc::new(self);
        this.resume_pending().await;
        this.catch_up().await;
        let mut shutdown = this.shared.shutdown.clone();
        // The loops' log from where the last daemon left it (on a first start, its end).
        let mut auto_after = {
            let store = Arc::clone(&this.shared.auto_store);
            let kept = tokio::task::spawn_blocking(move || {
                store.notifier_auto_position().ok().flatten().or_else(|| store.auto_log_last().ok())
            })
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
            this.auto_advance(kept).await;
            kept
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                entry = feed.recv() => match entry {
                    Ok(entry) => {
                        if let Event::UsageRecorded { .. } = &entry.record.event {
                            this.on_spend().await;
                        }
                        Arc::clone(&this).on_event(&entry).await;
                        if happening(&entry.record.event).is_some() {
                            this.advance(entry.position).await;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    Arc::clone(&this).digests().await;
                    let seen = Arc::clone(&this).on_auto(auto_after).await;
                    if seen != auto_after {
                        this.auto_advance(seen).await;
                    }
                    auto_after = seen;
                }
                _ = shutdown.changed() => return,
            }
        }
    }

    fn base_url(&self) -> String {
        self.shared.public.as_ref().map_or_else(|| format!("http://{}", self.shared.addr), |p| p.url.clone())
    }

    /// A link of `target`'s in notification `key`, answering the wait journaled at `since`:
    /// as the target's person, expiring after its `link_hours`, opening only for a person signed
    /// in or proving its recipient as the target says.
    fn link(&self, target: &Target, key: &str, action: LinkAction, since: u64) -> Link {
        let answer_as = target.answer_as();
        let hours = jiff::SignedDuration::from_hours(i64::from(target.config.link_hours));
        Link {
            key: key.to_owned(),
            run: String::new(),
            stage: String::new(),
            action,
            person: self.shared.people.role_of(&answer_as).is_some(),
            answer_as,
            since,
            exp: (jiff::Timestamp::now() + hours).as_second(),
            session: None,
            choice: None,
            sign_in: target.sign_in(),
            recipient: target.recipient.is_some(),
        }
    }

    /// `link`'s address: the daemon's, with the link signed.
    fn signed(&self, link: &Link) -> String {
        format!("{}/a/{}", self.base_url(), self.signer.sign(link))
    }

    async fn on_event(self: Arc<Self>, entry: &FeedEntry) {
        let Some(event) = happening(&entry.record.event) else { return };
        let wanted: Vec<&Target> = self.targets.iter().filter(|t| t.config.events.contains(&event)).collect();
        if wanted.is_empty() {
            return;
        }
        let Ok((pipeline, state)) = read::load_run(&self.shared.ws, &self.shared.store, &entry.run).await else {
            return;
        };
        let started = state.started.as_ref();
        let pipeline_name = started.map(|s| s.pipeline.clone()).unwrap_or_default();
        let shown = loopwright_app::ownership::shown_status(&state);
        let headline = ops::why::run_headline(&state, shown, &pipeline)
            .map(|h| format!("{} — {}", h.title, h.next))
            .unwrap_or_else(|| match event {
                NotifyEvent::Finished => format!("Run {} of {pipeline_name} ended: {}", entry.run, shown.as_str()),
                _ => format!("Run {} of {pipeline_name}: {}", entry.run, shown.as_str()),
            });
        let result = loopwright_engine::result::PipelineResult::from_state(&state);
        let waiting = result.waiting.filter(|_| event == NotifyEvent::NeedsHuman);
        let stage = waiting
            .as_ref()
            .map(|w| w.stage.clone())
            .or_else(|| entry.record.event.stage().map(ToString::to_string))
            .or_else(|| result.failed_stage.clone().filter(|_| event == NotifyEvent::Failed));
        // A run that ended in a dead letter was told as one: its failure is not told again.
        let dead_lettered = state.stages.iter().any(|s| s.closed.as_ref().is_some_and(|l| l.dead_letter.is_some()));
        let ending = matches!(event, NotifyEvent::Failed | NotifyEvent::Finished);
        let mut changed: Option<bool> = None;
        for target in wanted {
            let config = &target.config;
            if !config.pipelines.is_empty() && !config.pipelines.contains(&pipeline_name) {
                continue;
            }
            if event == NotifyEvent::Failed && dead_lettered && config.events.contains(&NotifyEvent::DeadLetter) {
                continue;
            }
            // A run's end a target does not take on its own goes to its digest, or nowhere.
            let alone = !ending
                || match config.on {
                    NotifyOn::Every => config.digest_minutes.is_none(),
                    NotifyOn::Change => match changed {
                        Some(c) => c,
                        None => {
                            let end = digest::End::of(&state, shown);
                            *changed.insert(digest::changed(&self.shared, end).await)
                        }
                    },
                };
            if !alone && config.digest_minutes.is_none() {
                continue;
            }
            let key = format!("run:{}:{}:{}", entry.run, entry.record.seq, target.hash);
            let actions: Vec<LinkAction> = match waiting.as_ref().map(|w| w.kind) {
                Some(WaitKind::Approval) => vec![LinkAction::Approve, LinkAction::Reject],
                Some(WaitKind::Escalation) => {
                    vec![LinkAction::Retry, LinkAction::Fix, LinkAction::Skip, LinkAction::Abort]
                }
                Some(WaitKind::Ci | WaitKind::Review) | None => Vec::new(),
            };
            let actions = actions
                .into_iter()
                .map(|action| {
                    let link = Link {
                        run: entry.run.to_string(),
                        stage: stage.clone().unwrap_or_default(),
                        ..self.link(target, &key, action, entry.record.seq)
                    };
                    Action { action, label: action.label().to_owned(), url: self.signed(&link) }
                })
                .collect();
            let message = Message {
                event,
                run_id: Some(entry.run.to_string()),
                session: None,
                pipeline: Some(pipeline_name.clone()),
                task: started.map(|s| s.task.clone()),
                stage: stage.clone(),
                headline: headline.clone(),
                url: format!("{}/runs/{}", self.base_url(), entry.run),
                pull_request: result.forge.as_ref().and_then(|f| f.pull_request.as_ref()).map(|p| p.url.clone()),
                actions,
                recipient: target.recipient.clone(),
            };
            if !alone {
                self.hold(key, target, &message).await;
                continue;
            }
            Arc::clone(&self).send(key, target.clone(), message).await;
        }
    }

    /// After an attempt's use is recorded: each `[[spend]]` cap whose period has reached 50, 80
    /// or 100 % of it is told once per threshold and period (the notification's key says which,
    /// so a claimed one is never sent again, by this daemon or the next).
    async fn on_spend(self: &Arc<Self>) {
        let caps = &self.shared.ws.config.spend;
        let wanted: Vec<&Target> =
            self.targets.iter().filter(|t| t.config.events.contains(&NotifyEvent::Spend)).collect();
        if caps.is_empty() || wanted.is_empty() {
            return;
        }
        let Ok(standing) = loopwright_app::spend::standing(caps, &self.shared.store, jiff::Timestamp::now()).await
        else {
            return;
        };
        for cap in standing {
            for threshold in SPEND_THRESHOLDS.into_iter().filter(|t| cap.percent >= f64::from(*t)) {
                let then = if threshold >= 100 {
                    format!(
                        "attempts under it {} until {}",
                        if cap.on_exceed == "fail" { "fail" } else { "wait" },
                        cap.until
                    )
                } else {
                    format!("it resets {}", cap.until)
                };
                let headline = format!("{} is {threshold} % used: {}; {then}", cap.shown, cap.used_words());
                for target in &wanted {
                    let key = format!("spend:{}:{}:{threshold}:{}", cap.key, cap.since.as_second(), target.hash);
                    let message = Message {
                        event: NotifyEvent::Spend,
                        run_id: None,
                        session: None,
                        pipeline: None,
                        task: None,
                        stage: None,
                        headline: headline.clone(),
                        url: format!("{}/stats#spend", self.base_url()),
                        pull_request: None,
                        actions: Vec::new(),
                        recipient: target.recipient.clone(),
                    };
                    Arc::clone(self).send(key, (*target).clone(), message).await;
                }
            }
        }
    }

    /// Sends the loops' notices journaled after `after`; returns the last one seen.
    async fn on_auto(self: Arc<Self>, after: i64) -> i64 {
        let store = Arc::clone(&self.shared.auto_store);
        let found = tokio::task::spawn_blocking(move || ops::auto::notices(&store, after, 100)).await;
        let Ok(Ok(notices)) = found else { return after };
        let mut last = after;
        for n in notices {
            last = last.max(n.id);
            let event = match n.kind {
                loopwright_auto::event::NoticeKind::NeedsHuman => NotifyEvent::AutoNeedsHuman,
                loopwright_auto::event::NoticeKind::Ended => NotifyEvent::AutoFinished,
            };
            // A loop waiting at a menu: one-tap links for its choices, bound to this question.
            let question = if event == NotifyEvent::AutoNeedsHuman {
                let (shared, session) = (Arc::clone(&self.shared), n.session_name.clone());
                tokio::task::spawn_blocking(move || ops::auto::question(&shared.ws, &shared.auto_store, &session))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten()
                    .filter(|q| q.asked == n.id)
            } else {
                None
            };
            for target in self.targets.iter().filter(|t| t.config.events.contains(&event)) {
                let key = format!("auto:{}:{}", n.id, target.hash);
                let actions = question
                    .iter()
                    .flat_map(|q| &q.choices)
                    .map(|choice| {
                        let link = Link {
                            session: Some(n.session_name.clone()),
                            choice: Some(choice.clone()),
                            ..self.link(target, &key, LinkAction::Choose, u64::try_from(n.id).unwrap_or_default())
                        };
                        Action {
                            action: LinkAction::Choose,
                            label: format!("{}. {}", choice.key, choice.label),
                            url: self.signed(&link),
                        }
                    })
                    .collect();
                let message = Message {
                    event,
                    run_id: None,
                    session: Some(n.session_name.clone()),
                    pipeline: None,
                    task: None,
                    stage: None,
                    headline: format!("Auto loop {}: {}", n.session_name, n.text),
                    url: format!("{}/auto#loop-{}", self.base_url(), n.session_name),
                    pull_request: None,
                    actions,
                    recipient: target.recipient.clone(),
                };
                Arc::clone(&self).send(key, target.clone(), message).await;
            }
        }
        last
    }

    /// Claims the notification, with what it sends, then sends it in a task of its own,
    /// retried with backoff. Returns once it is claimed (or was already).
    async fn send(self: Arc<Self>, key: String, target: Target, message: Message) {
        self.send_telling(key, target, message, Vec::new()).await;
    }

    /// [`Self::send`], for a message that tells the notifications `held` kept for it: they
    /// are marked as told in the same write as its claim.
    async fn send_telling(self: Arc<Self>, key: String, target: Target, message: Message, held: Vec<String>) {
        let (headers, body) = request_for(target.config.kind, &message);
        let request = Kept { target: target.hash.clone(), headers, body: String::from_utf8_lossy(&body).into_owned() };
        let row = message.row(key.clone(), &target, NotificationStatus::Pending);
        let store = Arc::clone(&self.shared.auto_store);
        let kept = serde_json::to_string(&request).unwrap_or_default();
        let claimed = tokio::task::spawn_blocking(move || {
            if held.is_empty() {
                store.notify_claim(&row, &kept)
            } else {
                store.notify_claim_digest(&row, &kept, &held)
            }
        })
        .await;
        if matches!(claimed, Ok(Ok(true))) {
            tokio::spawn(self.deliver(key, target.config.url, request, 0));
        }
    }

    /// Sends a claimed notification's request to `url`, its attempts going on from
    /// `attempts_made`, and records each outcome.
    async fn deliver(self: Arc<Self>, key: String, url: String, request: Kept, attempts_made: u32) {
        let mut detail = String::new();
        let mut shutdown = self.shared.shutdown.clone();
        let made = usize::try_from(attempts_made).unwrap_or(usize::MAX);
        for (attempt, wait) in BACKOFF.iter().enumerate().skip(made) {
            tokio::select! {
                () = tokio::time::sleep(*wait) => {}
                _ = shutdown.changed() => return,
            }
            let mut sending = self.http.post(&url).body(request.body.clone());
            for (k, v) in &request.headers {
                sending = sending.header(k.as_str(), v.as_str());
            }
            let ok = match sending.send().await {
                Ok(r) if r.status().is_success() => true,
                Ok(r) => {
                    detail = format!("the target answered HTTP {}", r.status().as_u16());
                    false
                }
                Err(e) if e.is_timeout() => {
                    detail = format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs());
                    false
                }
                Err(e) if e.is_connect() => {
                    detail = "the target could not be reached".into();
                    false
                }
                Err(_) => {
                    detail = "the request failed".into();
                    false
                }
            };
            let attempts = u32::try_from(attempt + 1).unwrap_or(u32::MAX);
            let last = attempt + 1 == BACKOFF.len();
            let status = match (ok, last) {
                (true, _) => NotificationStatus::NotificationSent,
                (false, true) => NotificationStatus::NotificationFailed,
                (false, false) => NotificationStatus::Pending,
            };
            let (store, key, detail_now) =
                (Arc::clone(&self.shared.auto_store), key.clone(), if ok { String::new() } else { detail.clone() });
            let at = jiff::Timestamp::now().to_string();
            let _ = tokio::task::spawn_blocking(move || store.notify_record(&key, status, attempts, &detail_now, &at))
                .await;
            if ok || last {
                return;
            }
        }
    }

    /// What a daemon that stopped left: the notifications it claimed and had not sent, sent
    /// now (their attempts going on), to the targets still configured.
    async fn resume_pending(self: &Arc<Self>) {
        let store = Arc::clone(&self.shared.auto_store);
        let Ok(Ok(pending)) = tokio::task::spawn_blocking(move || store.notify_pending()).await else { return };
        for (key, attempts, kept) in pending {
            let Ok(request) = serde_json::from_str::<Kept>(&kept) else { continue };
            let Some(target) = self.targets.iter().find(|t| t.hash == request.target) else { continue };
            tokio::spawn(Arc::clone(self).deliver(key, target.config.url.clone(), request, attempts));
        }
    }

    /// Notifies what happened in the journal while no daemon followed it: every entry of the
    /// feed after the notifier's recorded position (on its first start, nothing: it begins at
    /// the feed's end).
    async fn catch_up(self: &Arc<Self>) {
        let store = Arc::clone(&self.shared.auto_store);
        let known = tokio::task::spawn_blocking(move || store.notifier_position()).await.ok().and_then(Result::ok);
        let Some(mut position) = known.flatten() else {
            if let Ok(last) = loopwright_engine::Store::feed_last(&self.shared.store).await {
                self.advance(last).await;
            }
            return;
        };
        loop {
            let Ok(entries) = loopwright_engine::Store::feed_since(&self.shared.store, position, 500).await else {
                return;
            };
            let Some(last) = entries.last().map(|e| e.position) else { return };
            for entry in &entries {
                Arc::clone(self).on_event(entry).await;
            }
            position = last;
            self.advance(position).await;
        }
    }

    /// Records that the auto loops' log was looked at up to `id`.
    async fn auto_advance(&self, id: i64) {
        let store = Arc::clone(&self.shared.auto_store);
        let _ = tokio::task::spawn_blocking(move || store.notifier_auto_advance(id)).await;
    }

    /// Records that the feed was looked at up to `position`.
    async fn advance(&self, position: u64) {
        let store = Arc::clone(&self.shared.auto_store);
        let _ = tokio::task::spawn_blocking(move || store.notifier_advance(position)).await;
    }
}

/// A notification's request as the journal keeps it until it is sent: which target (by a hash
/// of its URL, whose path may be a secret), the headers and the body.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_refused_when_altered_signed_by_another_key_or_expired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let signer = Signer::load(dir.path()).expect("key");
        let link = Link {
            key: "run:r:4:00".into(),
            run: "r".into(),
            stage: "ship".into(),
            action: LinkAction::Approve,
            answer_as: "carol".into(),
            person: true,
            since: 4,
            exp: 2_000_000_000,
            session: None,
            choice: None,
            sign_in: false,
            recipient: false,
        };
        let token = signer.sign(&link);
        let now = jiff::Timestamp::from_second(1_900_000_000).expect("time");
        assert_eq!(signer.check(&token, now), Ok(link.clone()));
        // The same key is kept: a restarted daemon honours its links.
        assert_eq!(Signer::load(dir.path()).expect("key").check(&token, now), Ok(link.clone()));
        let other = Signer::load(tempfile::tempdir().expect("tempdir").path()).expect("key");
        assert_eq!(other.check(&token, now), Err(LinkRefused::Forged));
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (_, tag) = token.split_once('.').expect("two parts");
        let reject = Link { action: LinkAction::Reject, ..link.clone() };
        let altered = format!("{}.{tag}", b64.encode(serde_json::to_vec(&reject).expect("json")));
        assert_eq!(signer.check(&altered, now), Err(LinkRefused::Forged));
        // Nor can a link to a shared channel be made into one that proves its person.
        let proving = Link { recipient: true, ..link.clone() };
        let altered = format!("{}.{tag}", b64.encode(serde_json::to_vec(&proving).expect("json")));
        assert_eq!(signer.check(&altered, now), Err(LinkRefused::Forged));
        let late = jiff::Timestamp::from_second(2_000_000_000).expect("time");
        assert_eq!(signer.check(&token, late), Err(LinkRefused::Expired));
        assert_eq!(signer.check("nonsense", now), Err(LinkRefused::Forged));
    }

    #[test]
    fn each_kind_of_target_gets_the_headline_and_the_links_in_its_own_format() {
        let m = Message {
            event: NotifyEvent::NeedsHuman,
            run_id: Some("r1".into()),
            session: None,
            pipeline: Some("release".into()),
            task: Some("ship 1.2".into()),
            stage: Some("ship".into()),
            headline: "Stage ship waits for your approval <now>".into(),
            url: "http://127.0.0.1:7878/runs/r1".into(),
            pull_request: Some("https://github.com/acme/shop/pull/2".into()),
            actions: vec![Action { action: LinkAction::Approve, label: "Approve".into(), url: "http://h/a/t".into() }],
            recipient: None,
        };
        let (_, body) = request_for(NotifyKind::Webhook, &m);
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            body,
            json!({"event": "needs_human", "run_id": "r1", "session": null, "pipeline": "release", "task": "ship 1.2",
                   "stage": "ship", "headline": "Stage ship waits for your approval <now>", "url": "http://127.0.0.1:7878/runs/r1",
                   "pull_request": "https://github.com/acme/shop/pull/2",
                   "actions": [{"action": "approve", "label": "Approve", "url": "http://h/a/t"}]})
        );
        // A message for one of a target's recipients names them, for a webhook that routes by it.
        let (_, to_alice) = request_for(NotifyKind::Webhook, &Message { recipient: Some("alice".into()), ..m.clone() });
        let to_alice: Value = serde_json::from_slice(&to_alice).expect("json");
        let mut want = body.clone();
        want["recipient"] = json!("alice");
        assert_eq!(to_alice, want);
        let (_, body) = request_for(NotifyKind::Slack, &m);
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            body["blocks"][0]["text"]["text"],
            "Stage ship waits for your approval &lt;now&gt;\n<http://127.0.0.1:7878/runs/r1|Open in loopwright> · <https://github.com/acme/shop/pull/2|The pull request>"
        );
        assert_eq!(body["text"], "Stage ship waits for your approval &lt;now&gt;");
        let loud =
            Message { headline: "check said <!channel> see <https://evil.example|docs> & more".into(), ..m.clone() };
        let (_, body) = request_for(NotifyKind::Slack, &loud);
        let body: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(body["text"], "check said &lt;!channel&gt; see &lt;https://evil.example|docs&gt; &amp; more");
        assert_eq!(
            body["blocks"][1]["elements"][0],
            json!({"type": "button", "text": {"type": "plain_text", "text": "Approve"}, "url": "http://h/a/t"})
        );
        let (headers, body) = request_for(NotifyKind::Ntfy, &m);
        assert_eq!(String::from_utf8(body).expect("text"), "Stage ship waits for your approval <now>");
        assert!(headers.contains(&("Actions".to_owned(), "view, Approve, http://h/a/t".to_owned())), "{headers:?}");
    }
}
