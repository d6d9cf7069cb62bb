//! What a happening on the forge may make loopwright do (SPEC §14, "What may start, answer
//! and merge"), decided without I/O in two steps: [`screen`] reads the happening against
//! `[github]` and says what it would do and whose permission that needs; the caller asks the
//! forge for that person's permission (and, for a pull request, whether its head is a fork)
//! and [`judge`] says whether it is done or refused with one reply.

use std::collections::BTreeMap;

use loopwright_spec::github::{GithubConfig, Permission, TriggerOn};

use crate::port::{Actor, Happening, IssueText, ReviewVerdict};

/// Why a happening does nothing (nobody is told).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// About another repository than `[github] repo`.
    OtherRepository(String),
    /// Nothing loopwright acts on (a ping, another event or action).
    NotActionable,
    /// An edited comment: commands act only when created.
    Edited,
    /// loopwright's own comment, label or review.
    OwnAction,
    /// A bot not listed in `[github] bots`.
    Bot(String),
    /// No trigger answers to it (another label, a comment that is no command).
    NoTrigger,
    /// Its trigger happened longer ago than `max_delivery_age_minutes`.
    TooOld {
        /// When it happened.
        at: jiff::Timestamp,
    },
}

/// Which trigger started a run: kept with the run so it starts at most one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TriggerKey {
    /// A comment, by its id.
    Comment {
        /// The comment's id.
        id: u64,
    },
    /// One labelling of an issue (the issue's `updated_at` tells labellings apart).
    Label {
        /// The issue.
        issue: u64,
        /// The label.
        label: String,
        /// When it was given.
        at: jiff::Timestamp,
    },
}

impl TriggerKey {
    /// The key as one string (`comment/123`, `label/7/loopwright/2026-…`).
    pub fn as_string(&self) -> String {
        match self {
            TriggerKey::Comment { id } => format!("comment/{id}"),
            TriggerKey::Label { issue, label, at } => format!("label/{issue}/{label}/{at}"),
        }
    }
}

/// A run to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// What started it.
    pub key: TriggerKey,
    /// The pipeline.
    pub pipeline: String,
    /// Its variables: the trigger's, then the command's.
    pub vars: BTreeMap<String, String>,
    /// The issue as the trigger carried it (the task).
    pub issue: IssueText,
    /// Whether the issue is a pull request (its head must not be a fork unless `forks`).
    pub on_pull_request: bool,
    /// Who started it.
    pub actor: Actor,
    /// When the trigger happened (the comment's creation, the labelling).
    pub at: jiff::Timestamp,
}

/// An answer to a run that waits for a person (`/loopwright retry|skip|abort|fix TEXT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Try the stage again.
    Retry,
    /// Skip it.
    Skip,
    /// End the run.
    Abort,
    /// Try again with this guidance.
    Fix(String),
}

/// What a person said about a pull request loopwright opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feedback {
    /// Changes requested, or a comment: the next attempt's guidance.
    Guidance {
        /// The text, with where it points at (`path:line`) when it is on a line.
        text: String,
    },
    /// An approval of exactly this head commit.
    Approval {
        /// The commit approved.
        commit: String,
    },
}

/// What a happening would do, before the actor's permission is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Start a run.
    Start(Box<Start>),
    /// Answer the run about this issue or pull request.
    Answer {
        /// The issue or pull request the comment is on.
        issue: u64,
        /// The comment (an idempotency key).
        comment_id: u64,
        /// The answer.
        answer: Answer,
    },
    /// Feed a review back into the run that owns this pull request.
    Review {
        /// The pull request.
        pull_request: u64,
        /// Its head branch (a run's own, else nothing is done).
        head_branch: String,
        /// What was said.
        feedback: Feedback,
    },
    /// A command loopwright does not know: told once what it understands.
    Unknown {
        /// The issue or pull request the comment is on.
        issue: u64,
        /// The word after the command.
        word: String,
    },
}

/// The outcome of [`screen`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screen {
    /// Nothing happens and nobody is told.
    Ignore(Ignored),
    /// Would do `intent` if `actor` has at least `min` on the repository.
    Ask {
        /// Who did it.
        actor: Actor,
        /// The least permission needed.
        min: Permission,
        /// What would be done.
        intent: Box<Intent>,
    },
}

