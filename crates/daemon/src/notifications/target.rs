//! The targets the notifier sends to: a `[[notify]]` entry as written, or — for an entry with
//! `recipients` — one copy per person, sent to that person's own address, whose links answer
//! as them and prove them (the link went to them alone).

use loopwright_spec::config::{LinkMode, Notify, NotifyKind};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a person's name is written as in a URL: everything but the unreserved characters
/// escaped, so a name cannot reach outside its place in the path or query.
const IN_URL: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// One place the notifier sends to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The entry of config.toml, its `url` with the recipient's name put in.
    pub config: Notify,
    /// The person this copy is for (an entry with `recipients`).
    pub recipient: Option<String>,
    /// What "Notified" and the notifications journal call it.
    pub name: String,
    /// Who it is in notification keys and kept requests: a hash of its URL (and recipient) —
    /// the URL's path may hold a secret.
    pub hash: String,
}

impl Target {
    /// Every target of `entries`, in order: each entry once, or once per recipient.
    pub(crate) fn all(entries: &[Notify]) -> Vec<Target> {
        entries
            .iter()
            .flat_map(|entry| {
                if entry.recipients.is_empty() {
                    vec![Self::plain(entry)]
                } else {
                    entry.recipients.iter().map(|person| Self::for_person(entry, person)).collect()
                }
            })
            .collect()
    }

    fn plain(entry: &Notify) -> Self {
        Self {
            config: entry.clone(),
            recipient: None,
            name: shown_name(entry),
            hash: format!("{:016x}", loopwright_engine::hash::fnv1a(entry.url.as_bytes())),
        }
    }

    fn for_person(entry: &Notify, person: &str) -> Self {
        let url = entry.url.replace("{person}", &utf8_percent_encode(person, IN_URL).to_string());
        let hash = format!("{:016x}", loopwright_engine::hash::fnv1a(format!("{url}\n{person}").as_bytes()));
        Self {
            config: Notify { url, recipients: Vec::new(), ..entry.clone() },
            recipient: Some(person.to_owned()),
            name: format!("{} → {person}", shown_name(entry)),
            hash,
        }
    }

    /// Whom its links answer as: its recipient, the entry's `as`, or `notification`.
    pub(crate) fn answer_as(&self) -> String {
        self.recipient.clone().or_else(|| self.config.answer_as.clone()).unwrap_or_else(|| "notification".to_owned())
    }

    /// Its links open only for a person signed in to the dashboard.
    pub(crate) fn sign_in(&self) -> bool {
        self.config.links == LinkMode::SignIn
    }
}

/// An entry's name: the one it was given, else its kind, scheme and host (never its path,
/// which may hold a secret).
fn shown_name(target: &Notify) -> String {
    if let Some(name) = &target.name {
        return name.clone();
    }
    let kind = match target.kind {
        NotifyKind::Webhook => "webhook",
        NotifyKind::Slack => "slack",
        NotifyKind::Ntfy => "ntfy",
    };
    let origin = target
        .url
        .parse::<axum::http::Uri>()
        .ok()
        .map(|u| format!("{}://{}", u.scheme_str().unwrap_or("http"), u.authority().map(|a| a.host()).unwrap_or("")))
        .unwrap_or_default();
    format!("{kind} {origin}")
}

#[cfg(test)]
mod tests {
    use loopwright_spec::config::{NotifyEvent, NotifyOn};

    use super::*;

    fn entry(url: &str, name: Option<&str>, recipients: &[&str]) -> Notify {
        Notify {
            name: name.map(str::to_owned),
            url: url.into(),
            kind: NotifyKind::Ntfy,
            events: NotifyEvent::all(),
            pipelines: vec![],
            answer_as: None,
            link_hours: 24,
            links: LinkMode::Open,
            recipients: recipients.iter().map(|r| (*r).to_owned()).collect(),
            on: NotifyOn::Every,
            digest_minutes: None,
        }
    }

    #[test]
    fn each_recipient_is_a_target_of_their_own_with_their_address_name_and_identity() {
        let entries = [
            entry("https://ntfy.sh/acme-{person}", Some("phones"), &["alice", "bob.k@acme", "zoë/../x"]),
            entry("https://ntfy.sh/secret-topic", None, &[]),
        ];
        let got: Vec<(String, Option<String>, String, String)> = Target::all(&entries)
            .into_iter()
            .map(|t| (t.config.url.clone(), t.recipient.clone(), t.name.clone(), t.answer_as()))
            .collect();
        assert_eq!(
            got,
            [
                ("https://ntfy.sh/acme-alice".into(), Some("alice".into()), "phones → alice".into(), "alice".into()),
                (
                    "https://ntfy.sh/acme-bob.k%40acme".into(),
                    Some("bob.k@acme".into()),
                    "phones → bob.k@acme".into(),
                    "bob.k@acme".into()
                ),
                (
                    "https://ntfy.sh/acme-zo%C3%AB%2F..%2Fx".into(),
                    Some("zoë/../x".into()),
                    "phones → zoë/../x".into(),
                    "zoë/../x".into()
                ),
                ("https://ntfy.sh/secret-topic".into(), None, "ntfy https://ntfy.sh".into(), "notification".into()),
            ]
        );
        // Each is told apart in keys, even two recipients routed by one webhook's body; a
        // plain target keeps the hash of its URL alone (what notifications kept before said).
        let hooked = Target::all(&[entry("https://hooks.acme/notify", None, &["alice", "bob"])]);
        assert_ne!(hooked[0].hash, hooked[1].hash);
        let plain = &Target::all(&entries)[3];
        assert_eq!(plain.hash, format!("{:016x}", loopwright_engine::hash::fnv1a(b"https://ntfy.sh/secret-topic")));
    }
}