/// Reads a happening against `[github]`. `me` is loopwright's own login on the forge.
pub fn screen(config: &GithubConfig, happening: &Happening, me: &str, now: jiff::Timestamp) -> Screen {
    use Screen::Ignore;
    if let Some(repo) = happening.repo()
        && !repo.eq_ignore_ascii_case(&config.repo)
    {
        return Ignore(Ignored::OtherRepository(repo.to_owned()));
    }
    let actor = match happening {
        Happening::IssueLabeled { actor, .. }
        | Happening::Comment { actor, .. }
        | Happening::Review { actor, .. }
        | Happening::ReviewComment { actor, .. } => actor,
        Happening::CheckDone { .. } | Happening::Ping | Happening::Other { .. } => {
            return Ignore(Ignored::NotActionable);
        }
    };
    if actor.login.eq_ignore_ascii_case(me) {
        return Ignore(Ignored::OwnAction);
    }
    if actor.bot && !config.bots.iter().any(|b| b.eq_ignore_ascii_case(&actor.login)) {
        return Ignore(Ignored::Bot(actor.login.clone()));
    }
    let too_old = |at: jiff::Timestamp| {
        let age = now.duration_since(at);
        age > jiff::SignedDuration::from_mins(config.max_delivery_age_minutes as i64)
    };
    let ask = |min: Permission, intent: Intent| Screen::Ask { actor: actor.clone(), min, intent: Box::new(intent) };
    match happening {
        Happening::IssueLabeled { issue, label, .. } => {
            let Some(trigger) = config
                .trigger
                .iter()
                .find(|t| t.on == TriggerOn::IssueLabeled && t.label.as_deref() == Some(label.as_str()))
            else {
                return Ignore(Ignored::NoTrigger);
            };
            if too_old(issue.updated_at) {
                return Ignore(Ignored::TooOld { at: issue.updated_at });
            }
            let Some(pipeline) = trigger.pipeline.clone() else {
                return Ignore(Ignored::NoTrigger);
            };
            let key = TriggerKey::Label { issue: issue.number, label: label.clone(), at: issue.updated_at };
            let start = Start {
                key,
                pipeline,
                vars: trigger.vars.clone(),
                issue: issue.clone(),
                on_pull_request: false,
                actor: actor.clone(),
                at: issue.updated_at,
            };
            ask(trigger.min_permission.unwrap_or(config.min_permission), Intent::Start(Box::new(start)))
        }
        Happening::Comment { issue, comment_id, body, created_at, edited, on_pull_request, .. } => {
            let Some((trigger, words)) = config
                .trigger
                .iter()
                .filter(|t| t.on == TriggerOn::IssueComment)
                .find_map(|t| command_words(body, &t.command).map(|w| (t, w)))
            else {
                return Ignore(Ignored::NoTrigger);
            };
            if *edited {
                return Ignore(Ignored::Edited);
            }
            if too_old(*created_at) {
                return Ignore(Ignored::TooOld { at: *created_at });
            }
            let min = trigger.min_permission.unwrap_or(config.min_permission);
            let intent = match read_command(&words) {
                Command::Run { pipeline, vars } => {
                    let Some(pipeline) = pipeline.or_else(|| trigger.pipeline.clone()) else {
                        return ask(min, Intent::Unknown { issue: issue.number, word: "run".into() });
                    };
                    let mut all = trigger.vars.clone();
                    all.extend(vars);
                    Intent::Start(Box::new(Start {
                        key: TriggerKey::Comment { id: *comment_id },
                        pipeline,
                        vars: all,
                        issue: issue.clone(),
                        on_pull_request: *on_pull_request,
                        actor: actor.clone(),
                        at: *created_at,
                    }))
                }
                Command::Answer(answer) => Intent::Answer { issue: issue.number, comment_id: *comment_id, answer },
                Command::Unknown(word) => Intent::Unknown { issue: issue.number, word },
            };
            ask(min, intent)
        }
        Happening::Review { pull_request, head_branch, verdict, body, commit, .. } => {
            let feedback = match verdict {
                ReviewVerdict::Approved => Feedback::Approval { commit: commit.clone() },
                ReviewVerdict::ChangesRequested | ReviewVerdict::Commented if !body.trim().is_empty() => {
                    Feedback::Guidance { text: body.trim().to_owned() }
                }
                _ => return Ignore(Ignored::NotActionable),
            };
            ask(
                config.min_permission,
                Intent::Review { pull_request: *pull_request, head_branch: head_branch.clone(), feedback },
            )
        }
        Happening::ReviewComment { pull_request, head_branch, body, path, line, .. } => {
            let at = match line {
                Some(line) => format!("{path}:{line}"),
                None => path.clone(),
            };
            let feedback = Feedback::Guidance { text: format!("On {at}: {}", body.trim()) };
            ask(
                config.min_permission,
                Intent::Review { pull_request: *pull_request, head_branch: head_branch.clone(), feedback },
            )
        }
        Happening::CheckDone { .. } | Happening::Ping | Happening::Other { .. } => Ignore(Ignored::NotActionable),
    }
}

/// What is done once the actor's permission is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Do it.
    Act(Intent),
    /// Nothing is done; this one reply says why (on the issue or pull request), or nobody is
    /// told (a review's author is not answered).
    Refuse {
        /// Where to reply, when anyone is told.
        issue: Option<u64>,
        /// The reply.
        reply: String,
    },
}

/// Decides with the actor's permission on the repository.
pub fn judge(actor: &Actor, min: Permission, permission: Permission, intent: Intent) -> Verdict {
    if permission >= min {
        return Verdict::Act(intent);
    }
    let issue = match &intent {
        Intent::Start(start) => Some(start.issue.number),
        Intent::Answer { issue, .. } | Intent::Unknown { issue, .. } => Some(*issue),
        Intent::Review { .. } => None,
    };
    let reply = format!(
        "@{} loopwright did nothing: this needs `{}` permission on the repository, and yours is `{}`.",
        actor.login,
        min.as_str(),
        permission.as_str()
    );
    Verdict::Refuse { issue, reply }
}

/// A comment's command read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Run { pipeline: Option<String>, vars: BTreeMap<String, String> },
    Answer(Answer),
    Unknown(String),
}

/// The words after `command` when the comment's first line starts with it.
fn command_words(body: &str, command: &str) -> Option<Vec<String>> {
    let trimmed = body.trim_start();
    let rest = trimmed.strip_prefix(command)?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    let (first, more) = rest.split_once('\n').unwrap_or((rest, ""));
    let mut words: Vec<String> = first.split_whitespace().map(str::to_owned).collect();
    if words.first().is_some_and(|w| w == "fix") {
        let text = format!("{}\n{}", words[1..].join(" "), more).trim().to_owned();
        words.truncate(1);
        words.push(text);
    }
    Some(words)
}

fn read_command(words: &[String]) -> Command {
    match words.first().map(String::as_str) {
        Some("run") => {
            let mut pipeline = None;
            let mut vars = BTreeMap::new();
            let mut rest = words[1..].iter();
            while let Some(word) = rest.next() {
                if word == "--var" {
                    let Some((k, v)) = rest.next().and_then(|kv| kv.split_once('=')) else {
                        return Command::Unknown("run --var (expected --var NAME=VALUE)".into());
                    };
                    if !is_name(k) {
                        return Command::Unknown(format!("run --var {k} (a variable's name is letters, digits and _)"));
                    }
                    vars.insert(k.to_owned(), v.to_owned());
                } else if pipeline.is_none() && is_name(word) {
                    pipeline = Some(word.clone());
                } else {
                    return Command::Unknown(format!("run {word}"));
                }
            }
            Command::Run { pipeline, vars }
        }
        Some("retry") if words.len() == 1 => Command::Answer(Answer::Retry),
        Some("skip") if words.len() == 1 => Command::Answer(Answer::Skip),
        Some("abort") if words.len() == 1 => Command::Answer(Answer::Abort),
        Some("fix") if words.get(1).is_some_and(|t| !t.is_empty()) => Command::Answer(Answer::Fix(words[1].clone())),
        Some(word) => Command::Unknown(word.to_owned()),
        None => Command::Unknown(String::new()),
    }
}

/// A pipeline's or variable's name: letters, digits, `-` and `_`, at most 100.
fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
